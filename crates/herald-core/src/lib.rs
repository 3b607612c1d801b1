//! herald's vocabulary: the plain data every other crate speaks.
//!
//! Depends on nothing of ours. Platform wire types never appear here; adapters translate
//! into these types at their edge. The [`Adapter`] trait is the boundary every platform crate
//! implements and the gateway drives.

mod adapter;
mod chat;
mod chunk;
mod claims;
mod message;
mod platform;
mod reply;
mod role;
mod slash;

pub use adapter::{
    Adapter, AdapterContext, AdapterError, AdapterEvent, Capabilities, LengthUnit, serve_outbound,
};
pub use chat::{ChatKind, ChatRef, SessionKey, UserRef};
pub use chunk::chunk;
pub use claims::{Claim, Claimer, Claims, PositionSource, Positions};
pub use message::{
    Ack, Inbound, Outbound, SendError, SentId, Taken, Tracking, backoff, first_piece,
};
pub use platform::{ParsePlatformError, Platform};
pub use reply::{Placement, ReplyStyle};
pub use role::{ParseRoleError, Role};
pub use slash::{SLASH_COMMANDS, SlashCommand};

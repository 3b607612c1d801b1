//! herald's vocabulary: the plain data every other crate speaks.
//!
//! Depends on nothing of ours. Platform wire types never appear here; adapters translate
//! into these types at their edge.

mod platform;
mod role;

pub use platform::{ParsePlatformError, Platform};
pub use role::{ParseRoleError, Role};

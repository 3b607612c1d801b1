//! herald's gateway: routes every chat to its session and answers it through the agent.
//!
//! Depends on herald-core, herald-store and herald-agent; never on a platform crate. Adapters
//! come in through the `Adapter` trait. Inside: one router task (authorization, session keys),
//! one worker per active session key (strict order inside a session, concurrency across
//! sessions up to `max_concurrent_runs`), and a fresh agent per inbound message built from the
//! session's stored system prompt and its history read back from the store. Every inbound
//! message is stored before the agent runs and its platform id recorded, so a redelivered
//! message is answered once and a restart answers what was left. The gateway keeps [`Metrics`]
//! and answers a [`Heartbeat`] from its event loop, for the daemon's health and watchdog.

mod auth;
mod commands;
pub mod compress;
mod cursors;
mod events;
mod gateway;
pub mod history;
mod link;
mod liveness;
mod metrics;
mod outbox;
pub mod pipeline;
mod replicas;
mod router;
mod settings;
mod shared;
mod turn;
mod worker;

pub use auth::{Allowed, pairing_code};
pub use commands::{Command, HELP};
pub use gateway::{Gateway, GatewayError};
pub use link::{PlatformState, PlatformStates};
pub use liveness::{Heartbeat, Started};
pub use metrics::{Metrics, PROMETHEUS_TEXT, RUN_BUCKETS, StoreFigures};
pub use outbox::Backlog;
pub use settings::{Access, BusyInput, DmPolicy, GatewaySettings, Reloadable};

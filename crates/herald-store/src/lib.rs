//! herald's session store: every line of SQL in herald lives in this crate.
//!
//! One [`Store`] over a sqlx SQLite pool in WAL mode. Writes are serialized inside the process,
//! run as `BEGIN IMMEDIATE` transactions and retried whole, with randomized backoff, when another
//! process holds the database; the gateway's writes from many concurrent chats (appends, new
//! routes, queued messages, cursors) are committed together (group commit) so a busy gateway
//! pays for one commit, not one per chat. Depends only on herald-core.

mod appends;
mod checkpoint;
mod copy;
mod error;
mod gateway;
mod group;
mod handover;
mod health;
mod history;
mod index;
mod lineage;
mod messages;
mod migrate;
mod numbers;
mod open;
mod outbox;
mod pairing;
mod pg;
mod raw;
mod replica;
mod routes;
pub mod scratch;
mod search;
mod sessions;
mod short_ids;
mod snippet;
mod stats;
mod store;
mod time;
mod write;

pub use copy::{Fingerprint, TableFingerprint};
pub use error::StoreError;
pub use gateway::QueuedInbound;
pub use handover::Heard;
pub use health::WriteFailing;
pub use messages::{Appended, Delivery, NewMessage, StoredMessage, TokenUsage};
pub use open::{PostgresOptions, StoreOptions};
pub use outbox::Undelivered;
pub use pairing::{ApproveError, ApprovedUser, NewPairing, PairingIssue, PairingRequest};
pub use raw::write_turns_raw;
pub use replica::SessionLock;
pub use routes::{Opening, Routed};
pub use search::{SearchHit, SearchQuery, sanitize_query};
pub use sessions::{NewSession, Session, SessionFilter};
pub use stats::{Health, SourceStats, Stats};
pub use store::Store;
pub use time::now_ms;

//! The one `Store` the rest of herald sees: the same methods, the same guarantees, on either
//! backend. Each method hands the call to the backend the store was opened on; neither backend
//! knows the other exists.

use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};

use crate::copy::{Fingerprint, Side};
use crate::error::StoreError;
use crate::gateway::QueuedInbound;
use crate::handover::Heard;
use crate::health::WriteFailing;
use crate::messages::{Appended, Delivery, NewMessage, StoredMessage, TokenUsage};
use crate::open::{Lite, StoreOptions};
use crate::outbox::Undelivered;
use crate::pairing::{ApproveError, ApprovedUser, NewPairing, PairingIssue, PairingRequest};
use crate::pg::Pg;
use crate::replica::SessionLock;
use crate::routes::Opening;
use crate::search::{SearchHit, SearchQuery};
use crate::sessions::{NewSession, Session, SessionFilter};
use crate::stats::{Health, Stats};

/// The session store. Cheap to clone; every clone shares one pool (and, on SQLite, one writer).
#[derive(Debug, Clone)]
pub struct Store {
    backend: Backend,
}

#[derive(Debug, Clone)]
enum Backend {
    /// An embedded SQLite file in WAL mode: one host.
    Sqlite(Lite),
    /// A PostgreSQL database shared by any number of replicas.
    Postgres(Pg),
}

/// Calls the same method, with the same arguments, on whichever backend the store runs on.
macro_rules! on_backend {
    ($self:ident . $method:ident ( $($arg:expr),* )) => {
        match &$self.backend {
            Backend::Sqlite(lite) => lite.$method($($arg),*).await,
            Backend::Postgres(pg) => pg.$method($($arg),*).await,
        }
    };
}

/// The methods that only pass their call on, written once each.
macro_rules! pass_on {
    ($(
        $(#[$doc:meta])*
        fn $method:ident(&self $(, $arg:ident: $ty:ty)*) -> $ret:ty;
    )*) => {
        impl Store {
            $(
                $(#[$doc])*
                pub async fn $method(&self $(, $arg: $ty)*) -> $ret {
                    on_backend!(self.$method($($arg),*))
                }
            )*
        }
    };
}

impl Store {
    /// Opens (creating if needed) the store and applies migrations: the SQLite file at
    /// `options.path`, or the PostgreSQL database of `options.postgres`.
    pub async fn open(options: StoreOptions) -> Result<Store, StoreError> {
        let backend = match &options.postgres {
            Some(postgres) => Backend::Postgres(Pg::open(postgres, &options).await?),
            None => Backend::Sqlite(Lite::open(options).await?),
        };
        Ok(Store { backend })
    }

    /// Opens a store that must already exist, creating nothing: for commands that only look at
    /// what is stored. (A PostgreSQL database must exist already; its schema is brought up to
    /// date, as a replica would.)
    pub async fn open_existing(options: StoreOptions) -> Result<Store, StoreError> {
        let backend = match &options.postgres {
            Some(postgres) => Backend::Postgres(Pg::open(postgres, &options).await?),
            None => Backend::Sqlite(Lite::open_existing(options).await?),
        };
        Ok(Store { backend })
    }

    /// The newest SQLite migration this binary carries.
    pub fn known_schema_version() -> i64 {
        Lite::known_schema_version()
    }

    /// `sqlite` or `postgres`.
    pub fn backend_name(&self) -> &'static str {
        match &self.backend {
            Backend::Sqlite(_) => "sqlite",
            Backend::Postgres(_) => "postgres",
        }
    }

    /// Where the store lives, fit for a log line: the file's path, or the database's URL
    /// without its password.
    pub fn location(&self) -> String {
        match &self.backend {
            Backend::Sqlite(lite) => lite.path().display().to_string(),
            Backend::Postgres(pg) => pg.location().to_owned(),
        }
    }

    /// Whether the store writes ahead: SQLite in WAL mode (false only on filesystems that refuse
    /// it); always true on PostgreSQL.
    pub fn is_wal(&self) -> bool {
        match &self.backend {
            Backend::Sqlite(lite) => lite.is_wal(),
            Backend::Postgres(_) => true,
        }
    }

    /// How many times a write transaction was retried because another writer held a lock (or,
    /// on PostgreSQL, lost a serialization race or its connection).
    pub fn busy_retries(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(lite) => lite.busy_retries(),
            Backend::Postgres(pg) => pg.busy_retries(),
        }
    }

    /// How many writes failed since the store opened (errors of one request not counted).
    pub fn write_failures(&self) -> u64 {
        match &self.backend {
            Backend::Sqlite(lite) => lite.write_failures(),
            Backend::Postgres(pg) => pg.write_failures(),
        }
    }

    /// `Some` while writes are failing: since when, and the last error.
    pub fn write_failing(&self) -> Option<WriteFailing> {
        match &self.backend {
            Backend::Sqlite(lite) => lite.write_failing(),
            Backend::Postgres(pg) => pg.write_failing(),
        }
    }

    /// Copies every row of this store into `target`, which must be empty, then reads both back
    /// and compares them table by table (rows and a SHA-256 of each table's rows). `progress`
    /// hears each table's name and how many of its rows were copied so far.
    pub async fn copy_to(
        &self,
        target: &Store,
        progress: &mut (dyn FnMut(&str, u64) + Send),
    ) -> Result<Fingerprint, StoreError> {
        crate::copy::copy(self.side(), target.side(), progress).await
    }

    /// Rows and a checksum of every table, as `copy_to` compares them.
    pub async fn fingerprint(&self) -> Result<Fingerprint, StoreError> {
        crate::copy::fingerprint(self.side()).await
    }

    fn side(&self) -> Side<'_> {
        match &self.backend {
            Backend::Sqlite(lite) => Side::Lite(lite),
            Backend::Postgres(pg) => Side::Pg(pg),
        }
    }

    /// The PostgreSQL backend, for the crate's own tests.
    #[cfg(test)]
    pub(crate) fn postgres(&self) -> Option<&Pg> {
        match &self.backend {
            Backend::Postgres(pg) => Some(pg),
            Backend::Sqlite(_) => None,
        }
    }

    /// Whether other processes share this store as replicas (PostgreSQL), so that work is
    /// taken through it (session locks, claims) instead of assumed.
    pub fn is_shared(&self) -> bool {
        matches!(self.backend, Backend::Postgres(_))
    }

    /// Session keys as any replica queues messages for them (PostgreSQL's notifications; on
    /// SQLite nothing ever arrives).
    pub fn queued_notifications(&self) -> tokio::sync::mpsc::Receiver<Heard> {
        match &self.backend {
            Backend::Sqlite(lite) => lite.queued_notifications(),
            Backend::Postgres(pg) => pg.queued_notifications(),
        }
    }

    /// Waits for writes in flight and closes every connection.
    pub async fn close(&self) {
        on_backend!(self.close())
    }
}

pass_on! {
    /// A cheap check that the database still answers.
    fn ping(&self) -> Result<(), StoreError>;
    /// Writes nothing lasting, but goes through the write path: whether a write would succeed now.
    fn probe_write(&self) -> Result<(), StoreError>;

    /// Saved platform position `name`, if any.
    fn cursor(&self, platform: Platform, name: &str) -> Result<Option<String>, StoreError>;
    /// Every saved position of `platform`, by name.
    fn cursors(&self, platform: Platform) -> Result<Vec<(String, String)>, StoreError>;
    /// Each open routed session's chat (its thread, when it has one) on `platform`, with the
    /// platform id of its newest message that has one.
    fn newest_inbound(&self, platform: Platform) -> Result<Vec<(String, String)>, StoreError>;
    /// Saves a platform position.
    fn set_cursor(&self, platform: Platform, name: &str, value: &str) -> Result<(), StoreError>;
    /// Queues an inbound message for its session (recording its id as processed); `None` when
    /// the message was stored before.
    fn queue_inbound(
        &self,
        session_key: &str,
        message_id: &str,
        chat: &ChatRef,
        user: &UserRef,
        content: &str
    ) -> Result<Option<i64>, StoreError>;
    /// Moves queued messages into the session's history, in queue order; returns the new ids.
    fn take_queued(&self, session_id: &str, seqs: &[i64]) -> Result<Vec<i64>, StoreError>;
    /// Takes one queued message out of the queue without adding it to a history (a command
    /// queued as text by another replica); whether it was still there.
    fn unqueue(&self, seq: i64) -> Result<bool, StoreError>;
    /// Keeps this replica's claims on the replies it is still sending for `claim_for` more.
    fn renew_claims(&self, ids: &[i64], claim_for: Duration) -> Result<(), StoreError>;
    /// Everything queued, in arrival order.
    fn queued_inbound(&self) -> Result<Vec<QueuedInbound>, StoreError>;
    /// Open routed sessions whose last message is a user's, not yet answered.
    fn unanswered_sessions(&self) -> Result<Vec<Session>, StoreError>;
    /// Whether the session `session_key` is routed to is open and its last message is a
    /// user's, not yet answered.
    fn left_unanswered(&self, session_key: &str) -> Result<bool, StoreError>;
    /// What is queued for one session key, in queue order.
    fn queued_for(&self, session_key: &str) -> Result<Vec<QueuedInbound>, StoreError>;
    /// Every session key with queued messages whose session no replica holds (nobody will
    /// take them in unless the sweep does), the one waiting longest first.
    fn orphaned_keys(&self) -> Result<Vec<String>, StoreError>;
    /// Removes the last user message and everything after it; returns how many went.
    fn undo_last_exchange(&self, session_id: &str) -> Result<u64, StoreError>;
    /// Removes the last answer so the last user message is answered again; returns its text.
    fn reset_last_answer(&self, session_id: &str) -> Result<Option<String>, StoreError>;

    /// A session's messages in order (from the start of its own history).
    fn history(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError>;
    /// Brings the search index up to date; returns how many messages it indexed.
    fn index_pending(&self) -> Result<u64, StoreError>;
    /// Messages stored but not yet searchable.
    fn unindexed(&self) -> Result<i64, StoreError>;

    /// Ends `parent_id` and continues it in a new child session holding `messages`.
    fn compress_session(
        &self,
        parent_id: &str,
        messages: Vec<NewMessage>,
        context_tokens: i64
    ) -> Result<Session, StoreError>;
    /// The session's lineage, oldest first.
    fn chain(&self, id: &str) -> Result<Vec<Session>, StoreError>;
    /// The newest session of the chain `id` belongs to.
    fn newest_in_chain(&self, id: &str) -> Result<Session, StoreError>;

    /// Appends messages to a session; returns their ids.
    fn append_messages(&self, session_id: &str, messages: Vec<NewMessage>) -> Result<Vec<i64>, StoreError>;
    /// Appends a turn with its token usage.
    fn append_turn(&self, session_id: &str, messages: Vec<NewMessage>, usage: TokenUsage) -> Result<Vec<i64>, StoreError>;
    /// Appends a turn whose last message is a reply to deliver, with its outbox entry.
    fn append_reply(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
        delivery: Delivery
    ) -> Result<Vec<i64>, StoreError>;
    /// Appends an inbound message unless its platform id was stored before.
    fn append_inbound(
        &self,
        session_id: &str,
        platform: Platform,
        platform_message_id: &str,
        message: NewMessage
    ) -> Result<Appended, StoreError>;
    /// Records an inbound id as processed; false when it was already.
    fn record_inbound(&self, platform: Platform, platform_message_id: &str) -> Result<bool, StoreError>;

    /// Marks a reply as taken by its platform.
    fn delivered(&self, message_id: i64) -> Result<(), StoreError>;
    /// Replies stored but not yet taken by their platform, oldest first.
    fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError>;
    /// Notes that the platform took the first `pieces` pieces of a reply split for it.
    fn pieces_taken(&self, message_id: i64, pieces: i64) -> Result<(), StoreError>;
    /// Claims up to `limit` undelivered replies, oldest first, that no sender holds, for
    /// `claim_for`: each reply is handed to one replica, and to another only once that claim
    /// has expired (its sender died). [`Store::delivered`] takes a reply out for good.
    fn claim_undelivered(&self, limit: i64, claim_for: Duration) -> Result<Vec<Undelivered>, StoreError>;

    /// Locks a session key for one agent run across replicas; `None` at once when another
    /// holder has it (never waits). Dropping the lock lets it go; on PostgreSQL it also goes
    /// with its holder's connection, and [`SessionLock::lost`] says so.
    fn lock_session(&self, key: &str) -> Result<Option<SessionLock>, StoreError>;
    /// Claims an adapter's name (`telegram:poller`, a Discord shard) for this replica, as
    /// [`Store::lock_session`] locks a session, with names apart from session keys.
    fn try_claim(&self, name: &str) -> Result<Option<SessionLock>, StoreError>;

    /// Issues (or repeats) a pairing code for an unknown user.
    fn request_pairing(&self, new: &NewPairing<'_>) -> Result<PairingIssue, StoreError>;
    /// Approves the user who asked for `code`.
    fn approve_pairing(&self, platform: Platform, code: &str) -> Result<Result<ApprovedUser, ApproveError>, StoreError>;
    /// Revokes an approved user; false when there was none.
    fn revoke_user(&self, platform: Platform, user_id: &str) -> Result<bool, StoreError>;
    /// Whether the user was approved.
    fn is_approved(&self, platform: Platform, user_id: &str) -> Result<bool, StoreError>;
    /// Pending pairing requests.
    fn pairing_requests(&self) -> Result<Vec<PairingRequest>, StoreError>;
    /// Approved users.
    fn approved_users(&self) -> Result<Vec<ApprovedUser>, StoreError>;

    /// The session a chat currently talks to.
    fn routed_session(&self, key: &str) -> Result<Option<Session>, StoreError>;
    /// The routed session with its system prompt and whether it was left unanswered, and
    /// whether messages wait in the key's queue.
    fn opening(&self, key: &str) -> Result<Opening, StoreError>;
    /// `opening`, with `new` created and routed when the key has no route, in one write.
    fn opening_or_create(&self, key: &str, new: &NewSession) -> Result<Opening, StoreError>;
    /// The routed session, or a new one routed in the same transaction; true when created.
    fn route_or_create(&self, key: &str, new: &NewSession) -> Result<(Session, bool), StoreError>;
    /// As `route_or_create`, for a caller that just found no route.
    fn create_routed(&self, key: &str, new: &NewSession) -> Result<(Session, bool), StoreError>;
    /// Ends the routed session and routes the key to a new one, in one transaction.
    fn reroute(&self, key: &str, new: &NewSession, end_reason: &str) -> Result<Session, StoreError>;

    /// Full-text search over every message.
    fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError>;

    /// Creates a session.
    fn create_session(&self, new: &NewSession) -> Result<Session, StoreError>;
    /// A session by its full id.
    fn session(&self, id: &str) -> Result<Option<Session>, StoreError>;
    /// A session by id, id prefix, number or title.
    fn resolve_session(&self, reference: &str) -> Result<Session, StoreError>;
    /// The session's system prompt.
    fn system_prompt(&self, session_id: &str) -> Result<Option<String>, StoreError>;
    /// Sessions, newest first, filtered.
    fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>, StoreError>;
    /// Ends a session.
    fn end_session(&self, id: &str, reason: &str) -> Result<(), StoreError>;
    /// Reopens an ended session.
    fn reopen_session(&self, id: &str) -> Result<(), StoreError>;
    /// Sets a session's (unique) title.
    fn rename_session(&self, id: &str, title: &str) -> Result<(), StoreError>;
    /// Deletes a session and its messages; returns how many messages went.
    fn delete_session(&self, id: &str) -> Result<i64, StoreError>;
    /// Deletes ended sessions older than `older_than`; returns how many.
    fn prune_sessions(&self, older_than: Duration, source: Option<Platform>) -> Result<u64, StoreError>;
    /// The shortest unambiguous prefix of each id.
    fn short_ids(&self, ids: &[&str]) -> Result<Vec<String>, StoreError>;

    /// Counts sessions and messages.
    fn stats(&self) -> Result<Stats, StoreError>;
    /// `herald doctor`'s checks.
    fn health(&self) -> Result<Health, StoreError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every backend answers every method of `Store` (a method missing on one fails the build);
    /// this checks the choice of backend follows the options.
    #[tokio::test]
    async fn a_path_opens_sqlite() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("s.db"))).await.unwrap();
        assert_eq!(store.backend_name(), "sqlite");
        assert!(store.location().ends_with("s.db"));
    }
}

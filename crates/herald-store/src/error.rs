use std::path::PathBuf;

/// What can go wrong in the store, split where a caller branches on it.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another writer held the database longer than `write_patience_ms`.
    #[error(
        "the database stayed locked by another writer for {waited_ms} ms; \
         check for a stuck process holding it, or raise [store] write_patience_ms"
    )]
    Busy {
        /// How long the write kept retrying.
        waited_ms: u64,
    },
    /// The file was written by a newer herald.
    #[error(
        "the database {path} has schema version {found}, newer than this herald knows ({known}); \
         upgrade herald before using it"
    )]
    NewerSchema {
        /// The database file.
        path: PathBuf,
        /// The newest migration recorded in the file.
        found: i64,
        /// The newest migration this binary carries.
        known: i64,
    },
    /// The database could not be opened, created or migrated.
    #[error("could not open the store at {path}: {reason}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What failed, in one line.
        reason: String,
    },
    /// No session has this id, id prefix or title.
    #[error("no session matches `{0}`")]
    SessionNotFound(String),
    /// A reference matched more than one session.
    #[error("`{reference}` matches {count} sessions; give more of the id")]
    AmbiguousSession {
        /// What the user typed.
        reference: String,
        /// How many sessions it matched.
        count: usize,
    },
    /// Titles are unique and this one is taken.
    #[error("the title `{title}` is already used by session {session_id}")]
    TitleTaken {
        /// The requested title.
        title: String,
        /// The session that has it.
        session_id: String,
    },
    /// The session has ended (compressed into a child, or closed), so it cannot be continued
    /// again: a second compression of it would split its chain.
    #[error(
        "session {id} has ended{}",
        newest.as_ref().map(|n| format!("; its conversation continues in {n}")).unwrap_or_default()
    )]
    AlreadyContinued {
        /// The ended session.
        id: String,
        /// The newest session of its chain, when another session continues it.
        newest: Option<String>,
    },
    /// Tool calls that could not be encoded as JSON.
    #[error("could not encode tool calls as JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The background task that commits appends went away (the runtime is shutting down).
    #[error("the store's writer stopped before the write was committed")]
    WriterGone,
    /// The store was closed; nothing more is written through it.
    #[error("the store is closed")]
    Closed,
    /// `store copy` cannot copy into this store, or the copy did not match its source.
    #[error("store copy: {0}")]
    CopyTarget(String),
    /// A batch of writes failed as a whole; every caller in it gets this copy of the cause.
    #[error("database write failed: {0}")]
    WriteFailed(String),
    /// Any other database error.
    #[error("database error: {0}")]
    Sqlx(#[from] sqlx::Error),
}

impl StoreError {
    /// Whether this is SQLite saying another connection holds a lock (SQLITE_BUSY or
    /// SQLITE_LOCKED, any extended code): the transaction may succeed if run again.
    pub fn is_retryable(&self) -> bool {
        matches!(self, StoreError::Sqlx(e) if is_lock_error(e))
    }
}

impl StoreError {
    /// A copy for one more caller of a failed batch.
    pub(crate) fn duplicate(&self) -> StoreError {
        match self {
            StoreError::Busy { waited_ms } => StoreError::Busy { waited_ms: *waited_ms },
            StoreError::Closed => StoreError::Closed,
            StoreError::WriteFailed(reason) => StoreError::WriteFailed(reason.clone()),
            other => StoreError::WriteFailed(other.to_string()),
        }
    }
}

/// SQLITE_BUSY (5) and SQLITE_LOCKED (6) in their primary and extended forms, such as
/// SQLITE_BUSY_SNAPSHOT (517), which SQLite returns at once whatever the busy timeout.
pub(crate) fn is_lock_error(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    db.code().and_then(|c| c.parse::<i32>().ok()).is_some_and(|c| matches!(c & 0xff, 5 | 6))
}

/// A UNIQUE constraint failure (SQLITE_CONSTRAINT_UNIQUE, 2067).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    let sqlx::Error::Database(db) = e else { return false };
    db.code().is_some_and(|c| c == "2067" || c == "1555")
}

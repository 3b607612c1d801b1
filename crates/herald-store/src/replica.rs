//! What replicas share a store with: the queue of one session key, the keys waiting, outbox
//! rows claimed by one sender at a time, and locks on names (one agent run per session, one
//! holder per adapter claim). On SQLite, one process serves the file: its locks are a map in
//! the process and are never lost; PostgreSQL's are in `pg/locks.rs`.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use crate::error::StoreError;
use crate::gateway::{QUEUE_COLUMNS, QueueRow, QueuedInbound};
use crate::open::Lite;
use crate::outbox::{OUTBOX_COLUMNS, OutboxRow, Undelivered};
use crate::time::now_ms;
use crate::write::write_tx;

/// The key space of session locks.
pub(crate) const SESSION_SPACE: &str = "session";
/// The key space of adapter claims.
pub(crate) const CLAIM_SPACE: &str = "claim";

/// A lock this store holds on a name: a session (one agent run at a time across replicas) or an
/// adapter claim (a poller, a shard). Dropping it lets the name go.
#[derive(Debug)]
pub struct SessionLock {
    held: Held,
}

#[derive(Debug)]
enum Held {
    /// Held for as long as the guard lives.
    Local {
        _guard: Local,
    },
    Postgres(crate::pg::Held),
}

impl SessionLock {
    pub(crate) fn postgres(held: crate::pg::Held) -> SessionLock {
        SessionLock { held: Held::Postgres(held) }
    }

    /// Resolves when the lock is gone without being dropped (on PostgreSQL, its connection was
    /// lost): another replica may take the name now, so stop acting on it at once. Never
    /// resolves on SQLite.
    pub async fn lost(&self) {
        match &self.held {
            Held::Local { .. } => std::future::pending().await,
            Held::Postgres(held) => held.lost.cancelled().await,
        }
    }

    /// Whether the lock is gone (see [`SessionLock::lost`]).
    pub fn is_lost(&self) -> bool {
        match &self.held {
            Held::Local { .. } => false,
            Held::Postgres(held) => held.lost.is_cancelled(),
        }
    }
}

/// Names held in this process, by database file: every `Store` opened on one file shares them.
static HELD: LazyLock<Mutex<HashSet<(PathBuf, String)>>> = LazyLock::new(Default::default);

/// A name held in [`HELD`], given up when dropped.
#[derive(Debug)]
struct Local {
    entry: (PathBuf, String),
}

impl Drop for Local {
    fn drop(&mut self) {
        HELD.lock().unwrap_or_else(|p| p.into_inner()).remove(&self.entry);
    }
}

impl Lite {
    /// What is queued for one session key, in queue order.
    pub async fn queued_for(&self, session_key: &str) -> Result<Vec<QueuedInbound>, StoreError> {
        let rows: Vec<QueueRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {QUEUE_COLUMNS} FROM inbound_queue WHERE session_key = ? ORDER BY seq"
        )))
        .bind(session_key)
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(QueuedInbound::try_from).collect()
    }

    /// Every session key with queued messages whose session no store on this file holds, the
    /// one waiting longest first.
    pub async fn orphaned_keys(&self) -> Result<Vec<String>, StoreError> {
        let keys: Vec<String> = sqlx::query_scalar(
            "SELECT session_key FROM inbound_queue GROUP BY session_key ORDER BY min(seq)",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        let file = self.canonical_path();
        let held = HELD.lock().unwrap_or_else(|p| p.into_inner());
        Ok(keys
            .into_iter()
            .filter(|key| !held.contains(&(file.clone(), format!("{SESSION_SPACE}:{key}"))))
            .collect())
    }

    /// Claims up to `limit` undelivered replies nobody else is sending, oldest first, for
    /// `claim_for`.
    pub async fn claim_undelivered(
        &self,
        limit: i64,
        claim_for: Duration,
    ) -> Result<Vec<Undelivered>, StoreError> {
        let now = now_ms();
        let until = now.saturating_add(i64::try_from(claim_for.as_millis()).unwrap_or(i64::MAX));
        let rows: Vec<OutboxRow> = write_tx!(self, |conn| async {
            let sql = format!(
                "UPDATE outbox SET claimed_until = ?1
                 WHERE message_id IN (SELECT message_id FROM outbox
                                      WHERE claimed_until IS NULL OR claimed_until < ?2
                                      ORDER BY message_id LIMIT ?3)
                 RETURNING {OUTBOX_COLUMNS}"
            );
            let rows = sqlx::query_as(sqlx::AssertSqlSafe(sql))
                .bind(until)
                .bind(now)
                .bind(limit)
                .fetch_all(&mut *conn)
                .await?;
            Ok::<_, StoreError>(rows)
        })?;
        sorted(rows)
    }

    /// Locks a session key, unless it is held already.
    pub async fn lock_session(&self, key: &str) -> Result<Option<SessionLock>, StoreError> {
        Ok(self.hold(SESSION_SPACE, key))
    }

    /// Claims an adapter's name, unless it is held already.
    pub async fn try_claim(&self, name: &str) -> Result<Option<SessionLock>, StoreError> {
        Ok(self.hold(CLAIM_SPACE, name))
    }

    fn hold(&self, space: &str, name: &str) -> Option<SessionLock> {
        let entry = (self.canonical_path(), format!("{space}:{name}"));
        let fresh = HELD.lock().unwrap_or_else(|p| p.into_inner()).insert(entry.clone());
        fresh.then(|| SessionLock { held: Held::Local { _guard: Local { entry } } })
    }

    /// The database file, one spelling for all the ways it was opened.
    fn canonical_path(&self) -> PathBuf {
        std::fs::canonicalize(self.path()).unwrap_or_else(|_| self.path().to_owned())
    }
}

/// Claimed rows as replies, oldest first (`RETURNING` keeps no order).
pub(crate) fn sorted(mut rows: Vec<OutboxRow>) -> Result<Vec<Undelivered>, StoreError> {
    rows.sort_by_key(|row| row.message_id);
    rows.into_iter().map(Undelivered::try_from).collect()
}

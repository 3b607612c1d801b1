//! Deferred search indexing: messages commit without touching the full-text indexes, and are
//! indexed in larger batches right after, when the writer is idle, and always before a search.
//!
//! Tokenizing is most of the cost of a write; taking it out of each turn's transaction keeps a
//! busy gateway's turns short while the index trails by milliseconds. On SQLite,
//! `search_cursor.upto` is the highest message id in the indexes (ids are AUTOINCREMENT, never
//! reused); PostgreSQL's side is in `pg/index.rs`. When to index is decided here for both.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::time::Duration;

use sqlx::SqliteConnection;
use tracing::warn;

use crate::error::StoreError;
use crate::open::Lite;
use crate::time::now_ms;
use crate::write::write_tx;

/// How long the database must have been quiet (no message written by this process or any
/// other) before the background indexer takes its turn.
const IDLE: Duration = Duration::from_millis(200);
/// Above this many unindexed messages of this process, index even while writes keep coming, so
/// the index never trails a sustained load by more than a few seconds of work.
const FORCE_BACKLOG: u64 = 50_000;
/// Messages per indexing transaction: small enough not to hold writers up for long.
pub(crate) const CHUNK: i64 = 500;

/// The background indexer's bookkeeping, one per store.
#[derive(Debug, Default)]
pub(crate) struct Indexer {
    scheduled: AtomicBool,
    last_write_ms: AtomicI64,
    pub(crate) backlog: AtomicU64,
}

impl Lite {
    /// Indexes every message not yet searchable; returns how many were indexed.
    pub async fn index_pending(&self) -> Result<u64, StoreError> {
        // A read first: with nothing pending (every close of a read-only CLI command), no
        // write lock is taken, so another process holding it delays nothing. The backlog is
        // left alone here: this snapshot may predate a commit that just added to it.
        if !self.unindexed_exists().await? {
            return Ok(0);
        }
        let mut total = 0;
        loop {
            let (indexed, more) = write_tx!(self, |conn| index_chunk(conn, CHUNK * 4))?;
            total += indexed;
            if !more {
                self.inner.indexer.backlog.store(0, Ordering::Relaxed);
                return Ok(total);
            }
        }
    }

    /// Whether any message is stored but not yet in the search indexes.
    async fn unindexed_exists(&self) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM messages
             WHERE id > (SELECT upto FROM search_cursor WHERE name = 'messages'))",
        )
        .fetch_one(&self.inner.pool)
        .await?)
    }

    /// Messages stored but not yet in the search indexes.
    pub async fn unindexed(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT count(*) FROM messages
             WHERE id > (SELECT upto FROM search_cursor WHERE name = 'messages')",
        )
        .fetch_one(&self.inner.pool)
        .await?)
    }

    /// Notes that `messages` were committed, and makes sure an indexer will pick them up.
    pub(crate) fn schedule_indexing(&self, messages: u64) {
        schedule_indexing(self, messages);
    }
}

impl Indexing for Lite {
    fn indexer(&self) -> &Indexer {
        &self.inner.indexer
    }

    async fn newest_message_id(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'messages'), 0)",
        )
        .fetch_one(&self.inner.pool)
        .await?)
    }

    async fn index_chunk(&self) -> Result<(u64, bool), StoreError> {
        write_tx!(self, |conn| index_chunk(conn, CHUNK))
    }

    async fn caught_up(&self) {
        self.checkpoint().await;
    }
}

/// What the background indexer needs of a backend.
pub(crate) trait Indexing: Clone + Send + Sync + 'static {
    fn indexer(&self) -> &Indexer;
    /// The highest message id given out so far, by any process.
    fn newest_message_id(&self) -> impl Future<Output = Result<i64, StoreError>> + Send;
    /// Indexes up to [`CHUNK`] messages; returns how many, and whether more are waiting.
    fn index_chunk(&self) -> impl Future<Output = Result<(u64, bool), StoreError>> + Send;
    /// The index caught up with the writes.
    fn caught_up(&self) -> impl Future<Output = ()> + Send;
}

/// Notes that `messages` were committed, and makes sure an indexer will pick them up.
pub(crate) fn schedule_indexing<S: Indexing>(store: &S, messages: u64) {
    let indexer = store.indexer();
    indexer.last_write_ms.store(now_ms(), Ordering::Relaxed);
    indexer.backlog.fetch_add(messages, Ordering::Relaxed);
    if indexer.scheduled.swap(true, Ordering::AcqRel) {
        return;
    }
    let store = store.clone();
    tokio::spawn(async move { index_in_background(&store).await });
}

async fn index_in_background<S: Indexing>(store: &S) {
    let indexer = store.indexer();
    loop {
        index_until_caught_up(store).await;
        indexer.scheduled.store(false, Ordering::Release);
        // A write that landed while this task was finishing found it still scheduled.
        let again = indexer.backlog.load(Ordering::Relaxed) > 0
            && !indexer.scheduled.swap(true, Ordering::AcqRel);
        if !again {
            return;
        }
    }
}

async fn index_until_caught_up<S: Indexing>(store: &S) {
    let indexer = store.indexer();
    // The newest message id seen at the last look: another process still writing moves
    // it, and indexing then waits, as it does for this process's own writes.
    let mut newest = None;
    loop {
        tokio::time::sleep(IDLE).await;
        let since_write = now_ms() - indexer.last_write_ms.load(Ordering::Relaxed);
        let now_newest = store.newest_message_id().await.ok();
        let others_quiet = newest.is_some() && now_newest == newest;
        newest = now_newest;
        let quiet = since_write >= IDLE.as_millis() as i64 && others_quiet;
        if !quiet && indexer.backlog.load(Ordering::Relaxed) < FORCE_BACKLOG {
            continue;
        }
        match store.index_chunk().await {
            Ok((indexed, true)) => {
                let _ = indexer.backlog.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| {
                    Some(b.saturating_sub(indexed))
                });
            }
            Ok((_, false)) => {
                indexer.backlog.store(0, Ordering::Relaxed);
                store.caught_up().await;
                return;
            }
            Err(e) => {
                // Nothing is lost: the next write, search or close indexes what is left.
                warn!(error = %e, "background search indexing failed; will retry on the next write");
                indexer.backlog.store(0, Ordering::Relaxed);
                return;
            }
        }
    }
}

/// Indexes up to `limit` messages above the cursor inside the caller's transaction; returns
/// how many and whether more are waiting.
pub(crate) async fn index_chunk(
    conn: &mut SqliteConnection,
    limit: i64,
) -> Result<(u64, bool), StoreError> {
    let upto: i64 = sqlx::query_scalar("SELECT upto FROM search_cursor WHERE name = 'messages'")
        .fetch_one(&mut *conn)
        .await?;
    let target: Option<i64> = sqlx::query_scalar(
        "SELECT max(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
    )
    .bind(upto)
    .bind(limit)
    .fetch_one(&mut *conn)
    .await?;
    let Some(target) = target else { return Ok((0, false)) };
    let indexed = sqlx::query(
        "INSERT INTO messages_fts (rowid, system_text, user_text, assistant_text, tool_text,
                                   tool_name, source, author, session)
         SELECT id, system_text, user_text, assistant_text, tool_text, tool_name, source,
                author, session
         FROM messages_search WHERE id > ? AND id <= ?",
    )
    .bind(upto)
    .bind(target)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    sqlx::query(
        "INSERT INTO messages_cjk (rowid, content)
         SELECT id, content FROM messages WHERE id > ? AND id <= ? AND cjk",
    )
    .bind(upto)
    .bind(target)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE search_cursor SET upto = ? WHERE name = 'messages'")
        .bind(target)
        .execute(&mut *conn)
        .await?;
    let more: bool = sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM messages WHERE id > ?)")
        .bind(target)
        .fetch_one(&mut *conn)
        .await?;
    Ok((indexed, more))
}

//! Deferred search indexing on PostgreSQL, as on SQLite (when to index is decided in
//! `index.rs` for both): a message commits with `search` NULL and gets its words in a batch
//! right after, when the database is quiet, and always before a search. Any replica indexes
//! any message.

use std::sync::atomic::Ordering;

use super::Pg;
use crate::error::StoreError;
use crate::index::{CHUNK, Indexer, Indexing};

impl Pg {
    /// Indexes every message committed before the call and not yet searchable; returns how
    /// many were indexed. Messages other replicas write meanwhile are left to later: a search
    /// or a close does not chase them.
    pub(crate) async fn index_pending(&self) -> Result<u64, StoreError> {
        let upto = Some(Indexing::newest_message_id(self).await?);
        let mut total = 0;
        loop {
            // Waiting for the rows another replica is indexing: when this returns, every
            // message up to `upto` is searchable.
            let indexed = self.index_some(CHUNK * 4, upto).await?;
            total += indexed;
            if indexed == 0 {
                self.inner.indexer.backlog.store(0, Ordering::Relaxed);
                return Ok(total);
            }
        }
    }

    /// Messages stored but not yet searchable.
    pub(crate) async fn unindexed(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT count(*) FROM messages WHERE search IS NULL")
            .fetch_one(&self.inner.pool)
            .await?)
    }

    /// Indexes up to `limit` messages, oldest first. The background indexer (`upto` None)
    /// leaves the rows another replica is indexing to it; otherwise they are waited for, up to
    /// the message `upto`.
    async fn index_some(&self, limit: i64, upto: Option<i64>) -> Result<u64, StoreError> {
        let sql = if upto.is_some() { INDEX_WAITING } else { INDEX_SKIPPING };
        self.write(move |tx| {
            Box::pin(async move {
                let done = sqlx::query(sql).bind(limit).bind(upto).execute(&mut **tx).await?;
                Ok(done.rows_affected())
            })
        })
        .await
    }
}

/// Gives words to a batch of messages still without them (their row locks taken in id order,
/// so two indexers cannot deadlock).
const INDEX_SKIPPING: &str = "
    UPDATE messages m SET search = herald_search(m.content, m.tool_name)
    FROM (SELECT id FROM messages WHERE search IS NULL AND $2::bigint IS NULL
          ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED) pending
    WHERE m.id = pending.id";

/// [`INDEX_SKIPPING`] up to the message `$2`, waiting for the rows another indexer holds
/// (found indexed once it is done, they are left alone).
const INDEX_WAITING: &str = "
    UPDATE messages m SET search = herald_search(m.content, m.tool_name)
    FROM (SELECT id FROM messages WHERE search IS NULL AND id <= $2
          ORDER BY id LIMIT $1 FOR UPDATE) pending
    WHERE m.id = pending.id";

impl Indexing for Pg {
    fn indexer(&self) -> &Indexer {
        &self.inner.indexer
    }

    async fn newest_message_id(&self) -> Result<i64, StoreError> {
        Ok(sqlx::query_scalar("SELECT coalesce(max(id), 0) FROM messages")
            .fetch_one(&self.inner.pool)
            .await?)
    }

    async fn index_chunk(&self) -> Result<(u64, bool), StoreError> {
        let indexed = self.index_some(CHUNK, None).await?;
        Ok((indexed, indexed == CHUNK as u64))
    }

    async fn caught_up(&self) {}
}

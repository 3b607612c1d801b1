//! What replicas share on PostgreSQL: per-key queues, outbox claims with `SKIP LOCKED`, and
//! session locks (advisory locks on the lock connection, `locks.rs`).

use std::time::Duration;

use super::{Pg, lock_key};
use crate::error::StoreError;
use crate::gateway::{QUEUE_COLUMNS, QueueRow, QueuedInbound};
use crate::outbox::{OUTBOX_COLUMNS, OutboxRow, Undelivered};
use crate::replica::{CLAIM_SPACE, SESSION_SPACE, SessionLock, sorted};

impl Pg {
    pub(crate) async fn queued_for(
        &self,
        session_key: &str,
    ) -> Result<Vec<QueuedInbound>, StoreError> {
        let rows: Vec<QueueRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {QUEUE_COLUMNS} FROM inbound_queue WHERE session_key = $1 ORDER BY seq"
        )))
        .bind(session_key)
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(QueuedInbound::try_from).collect()
    }

    pub(crate) async fn queued_keys(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT session_key FROM inbound_queue GROUP BY session_key ORDER BY min(seq)",
        )
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Rows another replica is claiming at this moment are skipped, not waited for, and rows it
    /// claimed are left until their claim expires: each reply goes to one live replica. Claims
    /// are timed by the database's clock, which every replica shares.
    pub(crate) async fn claim_undelivered(
        &self,
        limit: i64,
        claim_for: Duration,
    ) -> Result<Vec<Undelivered>, StoreError> {
        // Capped far below overflow when added to the time.
        let claim_ms = i64::try_from(claim_for.as_millis()).unwrap_or(i64::MAX).min(i64::MAX / 2);
        let rows: Vec<OutboxRow> = self
            .write(move |tx| {
                Box::pin(async move {
                    let sql = format!(
                        "WITH now AS (
                             SELECT (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT AS ms
                         ),
                         picked AS (
                             SELECT message_id FROM outbox, now
                             WHERE claimed_until IS NULL OR claimed_until < now.ms
                             ORDER BY message_id LIMIT $1
                             FOR UPDATE OF outbox SKIP LOCKED
                         )
                         UPDATE outbox SET claimed_until = now.ms + $2
                         FROM picked, now
                         WHERE outbox.message_id = picked.message_id
                         RETURNING {}",
                        qualified(OUTBOX_COLUMNS)
                    );
                    sqlx::query_as(sqlx::AssertSqlSafe(sql))
                        .bind(limit)
                        .bind(claim_ms)
                        .fetch_all(&mut **tx)
                        .await
                })
            })
            .await?;
        sorted(rows)
    }

    pub(crate) async fn lock_session(&self, key: &str) -> Result<Option<SessionLock>, StoreError> {
        let held = self.inner.locks.try_lock(lock_key(SESSION_SPACE, key)).await?;
        Ok(held.map(SessionLock::postgres))
    }

    pub(crate) async fn try_claim(&self, name: &str) -> Result<Option<SessionLock>, StoreError> {
        let held = self.inner.locks.try_lock(lock_key(CLAIM_SPACE, name)).await?;
        Ok(held.map(SessionLock::postgres))
    }
}

/// `columns` of the outbox, each named with its table (`picked` has a `message_id` too).
fn qualified(columns: &str) -> String {
    columns.split(", ").map(|c| format!("outbox.{c}")).collect::<Vec<_>>().join(", ")
}

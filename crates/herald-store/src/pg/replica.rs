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

    /// One statement: the keys are checked against the advisory locks every replica holds in
    /// this database, so a sweep asks for no lock a live replica has.
    pub(crate) async fn orphaned_keys(&self) -> Result<Vec<String>, StoreError> {
        Ok(sqlx::query_scalar(ORPHANED).bind(SESSION_SPACE).fetch_all(&self.inner.pool).await?)
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

/// The statement of [`Pg::orphaned_keys`]. A session's lock key is [`lock_key`] computed in
/// SQL: the first 8 bytes of SHA-256 of the space, a zero byte and the key. An advisory lock
/// on a bigint shows in `pg_locks` as its high half (`classid`), its low half (`objid`) and
/// `objsubid` 1.
const ORPHANED: &str = "
    WITH held AS MATERIALIZED (
        SELECT classid::bigint AS high, objid::bigint AS low FROM pg_locks
        WHERE locktype = 'advisory' AND objsubid = 1 AND granted
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
    ),
    waiting AS (
        SELECT session_key, min(seq) AS first,
               ('x' || left(encode(sha256(convert_to($1, 'UTF8') || '\\x00'::bytea
                                          || convert_to(session_key, 'UTF8')), 'hex'), 16)
               )::bit(64)::bigint AS lock
        FROM inbound_queue GROUP BY session_key
    )
    SELECT session_key FROM waiting w
    WHERE NOT EXISTS (SELECT 1 FROM held h
                      WHERE h.high = (w.lock >> 32) & 4294967295 AND h.low = w.lock & 4294967295)
    ORDER BY first";

//! The gateway's state on PostgreSQL: cursors, the inbound queue, and what is left unanswered
//! (the outbox is in `outbox.rs`, pairing in `pairing.rs`).

use std::sync::Arc;

use herald_core::{ChatRef, Platform, Role, UserRef};
use sqlx::PgConnection;

use super::Pg;
use crate::error::StoreError;
use crate::gateway::{QUEUE_COLUMNS, QueueRow, QueuedInbound};
use crate::sessions::{SESSION_COLUMNS, Session};
use crate::time::now_ms;

/// What [`Pg::queue_inbound`] writes.
#[derive(Debug)]
struct ToQueue {
    session_key: String,
    message_id: String,
    chat: ChatRef,
    user: UserRef,
    content: String,
}

impl Pg {
    pub(crate) async fn cursor(
        &self,
        platform: Platform,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT value FROM platform_cursors WHERE platform = $1 AND name = $2",
        )
        .bind(platform.as_str())
        .bind(name)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn cursors(
        &self,
        platform: Platform,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT name, value FROM platform_cursors WHERE platform = $1 ORDER BY name",
        )
        .bind(platform.as_str())
        .fetch_all(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn set_cursor(
        &self,
        platform: Platform,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (name, value) = (Arc::<str>::from(name), Arc::<str>::from(value));
        self.write(move |tx| {
            let (name, value) = (Arc::clone(&name), Arc::clone(&value));
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO platform_cursors (platform, name, value, updated_at)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (platform, name)
                     DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at",
                )
                .bind(platform.as_str())
                .bind(&*name)
                .bind(&*value)
                .bind(now_ms())
                .execute(&mut **tx)
                .await
                .map(drop)
            })
        })
        .await
    }

    /// Records the inbound id and queues the message (see [`QUEUE`]); `None` when the id was
    /// recorded before.
    pub(crate) async fn queue_inbound(
        &self,
        session_key: &str,
        message_id: &str,
        chat: &ChatRef,
        user: &UserRef,
        content: &str,
    ) -> Result<Option<i64>, StoreError> {
        let queued = Arc::new(ToQueue {
            session_key: session_key.to_owned(),
            message_id: message_id.to_owned(),
            chat: chat.clone(),
            user: user.clone(),
            content: content.to_owned(),
        });
        self.write_one(move |pool| {
            let q = Arc::clone(&queued);
            Box::pin(async move {
                sqlx::query_scalar(QUEUE)
                    .bind(q.chat.platform.as_str())
                    .bind(&q.message_id)
                    .bind(&q.session_key)
                    .bind(&q.chat.id)
                    .bind(&q.chat.thread)
                    .bind(q.chat.kind.as_str())
                    .bind(&q.user.id)
                    .bind(&q.user.name)
                    .bind(&q.content)
                    .bind(now_ms())
                    .bind(super::handover::QUEUED_CHANNEL)
                    .fetch_optional(&pool)
                    .await
            })
        })
        .await
    }

    pub(crate) async fn take_queued(
        &self,
        session_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<i64>, StoreError> {
        let (id, seqs) = (Arc::<str>::from(session_id), Arc::<[i64]>::from(seqs));
        let taken = self
            .write_one(move |pool| {
                let (id, seqs) = (Arc::clone(&id), Arc::clone(&seqs));
                Box::pin(async move { take_in(&pool, &id, &seqs).await })
            })
            .await?;
        let ids = taken.ok_or_else(|| StoreError::SessionNotFound(session_id.to_owned()))?;
        crate::index::schedule_indexing(self, ids.len() as u64);
        Ok(ids)
    }

    pub(crate) async fn queued_inbound(&self) -> Result<Vec<QueuedInbound>, StoreError> {
        let rows: Vec<QueueRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {QUEUE_COLUMNS} FROM inbound_queue ORDER BY seq"
        )))
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(QueuedInbound::try_from).collect()
    }

    pub(crate) async fn unanswered_sessions(&self) -> Result<Vec<Session>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE id IN (SELECT session_id FROM routes) AND ended_at IS NULL
               AND (SELECT role FROM messages WHERE session_id = sessions.id
                    ORDER BY id DESC LIMIT 1) = 'user'
             ORDER BY updated_at"
        )))
        .fetch_all(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn left_unanswered(&self, session_key: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM routes r JOIN sessions s ON s.id = r.session_id
                            WHERE r.session_key = $1 AND s.ended_at IS NULL
                              AND (SELECT role FROM messages WHERE session_id = s.id
                                   ORDER BY id DESC LIMIT 1) = 'user')",
        )
        .bind(session_key)
        .fetch_one(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn undo_last_exchange(&self, session_id: &str) -> Result<u64, StoreError> {
        let session_id = Arc::<str>::from(session_id);
        self.write(move |tx| {
            let session_id = Arc::clone(&session_id);
            Box::pin(async move {
                let Some(from) = last_user_message(tx, &session_id).await? else {
                    return Ok(0);
                };
                delete_from(tx, &session_id, from).await
            })
        })
        .await
    }

    pub(crate) async fn reset_last_answer(
        &self,
        session_id: &str,
    ) -> Result<Option<String>, StoreError> {
        let session_id = Arc::<str>::from(session_id);
        self.write(move |tx| {
            let session_id = Arc::clone(&session_id);
            Box::pin(async move {
                let Some(from) = last_user_message(tx, &session_id).await? else {
                    return Ok(None);
                };
                delete_from(tx, &session_id, from + 1).await?;
                sqlx::query_scalar("SELECT content FROM messages WHERE id = $1")
                    .bind(from)
                    .fetch_one(&mut **tx)
                    .await
                    .map(Some)
            })
        })
        .await
    }
}

/// Moves queued messages into a session's history, in the order of `seqs`; `None` when the
/// session does not exist. One statement: the session's row is locked before any message id is
/// drawn, so appends to it from another replica wait rather than interleave with these ids.
async fn take_in(
    pool: &sqlx::PgPool,
    session_id: &str,
    seqs: &[i64],
) -> Result<Option<Vec<i64>>, sqlx::Error> {
    // One message (nearly always) by a statement of its own: PostgreSQL plans the array's
    // statement again at every call, guessing the array's length.
    let query = match seqs {
        [seq] => sqlx::query_as(TAKE_ONE).bind(session_id).bind(seq),
        seqs => sqlx::query_as(TAKE).bind(session_id).bind(seqs),
    };
    let (found, ids): (bool, Vec<i64>) =
        query.bind(now_ms()).bind(Role::User.as_str()).fetch_one(pool).await?;
    Ok(found.then_some(ids))
}

/// The statement of [`take_in`].
const TAKE: &str = "
    WITH found AS (SELECT id FROM sessions WHERE id = $1 FOR UPDATE),
    taken AS (
        DELETE FROM inbound_queue WHERE seq = ANY($2::bigint[]) AND EXISTS (SELECT 1 FROM found)
        RETURNING seq, message_id, content
    ),
    added AS (
        INSERT INTO messages (session_id, role, content, platform_message_id, created_at)
        SELECT $1, $4, t.content, t.message_id, $3 FROM taken t
        ORDER BY array_position($2::bigint[], t.seq)
        RETURNING id
    ),
    counted AS (
        UPDATE sessions SET message_count = message_count + (SELECT count(*) FROM added),
               updated_at = $3
        WHERE id = $1 AND EXISTS (SELECT 1 FROM added)
    )
    SELECT EXISTS (SELECT 1 FROM found), array(SELECT id FROM added ORDER BY id)";

/// [`TAKE`] for one message.
const TAKE_ONE: &str = "
    WITH found AS (SELECT id FROM sessions WHERE id = $1 FOR UPDATE),
    taken AS (
        DELETE FROM inbound_queue WHERE seq = $2 AND EXISTS (SELECT 1 FROM found)
        RETURNING message_id, content
    ),
    added AS (
        INSERT INTO messages (session_id, role, content, platform_message_id, created_at)
        SELECT $1, $4, content, message_id, $3 FROM taken
        RETURNING id
    ),
    counted AS (
        UPDATE sessions SET message_count = message_count + 1, updated_at = $3
        WHERE id = $1 AND EXISTS (SELECT 1 FROM added)
    )
    SELECT EXISTS (SELECT 1 FROM found), array(SELECT id FROM added)";

/// The statement of [`Pg::queue_inbound`]: the inbound id recorded, the message queued and
/// every replica told (once this commits, the one running the session takes it in at once);
/// no row when the id was recorded before. Two replicas queueing the same message at once:
/// the second insert into `processed_inbound` waits for the first and then does nothing.
const QUEUE: &str = "
    WITH fresh AS (
        INSERT INTO processed_inbound (platform, message_id, received_at) VALUES ($1, $2, $10)
        ON CONFLICT DO NOTHING
        RETURNING 1
    ),
    queued AS (
        INSERT INTO inbound_queue (platform, message_id, session_key, chat_id, thread_id,
                                   chat_kind, user_id, user_name, content, received_at)
        SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10 WHERE EXISTS (SELECT 1 FROM fresh)
        RETURNING seq
    )
    SELECT q.seq FROM queued q CROSS JOIN LATERAL (SELECT pg_notify($11, $3)) told";

async fn last_user_message(
    conn: &mut PgConnection,
    session_id: &str,
) -> Result<Option<i64>, sqlx::Error> {
    sqlx::query_scalar("SELECT max(id) FROM messages WHERE session_id = $1 AND role = $2")
        .bind(session_id)
        .bind(Role::User.as_str())
        .fetch_one(&mut *conn)
        .await
}

/// Deletes a session's messages from id `from` on and keeps its counters true.
async fn delete_from(
    conn: &mut PgConnection,
    session_id: &str,
    from: i64,
) -> Result<u64, sqlx::Error> {
    // Tool calls are a JSON array as the model sent it; anything else counts no calls.
    let (messages, calls): (i64, i64) = sqlx::query_as(
        "WITH gone AS (
             DELETE FROM messages WHERE session_id = $1 AND id >= $2 RETURNING tool_calls
         )
         SELECT count(*),
                coalesce(sum(CASE WHEN json_typeof(tool_calls::json) = 'array'
                                  THEN json_array_length(tool_calls::json) ELSE 0 END), 0)::BIGINT
         FROM gone",
    )
    .bind(session_id)
    .bind(from)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE sessions SET message_count = greatest(message_count - $1, 0),
                tool_call_count = greatest(tool_call_count - $2, 0), updated_at = $3
         WHERE id = $4",
    )
    .bind(messages)
    .bind(calls)
    .bind(now_ms())
    .bind(session_id)
    .execute(&mut *conn)
    .await?;
    Ok(u64::try_from(messages).unwrap_or(0))
}

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

    /// Two replicas queueing the same message at once: the second insert into
    /// `processed_inbound` waits for the first transaction and then does nothing.
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
        self.write(move |tx| {
            let q = Arc::clone(&queued);
            Box::pin(async move {
                let now = now_ms();
                let fresh = sqlx::query(
                    "INSERT INTO processed_inbound (platform, message_id, received_at)
                     VALUES ($1, $2, $3) ON CONFLICT DO NOTHING",
                )
                .bind(q.chat.platform.as_str())
                .bind(&q.message_id)
                .bind(now)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                if fresh == 0 {
                    return Ok(None);
                }
                let seq: i64 = sqlx::query_scalar(
                    "INSERT INTO inbound_queue (platform, message_id, session_key, chat_id,
                         thread_id, chat_kind, user_id, user_name, content, received_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING seq",
                )
                .bind(q.chat.platform.as_str())
                .bind(&q.message_id)
                .bind(&q.session_key)
                .bind(&q.chat.id)
                .bind(&q.chat.thread)
                .bind(q.chat.kind.as_str())
                .bind(&q.user.id)
                .bind(&q.user.name)
                .bind(&q.content)
                .bind(now)
                .fetch_one(&mut **tx)
                .await?;
                // Heard by every replica once this commits: the one running the session takes
                // the message in at once.
                sqlx::query("SELECT pg_notify($1, $2)")
                    .bind(super::handover::QUEUED_CHANNEL)
                    .bind(&q.session_key)
                    .execute(&mut **tx)
                    .await?;
                Ok(Some(seq))
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
            .write(move |tx| {
                let (id, seqs) = (Arc::clone(&id), Arc::clone(&seqs));
                Box::pin(async move { take_in(tx, &id, &seqs).await })
            })
            .await?;
        taken.ok_or_else(|| StoreError::SessionNotFound(session_id.to_owned()))
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

/// Moves `seqs` into the session's history in the order given; `None` (and nothing written)
/// when the session does not exist. The session row is locked first, so appends to it from
/// another replica wait rather than interleave with these ids.
async fn take_in(
    conn: &mut PgConnection,
    session_id: &str,
    seqs: &[i64],
) -> Result<Option<Vec<i64>>, sqlx::Error> {
    let found: Option<String> =
        sqlx::query_scalar("SELECT id FROM sessions WHERE id = $1 FOR UPDATE")
            .bind(session_id)
            .fetch_optional(&mut *conn)
            .await?;
    if found.is_none() {
        return Ok(None);
    }
    let now = now_ms();
    let mut ids = Vec::with_capacity(seqs.len());
    for seq in seqs {
        let row: Option<(String, String)> = sqlx::query_as(
            "DELETE FROM inbound_queue WHERE seq = $1 RETURNING message_id, content",
        )
        .bind(seq)
        .fetch_optional(&mut *conn)
        .await?;
        let Some((message_id, content)) = row else { continue };
        // One row at a time: the ids must grow in the order the messages are taken.
        let id: i64 = sqlx::query_scalar(
            "INSERT INTO messages (session_id, role, content, platform_message_id, created_at)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(session_id)
        .bind(Role::User.as_str())
        .bind(content)
        .bind(message_id)
        .bind(now)
        .fetch_one(&mut *conn)
        .await?;
        ids.push(id);
    }
    if !ids.is_empty() {
        sqlx::query(
            "UPDATE sessions SET message_count = message_count + $1, updated_at = $2 WHERE id = $3",
        )
        .bind(ids.len() as i64)
        .bind(now)
        .bind(session_id)
        .execute(&mut *conn)
        .await?;
    }
    Ok(Some(ids))
}

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

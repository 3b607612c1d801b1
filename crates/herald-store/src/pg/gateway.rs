//! The gateway's state on PostgreSQL: cursors, the inbound queue, and what is left unanswered
//! (the outbox is in `outbox.rs`, pairing in `pairing.rs`).

use std::sync::Arc;

use herald_core::{Platform, Role};
use sqlx::PgConnection;

use super::Pg;
use crate::error::StoreError;
use crate::gateway::{QUEUE_COLUMNS, QueueRow, QueuedInbound};
use crate::sessions::{SESSION_COLUMNS, Session};
use crate::time::now_ms;

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

    pub(crate) async fn newest_inbound(
        &self,
        platform: Platform,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT chat, newest FROM
                 (SELECT coalesce(s.thread_id, s.chat_id) AS chat,
                         (SELECT m.platform_message_id FROM messages m
                          WHERE m.session_id = s.id AND m.platform_message_id IS NOT NULL
                          ORDER BY m.id DESC LIMIT 1) AS newest
                  FROM sessions s
                  WHERE s.source = $1 AND s.ended_at IS NULL
                    AND s.id IN (SELECT session_id FROM routes)) open
             WHERE chat IS NOT NULL AND newest IS NOT NULL
             ORDER BY chat",
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

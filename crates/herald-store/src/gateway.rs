//! State the gateway keeps across restarts: platform cursors, the inbound queue of busy
//! sessions, and what is left unanswered.

use std::sync::Arc;

use herald_core::{ChatKind, ChatRef, Platform, Role, UserRef};
use sqlx::SqliteConnection;

use crate::appends::apply_batch;
use crate::error::StoreError;
use crate::messages::{Append, NewMessage, TokenUsage};
use crate::open::Lite;
use crate::sessions::{SESSION_COLUMNS, Session};
use crate::time::now_ms;
use crate::write::write_tx;

/// An inbound message waiting for its session's running turn to finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedInbound {
    /// Position in the queue (arrival order across all sessions).
    pub seq: i64,
    /// The session key it was routed by.
    pub session_key: String,
    /// The platform's message id.
    pub message_id: String,
    /// Where it was written.
    pub chat: ChatRef,
    /// Who wrote it.
    pub user: UserRef,
    /// Its text.
    pub content: String,
}

/// A row of `inbound_queue`, on either backend (and in a PostgreSQL notification).
#[derive(sqlx::FromRow, serde::Deserialize)]
pub(crate) struct QueueRow {
    seq: i64,
    platform: String,
    message_id: String,
    session_key: String,
    chat_id: String,
    thread_id: Option<String>,
    chat_kind: String,
    user_id: String,
    user_name: Option<String>,
    content: String,
}

impl TryFrom<QueueRow> for QueuedInbound {
    type Error = StoreError;

    fn try_from(row: QueueRow) -> Result<Self, StoreError> {
        let platform: Platform = row.platform.parse().map_err(decode)?;
        let kind = ChatKind::from_stored(&row.chat_kind);
        Ok(QueuedInbound {
            seq: row.seq,
            session_key: row.session_key,
            message_id: row.message_id,
            chat: ChatRef { platform, id: row.chat_id, kind, thread: row.thread_id },
            user: UserRef { id: row.user_id, name: row.user_name },
            content: row.content,
        })
    }
}

fn decode(e: impl std::error::Error + Send + Sync + 'static) -> StoreError {
    StoreError::Sqlx(sqlx::Error::Decode(Box::new(e)))
}

/// The columns [`QueueRow`] reads.
pub(crate) const QUEUE_COLUMNS: &str = "seq, platform, message_id, session_key, chat_id, thread_id, \
    chat_kind, user_id, user_name, content";

impl Lite {
    /// A platform's saved position (for example the Telegram update offset).
    pub async fn cursor(
        &self,
        platform: Platform,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar("SELECT value FROM platform_cursors WHERE platform = ? AND name = ?")
            .bind(platform.as_str())
            .bind(name)
            .fetch_optional(&self.inner.pool)
            .await?)
    }

    /// Every position and value saved for `platform`, by name.
    pub async fn cursors(&self, platform: Platform) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT name, value FROM platform_cursors WHERE platform = ? ORDER BY name",
        )
        .bind(platform.as_str())
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Where each open routed session of `platform` stands: its chat (its thread, when it has
    /// one) and the platform id of its newest message that has one. Read at a start, not per
    /// message: one step back along each session's history index.
    pub async fn newest_inbound(
        &self,
        platform: Platform,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT chat, newest FROM
                 (SELECT coalesce(s.thread_id, s.chat_id) AS chat,
                         (SELECT m.platform_message_id FROM messages m
                          WHERE m.session_no = s.no AND m.platform_message_id IS NOT NULL
                          ORDER BY m.id DESC LIMIT 1) AS newest
                  FROM sessions s
                  WHERE s.source = ? AND s.ended_at IS NULL
                    AND s.id IN (SELECT session_id FROM routes))
             WHERE chat IS NOT NULL AND newest IS NOT NULL
             ORDER BY chat",
        )
        .bind(platform.as_str())
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Saves a platform's position.
    pub async fn set_cursor(
        &self,
        platform: Platform,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let (name, value) = (name.to_owned(), value.to_owned());
        self.grouped(move |conn| {
            let (name, value) = (name.clone(), value.clone());
            Box::pin(async move {
                sqlx::query(
                    "INSERT INTO platform_cursors (platform, name, value, updated_at)
                     VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (platform, name) DO UPDATE SET value = ?3, updated_at = ?4",
                )
                .bind(platform.as_str())
                .bind(name)
                .bind(value)
                .bind(now_ms())
                .execute(&mut *conn)
                .await?;
                Ok(())
            })
        })
        .await
    }

    /// Queues an inbound message for a busy session and records its id for dedupe, in one
    /// transaction. Returns its queue position, or `None` when the message was seen before.
    pub async fn queue_inbound(
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
        self.grouped(move |conn| {
            let queued = Arc::clone(&queued);
            Box::pin(async move { queue_in(conn, &queued).await })
        })
        .await
    }

    /// Moves queued messages into a session's history, in one transaction, when its turn
    /// starts. Returns the new message ids (fewer when some were already taken).
    pub async fn take_queued(
        &self,
        session_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<i64>, StoreError> {
        let (session_id, seqs) = (Arc::<str>::from(session_id), Arc::<[i64]>::from(seqs));
        self.grouped(move |conn| {
            let (session_id, seqs) = (Arc::clone(&session_id), Arc::clone(&seqs));
            Box::pin(async move { take_in(conn, &session_id, &seqs).await })
        })
        .await
    }

    /// Every queued inbound message, in arrival order (what a restart must still answer).
    pub async fn queued_inbound(&self) -> Result<Vec<QueuedInbound>, StoreError> {
        let rows: Vec<QueueRow> = sqlx::query_as(
            "SELECT seq, platform, message_id, session_key, chat_id, thread_id, chat_kind,
                    user_id, user_name, content
             FROM inbound_queue ORDER BY seq",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(QueuedInbound::try_from).collect()
    }

    /// Open routed sessions whose last message is a person's, not yet answered (the daemon
    /// stopped mid-turn): a restart answers them.
    pub async fn unanswered_sessions(&self) -> Result<Vec<Session>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE id IN (SELECT session_id FROM routes) AND ended_at IS NULL
               AND (SELECT role FROM messages WHERE session_no = sessions.no
                    ORDER BY id DESC LIMIT 1) = 'user'
             ORDER BY updated_at"
        )))
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Whether the session `session_key` is routed to is open and its last message is a
    /// person's, not yet answered: its last turn never finished.
    pub async fn left_unanswered(&self, session_key: &str) -> Result<bool, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT EXISTS (SELECT 1 FROM routes r JOIN sessions s ON s.id = r.session_id
                            WHERE r.session_key = ? AND s.ended_at IS NULL
                              AND (SELECT role FROM messages WHERE session_no = s.no
                                   ORDER BY id DESC LIMIT 1) = 'user')",
        )
        .bind(session_key)
        .fetch_one(&self.inner.pool)
        .await?)
    }

    /// Drops a session's last exchange: the last message a person wrote and everything after
    /// it. Returns how many messages were removed (0 when there is no such message).
    pub async fn undo_last_exchange(&self, session_id: &str) -> Result<u64, StoreError> {
        write_tx!(self, |conn| async {
            let Some(from) = last_user_message(conn, session_id).await? else {
                return Ok::<_, StoreError>(0);
            };
            delete_from(conn, session_id, from).await
        })
    }

    /// Drops what answered the last message a person wrote, so it can be answered again.
    /// Returns that message's text, or `None` when the session has no such message.
    pub async fn reset_last_answer(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        write_tx!(self, |conn| async {
            let Some(from) = last_user_message(conn, session_id).await? else {
                return Ok::<_, StoreError>(None);
            };
            delete_from(conn, session_id, from + 1).await?;
            let text = sqlx::query_scalar("SELECT content FROM messages WHERE id = ?")
                .bind(from)
                .fetch_one(&mut *conn)
                .await?;
            Ok(Some(text))
        })
    }
}

async fn last_user_message(
    conn: &mut SqliteConnection,
    session_id: &str,
) -> Result<Option<i64>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT max(id) FROM messages
         WHERE session_no = (SELECT no FROM sessions WHERE id = ?) AND role = ?",
    )
    .bind(session_id)
    .bind(Role::User.as_str())
    .fetch_one(&mut *conn)
    .await?)
}

/// Deletes a session's messages from id `from` on and keeps its counters true.
async fn delete_from(
    conn: &mut SqliteConnection,
    session_id: &str,
    from: i64,
) -> Result<u64, StoreError> {
    let (messages, calls): (i64, i64) = sqlx::query_as(
        "SELECT count(*), coalesce(sum(json_array_length(tool_calls)), 0)
         FROM messages WHERE session_no = (SELECT no FROM sessions WHERE id = ?) AND id >= ?",
    )
    .bind(session_id)
    .bind(from)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "DELETE FROM messages
         WHERE session_no = (SELECT no FROM sessions WHERE id = ?) AND id >= ?",
    )
    .bind(session_id)
    .bind(from)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE sessions SET message_count = max(message_count - ?1, 0),
                tool_call_count = max(tool_call_count - ?2, 0), updated_at = ?3
         WHERE id = ?4",
    )
    .bind(messages)
    .bind(calls)
    .bind(now_ms())
    .bind(session_id)
    .execute(&mut *conn)
    .await?;
    Ok(u64::try_from(messages).unwrap_or(0))
}

/// What [`Lite::queue_inbound`] writes.
#[derive(Debug)]
struct ToQueue {
    session_key: String,
    message_id: String,
    chat: ChatRef,
    user: UserRef,
    content: String,
}

async fn queue_in(conn: &mut SqliteConnection, q: &ToQueue) -> Result<Option<i64>, StoreError> {
    let now = now_ms();
    let fresh = sqlx::query(
        "INSERT INTO processed_inbound (platform, message_id, received_at)
         VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
    )
    .bind(q.chat.platform.as_str())
    .bind(&q.message_id)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if fresh == 0 {
        return Ok(None);
    }
    let seq = sqlx::query_scalar(
        "INSERT INTO inbound_queue (platform, message_id, session_key, chat_id, thread_id,
                                    chat_kind, user_id, user_name, content, received_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq",
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
    .fetch_one(&mut *conn)
    .await?;
    Ok(Some(seq))
}

async fn take_in(
    conn: &mut SqliteConnection,
    session_id: &str,
    seqs: &[i64],
) -> Result<Vec<i64>, StoreError> {
    let mut messages = Vec::with_capacity(seqs.len());
    for seq in seqs {
        let row: Option<(String, String)> =
            sqlx::query_as("DELETE FROM inbound_queue WHERE seq = ? RETURNING message_id, content")
                .bind(seq)
                .fetch_optional(&mut *conn)
                .await?;
        if let Some((id, content)) = row {
            messages.push(NewMessage::user(content).with_platform_id(id));
        }
    }
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let append = Append {
        session_id: session_id.to_owned(),
        messages,
        dedupe: None,
        usage: TokenUsage::default(),
        outbox: None,
    };
    let mut results = apply_batch(conn, &[&append]).await?;
    match results.pop() {
        Some(Ok(crate::Appended::Stored(ids))) => Ok(ids),
        Some(Err(e)) => Err(e),
        _ => Ok(Vec::new()),
    }
}

//! Messages on PostgreSQL: the ways to append (each written by the group commit of `group.rs`),
//! an append inside a caller's transaction, and reading a history back.

use std::sync::Arc;

use herald_core::{Platform, Role};
use serde::Deserialize;
use serde::de::IntoDeserializer;
use sqlx::PgConnection;

use super::Pg;
use crate::error::StoreError;
use crate::messages::{Append, Appended, Delivery, NewMessage, StoredMessage, TokenUsage};
use crate::time::now_ms;

impl Pg {
    /// A session's messages in the order they were written.
    pub(crate) async fn history(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let rows: Vec<MessageRow> = sqlx::query_as(
            "SELECT id, role, content, tool_calls, tool_call_id, tool_name, platform_message_id,
                    token_count, created_at
             FROM messages WHERE session_id = $1 ORDER BY id",
        )
        .bind(session_id)
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(|row| row.into_message(session_id)).collect()
    }

    pub(crate) async fn append_messages(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<i64>, StoreError> {
        self.append_turn(session_id, messages, TokenUsage::default()).await
    }

    pub(crate) async fn append_turn(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
    ) -> Result<Vec<i64>, StoreError> {
        self.append_delta(session_id, messages, usage, None).await
    }

    pub(crate) async fn append_reply(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
        delivery: Delivery,
    ) -> Result<Vec<i64>, StoreError> {
        self.append_delta(session_id, messages, usage, Some(delivery)).await
    }

    async fn append_delta(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
        delivery: Option<Delivery>,
    ) -> Result<Vec<i64>, StoreError> {
        let outbox = delivery.filter(|_| !messages.is_empty());
        let append =
            Append { session_id: session_id.to_owned(), messages, dedupe: None, usage, outbox };
        match self.append(append).await? {
            Appended::Stored(ids) => Ok(ids),
            Appended::Duplicate => Ok(Vec::new()),
        }
    }

    pub(crate) async fn append_inbound(
        &self,
        session_id: &str,
        platform: Platform,
        platform_message_id: &str,
        message: NewMessage,
    ) -> Result<Appended, StoreError> {
        let message = message.with_platform_id(platform_message_id);
        self.append(Append {
            session_id: session_id.to_owned(),
            messages: vec![message],
            dedupe: Some((platform, platform_message_id.to_owned())),
            usage: TokenUsage::default(),
            outbox: None,
        })
        .await
    }

    /// Whether the inbound id was new. Replicas that received the same message at once record
    /// it once: the second insert waits for the first to commit, then does nothing.
    pub(crate) async fn record_inbound(
        &self,
        platform: Platform,
        platform_message_id: &str,
    ) -> Result<bool, StoreError> {
        let id = Arc::<str>::from(platform_message_id);
        self.write(move |tx| {
            let id = Arc::clone(&id);
            Box::pin(async move { record_in(tx, platform, &id, now_ms()).await })
        })
        .await
    }
}

/// Records an inbound id inside the caller's transaction; false when it was recorded before.
async fn record_in(
    conn: &mut PgConnection,
    platform: Platform,
    message_id: &str,
    now: i64,
) -> Result<bool, sqlx::Error> {
    let fresh = sqlx::query(
        "INSERT INTO processed_inbound (platform, message_id, received_at) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(platform.as_str())
    .bind(message_id)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(fresh > 0)
}

/// Applies one append inside the caller's transaction: the counters, the messages, the inbound
/// id and the outbox row, as the SQLite batch does for each of its appends. `None` when the
/// session does not exist (nothing written), `Duplicate` when the inbound id was seen before.
pub(crate) async fn append_in(
    conn: &mut PgConnection,
    append: &Append,
) -> Result<Option<Appended>, sqlx::Error> {
    let now = now_ms();
    // The session's row stays locked until commit: appends to one session take turns, so its
    // message ids grow in the order its messages were written.
    let found: Option<i32> = sqlx::query_scalar("SELECT 1 FROM sessions WHERE id = $1 FOR UPDATE")
        .bind(&append.session_id)
        .fetch_optional(&mut *conn)
        .await?;
    if found.is_none() {
        return Ok(None);
    }
    if let Some((platform, id)) = &append.dedupe
        && !record_in(conn, *platform, id, now).await?
    {
        return Ok(Some(Appended::Duplicate));
    }
    let messages = &append.messages;
    let calls: i64 = messages.iter().map(NewMessage::tool_call_count).sum();
    sqlx::query(
        "UPDATE sessions SET message_count = message_count + $1,
                tool_call_count = tool_call_count + $2,
                input_tokens = input_tokens + $3, output_tokens = output_tokens + $4,
                context_tokens = CASE WHEN $5::bigint > 0 THEN $5 ELSE context_tokens END,
                updated_at = $6
         WHERE id = $7",
    )
    .bind(messages.len() as i64)
    .bind(calls)
    .bind(append.usage.input)
    .bind(append.usage.output)
    .bind(append.usage.context)
    .bind(now)
    .bind(&append.session_id)
    .execute(&mut *conn)
    .await?;
    let ids = insert_messages(conn, &append.session_id, messages, now).await?;
    if let (Some(delivery), Some(last)) = (&append.outbox, ids.last()) {
        sqlx::query(
            "INSERT INTO outbox (message_id, session_id, platform, chat_id, thread_id, chat_kind,
                                 reply_to, text, created_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        )
        .bind(last)
        .bind(&append.session_id)
        .bind(delivery.chat.platform.as_str())
        .bind(&delivery.chat.id)
        .bind(&delivery.chat.thread)
        .bind(delivery.chat.kind.as_str())
        .bind(&delivery.reply_to)
        .bind(&delivery.text)
        .bind(now)
        .execute(&mut *conn)
        .await?;
    }
    Ok(Some(Appended::Stored(ids)))
}

/// Inserts `messages` in order with one statement whatever their number; returns their ids.
async fn insert_messages(
    conn: &mut PgConnection,
    session_id: &str,
    messages: &[NewMessage],
    now: i64,
) -> Result<Vec<i64>, sqlx::Error> {
    if messages.is_empty() {
        return Ok(Vec::new());
    }
    let column = |f: fn(&NewMessage) -> Option<String>| messages.iter().map(f).collect::<Vec<_>>();
    // Rows are inserted, and their ids drawn, in the order ORDER BY gives; the ids come back
    // in no promised order, so they are sorted.
    let mut ids: Vec<i64> = sqlx::query_scalar(
        "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, tool_name,
                               platform_message_id, token_count, created_at)
         SELECT $1, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name,
                m.platform_message_id, m.token_count, $9
         FROM unnest($2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                     $8::bigint[])
              WITH ORDINALITY AS m (role, content, tool_calls, tool_call_id, tool_name,
                                    platform_message_id, token_count, n)
         ORDER BY m.n
         RETURNING id",
    )
    .bind(session_id)
    .bind(column(|m| Some(m.role.as_str().to_owned())))
    .bind(column(|m| Some(m.content.clone())))
    .bind(column(|m| m.tool_calls.as_ref().map(serde_json::Value::to_string)))
    .bind(column(|m| m.tool_call_id.clone()))
    .bind(column(|m| m.tool_name.clone()))
    .bind(column(|m| m.platform_message_id.clone()))
    .bind(messages.iter().map(|m| m.token_count).collect::<Vec<_>>())
    .bind(now)
    .fetch_all(&mut *conn)
    .await?;
    ids.sort_unstable();
    Ok(ids)
}

/// One message as [`Pg::history`] reads it.
#[derive(sqlx::FromRow)]
struct MessageRow {
    id: i64,
    role: String,
    content: String,
    tool_calls: Option<String>,
    tool_call_id: Option<String>,
    tool_name: Option<String>,
    platform_message_id: Option<String>,
    token_count: Option<i64>,
    created_at: i64,
}

impl MessageRow {
    fn into_message(self, session_id: &str) -> Result<StoredMessage, StoreError> {
        let decode = |e: serde_json::Error| StoreError::Sqlx(sqlx::Error::Decode(Box::new(e)));
        let role = Role::deserialize(self.role.as_str().into_deserializer()).map_err(
            |e: serde::de::value::Error| StoreError::Sqlx(sqlx::Error::Decode(e.into())),
        )?;
        // JSON null reads back as no tool calls, as SQLite's history gives it.
        let tool_calls = match self.tool_calls.as_deref() {
            Some(json) => {
                serde_json::from_str::<Option<serde_json::Value>>(json).map_err(decode)?
            }
            None => None,
        };
        Ok(StoredMessage {
            id: self.id,
            session_id: session_id.to_owned(),
            role,
            content: self.content,
            tool_calls,
            tool_call_id: self.tool_call_id,
            tool_name: self.tool_name,
            platform_message_id: self.platform_message_id,
            token_count: self.token_count,
            created_at: self.created_at,
        })
    }
}

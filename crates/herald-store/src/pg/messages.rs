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

//! The outbox: replies stored with their turn and not yet accepted by their platform.

use herald_core::{ChatKind, ChatRef, Platform};

use crate::error::StoreError;
use crate::messages::Delivery;
use crate::open::Store;

/// A stored reply still to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// The reply's message id (what [`Store::delivered`] takes).
    pub message_id: i64,
    /// Its session.
    pub session_id: String,
    /// Where it goes and what it says.
    pub delivery: Delivery,
}

#[derive(sqlx::FromRow)]
struct OutboxRow {
    message_id: i64,
    session_id: String,
    platform: String,
    chat_id: String,
    thread_id: Option<String>,
    chat_kind: String,
    reply_to: Option<String>,
    text: String,
}

impl Store {
    /// Takes a reply out of the outbox: its platform accepted it, or refused it for good.
    pub async fn delivered(&self, message_id: i64) -> Result<(), StoreError> {
        self.delivered_grouped(message_id).await
    }

    /// Every reply still to deliver, oldest first (what a restart must still send).
    pub async fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT message_id, session_id, platform, chat_id, thread_id, chat_kind, reply_to, text
             FROM outbox ORDER BY message_id",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter()
            .map(|row| {
                let platform: Platform = row
                    .platform
                    .parse()
                    .map_err(|e| StoreError::Sqlx(sqlx::Error::Decode(Box::new(e))))?;
                let kind = ChatKind::from_stored(&row.chat_kind);
                let chat = ChatRef { platform, id: row.chat_id, kind, thread: row.thread_id };
                Ok(Undelivered {
                    message_id: row.message_id,
                    session_id: row.session_id,
                    delivery: Delivery { chat, reply_to: row.reply_to, text: row.text },
                })
            })
            .collect()
    }
}

//! The outbox: replies stored with their turn and not yet accepted by their platform.

use herald_core::{ChatKind, ChatRef, Platform};
use sqlx::SqliteConnection;

use crate::appends::{ROWS_PER_INSERT, placeholders};
use crate::error::StoreError;
use crate::messages::{Append, Delivery};
use crate::open::Lite;
use crate::write::write_tx;

/// A stored reply still to deliver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undelivered {
    /// The reply's message id (what [`Lite::delivered`] takes).
    pub message_id: i64,
    /// Its session.
    pub session_id: String,
    /// Where it goes and what it says.
    pub delivery: Delivery,
    /// When it was stored, in milliseconds since the Unix epoch.
    pub created_at: i64,
    /// How many of its pieces the platform took already (see [`Lite::pieces_taken`]).
    pub pieces: i64,
}

/// A row of `outbox`, on either backend.
#[derive(sqlx::FromRow)]
pub(crate) struct OutboxRow {
    pub(crate) message_id: i64,
    session_id: String,
    platform: String,
    chat_id: String,
    thread_id: Option<String>,
    chat_kind: String,
    reply_to: Option<String>,
    text: String,
    created_at: i64,
    pieces: i64,
}

impl Lite {
    /// Takes a reply out of the outbox: its platform accepted it, or refused it for good.
    pub async fn delivered(&self, message_id: i64) -> Result<(), StoreError> {
        self.delivered_grouped(message_id).await
    }

    /// Notes that the platform took the first `pieces` pieces of a reply still in the outbox
    /// (a reply split for its platform): a later try starts after them.
    pub async fn pieces_taken(&self, message_id: i64, pieces: i64) -> Result<(), StoreError> {
        write_tx!(self, |conn| async {
            sqlx::query("UPDATE outbox SET pieces = max(pieces, ?) WHERE message_id = ?")
                .bind(pieces)
                .bind(message_id)
                .execute(&mut *conn)
                .await
                .map(drop)
        })
    }

    /// Every reply still to deliver, oldest first (what a restart must still send).
    pub async fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(
            "SELECT message_id, session_id, platform, chat_id, thread_id, chat_kind, reply_to, text,
                    created_at, pieces
             FROM outbox ORDER BY message_id",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(Undelivered::try_from).collect()
    }
}

/// The columns [`OutboxRow`] reads.
pub(crate) const OUTBOX_COLUMNS: &str = "message_id, session_id, platform, chat_id, thread_id, \
     chat_kind, reply_to, text, created_at, pieces";

impl TryFrom<OutboxRow> for Undelivered {
    type Error = StoreError;

    fn try_from(row: OutboxRow) -> Result<Self, StoreError> {
        let platform: Platform =
            row.platform.parse().map_err(|e| StoreError::Sqlx(sqlx::Error::Decode(Box::new(e))))?;
        let kind = ChatKind::from_stored(&row.chat_kind);
        let chat = ChatRef { platform, id: row.chat_id, kind, thread: row.thread_id };
        Ok(Undelivered {
            message_id: row.message_id,
            session_id: row.session_id,
            delivery: Delivery { chat, reply_to: row.reply_to, text: row.text },
            created_at: row.created_at,
            pieces: row.pieces,
        })
    }
}

/// Puts the reply of each append of a batch that has one (its last message) in the outbox,
/// inside the batch's transaction, with one statement for the whole batch.
pub(crate) async fn insert(
    conn: &mut SqliteConnection,
    kept: &[&Append],
    ids: &[Vec<i64>],
    now: i64,
) -> Result<(), StoreError> {
    let rows: Vec<(i64, &Append, &Delivery)> = kept
        .iter()
        .zip(ids)
        .filter_map(|(append, ids)| Some((*ids.last()?, *append, append.outbox.as_ref()?)))
        .collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO outbox (message_id, session_id, platform, chat_id, thread_id, chat_kind,
                                 reply_to, text, created_at) VALUES {}",
            placeholders(chunk.len(), 9)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (id, append, delivery) in chunk {
            query = query
                .bind(*id)
                .bind(&append.session_id)
                .bind(delivery.chat.platform.as_str())
                .bind(&delivery.chat.id)
                .bind(&delivery.chat.thread)
                .bind(delivery.chat.kind.as_str())
                .bind(&delivery.reply_to)
                .bind(&delivery.text)
                .bind(now);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(())
}

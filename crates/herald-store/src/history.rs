//! Reading a session's history back, in order, with the histories read lately kept in memory.
//!
//! Every turn reads its session's whole history, and building and parsing it costs in
//! proportion to its length. Messages are never changed once written, and their ids only grow
//! (AUTOINCREMENT, allocated under the write lock), so a history read before is still its own
//! prefix, unless something of it was deleted (`/retry`, a deleted session, another process):
//! each read asks SQLite in one statement how many messages up to the last one it holds are
//! still there, and for the messages after it. Only a changed count reads everything again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use herald_core::Role;

use crate::error::StoreError;
use crate::messages::StoredMessage;
use crate::open::Lite;

/// Histories kept, at most, and the text they may hold in all.
const MAX_SESSIONS: usize = 256;
const MAX_BYTES: usize = 32 << 20;

/// The positional row of one message, as the queries below build it.
const ROW: &str = "json_array(id, role, content, json(tool_calls), tool_call_id, tool_name,
                              platform_message_id, token_count, created_at)";

/// The histories read lately, one per session.
#[derive(Debug, Default)]
pub(crate) struct HistoryCache {
    entries: Mutex<HashMap<String, Entry>>,
    clock: AtomicU64,
}

#[derive(Debug)]
struct Entry {
    messages: Arc<Vec<StoredMessage>>,
    bytes: usize,
    used: u64,
}

impl Lite {
    /// A session's messages in the order they were written.
    ///
    /// Read as one JSON array of positional rows built by SQLite: one value to hand over
    /// through the driver instead of hundreds of rows (and arrays are cheaper than objects to
    /// build and to parse).
    pub async fn history(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        let cache = &self.inner.history;
        let (messages, bytes) = match cache.get(session_id) {
            Some((known, bytes)) => match self.read_after(session_id, &known).await? {
                Some(newer) if newer.is_empty() => return Ok(known.as_ref().clone()),
                Some(newer) => {
                    let bytes = bytes + newer.iter().map(size).sum::<usize>();
                    (known.iter().cloned().chain(newer).collect(), bytes)
                }
                None => self.read_all(session_id).await?,
            },
            None => self.read_all(session_id).await?,
        };
        let messages = Arc::new(messages);
        cache.put(session_id, Arc::clone(&messages), bytes);
        Ok(messages.as_ref().clone())
    }

    /// The whole history, with its size in memory.
    async fn read_all(&self, session_id: &str) -> Result<(Vec<StoredMessage>, usize), StoreError> {
        let messages = self.read_after(session_id, &[]).await?.unwrap_or_default();
        let bytes = messages.iter().map(size).sum();
        Ok((messages, bytes))
    }

    /// The messages after `known` (all of them after none), or `None` when some of `known` is
    /// gone.
    async fn read_after(
        &self,
        session_id: &str,
        known: &[StoredMessage],
    ) -> Result<Option<Vec<StoredMessage>>, StoreError> {
        let last = known.last().map_or(0, |m| m.id);
        // One statement, so both halves see the same snapshot.
        let (kept, json): (i64, String) = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT (SELECT count(*) FROM messages WHERE session_no = s.no AND id <= ?2),
                    (SELECT coalesce(json_group_array({ROW} ORDER BY id), '[]')
                     FROM messages WHERE session_no = s.no AND id > ?2)
             FROM (SELECT (SELECT no FROM sessions WHERE id = ?1) AS no) s"
        )))
        .bind(session_id)
        .bind(last)
        .fetch_one(&self.inner.pool)
        .await?;
        if usize::try_from(kept).ok() != Some(known.len()) {
            return Ok(None);
        }
        parse(&json, session_id).map(Some)
    }
}

impl HistoryCache {
    /// The session's history, if kept, and its size.
    fn get(&self, session_id: &str) -> Option<(Arc<Vec<StoredMessage>>, usize)> {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let entry = entries.get_mut(session_id)?;
        entry.used = self.clock.fetch_add(1, Ordering::Relaxed);
        Some((Arc::clone(&entry.messages), entry.bytes))
    }

    /// Keeps `messages` as the session's history, forgetting the least recently read ones
    /// past the bounds. An empty history (a deleted session, say) is not kept.
    fn put(&self, session_id: &str, messages: Arc<Vec<StoredMessage>>, bytes: usize) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if messages.is_empty() || bytes > MAX_BYTES / 4 {
            entries.remove(session_id);
            return;
        }
        let used = self.clock.fetch_add(1, Ordering::Relaxed);
        entries.insert(session_id.to_owned(), Entry { messages, bytes, used });
        let mut total: usize = entries.values().map(|e| e.bytes).sum();
        while entries.len() > MAX_SESSIONS || total > MAX_BYTES {
            let Some(oldest) = entries.iter().min_by_key(|(_, e)| e.used).map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(gone) = entries.remove(&oldest) {
                total -= gone.bytes;
            }
        }
    }
}

/// About what a message holds in memory.
fn size(message: &StoredMessage) -> usize {
    let text = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    std::mem::size_of::<StoredMessage>()
        + message.session_id.len()
        + message.content.len()
        + message.tool_calls.as_ref().map_or(0, |calls| calls.to_string().len())
        + text(&message.tool_call_id)
        + text(&message.tool_name)
        + text(&message.platform_message_id)
}

fn parse(json: &str, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
    let rows: Vec<HistoryRow> = serde_json::from_str(json)
        .map_err(|e| StoreError::Sqlx(sqlx::Error::Decode(Box::new(e))))?;
    Ok(rows.into_iter().map(|row| row.into_message(session_id)).collect())
}

/// One message of [`Lite::history`]'s array, in the order of its `json_array`.
#[derive(serde::Deserialize)]
struct HistoryRow(
    i64,
    Role,
    String,
    Option<serde_json::Value>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<i64>,
    i64,
);

impl HistoryRow {
    fn into_message(self, session_id: &str) -> StoredMessage {
        let HistoryRow(
            id,
            role,
            content,
            tool_calls,
            tool_call_id,
            tool_name,
            platform,
            tokens,
            at,
        ) = self;
        StoredMessage {
            id,
            session_id: session_id.to_owned(),
            role,
            content,
            tool_calls,
            tool_call_id,
            tool_name,
            platform_message_id: platform,
            token_count: tokens,
            created_at: at,
        }
    }
}

//! Messages: appending a turn's delta (reading a history back is in `history.rs`).

use herald_core::{Platform, Role};
use serde::Serialize;
use sqlx::SqliteConnection;

use crate::error::StoreError;
use crate::open::Store;
use crate::time::now_ms;

/// A message to append to a session.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Who wrote it.
    pub role: Role,
    /// Its text (empty for an assistant message that only calls tools).
    pub content: String,
    /// The assistant's tool calls, as the JSON array the model sent.
    pub tool_calls: Option<serde_json::Value>,
    /// For a tool result: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name.
    pub tool_name: Option<String>,
    /// The platform's id for an inbound or delivered message.
    pub platform_message_id: Option<String>,
    /// Tokens, when the model reported them.
    pub token_count: Option<i64>,
}

impl NewMessage {
    /// A message with only a role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        NewMessage {
            role,
            content: content.into(),
            tool_calls: None,
            tool_call_id: None,
            tool_name: None,
            platform_message_id: None,
            token_count: None,
        }
    }

    /// A message from the person chatting.
    pub fn user(content: impl Into<String>) -> Self {
        NewMessage::new(Role::User, content)
    }

    /// A reply of the model.
    pub fn assistant(content: impl Into<String>) -> Self {
        NewMessage::new(Role::Assistant, content)
    }

    /// The result of the tool call `call_id` to `tool`.
    pub fn tool(
        call_id: impl Into<String>,
        tool: impl Into<String>,
        content: impl Into<String>,
    ) -> Self {
        NewMessage {
            tool_call_id: Some(call_id.into()),
            tool_name: Some(tool.into()),
            ..NewMessage::new(Role::Tool, content)
        }
    }

    /// The same message carrying the model's tool calls.
    pub fn with_tool_calls(mut self, calls: serde_json::Value) -> Self {
        self.tool_calls = Some(calls);
        self
    }

    /// The same message with the platform's id for it.
    pub fn with_platform_id(mut self, id: impl Into<String>) -> Self {
        self.platform_message_id = Some(id.into());
        self
    }

    fn tool_call_count(&self) -> i64 {
        match &self.tool_calls {
            Some(serde_json::Value::Array(calls)) => calls.len() as i64,
            Some(serde_json::Value::Null) | None => 0,
            Some(_) => 1,
        }
    }
}

/// A message as stored, in history order.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct StoredMessage {
    /// The ordering key.
    pub id: i64,
    /// The session it belongs to.
    pub session_id: String,
    /// Who wrote it.
    pub role: Role,
    /// Its text.
    pub content: String,
    /// The assistant's tool calls, as JSON.
    pub tool_calls: Option<serde_json::Value>,
    /// For a tool result: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name.
    pub tool_name: Option<String>,
    /// The platform's id for the message.
    pub platform_message_id: Option<String>,
    /// Tokens, when known.
    pub token_count: Option<i64>,
    /// When it was stored, in Unix milliseconds.
    pub created_at: i64,
}

/// One queued append: messages for a session, and for inbound messages the platform id that
/// must not be processed twice.
#[derive(Debug)]
pub(crate) struct Append {
    pub(crate) session_id: String,
    pub(crate) messages: Vec<NewMessage>,
    pub(crate) dedupe: Option<(Platform, String)>,
    pub(crate) usage: TokenUsage,
    /// For a turn with a reply: where it goes, kept in the outbox until it is delivered.
    pub(crate) outbox: Option<Delivery>,
}

/// A reply to deliver: where, and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Delivery {
    /// The chat it answers.
    pub chat: herald_core::ChatRef,
    /// The platform message it replies to (in groups).
    pub reply_to: Option<String>,
    /// The text to send.
    pub text: String,
}

/// Tokens the model reported for a turn, added to the session's totals.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input: i64,
    /// Completion tokens.
    pub output: i64,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// The messages were stored, with these ids.
    Stored(Vec<i64>),
    /// The inbound platform message was stored before; nothing was written.
    Duplicate,
}

impl Store {
    /// Appends a turn's new messages to a session in one transaction and returns their ids.
    pub async fn append_messages(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<i64>, StoreError> {
        self.append_turn(session_id, messages, TokenUsage::default()).await
    }

    /// Appends a turn's new messages and adds the tokens it used to the session's totals, in
    /// one transaction.
    pub async fn append_turn(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
    ) -> Result<Vec<i64>, StoreError> {
        self.append_delta(session_id, messages, usage, None).await
    }

    /// Appends a turn whose last message is the reply to `delivery`, and puts the reply in the
    /// outbox in the same transaction (see [`Store::delivered`]). Returns the new ids.
    pub async fn append_reply(
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

    /// Stores an inbound message and records its platform id in the same transaction, so a
    /// redelivered message is seen as [`Appended::Duplicate`] and answered once.
    pub async fn append_inbound(
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

    /// Records the id of an inbound message that is not kept as a message (a slash command),
    /// so that a redelivery is recognized. Returns whether the id was new.
    pub async fn record_inbound(
        &self,
        platform: Platform,
        platform_message_id: &str,
        session_id: Option<&str>,
    ) -> Result<bool, StoreError> {
        crate::write::write_tx!(self, |conn| async {
            let fresh = sqlx::query(
                "INSERT INTO processed_inbound (platform, message_id, session_id, received_at)
                 VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(platform.as_str())
            .bind(platform_message_id)
            .bind(session_id)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?
            .rows_affected();
            Ok::<_, StoreError>(fresh > 0)
        })
    }
}

/// Most message rows per INSERT: 10 parameters each stays under SQLite's 32766.
pub(crate) const ROWS_PER_INSERT: usize = 3000;

/// Whether [`apply_batch`] looks up the batch's sessions first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Sessions {
    /// Each append whose session is gone fails alone, with [`StoreError::SessionNotFound`].
    Checked,
    /// No lookup: a session that is gone makes the whole batch fail, on its counters or a
    /// foreign key, and the caller applies it again, checked. A session deleted while its chat still writes is
    /// rare; the lookup on every batch of a busy gateway is not.
    Assumed,
}

/// Writes a batch of appends inside the caller's transaction with a handful of statements,
/// whatever the batch size: which sessions exist, which inbound ids are new, every session's
/// counters at once, every message at once. Each append gets its own result: a missing
/// session fails that append alone (when `sessions` is checked), a redelivered inbound
/// message is a duplicate.
pub(crate) async fn apply_batch(
    conn: &mut SqliteConnection,
    batch: &[&Append],
    sessions: Sessions,
) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    let now = now_ms();
    let existing = match sessions {
        Sessions::Checked => Some(existing_sessions(conn, batch).await?),
        Sessions::Assumed => None,
    };
    let exists = |a: &Append| existing.as_ref().is_none_or(|e| e.contains(a.session_id.as_str()));
    let mut fresh = new_inbound_ids(conn, batch, exists, now).await?;
    let mut results: Vec<Option<Result<Appended, StoreError>>> = Vec::with_capacity(batch.len());
    let mut kept: Vec<&Append> = Vec::new();
    for append in batch {
        if !exists(append) {
            results.push(Some(Err(StoreError::SessionNotFound(append.session_id.clone()))));
        } else if append
            .dedupe
            .as_ref()
            // Taken out when used: the same id twice in one batch stores the first only.
            .is_some_and(|(p, id)| !fresh.remove(&(p.as_str(), id.as_str())))
        {
            results.push(Some(Ok(Appended::Duplicate)));
        } else {
            results.push(None);
            kept.push(append);
        }
    }
    update_counters(conn, &kept, now).await?;
    let stored = insert_messages(conn, &kept, now).await?;
    crate::outbox::insert(conn, &kept, &stored, now).await?;
    let mut ids = stored.into_iter();
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Ok(Appended::Stored(ids.next().unwrap_or_default()))))
        .collect())
}

async fn existing_sessions(
    conn: &mut SqliteConnection,
    batch: &[&Append],
) -> Result<std::collections::HashSet<String>, StoreError> {
    let mut wanted: Vec<&str> = batch.iter().map(|a| a.session_id.as_str()).collect();
    wanted.sort_unstable();
    wanted.dedup();
    let mut found = std::collections::HashSet::new();
    for chunk in wanted.chunks(ROWS_PER_INSERT) {
        let sql = format!("SELECT id FROM sessions WHERE id IN ({})", placeholders(chunk.len(), 1));
        let mut query = sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            query = query.bind(*id);
        }
        found.extend(query.fetch_all(&mut *conn).await?);
    }
    Ok(found)
}

/// Records the inbound ids of the batch and returns those not seen before.
async fn new_inbound_ids<'a>(
    conn: &mut SqliteConnection,
    batch: &[&'a Append],
    exists: impl Fn(&Append) -> bool,
    now: i64,
) -> Result<std::collections::HashSet<(&'a str, &'a str)>, StoreError> {
    let inbound: Vec<(&'a str, &'a str, &'a str)> = batch
        .iter()
        .filter(|a| exists(a))
        .filter_map(|a| {
            a.dedupe.as_ref().map(|(p, id)| (p.as_str(), id.as_str(), a.session_id.as_str()))
        })
        .collect();
    let mut fresh = std::collections::HashSet::new();
    for chunk in inbound.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO processed_inbound (platform, message_id, session_id, received_at) VALUES {}
             ON CONFLICT DO NOTHING RETURNING platform, message_id",
            placeholders(chunk.len(), 4)
        );
        let mut query = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql));
        for (platform, id, session) in chunk {
            query = query.bind(*platform).bind(*id).bind(*session).bind(now);
        }
        for (platform, id) in query.fetch_all(&mut *conn).await? {
            if let Some(key) = chunk.iter().find(|(p, i, _)| *p == platform && *i == id) {
                fresh.insert((key.0, key.1));
            }
        }
    }
    Ok(fresh)
}

/// Adds each append to its session's counters; fails when a session is missing.
async fn update_counters(
    conn: &mut SqliteConnection,
    kept: &[&Append],
    now: i64,
) -> Result<(), StoreError> {
    let mut totals: std::collections::BTreeMap<&str, [i64; 4]> = std::collections::BTreeMap::new();
    for append in kept {
        let t = totals.entry(append.session_id.as_str()).or_default();
        t[0] += append.messages.len() as i64;
        t[1] += append.messages.iter().map(NewMessage::tool_call_count).sum::<i64>();
        t[2] += append.usage.input;
        t[3] += append.usage.output;
    }
    let rows: Vec<_> = totals.into_iter().collect();
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "WITH d (id, messages, calls, input, output) AS (VALUES {})
             UPDATE sessions SET message_count = message_count + d.messages,
                    tool_call_count = tool_call_count + d.calls,
                    input_tokens = input_tokens + d.input, output_tokens = output_tokens + d.output,
                    updated_at = ?
             FROM d WHERE sessions.id = d.id",
            placeholders(chunk.len(), 5)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (id, [messages, calls, input, output]) in chunk {
            query = query.bind(*id).bind(*messages).bind(*calls).bind(*input).bind(*output);
        }
        let updated = query.bind(now).execute(&mut *conn).await?.rows_affected();
        // Every session of the batch exists when they were looked up first; when they were
        // assumed to, this is where a missing one shows (an append without messages inserts no
        // row whose foreign key would fail), and the batch is applied again with the lookup.
        if updated < chunk.len() as u64 {
            let missing = chunk.iter().map(|(id, _)| *id).collect::<Vec<_>>().join(", ");
            return Err(StoreError::SessionNotFound(format!("one of {missing}")));
        }
    }
    Ok(())
}

/// Inserts every message of `kept`, in order, and returns each append's new ids.
async fn insert_messages(
    conn: &mut SqliteConnection,
    kept: &[&Append],
    now: i64,
) -> Result<Vec<Vec<i64>>, StoreError> {
    let rows: Vec<(&str, &NewMessage)> =
        kept.iter().flat_map(|a| a.messages.iter().map(|m| (a.session_id.as_str(), m))).collect();
    let mut ids = Vec::with_capacity(rows.len());
    for chunk in rows.chunks(ROWS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, tool_name,
                                   platform_message_id, token_count, created_at, cjk) VALUES {}",
            placeholders(chunk.len(), 10)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (session, m) in chunk {
            let calls = m.tool_calls.as_ref().map(serde_json::to_string).transpose()?;
            query = query
                .bind(*session)
                .bind(m.role.as_str())
                .bind(&m.content)
                .bind(calls)
                .bind(&m.tool_call_id)
                .bind(&m.tool_name)
                .bind(&m.platform_message_id)
                .bind(m.token_count)
                .bind(now)
                .bind(m.content.chars().any(crate::search::is_cjk));
        }
        // One statement under the write lock on an AUTOINCREMENT table: its rows get
        // consecutive ids ending at the last insert rowid.
        let last = query.execute(&mut *conn).await?.last_insert_rowid();
        let first = last - chunk.len() as i64 + 1;
        ids.extend(first..=last);
    }
    let mut ids = ids.into_iter();
    Ok(kept.iter().map(|a| ids.by_ref().take(a.messages.len()).collect()).collect())
}

/// `(?, ?), (?, ?)`: `rows` groups of `columns` placeholders.
pub(crate) fn placeholders(rows: usize, columns: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    if columns == 1 {
        return vec!["?"; rows].join(", ");
    }
    vec![row; rows].join(", ")
}

//! Messages: appending a turn's delta (reading a history back is in `history.rs`).

use herald_core::{Platform, Role};
use serde::Serialize;

use crate::error::StoreError;
use crate::open::Lite;
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

    pub(crate) fn tool_call_count(&self) -> i64 {
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

/// Tokens the model reported for a turn: `input` and `output` are added to the session's
/// totals, `context` replaces its [`Session::context_tokens`](crate::Session::context_tokens).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TokenUsage {
    /// Prompt tokens.
    pub input: i64,
    /// Completion tokens.
    pub output: i64,
    /// The last model call's prompt plus completion; 0 when not reported (the stored value
    /// stays).
    pub context: i64,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Appended {
    /// The messages were stored, with these ids.
    Stored(Vec<i64>),
    /// The inbound platform message was stored before; nothing was written.
    Duplicate,
}

impl Lite {
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
    /// outbox in the same transaction (see [`Lite::delivered`]). Returns the new ids.
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
    ) -> Result<bool, StoreError> {
        crate::write::write_tx!(self, |conn| async {
            let fresh = sqlx::query(
                "INSERT INTO processed_inbound (platform, message_id, received_at)
                 VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
            )
            .bind(platform.as_str())
            .bind(platform_message_id)
            .bind(now_ms())
            .execute(&mut *conn)
            .await?
            .rows_affected();
            Ok::<_, StoreError>(fresh > 0)
        })
    }
}

//! What the fake remembers the bot doing: messages sent and edited, and every call made.

use serde::{Deserialize, Serialize};

/// A message the bot sent with `sendMessage`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentMessage {
    /// The id the fake gave it, counting per chat.
    pub message_id: i64,
    /// The chat it went to.
    pub chat_id: i64,
    /// The `message_thread_id` it was sent with.
    pub thread_id: Option<i64>,
    /// The text exactly as sent, markup included.
    pub text: String,
    /// The `parse_mode` it was sent with, like `HTML`.
    pub parse_mode: Option<String>,
    /// The message it replies to (`reply_parameters.message_id` or `reply_to_message_id`).
    pub reply_to: Option<i64>,
}

/// A successful `editMessageText` call.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditedMessage {
    /// The chat of the edited message.
    pub chat_id: i64,
    /// The edited message.
    pub message_id: i64,
    /// Its new text, markup included.
    pub text: String,
    /// The `parse_mode` of the edit.
    pub parse_mode: Option<String>,
}

/// One Bot API call as the fake received it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The method, lowercase (`sendmessage`).
    pub method: String,
    /// The parameters as a JSON object; form and query values are kept as strings.
    pub body: serde_json::Value,
}

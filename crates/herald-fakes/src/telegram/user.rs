//! What a person says to the bot: [`UserMessage`], its chat kind and its builders.
//!
//! The JSON form (for `POST /_fake/messages`) fills in what is left out, so `{"user_id": 1,
//! "text": "hi"}` is a direct message: the chat defaults to the user's private chat, a
//! `thread_id` makes it a forum topic, and another `chat_id` makes it a supergroup.

use serde::{Deserialize, Serialize};

use super::FakeTelegram;

/// A message from a user, to be delivered to the bot as an update.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "UserMessageJson")]
pub struct UserMessage {
    /// The chat it is posted in; a private chat has the user's id.
    pub chat_id: i64,
    /// What kind of chat that is.
    pub chat_kind: ChatKind,
    /// Who sends it; must be positive, as Telegram user ids are.
    pub user_id: i64,
    /// The sender's `@username`, without the `@`.
    pub username: Option<String>,
    /// The sender's first name.
    pub first_name: String,
    /// The text as the user typed it.
    pub text: String,
    /// The forum topic it is posted in.
    pub thread_id: Option<i64>,
    /// Whether the text mentions the bot; it gets a `mention` entity (and the `@username` if the
    /// text lacks it).
    pub mention: bool,
    /// Whether it replies to a message of the bot.
    pub reply_to_bot: bool,
}

/// The kind of a chat, as Telegram's `chat.type` (and `is_forum`) tell it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatKind {
    /// A one-to-one chat with the user.
    Private,
    /// A basic group.
    Group,
    /// A supergroup, which is what most groups are.
    Supergroup,
    /// A supergroup with topics (`is_forum: true`).
    Forum,
}

impl UserMessage {
    /// A direct message: the user's private chat, whose id is the user's.
    pub fn dm(user_id: i64, text: &str) -> Self {
        Self::new(user_id, ChatKind::Private, user_id, text)
    }

    /// A message in a supergroup.
    pub fn group(chat_id: i64, user_id: i64, text: &str) -> Self {
        Self::new(chat_id, ChatKind::Supergroup, user_id, text)
    }

    /// A message in a topic of a forum supergroup; `thread_id` is the topic's id.
    pub fn topic(chat_id: i64, thread_id: i64, user_id: i64, text: &str) -> Self {
        Self { thread_id: Some(thread_id), ..Self::new(chat_id, ChatKind::Forum, user_id, text) }
    }

    /// The same message addressed to the bot: `@herald_test_bot <text>`.
    pub fn mention(self) -> Self {
        let text = format!("@{} {}", FakeTelegram::BOT_USERNAME, self.text);
        Self { text, mention: true, ..self }
    }

    /// The same message as a reply to the bot's latest message in the chat (or topic).
    pub fn reply_to_bot(self) -> Self {
        Self { reply_to_bot: true, ..self }
    }

    /// The same message from a user with this `@username` (without the `@`).
    pub fn from_user(self, username: &str) -> Self {
        Self { username: Some(username.to_owned()), ..self }
    }

    fn new(chat_id: i64, chat_kind: ChatKind, user_id: i64, text: &str) -> Self {
        UserMessage {
            chat_id,
            chat_kind,
            user_id,
            username: None,
            first_name: default_first_name(user_id),
            text: text.to_owned(),
            thread_id: None,
            mention: false,
            reply_to_bot: false,
        }
    }
}

fn default_first_name(user_id: i64) -> String {
    format!("User {user_id}")
}

/// The JSON spelling of [`UserMessage`], with everything but the user and text optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserMessageJson {
    #[serde(default)]
    chat_id: Option<i64>,
    #[serde(default)]
    chat_kind: Option<ChatKind>,
    user_id: i64,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    first_name: Option<String>,
    text: String,
    #[serde(default)]
    thread_id: Option<i64>,
    #[serde(default)]
    mention: bool,
    #[serde(default)]
    reply_to_bot: bool,
}

impl From<UserMessageJson> for UserMessage {
    fn from(json: UserMessageJson) -> UserMessage {
        let chat_id = json.chat_id.unwrap_or(json.user_id);
        let chat_kind = json.chat_kind.unwrap_or(if json.thread_id.is_some() {
            ChatKind::Forum
        } else if chat_id == json.user_id {
            ChatKind::Private
        } else {
            ChatKind::Supergroup
        });
        UserMessage {
            chat_id,
            chat_kind,
            user_id: json.user_id,
            username: json.username,
            first_name: json.first_name.unwrap_or_else(|| default_first_name(json.user_id)),
            text: json.text,
            thread_id: json.thread_id,
            mention: json.mention,
            reply_to_bot: json.reply_to_bot,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> UserMessage {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn json_defaults_pick_the_chat() {
        assert_eq!(parse(r#"{"user_id": 1, "text": "hi"}"#), UserMessage::dm(1, "hi"));
        assert_eq!(
            parse(r#"{"user_id": 1, "chat_id": -5, "text": "hi"}"#),
            UserMessage::group(-5, 1, "hi")
        );
        assert_eq!(
            parse(r#"{"user_id": 1, "chat_id": -5, "thread_id": 3, "text": "hi"}"#),
            UserMessage::topic(-5, 3, 1, "hi")
        );
        let group = parse(r#"{"user_id": 1, "chat_id": -5, "chat_kind": "group", "text": "x"}"#);
        assert_eq!(group.chat_kind, ChatKind::Group);
        assert!(serde_json::from_str::<UserMessage>(r#"{"user_id": 1, "txt": "hi"}"#).is_err());
    }

    #[test]
    fn builders_compose() {
        let msg = UserMessage::group(-5, 1, "hi").mention().reply_to_bot().from_user("ann");
        assert_eq!(msg.text, "@herald_test_bot hi");
        assert!(msg.mention && msg.reply_to_bot);
        assert_eq!(msg.username.as_deref(), Some("ann"));
    }
}

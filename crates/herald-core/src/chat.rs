//! Where a message was written and by whom, and the session key that follows from it.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::Platform;

/// What kind of conversation a chat is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatKind {
    /// A private conversation between one person and the bot.
    Direct,
    /// A group, supergroup, server channel or Slack channel with several people.
    Group,
}

impl ChatKind {
    /// The name stored as a session's `chat_type` and used in session keys.
    pub fn as_str(self) -> &'static str {
        match self {
            ChatKind::Direct => "dm",
            ChatKind::Group => "group",
        }
    }

    /// The kind a stored name stands for: `"dm"` is direct, anything else (`"group"`, older
    /// or unknown names) a group, where herald is the more careful.
    pub fn from_stored(name: &str) -> ChatKind {
        if name == ChatKind::Direct.as_str() { ChatKind::Direct } else { ChatKind::Group }
    }
}

impl fmt::Display for ChatKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One chat window on a platform: a DM, a group, or a thread inside a group.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ChatRef {
    /// The platform the chat lives on.
    pub platform: Platform,
    /// The platform's chat (or channel) id.
    pub id: String,
    /// DM or group.
    pub kind: ChatKind,
    /// A thread inside the chat: a Telegram forum topic, a Discord thread, a Slack `thread_ts`.
    pub thread: Option<String>,
}

impl ChatRef {
    /// A direct-message chat.
    pub fn direct(platform: Platform, id: impl Into<String>) -> Self {
        ChatRef { platform, id: id.into(), kind: ChatKind::Direct, thread: None }
    }

    /// A group chat.
    pub fn group(platform: Platform, id: impl Into<String>) -> Self {
        ChatRef { platform, id: id.into(), kind: ChatKind::Group, thread: None }
    }

    /// The same chat, inside a thread.
    pub fn in_thread(mut self, thread: impl Into<String>) -> Self {
        self.thread = Some(thread.into());
        self
    }
}

/// A person on a platform.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserRef {
    /// The platform's stable user id (never the changeable username).
    pub id: String,
    /// A name to show the operator (username or display name), if the platform gives one.
    pub name: Option<String>,
}

impl UserRef {
    /// A user known by id only.
    pub fn new(id: impl Into<String>) -> Self {
        UserRef { id: id.into(), name: None }
    }
}

/// The key that names one conversation: which session a chat (and, in groups, a user) talks to.
///
/// `{platform}:dm:{chat}`, `{platform}:group:{chat}[:{user}]`, and `:thread:{thread}` appended
/// for a thread, which its participants share. Two different chats never share a key.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SessionKey(String);

impl SessionKey {
    /// The key for a message in `chat` from `user`; `per_user_in_groups` gives each group member
    /// a session of their own (threads stay shared).
    pub fn for_chat(chat: &ChatRef, user: &UserRef, per_user_in_groups: bool) -> Self {
        let mut key = format!("{}:{}:{}", chat.platform, chat.kind, chat.id);
        match (&chat.thread, chat.kind) {
            (Some(thread), _) => {
                key.push_str(":thread:");
                key.push_str(thread);
            }
            (None, ChatKind::Group) if per_user_in_groups => {
                key.push(':');
                key.push_str(&user.id);
            }
            (None, _) => {}
        }
        SessionKey(key)
    }

    /// A key as stored before (in a route or the inbound queue).
    pub fn from_stored(key: impl Into<String>) -> Self {
        SessionKey(key.into())
    }

    /// The key as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_kinds_read_back_and_unknown_ones_are_groups() {
        for kind in [ChatKind::Direct, ChatKind::Group] {
            assert_eq!(ChatKind::from_stored(kind.as_str()), kind);
        }
        assert_eq!(ChatKind::from_stored("thread"), ChatKind::Group);
        assert_eq!(ChatKind::from_stored(""), ChatKind::Group);
    }

    fn check(chat: ChatRef, per_user: bool, expected: &str) {
        let user = UserRef::new("42");
        assert_eq!(SessionKey::for_chat(&chat, &user, per_user).as_str(), expected);
    }

    #[test]
    fn keys_follow_the_spec() {
        check(ChatRef::direct(Platform::Telegram, "42"), true, "telegram:dm:42");
        check(ChatRef::group(Platform::Telegram, "-100"), true, "telegram:group:-100:42");
        check(ChatRef::group(Platform::Telegram, "-100"), false, "telegram:group:-100");
        check(
            ChatRef::group(Platform::Telegram, "-100").in_thread("7"),
            true,
            "telegram:group:-100:thread:7",
        );
        check(
            ChatRef::group(Platform::Slack, "C1").in_thread("17.5"),
            false,
            "slack:group:C1:thread:17.5",
        );
    }
}

//! Telegram's objects as JSON: users, chats, messages and their entities.
//!
//! Shapes follow the Bot API and are checked against teloxide's types in the tests; entity
//! offsets and lengths count UTF-16 code units, as Telegram's do.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::FakeTelegram;
use super::user::{ChatKind, UserMessage};

/// The bot as a `User`.
pub(crate) fn bot_user() -> Value {
    json!({
        "id": FakeTelegram::BOT_ID,
        "is_bot": true,
        "first_name": "Herald Test",
        "username": FakeTelegram::BOT_USERNAME,
    })
}

/// The result of `getMe`: the bot with the fields only `getMe` has.
pub(crate) fn me() -> Value {
    let mut me = bot_user();
    for (flag, on) in [
        ("can_join_groups", true),
        ("can_read_all_group_messages", false),
        ("supports_inline_queries", false),
        ("can_connect_to_business", false),
        ("has_main_web_app", false),
    ] {
        me[flag] = Value::Bool(on);
    }
    me
}

/// The sender of a user message.
pub(crate) fn sender(msg: &UserMessage) -> Value {
    let mut user = json!({"id": msg.user_id, "is_bot": false, "first_name": msg.first_name});
    if let Some(username) = &msg.username {
        user["username"] = json!(username);
    }
    user
}

/// The chat a user message is posted in.
pub(crate) fn chat_of(msg: &UserMessage) -> Value {
    let mut chat = chat(msg.chat_id, msg.chat_kind);
    if msg.chat_kind == ChatKind::Private {
        chat["first_name"] = json!(msg.first_name);
        if let Some(username) = &msg.username {
            chat["username"] = json!(username);
        }
    }
    chat
}

/// A chat known only by its id and kind.
pub(crate) fn chat(id: i64, kind: ChatKind) -> Value {
    match kind {
        ChatKind::Private => {
            json!({"id": id, "type": "private", "first_name": format!("User {id}")})
        }
        ChatKind::Group => json!({"id": id, "type": "group", "title": format!("Group {id}")}),
        ChatKind::Supergroup => {
            json!({"id": id, "type": "supergroup", "title": format!("Group {id}")})
        }
        ChatKind::Forum => {
            json!({"id": id, "type": "supergroup", "title": format!("Forum {id}"), "is_forum": true})
        }
    }
}

/// The parts of a message.
pub(crate) struct Message<'a> {
    pub id: i64,
    pub chat: &'a Value,
    pub from: Value,
    pub text: &'a str,
    /// The topic (for `message_thread_id`), and whether the chat is a forum.
    pub thread: Option<i64>,
    pub forum: bool,
    pub reply_to: Option<Value>,
}

impl Message<'_> {
    /// The message as JSON, with the entities Telegram would find in its text.
    pub(crate) fn to_json(&self) -> Value {
        let mut message = Map::new();
        message.insert("message_id".into(), json!(self.id));
        message.insert("from".into(), self.from.clone());
        message.insert("chat".into(), self.chat.clone());
        message.insert("date".into(), json!(now()));
        if let Some(thread) = self.thread {
            message.insert("message_thread_id".into(), json!(thread));
            if self.forum {
                message.insert("is_topic_message".into(), Value::Bool(true));
            }
        }
        if let Some(reply) = &self.reply_to {
            message.insert("reply_to_message".into(), reply.clone());
        }
        message.insert("text".into(), json!(self.text));
        let entities = entities(self.text);
        if !entities.is_empty() {
            message.insert("entities".into(), Value::Array(entities));
        }
        Value::Object(message)
    }
}

/// The service message that opens a forum topic; every topic message replies to it.
pub(crate) fn topic_created(chat: &Value, thread: i64, creator: Value) -> Value {
    json!({
        "message_id": thread,
        "from": creator,
        "chat": chat,
        "date": now(),
        "message_thread_id": thread,
        "is_topic_message": true,
        "forum_topic_created": {"name": format!("Topic {thread}"), "icon_color": 7_322_096},
    })
}

/// The `mention` and `bot_command` entities of a text: `@username` and `/command[@bot]` at the
/// start of a word.
pub(crate) fn entities(text: &str) -> Vec<Value> {
    let mut found = Vec::new();
    let mut offset = 0; // in UTF-16 units
    let mut word_start = true;
    let mut chars = text.char_indices().peekable();
    while let Some((at, c)) = chars.next() {
        if word_start && (c == '@' || c == '/') {
            let rest = &text[at + 1..];
            let name = rest.find(|c: char| !is_name_char(c)).unwrap_or(rest.len());
            let mut end = at + 1 + name;
            let kind = if c == '@' && (5..=32).contains(&name) {
                Some("mention")
            } else if c == '/' && name > 0 {
                // `/cmd@bot` is one command entity, the bot's name included.
                if let Some(bot) = text[end..].strip_prefix('@') {
                    end += 1 + bot.find(|c: char| !is_name_char(c)).unwrap_or(bot.len());
                }
                Some("bot_command")
            } else {
                None
            };
            if let Some(kind) = kind {
                let length = utf16_len(&text[at..end]);
                found.push(json!({"type": kind, "offset": offset, "length": length}));
                offset += length;
                while chars.peek().is_some_and(|(next, _)| *next < end) {
                    chars.next();
                }
                word_start = false;
                continue;
            }
        }
        offset += c.len_utf16();
        word_start = c.is_whitespace();
    }
    found
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The length Telegram measures: UTF-16 code units.
pub(crate) fn utf16_len(text: &str) -> usize {
    text.encode_utf16().count()
}

/// Unix time in seconds.
pub(crate) fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: &[(&str, usize, usize)]) {
        let got: Vec<(String, usize, usize)> = entities(text)
            .iter()
            .map(|e| {
                let n = |k: &str| usize::try_from(e[k].as_u64().unwrap()).unwrap();
                (e["type"].as_str().unwrap().to_owned(), n("offset"), n("length"))
            })
            .collect();
        let expected: Vec<(String, usize, usize)> =
            expected.iter().map(|(k, o, l)| ((*k).to_owned(), *o, *l)).collect();
        assert_eq!(got, expected, "{text:?}");
    }

    #[test]
    fn entities_count_utf16_units() {
        check("@herald_test_bot hi", &[("mention", 0, 16)]);
        check("héllo 👋 @herald_test_bot", &[("mention", 9, 16)]);
        check("/new@herald_test_bot", &[("bot_command", 0, 20)]);
        check("🙂 /help now", &[("bot_command", 3, 5)]);
        check("mail a@example.com or @abc, 1/2", &[]);
        check("@herald_test_bot /reset", &[("mention", 0, 16), ("bot_command", 17, 6)]);
    }

    #[test]
    fn me_has_what_teloxide_requires() {
        let me = me();
        assert_eq!(me["username"], FakeTelegram::BOT_USERNAME);
        assert_eq!(me["has_main_web_app"], false);
        assert_eq!(utf16_len("👋a"), 3);
    }
}

//! Turning a [`UserMessage`] into the `message` of an update, the way Telegram would show it.
//!
//! Like Telegram, a forum-topic message that replies to nothing else replies to the topic's
//! creation message (from the user, not the bot), and message ids in a topic go past the topic's
//! id. A reply to the bot quotes the bot's latest message in that chat and topic, or an earlier
//! one the fake makes up when the bot has not spoken there yet.
//!
//! A raw message is queued as the test wrote it, even when no `UserMessage` could say it: text
//! that is not valid Unicode (a lone surrogate escape, as Telegram sends for a cut emoji) or a
//! field of the wrong type. It only has to be one JSON object, so the batch around it stays JSON.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use super::FakeTelegram;
use super::state::{State, Stored};
use super::user::{ChatKind, UserMessage};
use super::wire;

/// What the made-up earlier bot message says.
const EARLIER_ANSWER: &str = "an earlier answer";

/// The id of a raw message's chat; its other fields are skipped unread.
#[derive(Deserialize)]
struct ChatId {
    id: i64,
}

impl State {
    /// Queues `msg` as an update; its id. Call through [`super::state::Shared::queue`].
    pub(crate) fn inject(&mut self, msg: &UserMessage) -> i64 {
        let mention = format!("@{}", FakeTelegram::BOT_USERNAME);
        let text = if msg.mention && !msg.text.contains(&mention) {
            format!("{mention} {}", msg.text)
        } else {
            msg.text.clone()
        };
        let chat_json = wire::chat_of(msg);
        let forum = msg.chat_kind == ChatKind::Forum;
        let chat = self.chat(msg.chat_id, msg.thread_id);
        chat.json = chat_json.clone();
        chat.kind = msg.chat_kind;
        if let Some(thread) = msg.thread_id {
            self.reserve(msg.chat_id, thread);
        }

        let reply_to = if msg.reply_to_bot {
            Some(self.bot_message(msg.chat_id, msg.thread_id, &chat_json, forum))
        } else {
            match msg.thread_id {
                Some(thread) if forum => Some(self.topic_root(msg, thread, &chat_json)),
                _ => None,
            }
        };
        let id = self.allocate(msg.chat_id);
        let message = wire::Message {
            id,
            chat: &chat_json,
            from: wire::sender(msg),
            text: &text,
            thread: msg.thread_id,
            forum,
            reply_to,
        }
        .to_json();
        let stored = Stored { from_bot: false, text, parse_mode: None, json: message.clone() };
        self.messages.insert((msg.chat_id, id), stored);
        self.queue_message(&message)
    }

    /// Queues an update whose `message` is `message`, JSON text kept byte for byte (a lone
    /// surrogate escape, a field of the wrong type); its id, or why the text is not one JSON
    /// object. Call through [`super::state::Shared::queue`].
    pub(crate) fn inject_raw(&mut self, message: &str) -> Result<i64, String> {
        // Values read as raw text, so that lone surrogates (which a `String` cannot hold) pass.
        let fields: HashMap<String, &RawValue> = serde_json::from_str(message)
            .map_err(|e| format!("the message is not one JSON object: {e}"))?;
        let read = |key: &str| fields.get(key).map(|value| value.get());
        let chat = read("chat").and_then(|v| serde_json::from_str::<ChatId>(v).ok());
        let id = read("message_id").and_then(|v| serde_json::from_str::<i64>(v).ok());
        // Later messages of the chat get later ids, as they would from Telegram.
        if let (Some(chat), Some(id)) = (chat, id) {
            self.reserve(chat.id, id);
        }
        Ok(self.queue_text(message.trim().to_owned()))
    }

    /// Queues the message of update `id` again under a new id; `None` if there was no such update.
    pub(crate) fn redeliver(&mut self, id: i64) -> Option<i64> {
        let message = self.queued_message(id)?.to_owned();
        Some(self.queue_text(message))
    }

    /// The bot's latest message in the chat and topic, made up if there is none.
    fn bot_message(
        &mut self,
        chat: i64,
        thread: Option<i64>,
        chat_json: &Value,
        forum: bool,
    ) -> Value {
        if let Some(found) =
            self.last_bot.get(&(chat, thread)).and_then(|id| self.nested(chat, *id))
        {
            return found;
        }
        let id = self.allocate(chat);
        let json = wire::Message {
            id,
            chat: chat_json,
            from: wire::bot_user(),
            text: EARLIER_ANSWER,
            thread,
            forum,
            reply_to: None,
        }
        .to_json();
        let stored = Stored {
            from_bot: true,
            text: EARLIER_ANSWER.to_owned(),
            parse_mode: None,
            json: json.clone(),
        };
        self.messages.insert((chat, id), stored);
        self.last_bot.insert((chat, thread), id);
        json
    }

    /// The service message that opened topic `thread`, made (by the sender) on first use.
    fn topic_root(&mut self, msg: &UserMessage, thread: i64, chat_json: &Value) -> Value {
        if let Some(found) = self.nested(msg.chat_id, thread) {
            return found;
        }
        let json = wire::topic_created(chat_json, thread, wire::sender(msg));
        let stored =
            Stored { from_bot: false, text: String::new(), parse_mode: None, json: json.clone() };
        self.messages.insert((msg.chat_id, thread), stored);
        json
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(state: &mut State, msg: UserMessage) -> Value {
        let id = state.inject(&msg);
        serde_json::from_str(state.queued_message(id).unwrap()).unwrap()
    }

    #[test]
    fn message_ids_count_per_chat_and_past_the_topic() {
        let mut state = State::default();
        let ids: Vec<Value> = [
            UserMessage::dm(1, "a"),
            UserMessage::dm(1, "b"),
            UserMessage::dm(2, "c"),
            UserMessage::topic(-5, 9, 1, "d"),
        ]
        .into_iter()
        .map(|m| message(&mut state, m)["message_id"].clone())
        .collect();
        assert_eq!(ids, [1, 2, 1, 10]);
    }

    #[test]
    fn replies_quote_the_bot_or_the_topic() {
        let mut state = State::default();
        let topic = message(&mut state, UserMessage::topic(-5, 9, 1, "d"));
        assert_eq!(topic["reply_to_message"]["message_id"], 9);
        assert_eq!(topic["reply_to_message"]["forum_topic_created"]["name"], "Topic 9");
        let reply = message(&mut state, UserMessage::topic(-5, 9, 1, "e").reply_to_bot());
        assert_eq!(reply["reply_to_message"]["from"]["id"], FakeTelegram::BOT_ID);
        assert_eq!(reply["reply_to_message"]["message_thread_id"], 9);
        let again = message(&mut state, UserMessage::topic(-5, 9, 1, "f").reply_to_bot());
        assert_eq!(again["reply_to_message"], reply["reply_to_message"], "one made-up message");
        let mention =
            message(&mut state, UserMessage { mention: true, ..UserMessage::dm(1, "hi") });
        assert_eq!(mention["text"], "@herald_test_bot hi");
        assert_eq!(mention["entities"][0]["type"], "mention");
    }
}

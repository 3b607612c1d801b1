//! The events users cause, shaped as Slack's Events API sends them: a DM (`message`,
//! `channel_type: im`), a channel post (a `message` event, and with a mention of the bot also an
//! `app_mention` event for the same `ts` under another `event_id`), a thread reply, a bot's
//! message (`subtype: bot_message`), an edit (`message_changed`), a deletion
//! (`message_deleted`), and the bot's own posts coming back. Each is wrapped in its
//! `event_callback` payload and handed to the postman in order.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::FakeSlack;
use super::postman::Command;
use super::state::{Channel, Shared, State, Stored, now_ms};

/// A message a user (or another bot) writes.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct Post {
    /// The author's user id, like `U0123`.
    pub user: String,
    /// The text; with `mention` the bot's mention `<@BOT_USER> ` is put in front.
    pub text: String,
    /// The channel, like `C0123`; `None` is the author's DM with the bot
    /// ([`FakeSlack::dm_channel`]).
    #[serde(default)]
    pub channel: Option<String>,
    /// The `ts` of the thread's parent, for a reply in a thread.
    #[serde(default)]
    pub thread_ts: Option<String>,
    /// Whether the text mentions the bot (in a channel: the `message` + `app_mention` pair).
    #[serde(default)]
    pub mention: bool,
    /// With `mention`, whether the `app_mention` event comes before the `message` event.
    #[serde(default)]
    pub mention_first: bool,
    /// A bot's id (`B…`): the message is a `bot_message` from that bot, not from `user`.
    #[serde(default)]
    pub bot_id: Option<String>,
    /// Message metadata (`event_type`, `event_payload`), as an app posts it with a message.
    #[serde(default)]
    pub metadata: Option<Value>,
}

impl Post {
    /// A direct message from `user`.
    pub fn dm(user: &str, text: &str) -> Post {
        Post {
            user: user.to_owned(),
            text: text.to_owned(),
            channel: None,
            thread_ts: None,
            mention: false,
            mention_first: false,
            bot_id: None,
            metadata: None,
        }
    }

    /// A message of `user` at the top of `channel`.
    pub fn channel(channel: &str, user: &str, text: &str) -> Post {
        Post { channel: Some(channel.to_owned()), ..Post::dm(user, text) }
    }

    /// The same message, mentioning the bot.
    pub fn mentioning_bot(self) -> Post {
        Post { mention: true, ..self }
    }

    /// The same message, its `app_mention` event sent before its `message` event.
    pub fn mention_first(self) -> Post {
        Post { mention_first: true, ..self }
    }

    /// The same message, as a reply in the thread of `thread_ts`.
    pub fn in_thread(self, thread_ts: &str) -> Post {
        Post { thread_ts: Some(thread_ts.to_owned()), ..self }
    }

    /// The same message, posted by bot `bot_id` (`subtype: bot_message`).
    pub fn from_bot(self, bot_id: &str) -> Post {
        Post { bot_id: Some(bot_id.to_owned()), ..self }
    }

    /// The same message, carrying message metadata `{event_type, event_payload}`.
    pub fn with_metadata(self, metadata: Value) -> Post {
        Post { metadata: Some(metadata), ..self }
    }
}

/// What an injection produced.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Injected {
    /// The channel the message is in.
    pub channel: String,
    /// The event's `ts` (the message's, or the edit's or deletion's own).
    pub ts: String,
    /// The ids of the events sent, in the order sent.
    pub event_ids: Vec<String>,
}

impl Shared {
    /// Stores `post` and sends its events; what was sent.
    pub fn inject(&self, post: &Post) -> Injected {
        let channel = post.channel.clone().unwrap_or_else(|| FakeSlack::dm_channel(&post.user));
        let kind = Channel::kind(&channel);
        let text = if post.mention {
            format!("<@{}> {}", FakeSlack::BOT_USER, post.text)
        } else {
            post.text.clone()
        };
        let mut state = self.lock();
        state.remember_channel(&channel, Some(&post.user));
        let ts = state.next_ts();
        let mut message = json!({
            "type": "message", "channel": channel, "text": text, "ts": ts, "event_ts": ts,
            "channel_type": kind, "team": FakeSlack::TEAM_ID,
        });
        match &post.bot_id {
            Some(bot_id) => {
                message["subtype"] = json!("bot_message");
                message["bot_id"] = json!(bot_id);
                message["username"] = json!(format!("bot-{bot_id}"));
            }
            None => {
                message["user"] = json!(post.user);
                message["client_msg_id"] = json!(format!("fake-client-msg-{ts}"));
            }
        }
        if let Some(thread_ts) = &post.thread_ts {
            message["thread_ts"] = json!(thread_ts);
            let parent = state.messages.iter().find(|m| m.channel == channel && &m.ts == thread_ts);
            if let Some(author) = parent.and_then(|m| m.user.clone()) {
                message["parent_user_id"] = json!(author);
            }
        }
        state.messages.push(Stored {
            channel: channel.clone(),
            ts: ts.clone(),
            thread_ts: post.thread_ts.clone(),
            user: post.bot_id.is_none().then(|| post.user.clone()),
            bot_id: post.bot_id.clone(),
            text: text.clone(),
            deleted: false,
            reactions: Vec::new(),
            metadata: post.metadata.clone(),
        });
        let mut events = vec![message];
        // Slack sends `app_mention` for mentions in conversations the app is in, not in DMs.
        if post.mention && kind != "im" && post.bot_id.is_none() {
            let mut mention = json!({
                "type": "app_mention", "user": post.user, "text": text, "ts": ts,
                "channel": channel, "event_ts": ts, "team": FakeSlack::TEAM_ID,
                "client_msg_id": format!("fake-client-msg-{ts}"),
            });
            if let Some(thread_ts) = &post.thread_ts {
                mention["thread_ts"] = json!(thread_ts);
            }
            if post.mention_first {
                events.insert(0, mention);
            } else {
                events.push(mention);
            }
        }
        let event_ids = self.send_events(&mut state, events);
        Injected { channel, ts, event_ids }
    }

    /// A user's edit of message `ts` in `channel` (`message_changed`); `None` when the fake
    /// knows no such message.
    pub fn edit(&self, channel: &str, ts: &str, text: &str) -> Option<Injected> {
        let mut state = self.lock();
        let event_ts = state.next_ts();
        let stored = state.message_mut(channel, ts)?;
        let previous = stored_message(stored);
        stored.text = text.to_owned();
        let mut current = stored_message(stored);
        current["edited"] = json!({"user": stored.user, "ts": event_ts});
        let event = json!({
            "type": "message", "subtype": "message_changed", "hidden": true,
            "channel": channel, "channel_type": Channel::kind(channel), "ts": event_ts,
            "event_ts": event_ts, "message": current, "previous_message": previous,
        });
        let event_ids = self.send_events(&mut state, vec![event]);
        Some(Injected { channel: channel.to_owned(), ts: event_ts, event_ids })
    }

    /// The deletion of message `ts` in `channel` (`message_deleted`); `None` when the fake
    /// knows no such message.
    pub fn delete(&self, channel: &str, ts: &str) -> Option<Injected> {
        let mut state = self.lock();
        let event_ts = state.next_ts();
        let stored = state.message_mut(channel, ts)?;
        stored.deleted = true;
        let previous = stored_message(stored);
        let event = json!({
            "type": "message", "subtype": "message_deleted", "hidden": true,
            "channel": channel, "channel_type": Channel::kind(channel), "ts": event_ts,
            "event_ts": event_ts, "deleted_ts": ts, "previous_message": previous,
        });
        let event_ids = self.send_events(&mut state, vec![event]);
        Some(Injected { channel: channel.to_owned(), ts: event_ts, event_ids })
    }

    /// Sends the bot's own new or changed message back as Slack does, unless turned off.
    pub fn echo(&self, state: &mut State, event: Value) {
        if state.echo_own_posts {
            self.send_events(state, vec![event]);
        }
    }

    /// Wraps each event in its `event_callback` and hands them to the postman in order, under
    /// the lock so that two injections never interleave; their event ids.
    fn send_events(&self, state: &mut State, events: Vec<Value>) -> Vec<String> {
        let mut ids = Vec::with_capacity(events.len());
        for event in events {
            let event_id = state.next_event_id();
            self.tell_postman(Command::Deliver(callback(event, &event_id)));
            ids.push(event_id);
        }
        ids
    }
}

/// The `event_callback` payload around `event`.
fn callback(event: Value, event_id: &str) -> Value {
    json!({
        "token": FakeSlack::VERIFICATION_TOKEN,
        "team_id": FakeSlack::TEAM_ID,
        "api_app_id": FakeSlack::APP_ID,
        "event": event,
        "type": "event_callback",
        "event_id": event_id,
        "event_time": now_ms() / 1000,
        "authorizations": [{
            "enterprise_id": null, "team_id": FakeSlack::TEAM_ID, "user_id": FakeSlack::BOT_USER,
            "is_bot": true, "is_enterprise_install": false,
        }],
        "is_ext_shared_channel": false,
        "event_context": format!("4-fake-{event_id}"),
    })
}

/// A stored message as Slack shows it inside events and answers.
pub(crate) fn stored_message(stored: &Stored) -> Value {
    let mut message = json!({
        "type": "message", "text": stored.text, "ts": stored.ts, "team": FakeSlack::TEAM_ID,
    });
    if let Some(user) = &stored.user {
        message["user"] = json!(user);
    }
    if let Some(bot_id) = &stored.bot_id {
        message["bot_id"] = json!(bot_id);
        if stored.user.as_deref() == Some(FakeSlack::BOT_USER) {
            message["app_id"] = json!(FakeSlack::APP_ID);
            message["bot_profile"] = json!({
                "id": FakeSlack::BOT_ID, "app_id": FakeSlack::APP_ID,
                "name": FakeSlack::BOT_NAME, "team_id": FakeSlack::TEAM_ID, "deleted": false,
            });
        } else {
            message["subtype"] = json!("bot_message");
        }
    }
    if let Some(thread_ts) = &stored.thread_ts {
        message["thread_ts"] = json!(thread_ts);
    }
    message
}

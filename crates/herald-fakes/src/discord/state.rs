//! What the fake Discord remembers: the dispatch log (for RESUME), the sessions it issued, what
//! the bot posted and what it identified with. One `std::sync::Mutex`, never held across an
//! `.await`; gateway connections learn of new dispatches and faults through a broadcast channel.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::sync::{broadcast, watch};

use super::FakeDiscord;

/// Discord's epoch (2015-01-01) in Unix milliseconds, the base of snowflakes.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

/// A message a user (or another bot) sends, to be dispatched as `MESSAGE_CREATE`.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct InboundMessage {
    /// The author's user id.
    pub author_id: u64,
    /// The text; with `mention_bot` the bot's mention `<@BOT_ID> ` is put in front.
    pub content: String,
    /// The channel; `None` is the DM channel of the author ([`FakeDiscord::dm_channel`]).
    #[serde(default)]
    pub channel_id: Option<u64>,
    /// The server; `None` is a DM.
    #[serde(default)]
    pub guild_id: Option<u64>,
    /// Whether the message mentions the bot.
    #[serde(default)]
    pub mention_bot: bool,
    /// Whether the author is a bot.
    #[serde(default)]
    pub author_is_bot: bool,
    /// The id of a message this one replies to (a reply to the bot's answer, say): sent as
    /// `message_reference` and `referenced_message`, with message type 19.
    #[serde(default)]
    pub reply_to: Option<u64>,
}

impl InboundMessage {
    /// A direct message from `author_id`.
    pub fn dm(author_id: u64, content: &str) -> InboundMessage {
        InboundMessage {
            author_id,
            content: content.to_owned(),
            channel_id: None,
            guild_id: None,
            mention_bot: false,
            author_is_bot: false,
            reply_to: None,
        }
    }

    /// A message in server `guild_id`'s channel `channel_id`.
    pub fn channel(
        guild_id: u64,
        channel_id: u64,
        author_id: u64,
        content: &str,
    ) -> InboundMessage {
        InboundMessage {
            channel_id: Some(channel_id),
            guild_id: Some(guild_id),
            ..InboundMessage::dm(author_id, content)
        }
    }

    /// The same message, mentioning the bot.
    pub fn mentioning_bot(self) -> InboundMessage {
        InboundMessage { mention_bot: true, ..self }
    }

    /// The same message, as a reply to message `message_id`.
    pub fn replying_to(self, message_id: u64) -> InboundMessage {
        InboundMessage { reply_to: Some(message_id), ..self }
    }

    /// The same message, written by a bot.
    pub fn from_bot(self) -> InboundMessage {
        InboundMessage { author_is_bot: true, ..self }
    }
}

/// A message the bot posted with `POST /channels/{id}/messages`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SentMessage {
    /// The message id the fake gave it.
    pub id: u64,
    /// The channel it was posted in.
    pub channel_id: u64,
    /// Its text.
    pub content: String,
    /// The `message_reference` as sent, if any.
    pub message_reference: Option<Value>,
    /// The `allowed_mentions` as sent, if any.
    pub allowed_mentions: Option<Value>,
    /// The `nonce` as sent (a string or an integer), if any.
    pub nonce: Option<Value>,
    /// Whether `enforce_nonce` was true.
    pub enforce_nonce: bool,
}

/// What a connection is told.
#[derive(Clone, Debug)]
pub(crate) enum Event {
    /// A dispatch was logged with this sequence number.
    Dispatch(u64),
    /// Close every gateway connection with this code.
    Close(u16),
    /// Send op 7 RECONNECT.
    Reconnect,
    /// Drop the socket without a close frame.
    Abort,
    /// Send op 9 INVALID_SESSION with this `d`.
    InvalidSession(bool),
}

/// One `IDENTIFY` the fake accepted or refused.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Identify {
    /// The token as sent.
    pub token: String,
    /// The intents bit set.
    pub intents: u64,
    /// The `shard` array as sent (`[id, total]`), if any.
    pub shard: Option<[u64; 2]>,
}

/// The shard a connection without a `shard` array is: the only one.
pub(crate) const UNSHARDED: [u64; 2] = [0, 1];

/// The shard that gets a dispatch, as Discord routes them: a server's events go to shard
/// `(guild_id >> 22) % total`, everything else (DMs) to shard 0.
pub(crate) fn shard_of(d: &Value, total: u64) -> u64 {
    let guild = d["guild_id"].as_str().and_then(|g| g.parse::<u64>().ok());
    guild.map_or(0, |guild| (guild >> 22) % total.max(1))
}

#[derive(Debug, Default)]
pub(crate) struct State {
    last_id: u64,
    /// The last sequence number given.
    pub seq: u64,
    /// Every dispatch after READY, as (seq, full payload).
    pub log: Vec<(u64, Value)>,
    /// Every session given, with its shard.
    pub sessions: Vec<(String, [u64; 2])>,
    /// The open connections that identified or resumed, by connection number: their shard.
    pub connections: BTreeMap<u64, [u64; 2]>,
    /// The number the next connection gets.
    pub next_connection: u64,
    /// The `shards` `GET /gateway/bot` recommends; 0 is 1.
    pub shards: u64,
    /// An IDENTIFY with fewer shards in all than this closes 4011 (sharding required).
    pub required_shards: u64,
    pub identifies: Vec<Identify>,
    pub sent: Vec<SentMessage>,
    /// Every message in every channel, injected or posted, oldest first.
    pub messages: Vec<Value>,
    /// Faults for the next posts, first first.
    pub faults: HashMap<Route, VecDeque<SendFault>>,
    /// Whether the application may ask for the Message Content intent (else IDENTIFY with it
    /// closes 4014).
    pub message_content_denied: bool,
    /// Channels by id: those messages were injected in (text or DM) and threads.
    pub channels: HashMap<u64, Value>,
    /// The HELLO's `heartbeat_interval` in ms; 0 is Discord's 41250.
    pub heartbeat_interval_ms: u64,
    /// While true, heartbeats get no HEARTBEAT_ACK (a zombied connection).
    pub heartbeat_acks_withheld: bool,
    /// Every `POST /channels/{id}/typing`, by channel id.
    pub typing: Vec<u64>,
    /// The global application commands, as last put.
    pub commands: Vec<Value>,
    /// How many times the commands were put.
    pub command_puts: usize,
    /// The interactions dispatched, as (id, token, channel id).
    pub interactions: Vec<(u64, String, u64)>,
    /// The answers to them.
    pub interaction_responses: Vec<super::InteractionResponse>,
    /// Followups and edits of the original answer, through the interaction webhook.
    pub followups: Vec<super::Followup>,
}

/// A REST route faults can be queued for.
#[derive(Clone, Copy, Debug, Deserialize, Eq, Hash, PartialEq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Route {
    /// `POST /channels/{id}/messages`.
    CreateMessage,
    /// `GET /channels/{id}/messages`.
    ListMessages,
    /// `GET /channels/{id}`.
    GetChannel,
    /// `POST /channels/{id}/typing`.
    Typing,
    /// `POST /channels/{id}/messages/{id}/threads`.
    StartThread,
    /// `PUT /applications/{id}/commands`.
    PutCommands,
    /// `POST /interactions/{id}/{token}/callback`.
    InteractionCallback,
    /// `POST /webhooks/{app}/{token}` and `PATCH .../messages/@original`.
    Followup,
}

/// A fault for the next call of a REST route, checked after the token.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SendFault {
    /// 429 with `retry_after` (seconds) in the body and the `Retry-After` and
    /// `X-RateLimit-Reset-After` headers; `global` marks the global limit.
    TooManyRequests {
        /// Seconds to wait.
        retry_after: f64,
        /// Whether it is the global limit.
        #[serde(default)]
        global: bool,
    },
    /// This HTTP status (500, 502, 503, ...) with Discord's error body.
    Status {
        /// The status code.
        status: u16,
    },
}

/// The state shared by handlers and handles.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    pub events: broadcast::Sender<Event>,
    /// How many messages the bot has posted; bumped on every post.
    pub sent: watch::Sender<usize>,
    /// While true, connections are dropped as soon as they are accepted, and open ones end.
    pub offline: watch::Sender<bool>,
    /// While true, `GET /channels/{id}/messages` waits before it answers (a fetch after a gap
    /// held back, so a test can dispatch a newer message first).
    pub history_held: watch::Sender<bool>,
    /// How many `GET /channels/{id}/messages` requests arrived, answered or held.
    pub history_asked: watch::Sender<usize>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            events: broadcast::Sender::new(1024),
            sent: watch::Sender::new(0),
            offline: watch::Sender::new(false),
            history_held: watch::Sender::new(false),
            history_asked: watch::Sender::new(0),
        }
    }
}

impl Shared {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Logs a dispatch `t` with data `d` under the next sequence number and tells connections.
    pub fn dispatch(&self, t: &str, d: Value) -> u64 {
        let seq = {
            let mut state = self.lock();
            state.seq += 1;
            let seq = state.seq;
            state.log.push((seq, json!({"op": 0, "t": t, "s": seq, "d": d})));
            seq
        };
        // No connection listening is not an error: the dispatch waits in the log for a RESUME.
        let _ = self.events.send(Event::Dispatch(seq));
        seq
    }

    /// Dispatches `msg` as MESSAGE_CREATE; (message id, seq).
    pub fn inject(&self, msg: &InboundMessage) -> (u64, u64) {
        let id = self.lock().next_id();
        self.inject_as(msg, id)
    }

    /// Dispatches `msg` as MESSAGE_CREATE under message id `id`; (id, seq).
    pub fn inject_as(&self, msg: &InboundMessage, id: u64) -> (u64, u64) {
        let channel_id = msg.channel_id.unwrap_or_else(|| FakeDiscord::dm_channel(msg.author_id));
        let author = json!({
            "id": msg.author_id.to_string(),
            "username": format!("user{}", msg.author_id),
            "discriminator": "0",
            "global_name": null,
            "avatar": null,
            "bot": msg.author_is_bot,
        });
        let (content, mentions) = if msg.mention_bot {
            (format!("<@{}> {}", FakeDiscord::BOT_ID, msg.content), vec![bot_user()])
        } else {
            (msg.content.clone(), vec![])
        };
        let mut d = message(id, channel_id, author.clone(), &content, mentions);
        if let Some(reply_to) = msg.reply_to {
            let reply_id = reply_to.to_string();
            let referenced =
                self.lock().messages.iter().find(|m| m["id"].as_str() == Some(&reply_id)).cloned();
            let mut reference = json!({"type": 0, "message_id": reply_to.to_string(), "channel_id": channel_id.to_string()});
            if let Some(guild) = msg.guild_id {
                reference["guild_id"] = json!(guild.to_string());
            }
            d["type"] = json!(19);
            d["message_reference"] = reference;
            d["referenced_message"] = referenced.clone().unwrap_or(Value::Null);
            // Discord lists the author of the replied-to message among the mentions.
            if let (Some(replied), Some(mentions)) = (referenced, d["mentions"].as_array_mut()) {
                mentions.push(replied["author"].clone());
            }
        }
        {
            let mut state = self.lock();
            state.channels.entry(channel_id).or_insert_with(|| match msg.guild_id {
                    Some(guild) => {
                        json!({"id": channel_id.to_string(), "type": 0, "guild_id": guild.to_string(), "name": format!("channel-{channel_id}"), "position": 0, "permission_overwrites": [], "nsfw": false, "parent_id": null})
                    }
                    None => {
                        json!({"id": channel_id.to_string(), "type": 1, "recipients": [author], "last_message_id": null})
                    }
                });
        }
        if let Some(guild) = msg.guild_id {
            d["guild_id"] = json!(guild.to_string());
            d["member"] = json!({"roles": [], "joined_at": timestamp(), "deaf": false, "mute": false, "flags": 0});
        }
        self.lock().messages.push(d.clone());
        (id, self.dispatch("MESSAGE_CREATE", d))
    }
}

impl Shared {
    /// Opens a public thread in `parent_id` of `guild_id` (its id is `from_message` when started
    /// from a message, as on Discord, else a fresh one) and dispatches THREAD_CREATE; the
    /// thread object, or `None` when that message already has a thread.
    pub fn create_thread(
        &self,
        guild_id: u64,
        parent_id: u64,
        name: &str,
        from_message: Option<u64>,
        owner_id: u64,
    ) -> Option<Value> {
        let thread = {
            let mut state = self.lock();
            let id = match from_message {
                Some(id) if state.channels.contains_key(&id) => return None,
                Some(id) => id,
                None => state.next_id(),
            };
            let thread = json!({
                "id": id.to_string(),
                "type": 11,
                "guild_id": guild_id.to_string(),
                "parent_id": parent_id.to_string(),
                "name": name,
                "owner_id": owner_id.to_string(),
                "message_count": 0,
                "member_count": 1,
                "thread_metadata": {"archived": false, "auto_archive_duration": 1440, "archive_timestamp": timestamp(), "locked": false},
            });
            state.channels.insert(id, thread.clone());
            thread
        };
        let mut event = thread.clone();
        event["newly_created"] = json!(true);
        self.dispatch("THREAD_CREATE", event);
        Some(thread)
    }
}

impl Shared {
    /// A forum post: forum channel `forum_id` (type 15) in `guild_id` gets a thread named `name`
    /// whose starter message, by `author_id`, is `content`; as on Discord the thread and its
    /// starter message share one id. THREAD_CREATE then MESSAGE_CREATE; the id.
    pub fn create_forum_post(
        &self,
        guild_id: u64,
        forum_id: u64,
        name: &str,
        author_id: u64,
        content: &str,
    ) -> u64 {
        let id = {
            let mut state = self.lock();
            state.channels.entry(forum_id).or_insert_with(|| {
                json!({"id": forum_id.to_string(), "type": 15, "guild_id": guild_id.to_string(), "name": format!("forum-{forum_id}"), "position": 0, "permission_overwrites": [], "nsfw": false, "parent_id": null, "available_tags": []})
            });
            state.next_id()
        };
        self.create_thread(guild_id, forum_id, name, Some(id), author_id);
        self.inject_as(&InboundMessage::channel(guild_id, id, author_id, content), id);
        id
    }
}

impl State {
    /// A fresh snowflake, greater than every earlier one.
    pub fn next_id(&mut self) -> u64 {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let id = (now.saturating_sub(DISCORD_EPOCH_MS) << 22).max(self.last_id + 1);
        self.last_id = id;
        id
    }

    /// A new session id of `shard`, remembered for RESUME.
    pub fn new_session(&mut self, shard: [u64; 2]) -> String {
        let session = format!("fake-session-{}", self.sessions.len() + 1);
        self.sessions.push((session.clone(), shard));
        session
    }
}

/// The bot's user object.
pub(crate) fn bot_user() -> Value {
    json!({
        "id": FakeDiscord::BOT_ID.to_string(),
        "username": FakeDiscord::BOT_USERNAME,
        "discriminator": "0",
        "global_name": null,
        "avatar": null,
        "bot": true,
        "verified": true,
        "mfa_enabled": false,
        "flags": 0,
    })
}

/// A message object as Discord's API and gateway send it.
pub(crate) fn message(
    id: u64,
    channel_id: u64,
    author: Value,
    content: &str,
    mentions: Vec<Value>,
) -> Value {
    json!({
        "id": id.to_string(),
        "channel_id": channel_id.to_string(),
        "author": author,
        "content": content,
        "timestamp": timestamp(),
        "edited_timestamp": null,
        "tts": false,
        "mention_everyone": false,
        "mentions": mentions,
        "mention_roles": [],
        "attachments": [],
        "embeds": [],
        "pinned": false,
        "type": 0,
        "flags": 0,
    })
}

/// Now, as an ISO 8601 timestamp (UTC, second precision).
fn timestamp() -> String {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = civil_from_days(days as i64);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000000+00:00",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Howard Hinnant's days-to-civil.
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

//! What the fake Slack remembers: channels and their messages (for threads, updates and
//! reactions), what the bot posted, every Web API call, every envelope delivered and its
//! acknowledgement, and the faults queued. One `std::sync::Mutex`, never held across an
//! `.await`; a watch counter wakes whoever waits for a record.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicUsize;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use super::postman::Command;

/// How long Slack waits for an envelope's acknowledgement before it sends the event again.
pub const ACK_TIMEOUT: Duration = Duration::from_secs(3);

/// A message the bot posted with `chat.postMessage`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Posted {
    /// The channel it went to (a DM's `D…` id when it was addressed to a user id).
    pub channel: String,
    /// The `ts` the fake gave it.
    pub ts: String,
    /// The `thread_ts` as sent, if any.
    pub thread_ts: Option<String>,
    /// Whether `thread_ts` named a message of that channel (Slack documents no error for one
    /// that does not, so the post is taken either way; a test asserts on this).
    pub thread_found: bool,
    /// The text as sent.
    pub text: String,
    /// The `blocks` as sent, if any.
    pub blocks: Option<Value>,
    /// The `mrkdwn` flag as sent, if any.
    pub mrkdwn: Option<bool>,
    /// The message `metadata` as sent, if any.
    pub metadata: Option<Value>,
}

/// A message the bot changed with `chat.update`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Updated {
    /// The channel of the message.
    pub channel: String,
    /// The `ts` of the message changed.
    pub ts: String,
    /// Its new text.
    pub text: String,
}

/// One successful `reactions.add` or `reactions.remove`.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Reaction {
    /// The channel of the message.
    pub channel: String,
    /// The `ts` of the message.
    pub timestamp: String,
    /// The emoji name, without colons.
    pub name: String,
    /// True for `reactions.add`, false for `reactions.remove`.
    pub added: bool,
}

/// One Web API call, answered or refused; the token itself is never kept.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ApiCall {
    /// The method, like `chat.postMessage`.
    pub method: String,
    /// The arguments, query and body merged (form values as strings).
    pub args: Value,
    /// The HTTP status answered.
    pub status: u16,
    /// The `error` answered, `None` for `"ok": true`.
    pub error: Option<String>,
}

/// One `events_api` envelope sent on a Socket Mode connection, and its acknowledgement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Delivery {
    /// The envelope's id, which the acknowledgement names.
    pub envelope_id: String,
    /// The event's id, the same on every redelivery.
    pub event_id: String,
    /// The event's `type` (`message`, `app_mention`).
    pub event_type: String,
    /// 0 for the first delivery, then 1, 2, 3.
    pub retry_attempt: u32,
    /// The connection it went to (counted from 1).
    pub connection: u64,
    /// When it was sent, in Unix milliseconds.
    pub delivered_ms: u64,
    /// When its acknowledgement came, in Unix milliseconds.
    pub acked_ms: Option<u64>,
}

impl Delivery {
    /// How long the acknowledgement took, if it came.
    pub fn ack_delay(&self) -> Option<Duration> {
        self.acked_ms.map(|acked| Duration::from_millis(acked.saturating_sub(self.delivered_ms)))
    }
}

/// What happened to one Socket Mode connection, in the order the fake saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SocketEvent {
    /// The connection said hello and counts against the app's limit.
    Opened {
        /// The connection (counted from 1, as in [`Delivery::connection`]).
        connection: u64,
    },
    /// The connection was refused with a `too_many_websockets` disconnect.
    Refused {
        /// The connection.
        connection: u64,
    },
    /// The connection ended, whoever closed it.
    Closed {
        /// The connection.
        connection: u64,
    },
}

/// A fault for the next call of a Web API method, answered after the token is checked.
#[derive(Clone, Debug, Deserialize, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum SlackFault {
    /// HTTP 429 with `Retry-After: retry_after` and `{"ok":false,"error":"ratelimited"}`.
    RateLimited {
        /// Seconds to wait.
        retry_after: u64,
    },
    /// This HTTP status (500, 502, 503, ...) with an `ok: false` body.
    Status {
        /// The status code.
        status: u16,
    },
    /// The call is carried out (a post stored), then answered with this HTTP status and an
    /// `ok: false` body: an answer lost after the fact.
    StatusAfter {
        /// The status code.
        status: u16,
    },
    /// No answer: the request is read and the connection held open until the fake stops, as
    /// behind a half-open connection.
    Stall,
    /// The call is carried out (a post stored), then never answered.
    StallAfter,
    /// HTTP 200 with `{"ok":false,"error":error}` (`fatal_error`, `not_in_channel`, ...).
    Error {
        /// The error code.
        error: String,
    },
}

/// A conversation the fake knows: where users wrote, so where the bot may post.
#[derive(Clone, Debug)]
pub(crate) struct Channel {
    pub id: String,
    /// For a DM, the user at the other end.
    pub user: Option<String>,
}

impl Channel {
    /// `im`, `group` (private) or `channel`, as events' `channel_type` says, from the id's prefix.
    pub fn kind(id: &str) -> &'static str {
        match id.as_bytes().first() {
            Some(b'D') => "im",
            Some(b'G') => "group",
            _ => "channel",
        }
    }
}

/// A message in a channel, injected or posted.
#[derive(Clone, Debug)]
pub(crate) struct Stored {
    pub channel: String,
    pub ts: String,
    pub thread_ts: Option<String>,
    /// The author's user id (the bot's for its own posts).
    pub user: Option<String>,
    pub bot_id: Option<String>,
    pub text: String,
    pub deleted: bool,
    /// The reactions the bot put on it.
    pub reactions: Vec<String>,
    /// Its message metadata (`event_type`, `event_payload`), as posted.
    pub metadata: Option<Value>,
}

#[derive(Debug)]
pub(crate) struct State {
    last_ts_micros: u64,
    last_event: u64,
    last_envelope: u64,
    last_ticket: u64,
    pub channels: HashMap<String, Channel>,
    pub messages: Vec<Stored>,
    pub posted: Vec<Posted>,
    pub updated: Vec<Updated>,
    pub reactions: Vec<Reaction>,
    pub calls: Vec<ApiCall>,
    pub deliveries: Vec<Delivery>,
    /// Index into `deliveries` by envelope id.
    pub delivery_index: HashMap<String, usize>,
    /// Acknowledgements naming an envelope the fake never sent.
    pub stray_acks: Vec<String>,
    pub faults: HashMap<String, VecDeque<SlackFault>>,
    /// While true, every token is refused with `invalid_auth` (a revoked app).
    pub invalid_auth: bool,
    pub ack_timeout: Duration,
    /// Socket Mode tickets given by `apps.connections.open` and not yet used.
    pub tickets: HashSet<String>,
    pub connections_opened: u64,
    /// Socket Mode connections that other processes of the app hold: they count against
    /// Slack's limit of [`super::MAX_CONNECTIONS`].
    pub held: usize,
    /// The most connections open at once, held ones left out.
    pub peak: usize,
    /// Every connection opened, refused and closed, in order.
    pub sockets: Vec<SocketEvent>,
    /// Whether the bot's own posts come back as `message` events, as on Slack.
    pub echo_own_posts: bool,
    /// The bot token's scopes.
    pub scopes: Vec<String>,
    /// Slack's per-method rate limit on reading messages, when on: at most `calls` of
    /// `conversations.history` (and as many of `conversations.replies`) per `window`.
    pub read_limit: Option<ReadLimit>,
    /// When each limited method was last answered, within the window.
    pub reads: HashMap<String, VecDeque<Instant>>,
    /// How many new Socket Mode connections get a `refresh_requested` disconnect in place of
    /// `hello`.
    pub refresh_before_hello: usize,
}

/// Slack's rate limit tier for a method: `calls` per `window` (Tier 3: about 50 a minute).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadLimit {
    /// Calls answered per window.
    pub calls: usize,
    /// The window.
    pub window: Duration,
}

impl ReadLimit {
    /// Slack's Tier 3, which `conversations.history` and `conversations.replies` are in.
    pub const TIER_3: ReadLimit = ReadLimit { calls: 50, window: Duration::from_secs(60) };
}

/// The bot scopes herald's app manifest asks for, which the bot token has by default.
pub const BOT_SCOPES: &[&str] = &[
    "app_mentions:read",
    "channels:history",
    "groups:history",
    "im:history",
    "mpim:history",
    "chat:write",
    "reactions:write",
];

impl Default for State {
    fn default() -> State {
        State {
            last_ts_micros: 0,
            last_event: 0,
            last_envelope: 0,
            last_ticket: 0,
            channels: HashMap::new(),
            messages: Vec::new(),
            posted: Vec::new(),
            updated: Vec::new(),
            reactions: Vec::new(),
            calls: Vec::new(),
            deliveries: Vec::new(),
            delivery_index: HashMap::new(),
            stray_acks: Vec::new(),
            faults: HashMap::new(),
            invalid_auth: false,
            ack_timeout: ACK_TIMEOUT,
            tickets: HashSet::new(),
            connections_opened: 0,
            held: 0,
            peak: 0,
            sockets: Vec::new(),
            echo_own_posts: true,
            scopes: BOT_SCOPES.iter().map(|s| (*s).to_owned()).collect(),
            read_limit: None,
            reads: HashMap::new(),
            refresh_before_hello: 0,
        }
    }
}

impl State {
    /// A fresh message `ts` like `1700000000.000100`: the wall clock in microseconds, and
    /// always greater than the last one, so that it is unique in the workspace.
    pub fn next_ts(&mut self) -> String {
        let micros = now_micros().max(self.last_ts_micros + 1);
        self.last_ts_micros = micros;
        format!("{}.{:06}", micros / 1_000_000, micros % 1_000_000)
    }

    /// A fresh event id, like `Ev0000000A1B`.
    pub fn next_event_id(&mut self) -> String {
        self.last_event += 1;
        format!("Ev{:010X}", self.last_event)
    }

    /// A fresh envelope id, shaped like the UUIDs Slack uses.
    pub fn next_envelope_id(&mut self) -> String {
        self.last_envelope += 1;
        format!("00000000-0000-4000-8000-{:012x}", self.last_envelope)
    }

    /// A fresh single-use Socket Mode ticket, remembered until a connection uses it.
    pub fn next_ticket(&mut self) -> String {
        self.last_ticket += 1;
        let ticket = format!("fake-ticket-{}", self.last_ticket);
        self.tickets.insert(ticket.clone());
        ticket
    }

    /// Knows `id` from now on (a DM with `user` when it is one).
    pub fn remember_channel(&mut self, id: &str, user: Option<&str>) {
        self.channels.entry(id.to_owned()).or_insert_with(|| Channel {
            id: id.to_owned(),
            user: user.filter(|_| Channel::kind(id) == "im").map(str::to_owned),
        });
    }

    /// `None` when `method` may be answered now (counted), or how long until it may, past
    /// [`State::read_limit`].
    pub fn rate_limited(&mut self, method: &str) -> Option<Duration> {
        let limit = self.read_limit?;
        if !matches!(method, "conversations.history" | "conversations.replies") {
            return None;
        }
        let now = Instant::now();
        let calls = self.reads.entry(method.to_owned()).or_default();
        while calls.front().is_some_and(|at| now.duration_since(*at) >= limit.window) {
            calls.pop_front();
        }
        if calls.len() < limit.calls {
            calls.push_back(now);
            return None;
        }
        let oldest = calls.front().copied().unwrap_or(now);
        Some(limit.window.saturating_sub(now.duration_since(oldest)))
    }

    /// The message `ts` of `channel`, deleted ones left out.
    pub fn message_mut(&mut self, channel: &str, ts: &str) -> Option<&mut Stored> {
        self.messages.iter_mut().find(|m| m.channel == channel && m.ts == ts && !m.deleted)
    }
}

/// The state shared by handlers, connections, the postman and handles.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Bumped on every record (post, call, delivery, acknowledgement, connection).
    pub changed: watch::Sender<u64>,
    /// While true, connections are dropped as soon as they are accepted, and open ones end.
    pub down: watch::Sender<bool>,
    /// The postman, which delivers events to the Socket Mode connections.
    pub postman: mpsc::UnboundedSender<Command>,
    /// Socket Mode connections open now.
    pub open: AtomicUsize,
    pub bot_token: String,
    pub app_token: String,
}

impl Shared {
    pub fn new(postman: mpsc::UnboundedSender<Command>, bot: String, app: String) -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            changed: watch::Sender::new(0),
            down: watch::Sender::new(false),
            postman,
            open: AtomicUsize::new(0),
            bot_token: bot,
            app_token: app,
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes whoever waits for a record.
    pub fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Hands `command` to the postman; it only fails when the fake is shutting down.
    pub fn tell_postman(&self, command: Command) {
        let _ = self.postman.send(command);
    }
}

/// The wall clock in Unix microseconds.
pub(crate) fn now_micros() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The wall clock in Unix milliseconds.
pub(crate) fn now_ms() -> u64 {
    now_micros() / 1000
}

//! The fake Discord: REST v10 and the Gateway WebSocket on one loopback port, written from
//! Discord's documented protocol, for herald's Discord adapter (serenity with
//! `HttpBuilder::proxy(api_url)` and the rate limiter off) and for offline trials.
//!
//! - REST under `/api/v10`: `GET /gateway` (`{"url": "ws://127.0.0.1:PORT"}`), `GET
//!   /gateway/bot`, `GET /users/@me`, `GET /applications/@me`, `GET /channels/{id}`, `GET
//!   /channels/{id}/messages` (`before`, `after`, `limit` 1 to 100; newest first), `POST
//!   /channels/{id}/messages` (`content` of at most 2000 characters, else 400 code 50035; an
//!   empty message 400 code 50006; `allowed_mentions`, `message_reference`, `nonce` and
//!   `enforce_nonce` recorded, a repeated enforced nonce gets the first message back), `POST
//!   /channels/{id}/typing`, `POST /channels/{id}/messages/{id}/threads` (the thread takes the
//!   message's id; a second one is 400 code 160004), `GET`/`PUT /applications/{id}/commands`,
//!   `POST /interactions/{id}/{token}/callback` (once; then 400 code 40060), `POST
//!   /webhooks/{app}/{token}` and `PATCH .../messages/@original`. Everything but `/gateway`,
//!   the interaction callback and the webhooks wants `Authorization: Bot TOKEN`, else 401.
//! - Gateway at `/` (JSON text frames): HELLO, IDENTIFY → READY (the intents and the `shard`
//!   array recorded; 4004 for another token, 4010 for an invalid shard, 4011 for too few shards
//!   when [`FakeDiscord::require_shards`] asks for more), heartbeats ACKed, dispatches
//!   (MESSAGE_CREATE, THREAD_CREATE, INTERACTION_CREATE, the bot's own posts too) with
//!   increasing `s`, each only on its shard (a server's on `(guild_id >> 22) % total`, DMs on
//!   shard 0), RESUME → the dispatches of its shard after its `seq` then RESUMED (op 9 for a
//!   session the fake does not know). [`FakeDiscord::connections`] lists the open ones.
//! - Faults: [`FakeDiscord::close_with`] (any close code), [`FakeDiscord::reconnect`] (op 7),
//!   [`FakeDiscord::invalid_session`] (op 9), [`FakeDiscord::drop_connections`] (no close
//!   frame), [`FakeDiscord::set_offline`] (down for a while), [`FakeDiscord::deny_message_content`]
//!   (4014), [`FakeDiscord::withhold_heartbeat_acks`], [`FakeDiscord::push_fault`] (429 with
//!   `retry_after` in body and headers, or any status, per [`Route`]), and
//!   [`FakeDiscord::hold_history`] (message history answered only once released).
//! - Messages are injected in DMs, server channels, threads ([`FakeDiscord::create_thread`]) and
//!   forum posts ([`FakeDiscord::create_forum_post`]), mentioning the bot, replying to a
//!   message, or from a bot; slash commands with [`FakeDiscord::inject_command`].
//! - The same controls over HTTP under `/_fake/` (for the `herald-fake-discord` binary):
//!   `messages`, `threads`, `forum_posts`, `commands`, `sent`, `identifies`, `connections`,
//!   `shards`, `typing`,
//!   `interaction_responses`, `followups`, `close`, `reconnect`, `invalid_session`, `drop`,
//!   `send_fault`, `message_content`, `heartbeat` (see the binary's `--help`).
//!
//! Not yet: message edits and deletes, reactions, guild and member lookups, GUILD_CREATE
//! dispatches after READY, attachments.

mod control;
mod gateway;
mod interactions;
mod rest;
mod server;
mod state;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use gateway::HEARTBEAT_INTERVAL_MS;
pub use interactions::{Followup, InteractionResponse, SlashCommand};
pub use rest::MAX_CONTENT;
use server::Ctx;
use state::{Event, Shared};
pub use state::{Identify, InboundMessage, Route, SendFault, SentMessage};

/// A running fake Discord; clones share it, and it stops when the last is dropped.
#[derive(Clone, Debug)]
pub struct FakeDiscord {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    task: Mutex<Option<JoinHandle<()>>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

impl FakeDiscord {
    /// The only bot token the fake accepts.
    pub const TOKEN: &'static str = "fake-discord-token.herald.test";
    /// The bot's user (and application) id.
    pub const BOT_ID: u64 = 100_000_000_000_000_001;
    /// The bot's username.
    pub const BOT_USERNAME: &'static str = "herald_test_bot";

    /// Starts a server on `127.0.0.1` with a port chosen by the system.
    ///
    /// # Panics
    /// If no loopback port can be bound, which leaves a test nothing to do.
    pub async fn start() -> FakeDiscord {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match FakeDiscord::start_on(loopback).await {
            Ok(fake) => fake,
            Err(err) => panic!("could not bind a loopback port for the fake discord: {err}"),
        }
    }

    /// Starts a server on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr) -> io::Result<FakeDiscord> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let shutdown = CancellationToken::new();
        let ctx = Ctx {
            shared: shared.clone(),
            gateway_url: format!("ws://{}", reachable(addr)),
            shutdown: shutdown.clone(),
        };
        let task = tokio::spawn(server::serve(listener, ctx));
        let inner = Inner { addr, shared, shutdown, task: Mutex::new(Some(task)) };
        Ok(FakeDiscord { inner: Arc::new(inner) })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The HTTP base, like `http://127.0.0.1:PORT` (REST is under `/api/v10`; serenity's
    /// `HttpBuilder::proxy` takes this).
    pub fn api_url(&self) -> String {
        format!("http://{}", reachable(self.inner.addr))
    }

    /// The gateway URL `GET /api/v10/gateway` returns, like `ws://127.0.0.1:PORT`.
    pub fn gateway_url(&self) -> String {
        format!("ws://{}", reachable(self.inner.addr))
    }

    /// The DM channel id of a user in this fake.
    pub fn dm_channel(user_id: u64) -> u64 {
        user_id.wrapping_add(500_000_000_000_000_000)
    }

    /// Dispatches `msg` as MESSAGE_CREATE to the identified connections (and into the log a
    /// RESUME replays); (message id, seq).
    pub fn inject_message(&self, msg: InboundMessage) -> (u64, u64) {
        self.inner.shared.inject(&msg)
    }

    /// Every message the bot posted, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.inner.shared.lock().sent.clone()
    }

    /// Waits until the bot has posted at least `n` messages, or `timeout` passed; what was posted.
    pub async fn wait_sent(&self, n: usize, timeout: Duration) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut sends = self.inner.shared.sent.subscribe();
        loop {
            {
                let state = self.inner.shared.lock();
                if state.sent.len() >= n || tokio::time::Instant::now() >= deadline {
                    return state.sent.clone();
                }
            }
            tokio::select! {
                _ = sends.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Waits until the bot has posted more than `from` messages, or `timeout` passed; the
    /// messages after the first `from`.
    pub async fn wait_sent_after(&self, from: usize, timeout: Duration) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut sends = self.inner.shared.sent.subscribe();
        loop {
            {
                let state = self.inner.shared.lock();
                if state.sent.len() > from || tokio::time::Instant::now() >= deadline {
                    return state.sent.get(from..).map(<[SentMessage]>::to_vec).unwrap_or_default();
                }
            }
            tokio::select! {
                _ = sends.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Every IDENTIFY received (token, intents and shard), in order.
    pub fn identifies(&self) -> Vec<Identify> {
        self.inner.shared.lock().identifies.clone()
    }

    /// The shard (`[id, total]`) of every open gateway connection that identified or resumed,
    /// in the order they were opened; `[0, 1]` for one that sent no `shard` array.
    pub fn connections(&self) -> Vec<[u64; 2]> {
        self.inner.shared.lock().connections.values().copied().collect()
    }

    /// The `shards` `GET /gateway/bot` recommends (1 unless set).
    pub fn set_shards(&self, shards: u64) {
        self.inner.shared.lock().shards = shards;
    }

    /// An IDENTIFY with fewer than `shards` shards in all (or none: `[0, 1]`) is closed with
    /// 4011, as Discord does for a bot in too many servers for its shard count.
    pub fn require_shards(&self, shards: u64) {
        self.inner.shared.lock().required_shards = shards;
    }

    /// A server id whose events go to shard `shard` of `total`, the `n`th of them: Discord
    /// routes a server by its snowflake's timestamp, `(guild_id >> 22) % total`.
    pub fn guild_on_shard(shard: u64, total: u64, n: u64) -> u64 {
        let total = total.max(1);
        ((1_000_000 + n) * total + shard % total) << 22 | 1
    }

    /// Closes every open gateway connection with close `code` (4004, 4014, 4000, ...).
    pub fn close_with(&self, code: u16) {
        // No connection open: nothing to close.
        let _ = self.inner.shared.events.send(Event::Close(code));
    }

    /// Opens a public thread in channel `parent_id` of server `guild_id` and dispatches
    /// THREAD_CREATE; the thread's id, to inject messages into (as their `channel_id`).
    pub fn create_thread(&self, guild_id: u64, parent_id: u64, name: &str) -> u64 {
        let thread =
            self.inner.shared.create_thread(guild_id, parent_id, name, None, FakeDiscord::BOT_ID);
        thread.and_then(|t| t["id"].as_str().and_then(|id| id.parse().ok())).unwrap_or_default()
    }

    /// A user's forum post in forum channel `forum_id` of server `guild_id`: a thread named
    /// `name` (THREAD_CREATE) and its starter message `content` (MESSAGE_CREATE), which share
    /// one id, as on Discord; that id, the thread's channel id for further messages.
    pub fn create_forum_post(
        &self,
        guild_id: u64,
        forum_id: u64,
        name: &str,
        author_id: u64,
        content: &str,
    ) -> u64 {
        self.inner.shared.create_forum_post(guild_id, forum_id, name, author_id, content)
    }

    /// The channel object of `channel_id` (a channel a message was injected in, or a thread), as `GET
    /// /channels/{id}` answers.
    pub fn channel(&self, channel_id: u64) -> Option<serde_json::Value> {
        self.inner.shared.lock().channels.get(&channel_id).cloned()
    }

    /// Every thread and forum post, as channel objects, oldest first.
    pub fn threads(&self) -> Vec<serde_json::Value> {
        let state = self.inner.shared.lock();
        let mut threads: Vec<serde_json::Value> = state
            .channels
            .values()
            .filter(|c| matches!(c["type"].as_u64(), Some(10..=12)))
            .cloned()
            .collect();
        threads.sort_by_key(|t| t["id"].as_str().and_then(|id| id.parse::<u64>().ok()));
        threads
    }

    /// Every `POST /channels/{id}/typing`, as channel ids in order.
    pub fn typing(&self) -> Vec<u64> {
        self.inner.shared.lock().typing.clone()
    }

    /// Dispatches a slash command as INTERACTION_CREATE; (interaction id, interaction token).
    pub fn inject_command(&self, command: SlashCommand) -> (u64, String) {
        self.inner.shared.inject_command(&command)
    }

    /// The global application commands as last put.
    pub fn commands(&self) -> Vec<serde_json::Value> {
        self.inner.shared.lock().commands.clone()
    }

    /// How many times the bot put its commands (`PUT /applications/{app}/commands`).
    pub fn command_puts(&self) -> usize {
        self.inner.shared.lock().command_puts
    }

    /// Every interaction callback, in order.
    pub fn interaction_responses(&self) -> Vec<InteractionResponse> {
        self.inner.shared.lock().interaction_responses.clone()
    }

    /// Every followup and edit of an original answer through the interaction webhooks.
    pub fn followups(&self) -> Vec<Followup> {
        self.inner.shared.lock().followups.clone()
    }

    /// The `heartbeat_interval` of the next HELLOs, in milliseconds (Discord's is 41250), so a
    /// test of heartbeat watching need not wait 41 seconds.
    pub fn set_heartbeat_interval(&self, ms: u64) {
        self.inner.shared.lock().heartbeat_interval_ms = ms;
    }

    /// While withheld, heartbeats get no HEARTBEAT_ACK: the connection looks alive but is deaf,
    /// as a zombied one does; the client should reconnect.
    pub fn withhold_heartbeat_acks(&self, withheld: bool) {
        self.inner.shared.lock().heartbeat_acks_withheld = withheld;
    }

    /// Drops every open gateway connection without a close frame, as a network failure would.
    pub fn drop_connections(&self) {
        let _ = self.inner.shared.events.send(Event::Abort);
    }

    /// While `held`, `GET /channels/{id}/messages` (the fetch after a gap) waits before it
    /// answers; releasing it answers every waiting request with the messages as they are then.
    pub fn hold_history(&self, held: bool) {
        self.inner.shared.history_held.send_replace(held);
    }

    /// How many `GET /channels/{id}/messages` requests arrived so far, answered or held.
    pub fn history_requests(&self) -> usize {
        *self.inner.shared.history_asked.borrow()
    }

    /// While offline (down for a while), every connection, REST and gateway, open or new, is
    /// dropped without an answer; the log keeps what is injected meanwhile, for a RESUME.
    pub fn set_offline(&self, offline: bool) {
        self.inner.shared.offline.send_replace(offline);
    }

    /// Sends op 7 RECONNECT on every open gateway connection (the client should resume).
    pub fn reconnect(&self) {
        let _ = self.inner.shared.events.send(Event::Reconnect);
    }

    /// Sends op 9 INVALID_SESSION with `d: resumable` on every open gateway connection; when
    /// not resumable, every session given so far is forgotten (a RESUME gets op 9 `false`).
    pub fn invalid_session(&self, resumable: bool) {
        if !resumable {
            self.inner.shared.lock().sessions.clear();
        }
        let _ = self.inner.shared.events.send(Event::InvalidSession(resumable));
    }

    /// Answers the next `POST /channels/{id}/messages` with `fault`, after those already queued.
    pub fn push_send_fault(&self, fault: SendFault) {
        self.push_fault(Route::CreateMessage, fault);
    }

    /// Answers the next call of `route` with `fault`, after those already queued for it.
    pub fn push_fault(&self, route: Route, fault: SendFault) {
        self.inner.shared.lock().faults.entry(route).or_default().push_back(fault);
    }

    /// While denied, an IDENTIFY asking for the Message Content intent is closed with 4014, as
    /// Discord does when the intent is not enabled in the developer portal.
    pub fn deny_message_content(&self, denied: bool) {
        self.inner.shared.lock().message_content_denied = denied;
    }

    /// Stops the server (for every clone) and waits until it no longer accepts connections.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let task = self.inner.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// `addr`, with loopback for an unspecified address (the one sure to reach it).
fn reachable(mut addr: SocketAddr) -> SocketAddr {
    if addr.ip().is_unspecified() {
        addr.set_ip(Ipv4Addr::LOCALHOST.into());
    }
    addr
}

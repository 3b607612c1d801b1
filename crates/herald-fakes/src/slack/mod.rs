//! The fake Slack: the Web API and Socket Mode on one loopback port, written from Slack's
//! documented protocol, for herald's Slack adapter (slack-morphism pointed at
//! [`FakeSlack::api_url`]) and for offline trials.
//!
//! - Web API at `/api/{method}` (see `web.rs`, `methods.rs` and `history.rs`): `auth.test`,
//!   `apps.connections.open` (app-level token only), `chat.postMessage` (message metadata
//!   kept), `chat.update`, `reactions.add`, `reactions.remove`, `conversations.info`,
//!   `conversations.history` and `conversations.replies` (with the history scopes,
//!   [`FakeSlack::set_scopes`]), `assistant.threads.setStatus` (bot token only), `api.test`. Errors as Slack answers them:
//!   HTTP 200 with `{"ok": false, "error": …}` (`not_authed`, `invalid_auth`,
//!   `not_allowed_token_type`, `channel_not_found`, `no_text`, `msg_too_long`, ...).
//! - Socket Mode at the URL `apps.connections.open` returns (one connection per URL, several
//!   at once): `hello`, `events_api` envelopes to one connection at a time, acknowledgements
//!   recorded ([`Delivery`]), redelivery with `retry_attempt` after [`ACK_TIMEOUT`]
//!   ([`FakeSlack::set_ack_timeout`]) up to three times, `disconnect` messages, pings.
//! - Users' messages with [`FakeSlack::inject`] ([`Post`]: DMs, channel posts, the
//!   `message` + `app_mention` pair for a mention in either order, thread replies, bots'
//!   messages), edits and deletions; the bot's own posts come back as events, as on Slack.
//! - Faults: [`FakeSlack::push_fault`] (429 with `Retry-After`, 5xx, a 5xx after the call was
//!   carried out, no answer ever (before or after the call was carried out), any `error`),
//!   Slack's Tier 3 limit on `conversations.history` and `conversations.replies`
//!   ([`FakeSlack::limit_reads`], off by default), `refresh_requested` before `hello`
//!   ([`FakeSlack::refresh_before_hello`]),
//!   [`FakeSlack::disconnect`], [`FakeSlack::drop_connections`] (no close frame),
//!   [`FakeSlack::silence`] (nothing sent, pongs included, while the client's close is still
//!   seen), [`FakeSlack::down_for`], [`FakeSlack::set_invalid_auth`].
//! - Slack's limit of [`MAX_CONNECTIONS`] Socket Mode connections per app: the next gets a
//!   `disconnect` (`too_many_websockets`) instead of `hello`; [`FakeSlack::hold_connections`]
//!   stands for other processes holding some, and [`FakeSlack::socket_events`] lists every
//!   connection opened, refused and closed, in order.
//! - The same controls over HTTP under `/_fake/` for the `herald-fake-slack` binary (see
//!   `control.rs`).
//!
//! Not here: files, interactive payloads and slash commands, `users.info`, the Events API over
//! HTTP.

mod control;
mod events;
mod history;
mod methods;
mod postman;
mod server;
mod socket;
mod state;
mod web;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use events::{Injected, Post};
pub use methods::MAX_TEXT;
pub use postman::MAX_RETRIES;
use postman::{Command, Outbound};
use server::Ctx;
pub use socket::MAX_CONNECTIONS;
use state::Shared;
pub use state::{
    ACK_TIMEOUT, ApiCall, BOT_SCOPES, Delivery, Posted, Reaction, ReadLimit, SlackFault,
    SocketEvent, Updated,
};

/// Why Slack asks a Socket Mode client to go, in its `disconnect` message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum DisconnectReason {
    /// The connection will close in a few seconds.
    Warning,
    /// Slack refreshes connections now and then: connect again.
    RefreshRequested,
    /// Socket Mode was turned off for the app.
    LinkDisabled,
}

impl DisconnectReason {
    fn as_str(self) -> &'static str {
        match self {
            DisconnectReason::Warning => "warning",
            DisconnectReason::RefreshRequested => "refresh_requested",
            DisconnectReason::LinkDisabled => "link_disabled",
        }
    }
}

/// The tokens the fake accepts.
#[derive(Clone, Debug)]
pub struct Tokens {
    /// The bot token (`xoxb-…`), for every method but `apps.connections.open`.
    pub bot: String,
    /// The app-level token (`xapp-…`), for `apps.connections.open` only.
    pub app: String,
}

impl Default for Tokens {
    fn default() -> Tokens {
        Tokens { bot: FakeSlack::BOT_TOKEN.to_owned(), app: FakeSlack::APP_TOKEN.to_owned() }
    }
}

/// A running fake Slack; clones share it, and it stops when the last is dropped.
#[derive(Clone, Debug)]
pub struct FakeSlack {
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

impl FakeSlack {
    /// The bot token accepted by default.
    pub const BOT_TOKEN: &'static str = "xoxb-fake-slack-token";
    /// The app-level token accepted by default.
    pub const APP_TOKEN: &'static str = "xapp-fake-slack-token";
    /// The workspace's id.
    pub const TEAM_ID: &'static str = "T0FAKETEAM";
    /// The app's id.
    pub const APP_ID: &'static str = "A0FAKEAPP";
    /// The bot user's id (what `<@…>` mentions name).
    pub const BOT_USER: &'static str = "U0FAKEBOT";
    /// The bot's id (`bot_id` on its messages).
    pub const BOT_ID: &'static str = "B0FAKEBOT";
    /// The bot user's name.
    pub const BOT_NAME: &'static str = "herald_test_bot";
    /// The deprecated verification token every payload carries.
    pub const VERIFICATION_TOKEN: &'static str = "fake-verification-token";

    /// Starts a server on `127.0.0.1` with a port chosen by the system and the default tokens.
    ///
    /// # Panics
    /// If no loopback port can be bound, which leaves a test nothing to do.
    pub async fn start() -> FakeSlack {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match FakeSlack::start_with(loopback, Tokens::default()).await {
            Ok(fake) => fake,
            Err(err) => panic!("could not bind a loopback port for the fake slack: {err}"),
        }
    }

    /// Starts a server on `addr` (port 0 picks a free one) with the default tokens.
    pub async fn start_on(addr: SocketAddr) -> io::Result<FakeSlack> {
        FakeSlack::start_with(addr, Tokens::default()).await
    }

    /// Starts a server on `addr` accepting `tokens`.
    pub async fn start_with(addr: SocketAddr, tokens: Tokens) -> io::Result<FakeSlack> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let (postman, commands) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::new(postman, tokens.bot, tokens.app));
        let shutdown = CancellationToken::new();
        let ctx = Ctx {
            shared: shared.clone(),
            socket_url: format!("ws://{}", reachable(addr)),
            shutdown: shutdown.clone(),
        };
        tokio::spawn(postman::run(shared.clone(), commands, shutdown.clone()));
        let task = tokio::spawn(server::serve(listener, ctx));
        let inner = Inner { addr, shared, shutdown, task: Mutex::new(Some(task)) };
        Ok(FakeSlack { inner: Arc::new(inner) })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The Web API base, like `http://127.0.0.1:PORT/api` (slack-morphism's
    /// `with_slack_api_url` takes this, `/api` included).
    pub fn api_url(&self) -> String {
        format!("{}/api", self.base_url())
    }

    /// The server's root, like `http://127.0.0.1:PORT` (the control API is under `/_fake/`).
    pub fn base_url(&self) -> String {
        format!("http://{}", reachable(self.inner.addr))
    }

    /// The DM channel of `user` with the bot in this fake (`U123` → `D123`).
    pub fn dm_channel(user: &str) -> String {
        format!("D{}", user.strip_prefix('U').unwrap_or(user))
    }

    /// Sends `post`'s events (the `message` + `app_mention` pair for a mention in a channel).
    pub fn inject(&self, post: Post) -> Injected {
        self.inner.shared.inject(&post)
    }

    /// A DM from `user`; its `ts`.
    pub fn dm(&self, user: &str, text: &str) -> String {
        self.inject(Post::dm(user, text)).ts
    }

    /// The author's edit of message `ts` in `channel` (`message_changed`); `None` when the fake
    /// knows no such message.
    pub fn edit(&self, channel: &str, ts: &str, text: &str) -> Option<Injected> {
        self.inner.shared.edit(channel, ts, text)
    }

    /// The deletion of message `ts` in `channel` (`message_deleted`); `None` when the fake
    /// knows no such message.
    pub fn delete(&self, channel: &str, ts: &str) -> Option<Injected> {
        self.inner.shared.delete(channel, ts)
    }

    /// Every message the bot posted, in order.
    pub fn posted(&self) -> Vec<Posted> {
        self.inner.shared.lock().posted.clone()
    }

    /// The bot's posts in `channel`, in order.
    pub fn posted_in(&self, channel: &str) -> Vec<Posted> {
        self.posted().into_iter().filter(|p| p.channel == channel).collect()
    }

    /// Waits until the bot has posted at least `n` messages, or `timeout` passed; the posts.
    pub async fn wait_posted(&self, n: usize, timeout: Duration) -> Vec<Posted> {
        self.wait_for(timeout, |fake| fake.inner.shared.lock().posted.len() >= n).await;
        self.posted()
    }

    /// Waits until the bot posted more than `from` messages (or `timeout` passed) and returns
    /// those after the first `from`: following the posts without copying them all each time.
    pub async fn wait_posted_after(&self, from: usize, timeout: Duration) -> Vec<Posted> {
        let more = |fake: &FakeSlack| fake.inner.shared.lock().posted.len() > from;
        self.wait_for(timeout, more).await;
        self.inner.shared.lock().posted.get(from..).map(<[Posted]>::to_vec).unwrap_or_default()
    }

    /// Every `chat.update`, in order.
    pub fn updates(&self) -> Vec<Updated> {
        self.inner.shared.lock().updated.clone()
    }

    /// Every reaction added or removed, in order.
    pub fn reactions(&self) -> Vec<Reaction> {
        self.inner.shared.lock().reactions.clone()
    }

    /// The reactions on message `ts` of `channel` now.
    pub fn reactions_on(&self, channel: &str, ts: &str) -> Vec<String> {
        let mut state = self.inner.shared.lock();
        state.message_mut(channel, ts).map(|m| m.reactions.clone()).unwrap_or_default()
    }

    /// Every Web API call, in order.
    pub fn calls(&self) -> Vec<ApiCall> {
        self.inner.shared.lock().calls.clone()
    }

    /// The calls of `method`, in order.
    pub fn calls_of(&self, method: &str) -> Vec<ApiCall> {
        self.calls().into_iter().filter(|c| c.method == method).collect()
    }

    /// Every envelope sent, with its acknowledgement, in order.
    pub fn deliveries(&self) -> Vec<Delivery> {
        self.inner.shared.lock().deliveries.clone()
    }

    /// Acknowledgements naming an envelope the fake never sent.
    pub fn stray_acks(&self) -> Vec<String> {
        self.inner.shared.lock().stray_acks.clone()
    }

    /// Waits until `done` holds (checked on every record), or `timeout` passed; whether it held.
    pub async fn wait_for(&self, timeout: Duration, done: impl Fn(&FakeSlack) -> bool) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.inner.shared.changed.subscribe();
        loop {
            changes.borrow_and_update();
            if done(self) {
                return true;
            }
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(deadline) => return done(self),
            }
        }
    }

    /// Socket Mode connections open now.
    pub fn open_connections(&self) -> usize {
        self.inner.shared.open.load(Ordering::SeqCst)
    }

    /// Socket Mode connections opened since the start.
    pub fn connections_opened(&self) -> u64 {
        self.inner.shared.lock().connections_opened
    }

    /// The most Socket Mode connections that were open at once (held ones left out).
    pub fn peak_connections(&self) -> usize {
        self.inner.shared.lock().peak
    }

    /// Every Socket Mode connection opened, refused and closed, in order.
    pub fn socket_events(&self) -> Vec<SocketEvent> {
        self.inner.shared.lock().sockets.clone()
    }

    /// Counts `count` connections as held by other processes of the app, against Slack's limit
    /// of [`MAX_CONNECTIONS`] (none by default).
    pub fn hold_connections(&self, count: usize) {
        self.inner.shared.lock().held = count;
        self.inner.shared.bump();
    }

    /// How long an envelope may go unacknowledged before its event is sent again (3 s on Slack),
    /// for envelopes sent from now on.
    pub fn set_ack_timeout(&self, timeout: Duration) {
        self.inner.shared.lock().ack_timeout = timeout;
    }

    /// Whether the bot's own posts and edits come back as `message` events (on by default, as
    /// on Slack).
    pub fn echo_own_posts(&self, echo: bool) {
        self.inner.shared.lock().echo_own_posts = echo;
    }

    /// Answers the next call of `method` with `fault`, after those already queued for it.
    pub fn push_fault(&self, method: &str, fault: SlackFault) {
        self.push_faults(method, fault, 1);
    }

    /// Answers the next `times` calls of `method` with `fault`.
    pub fn push_faults(&self, method: &str, fault: SlackFault, times: usize) {
        let mut state = self.inner.shared.lock();
        let queue = state.faults.entry(method.to_owned()).or_default();
        queue.extend(std::iter::repeat_n(fault, times));
    }

    /// Rate-limits `conversations.history` and `conversations.replies` each to `limit` (Slack's
    /// is [`ReadLimit::TIER_3`]), answering past it with 429 and `Retry-After`; `None` (the
    /// default) answers every call.
    pub fn limit_reads(&self, limit: Option<ReadLimit>) {
        let mut state = self.inner.shared.lock();
        state.read_limit = limit;
        state.reads.clear();
    }

    /// The next `count` Socket Mode connections get a `refresh_requested` disconnect in place
    /// of `hello`, and are closed.
    pub fn refresh_before_hello(&self, count: usize) {
        self.inner.shared.lock().refresh_before_hello = count;
    }

    /// Sends `disconnect` with `reason` on every open connection, which then gets no envelope
    /// and is closed a second later.
    pub fn disconnect(&self, reason: DisconnectReason) {
        let reason = reason.as_str().to_owned();
        self.inner.shared.tell_postman(Command::Everyone(Outbound::Disconnect(reason)));
    }

    /// Drops every open connection without a close frame, as a network failure would.
    pub fn drop_connections(&self) {
        self.inner.shared.tell_postman(Command::Everyone(Outbound::Abort));
    }

    /// Every open connection goes silent: no envelope, no ping, no pong, until the client
    /// closes it.
    pub fn silence(&self) {
        self.inner.shared.tell_postman(Command::Everyone(Outbound::Silence));
    }

    /// While down, every connection, HTTP and Socket Mode, open or new, is dropped unanswered.
    pub fn set_down(&self, down: bool) {
        self.inner.shared.down.send_replace(down);
    }

    /// Down now, and up again after `duration`.
    pub fn down_for(&self, duration: Duration) {
        self.set_down(true);
        server::up_after(self.inner.shared.clone(), self.inner.shutdown.clone(), duration);
    }

    /// The bot token's scopes from now on ([`BOT_SCOPES`], the manifest's, by default).
    pub fn set_scopes(&self, scopes: &[&str]) {
        self.inner.shared.lock().scopes = scopes.iter().map(|s| (*s).to_owned()).collect();
    }

    /// While set, every token is refused with `invalid_auth`, as for a revoked app.
    pub fn set_invalid_auth(&self, invalid: bool) {
        self.inner.shared.lock().invalid_auth = invalid;
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

//! The fake Telegram Bot API: a real HTTP server on loopback that answers `POST
//! /bot<TOKEN>/<Method>` like `api.telegram.org`, for the real teloxide client
//! (`Bot::new(FakeTelegram::TOKEN).set_api_url(url)`).
//!
//! It serves `getMe`, `setWebhook`, `getWebhookInfo`, `deleteWebhook`, `getUpdates` (long
//! polling, `offset` confirming; 409 while a webhook is set), `sendMessage`, `editMessageText`, `sendChatAction`, `setMyCommands` and
//! `getMyCommands`, with methods matched case-insensitively and parameters read from JSON, form
//! or query. Another token gets 401 `Unauthorized`, another method 404 `Not Found`. Tests queue
//! what users say ([`FakeTelegram::inject`], or [`FakeTelegram::inject_raw`] for updates no
//! well-formed message can make), read what the bot did ([`FakeTelegram::sent`],
//! [`FakeTelegram::requests`]) and inject failures ([`FakeTelegram::push_fault`],
//! [`FakeTelegram::set_offline`]); a queued fault answers the call before any check of it.
//!
//! The same controls over HTTP, for the `herald-fake-telegram` binary:
//! - `POST /_fake/messages` with a [`UserMessage`] (`{"user_id": 1, "text": "hi"}` is a DM; add
//!   `chat_id`, `chat_kind`, `thread_id`, `username`, `first_name`, `mention`, `reply_to_bot`)
//!   → `{"update_id": N}`; `POST /_fake/redeliver {"update_id": N}` → `{"update_id": M}`
//! - `POST /_fake/raw_messages` with the JSON text of an update's `message` as the body, kept
//!   byte for byte (`"text":"hi \ud83d"`, a lone surrogate) → `{"update_id": N}`, or 400 when
//!   the body is not one JSON object
//! - `GET /_fake/sent` (`?chat_id=N` for one chat), `/_fake/edits`, `/_fake/chat_actions`,
//!   `/_fake/requests`, `/_fake/offsets`, `/_fake/pending`
//! - `POST /_fake/fault {"method": "sendMessage", "fault": {"kind": "too_many_requests",
//!   "retry_after": 2}}` (see [`TelegramFault`] for the others)
//! - `POST /_fake/offline {"offline": true}`, `/_fake/reject_markup {"reject": true}`,
//!   `/_fake/webhook {"url": "https://..."}` (or `null`), `/_fake/reset`
//! - `POST /_fake/repeat {"update_id": N}` queues update N again under the same id;
//!   `GET /_fake/webhook` → the webhook's URL, the pending updates, and those delivered
//!
//! While a webhook is set, queued updates are POSTed to it (see [`webhook`]) when it is on
//! loopback.
//!
//! The control API keeps answering while the Bot API is offline.

mod control;
mod faults;
mod inbound;
mod methods;
mod params;
mod records;
mod server;
mod state;
mod user;
mod webhook;
mod wire;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::TelegramFault;
pub use records::{EditedMessage, RecordedRequest, SentMessage};
use state::Shared;
pub use user::{ChatKind, UserMessage};

/// A running fake Bot API; clones share it, and it stops when the last is dropped.
#[derive(Clone, Debug)]
pub struct FakeTelegram {
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

impl FakeTelegram {
    /// The only token the fake accepts.
    pub const TOKEN: &'static str = "123456:fake-telegram-token";
    /// The bot's user id.
    pub const BOT_ID: i64 = 1000;
    /// The bot's username, without the `@`.
    pub const BOT_USERNAME: &'static str = "herald_test_bot";

    /// Starts a server on `127.0.0.1` with a port chosen by the system.
    ///
    /// # Panics
    /// If no loopback port can be bound, which leaves a test nothing to do.
    pub async fn start() -> FakeTelegram {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match FakeTelegram::start_on(loopback).await {
            Ok(fake) => fake,
            Err(err) => panic!("could not bind a loopback port for the fake telegram: {err}"),
        }
    }

    /// Starts a server on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr) -> io::Result<FakeTelegram> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server::serve(listener, shared.clone(), shutdown.clone()));
        let inner = Inner { addr, shared, shutdown, task: Mutex::new(Some(task)) };
        Ok(FakeTelegram { inner: Arc::new(inner) })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// The base URL for teloxide's `set_api_url`, like `http://127.0.0.1:PORT`.
    pub fn api_url(&self) -> String {
        let mut addr = self.inner.addr;
        if addr.ip().is_unspecified() {
            // Listening on every interface: loopback is the one address sure to reach it.
            addr.set_ip(Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{addr}")
    }

    /// Queues an update with this message; its `update_id`.
    pub fn inject(&self, msg: UserMessage) -> i64 {
        self.shared().queue(|state| state.inject(&msg))
    }

    /// Queues an update whose `message` is this JSON text, byte for byte, even when it is not
    /// valid Unicode (`"text":"hi \ud83d"`) or not a valid message; its `update_id`.
    ///
    /// # Panics
    /// If `message` is not one JSON object, which is a mistake in the test.
    pub fn inject_raw(&self, message: &str) -> i64 {
        match self.shared().queue(|state| state.inject_raw(message)) {
            Ok(id) => id,
            Err(err) => panic!("cannot queue this raw message: {err}"),
        }
    }

    /// Queues a direct message from `user_id` (in the private chat of the same id).
    pub fn dm(&self, user_id: i64, text: &str) -> i64 {
        self.inject(UserMessage::dm(user_id, text))
    }

    /// Queues the message of update `update_id` again under a new update id, as Telegram does
    /// when it redelivers; the new id.
    ///
    /// # Panics
    /// If no update `update_id` was ever queued, which is a mistake in the test.
    pub fn redeliver(&self, update_id: i64) -> i64 {
        match self.shared().queue(|state| state.redeliver(update_id)) {
            Some(id) => id,
            None => panic!("no update {update_id} was ever queued by this fake telegram"),
        }
    }

    /// Every message the bot sent, in order.
    pub fn sent(&self) -> Vec<SentMessage> {
        self.shared().lock().sent.clone()
    }

    /// The messages the bot sent to `chat_id`, in order.
    pub fn sent_to(&self, chat_id: i64) -> Vec<SentMessage> {
        self.shared().lock().sent.iter().filter(|m| m.chat_id == chat_id).cloned().collect()
    }

    /// Waits until the bot has sent at least `n` messages, or `timeout` passed; what was sent.
    pub async fn wait_sent(&self, n: usize, timeout: Duration) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        // Subscribed before the first look, so a send after it still wakes us.
        let mut sends = self.shared().sent.subscribe();
        loop {
            {
                let state = self.shared().lock();
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

    /// Waits until the bot sent more than `from` messages (or `timeout` passed) and returns
    /// those after the first `from`: a cheap way to follow the sends as they happen.
    pub async fn wait_sent_after(&self, from: usize, timeout: Duration) -> Vec<SentMessage> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut sends = self.shared().sent.subscribe();
        loop {
            {
                let state = self.shared().lock();
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

    /// Every successful `editMessageText`, in order.
    pub fn edits(&self) -> Vec<EditedMessage> {
        self.shared().lock().edits.clone()
    }

    /// Every `sendChatAction`, as (chat id, action like `typing`).
    pub fn chat_actions(&self) -> Vec<(i64, String)> {
        self.shared().lock().actions.clone()
    }

    /// Every Bot API call received, in order, including failed and faulted ones.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared().lock().requests.clone()
    }

    /// The `offset` of every `getUpdates` call, in order.
    pub fn get_updates_offsets(&self) -> Vec<Option<i64>> {
        self.shared().lock().offsets.clone()
    }

    /// How many updates no `offset` has confirmed yet.
    pub fn pending_updates(&self) -> usize {
        self.shared().lock().pending()
    }

    /// Answers the next call of `method` (any case, like `sendMessage`) with `fault`, after the
    /// faults already queued for it.
    pub fn push_fault(&self, method: &str, fault: TelegramFault) {
        let mut state = self.shared().lock();
        state.faults.entry(method.to_ascii_lowercase()).or_default().push_back(fault);
    }

    /// Drops every fault still queued.
    pub fn clear_faults(&self) {
        self.shared().lock().faults.clear();
    }

    /// While offline, every Bot API request (held long polls too) ends without a response.
    pub fn set_offline(&self, offline: bool) {
        self.shared().offline.send_replace(offline);
    }

    /// While on, `sendMessage` and `editMessageText` with a `parse_mode` get 400 `can't parse
    /// entities`.
    pub fn reject_markup(&self, reject: bool) {
        self.shared().lock().reject_markup = reject;
    }

    /// Sets the webhook as `setWebhook` would, unchecked and without a secret token; while one
    /// is set `getUpdates` gets 409, and `deleteWebhook` clears it. Updates are posted to it
    /// only when it is on loopback.
    pub fn set_webhook(&self, url: Option<String>) {
        self.shared().queue(|state| state.webhook = url.map(state::Webhook::unchecked));
    }

    /// The webhook URL set, if any.
    pub fn webhook_url(&self) -> Option<String> {
        self.shared().lock().webhook.as_ref().map(|w| w.url.clone())
    }

    /// The `secret_token` of the webhook set, if any.
    pub fn webhook_secret(&self) -> Option<String> {
        self.shared().lock().webhook.as_ref().and_then(|w| w.secret.clone())
    }

    /// The updates the webhook answered 2xx, in the order it did.
    pub fn webhook_delivered(&self) -> Vec<i64> {
        self.shared().lock().delivered.clone()
    }

    /// Every post to the webhook: the update and the HTTP status (`None`: no answer).
    pub fn webhook_posts(&self) -> Vec<(i64, Option<u16>)> {
        self.shared().lock().posts.clone()
    }

    /// Waits until the webhook answered 2xx for at least `n` updates, or `timeout` passed; the
    /// updates it did.
    pub async fn wait_delivered(&self, n: usize, timeout: Duration) -> Vec<i64> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.shared().updates.subscribe();
        loop {
            {
                let state = self.shared().lock();
                if state.delivered.len() >= n || tokio::time::Instant::now() >= deadline {
                    return state.delivered.clone();
                }
            }
            tokio::select! {
                _ = changes.changed() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
        }
    }

    /// Queues update `update_id` again under the same id, as Telegram does when it is not sure
    /// the first copy arrived.
    ///
    /// # Panics
    /// If no update `update_id` was ever queued, which is a mistake in the test.
    pub fn repeat(&self, update_id: i64) {
        if !self.shared().queue(|state| state.repeat(update_id)) {
            panic!("no update {update_id} was ever queued by this fake telegram");
        }
    }

    /// Forgets sent and edited messages, chat actions, requests and offsets (not the updates).
    pub fn reset_records(&self) {
        self.shared().lock().reset_records();
    }

    /// Stops the server (for every clone) and waits until it no longer accepts connections.
    pub async fn shutdown(&self) {
        self.inner.shutdown.cancel();
        let task = self.inner.task.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(task) = task {
            // A panicking server task has nothing left to clean up.
            let _ = task.await;
        }
    }

    fn shared(&self) -> &Shared {
        &self.inner.shared
    }
}

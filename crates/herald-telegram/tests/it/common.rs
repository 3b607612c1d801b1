//! A running adapter wired to channels, and helpers that wait for what it reports.

use std::time::Duration;

use herald_core::{
    Adapter, AdapterContext, AdapterError, AdapterEvent, ChatRef, Inbound, Outbound, Platform,
    SendError, SentId,
};
use herald_fakes::telegram::FakeTelegram;
use herald_telegram::{TelegramAdapter, TelegramSettings};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// The longest any single expectation waits.
pub const WAIT: Duration = Duration::from_secs(5);

/// Settings for the fake: short polls and short backoff, so recovery is quick.
pub fn settings(fake: &FakeTelegram) -> TelegramSettings {
    let mut settings = TelegramSettings::new(FakeTelegram::TOKEN, fake.api_url());
    settings.poll_timeout = Duration::from_secs(1);
    settings.max_backoff = Duration::from_millis(500);
    settings
}

/// The DM chat of `user` as the gateway names it.
pub fn dm(user: i64) -> ChatRef {
    ChatRef::direct(Platform::Telegram, user.to_string())
}

/// An adapter running against a fake.
pub struct Running {
    pub events: mpsc::Receiver<AdapterEvent>,
    pub outbound: Option<mpsc::Sender<Outbound>>,
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), AdapterError>>,
}

impl Running {
    /// Starts the adapter with `settings`, resuming from `cursor`.
    pub fn start(settings: TelegramSettings, cursor: Option<String>) -> Running {
        Running::start_with(settings, cursor, herald_core::Claims::solo())
    }

    /// Starts the adapter with `settings` and `claims`, resuming from `cursor`.
    pub fn start_with(
        settings: TelegramSettings,
        cursor: Option<String>,
        claims: herald_core::Claims,
    ) -> Running {
        let (events_tx, events) = mpsc::channel(64);
        let (outbound_tx, outbound_rx) = mpsc::channel(64);
        let shutdown = CancellationToken::new();
        let ctx = AdapterContext {
            events: events_tx,
            outbound: outbound_rx,
            cursor,
            channel_cursors: Default::default(),
            kept: Default::default(),
            claims,
            positions: herald_core::Positions::default(),
        };
        let task = tokio::spawn(TelegramAdapter::new(settings).run(ctx, shutdown.clone()));
        Running { events, outbound: Some(outbound_tx), shutdown, task }
    }

    /// Starts against `fake` and waits until it is connected.
    pub async fn connected(fake: &FakeTelegram, cursor: Option<String>) -> Running {
        let mut running = Running::start(settings(fake), cursor);
        running.wait_connected().await;
        running
    }

    /// The next event.
    pub async fn event(&mut self) -> AdapterEvent {
        tokio::time::timeout(WAIT, self.events.recv())
            .await
            .expect("an adapter event within the wait")
            .expect("the adapter keeps its event sender while running")
    }

    /// Skips events until `pick` takes one.
    pub async fn until<T>(&mut self, mut pick: impl FnMut(AdapterEvent) -> Option<T>) -> T {
        loop {
            if let Some(found) = pick(self.event().await) {
                return found;
            }
        }
    }

    /// Waits for `Connected` and returns the bot's name.
    pub async fn wait_connected(&mut self) -> String {
        self.until(|e| match e {
            AdapterEvent::Connected { bot } => Some(bot),
            _ => None,
        })
        .await
    }

    /// Waits for the next inbound message.
    pub async fn inbound(&mut self) -> Inbound {
        self.until(|e| match e {
            AdapterEvent::Inbound(inbound) => Some(inbound),
            _ => None,
        })
        .await
    }

    /// Waits for the next cursor.
    pub async fn cursor(&mut self) -> String {
        self.until(|e| match e {
            AdapterEvent::Cursor(cursor) => Some(cursor),
            _ => None,
        })
        .await
    }

    /// Sends an outbound request without waiting for it.
    pub async fn request(&self, request: Outbound) {
        self.outbound.as_ref().unwrap().send(request).await.unwrap();
    }

    /// Queues a reply and returns where its result arrives.
    pub async fn queue(
        &self,
        chat: ChatRef,
        text: &str,
        reply_to: Option<&str>,
    ) -> oneshot::Receiver<Result<Vec<SentId>, SendError>> {
        let (done, result) = oneshot::channel();
        let text = text.to_owned();
        let reply_to = reply_to.map(str::to_owned);
        self.request(Outbound::Send {
            chat,
            text,
            reply_to,
            answers: None,
            track: None,
            done: Some(done),
        })
        .await;
        result
    }

    /// Sends a reply and waits for its result.
    pub async fn send(&self, chat: ChatRef, text: &str) -> Result<Vec<SentId>, SendError> {
        let result = self.queue(chat, text, None).await;
        tokio::time::timeout(WAIT, result).await.expect("the send finishes").unwrap()
    }

    /// Shuts down, closes the outbound channel, and returns what `run` returned.
    pub async fn stop(mut self) -> Result<(), AdapterError> {
        self.shutdown.cancel();
        self.outbound = None;
        tokio::time::timeout(WAIT, self.task).await.expect("the adapter stops").unwrap()
    }
}

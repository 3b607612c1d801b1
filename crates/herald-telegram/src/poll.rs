//! Long polling: `getUpdates` in a loop whose offset moves only past settled updates.
//!
//! Telegram forgets every update below the offset of a `getUpdates` call, so the offset is the
//! adapter's only promise: it advances to `id + 1` of the last update in the longest settled
//! prefix of a batch, and to nothing further. An ack dropped unsettled stops the prefix there,
//! and that update is fetched again. An update that cannot be read even after repair (see
//! [`crate::salvage`]) is logged by id and counts as settled: fetching it again cannot help.

use std::time::Duration;

use herald_core::{Ack, AdapterError, AdapterEvent, Platform, backoff};
use teloxide::Bot;
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::Requester;
use teloxide::types::{AllowedUpdate, Update, UpdateKind};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::TelegramSettings;
use crate::error::Failure;
use crate::inbound::{self, BotIdentity};
use crate::salvage;

/// Where to look when Telegram refuses the token.
const TOKEN_HINT: &str = "TELEGRAM_BOT_TOKEN (or the variable named by telegram.token_env)";

/// The polling half of the adapter.
pub(crate) struct Poller {
    bot: Bot,
    token: String,
    poll_timeout: u32,
    max_backoff: Duration,
    events: mpsc::Sender<AdapterEvent>,
    shutdown: CancellationToken,
}

/// What became of one batch of updates.
enum Batch {
    /// Every update was settled or skipped: poll from this offset.
    Settled(Option<i32>),
    /// An ack was dropped: poll again from this offset, which re-fetches that update.
    Redeliver(Option<i32>),
    /// Shutdown, or nobody listens to the events any more.
    Stopped,
}

impl Poller {
    /// A poller that reports through `events` until `shutdown` is cancelled.
    pub(crate) fn new(
        bot: Bot,
        settings: &TelegramSettings,
        events: mpsc::Sender<AdapterEvent>,
        shutdown: CancellationToken,
    ) -> Self {
        Poller {
            bot,
            token: settings.token.clone(),
            poll_timeout: u32::try_from(settings.poll_timeout.as_secs()).unwrap_or(u32::MAX),
            max_backoff: settings.max_backoff,
            events,
            shutdown,
        }
    }

    /// Connects, then polls from `cursor` until shutdown; fails only on a refused token.
    pub(crate) async fn run(self, cursor: Option<String>) -> Result<(), AdapterError> {
        let Some(me) = self.connect().await? else {
            return Ok(());
        };
        let mut offset = parse_cursor(cursor);
        let mut failures = 0u32;
        let mut redeliveries = 0u32;
        loop {
            // After a failure poll without waiting, so recovery is reported at once.
            let timeout = if failures == 0 { self.poll_timeout } else { 0 };
            let mut request =
                self.bot.get_updates().timeout(timeout).allowed_updates([AllowedUpdate::Message]);
            if let Some(offset) = offset {
                request = request.offset(offset);
            }
            let result = tokio::select! {
                _ = self.shutdown.cancelled() => break,
                result = request => result,
            };
            // A batch teloxide cannot read is read again here, so that one bad update is skipped
            // instead of stalling the offset for everyone.
            let updates = match result.or_else(salvage::batch) {
                Ok(updates) => updates,
                Err(err) => match Failure::classify(&err, &self.token) {
                    Failure::Unauthorized(detail) => return Err(unauthorized(detail)),
                    failure => {
                        if failure == Failure::WebhookSet {
                            self.delete_webhook().await;
                        }
                        let delay = backoff(failures, failure.retry_after(), self.max_backoff);
                        failures = failures.saturating_add(1);
                        if !self.retry(&failure, delay).await {
                            break;
                        }
                        continue;
                    }
                },
            };
            if failures > 0 {
                failures = 0;
                info!(bot = %me.username, "telegram polling recovered");
                if !self.emit(AdapterEvent::Connected { bot: me.username.clone() }).await {
                    break;
                }
            }
            match self.deliver(updates, &me, offset).await {
                Batch::Settled(next) => {
                    redeliveries = 0;
                    offset = next;
                }
                Batch::Redeliver(next) => {
                    offset = next;
                    let delay = backoff(redeliveries, None, self.max_backoff);
                    redeliveries = redeliveries.saturating_add(1);
                    if !self.sleep(delay).await {
                        break;
                    }
                }
                Batch::Stopped => break,
            }
        }
        info!("telegram polling stopped");
        Ok(())
    }

    /// `getMe`, then removes a webhook if one is set; `None` on shutdown.
    async fn connect(&self) -> Result<Option<BotIdentity>, AdapterError> {
        let mut attempt = 0u32;
        loop {
            let step = async {
                let me = self.bot.get_me().await?;
                if self.bot.get_webhook_info().await?.url.is_some() {
                    warn!("a webhook is set for this bot; deleting it so long polling can work");
                    self.bot.delete_webhook().await?;
                }
                Ok(me)
            };
            let result = tokio::select! {
                _ = self.shutdown.cancelled() => return Ok(None),
                result = step => result,
            };
            match result {
                Ok(me) => {
                    let me = BotIdentity {
                        id: me.user.id.0,
                        username: me.user.username.clone().unwrap_or_default(),
                    };
                    info!(bot = %me.username, "telegram adapter connected");
                    let connected = AdapterEvent::Connected { bot: me.username.clone() };
                    return Ok(self.emit(connected).await.then_some(me));
                }
                Err(err) => match Failure::classify(&err, &self.token) {
                    Failure::Unauthorized(detail) => return Err(unauthorized(detail)),
                    failure => {
                        let delay = backoff(attempt, failure.retry_after(), self.max_backoff);
                        attempt = attempt.saturating_add(1);
                        if !self.retry(&failure, delay).await {
                            return Ok(None);
                        }
                    }
                },
            }
        }
    }

    /// Removes a webhook set while polling (long polling and a webhook exclude each other).
    async fn delete_webhook(&self) {
        warn!("a webhook was set for this bot while polling; deleting it");
        let result = tokio::select! {
            _ = self.shutdown.cancelled() => return,
            result = self.bot.delete_webhook() => result,
        };
        if let Err(err) = result {
            let reason = Failure::classify(&err, &self.token).reason();
            debug!("could not delete the webhook: {reason}");
        }
    }

    /// Hands the batch to the gateway and waits for its acks; see the module doc.
    async fn deliver(&self, updates: Vec<Update>, me: &BotIdentity, offset: Option<i32>) -> Batch {
        let mut waiting: Vec<(i32, Option<oneshot::Receiver<()>>)> = Vec::new();
        for update in &updates {
            let id = i32::try_from(update.id.0).unwrap_or(i32::MAX);
            if matches!(update.kind, UpdateKind::Error(_)) {
                // Only the id: the body is the user's and may hold anything.
                warn!(update = id, "telegram update skipped: it could not be read");
                waiting.push((id, None));
                continue;
            }
            let Some(mut message) = inbound::inbound(update, me) else {
                debug!(update = id, "update skipped: not a message for the bot");
                waiting.push((id, None));
                continue;
            };
            let (ack, settled) = Ack::new();
            message.ack = ack;
            debug!(update = id, chat = %message.chat.id, text = %message.text, "message received");
            if !self.emit(AdapterEvent::Inbound(message)).await {
                return Batch::Stopped;
            }
            waiting.push((id, Some(settled)));
        }

        let mut next = offset;
        let mut dropped = None;
        // Every ack is awaited, even past a dropped one, so that a redelivered update never
        // races its first copy through the gateway.
        for (id, settled) in waiting {
            let kept = match settled {
                None => true,
                Some(settled) => tokio::select! {
                    _ = self.shutdown.cancelled() => {
                        // Settled updates before this one are safe to confirm; the rest are not.
                        if let Some(next) = next && Some(next) != offset {
                            let _ = self.events.try_send(AdapterEvent::Cursor(next.to_string()));
                        }
                        return Batch::Stopped;
                    }
                    result = settled => result.is_ok(),
                },
            };
            if !kept && dropped.is_none() {
                warn!(update = id, "the gateway could not keep a message; fetching it again");
                dropped = Some(id);
            }
            if kept && dropped.is_none() {
                next = Some(id.saturating_add(1));
            }
        }
        if let Some(next) = next
            && Some(next) != offset
            && !self.emit(AdapterEvent::Cursor(next.to_string())).await
        {
            return Batch::Stopped;
        }
        match dropped {
            Some(_) => Batch::Redeliver(next),
            None => Batch::Settled(next),
        }
    }

    /// Reports a failed call, then waits `delay`; `false` on shutdown.
    async fn retry(&self, failure: &Failure, delay: Duration) -> bool {
        let error = failure.reason();
        warn!(retry_in_ms = delay.as_millis(), "telegram: {error}; retrying");
        self.emit(AdapterEvent::Retrying { error, retry_in: delay }).await
            && self.sleep(delay).await
    }

    /// Waits `delay`; `false` on shutdown.
    async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    /// Sends an event to the gateway; `false` on shutdown or when nobody listens.
    async fn emit(&self, event: AdapterEvent) -> bool {
        tokio::select! {
            // Sending first: the last cursor of a stopping adapter still goes out when there
            // is room, and only a full channel gives way to the shutdown.
            biased;
            sent = self.events.send(event) => sent.is_ok(),
            _ = self.shutdown.cancelled() => false,
        }
    }
}

fn unauthorized(detail: String) -> AdapterError {
    AdapterError::Unauthorized { platform: Platform::Telegram, detail, hint: TOKEN_HINT.into() }
}

/// The offset stored by an earlier run; a cursor that is not one is logged and ignored.
fn parse_cursor(cursor: Option<String>) -> Option<i32> {
    let cursor = cursor?;
    match cursor.trim().parse::<i64>().ok().and_then(|o| i32::try_from(o).ok()) {
        Some(offset) => Some(offset),
        None => {
            warn!(%cursor, "ignoring a stored telegram cursor that is not an update offset");
            None
        }
    }
}

//! Long polling: `getUpdates` in a loop whose offset moves only past settled updates.
//!
//! Telegram forgets every update below the offset of a `getUpdates` call, so the offset is the
//! adapter's only promise: it advances to `id + 1` of the last update in the longest settled
//! prefix of a batch, and to nothing further. An ack dropped unsettled stops the prefix there,
//! and that update is fetched again. An update that cannot be read even after repair (see
//! [`crate::salvage`]) is logged by id and counts as settled: fetching it again cannot help.

use std::time::Duration;

use herald_core::{Ack, AdapterError, AdapterEvent, Claim, Claims, backoff};
use teloxide::payloads::GetUpdatesSetters;
use teloxide::requests::Requester;
use teloxide::types::{AllowedUpdate, Update, UpdateKind};
use tokio::sync::oneshot;
use tracing::{debug, info, warn};

use crate::error::Failure;
use crate::inbound::{self, BotIdentity};
use crate::link::{Link, unauthorized};
use crate::salvage;

/// The claim a replica holds while it polls: Telegram serves `getUpdates` to one client only.
pub(crate) const POLLER_CLAIM: &str = "telegram:poller";

/// What the log says when another replica takes over polling.
const LOST: &str = "another replica polls telegram now; this one still sends, and polls again \
                    when it holds the telegram:poller claim";

/// The polling half of the adapter.
pub(crate) struct Poller {
    link: Link,
    poll_timeout: u32,
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

/// Why polling under one claim ended.
enum Polled {
    /// Shutdown, or nobody listens to the events any more.
    Stopped,
    /// Another replica may poll now.
    Lost,
    /// Telegram refused the token.
    Refused(String),
}

impl Poller {
    /// A poller over `link`, whose long polls wait `poll_timeout`.
    pub(crate) fn new(link: Link, poll_timeout: Duration) -> Self {
        Poller { link, poll_timeout: u32::try_from(poll_timeout.as_secs()).unwrap_or(u32::MAX) }
    }

    /// Connects, then polls from `cursor` whenever this replica holds the poller claim, until
    /// shutdown; fails only on a refused token.
    pub(crate) async fn run(
        self,
        cursor: Option<String>,
        claims: Claims,
    ) -> Result<(), AdapterError> {
        let Some(me) = self.link.connect(true).await? else {
            return Ok(());
        };
        let mut offset = parse_cursor(cursor);
        loop {
            let claim = tokio::select! {
                _ = self.link.shutdown.cancelled() => break,
                claim = claims.hold(POLLER_CLAIM) => claim,
            };
            info!(bot = %me.username, "telegram polling: this replica holds the poller claim");
            // A poller that lost its claim keeps its offset: below what the next poller
            // confirmed it is harmless (Telegram forgot those updates), and it is never above.
            match self.poll(&me, &mut offset, &claim).await {
                Polled::Stopped => break,
                Polled::Refused(detail) => return Err(unauthorized(detail)),
                Polled::Lost => {
                    // Health follows what this replica does now: it sends, as a replica that
                    // never polled does, so it stays connected. A store that cannot be reached
                    // (what loses a claim) is reported as the store's own failure.
                    info!("telegram polling paused: {LOST}");
                    if !self.link.emit(AdapterEvent::Connected { bot: me.username.clone() }).await {
                        break;
                    }
                }
            }
        }
        info!("telegram polling stopped");
        Ok(())
    }

    /// Polls while `claim` is held.
    async fn poll(&self, me: &BotIdentity, offset: &mut Option<i32>, claim: &Claim) -> Polled {
        let link = &self.link;
        let mut failures = 0u32;
        let mut redeliveries = 0u32;
        loop {
            if claim.is_lost() {
                return Polled::Lost;
            }
            // After a failure poll without waiting, so recovery is reported at once.
            let timeout = if failures == 0 { self.poll_timeout } else { 0 };
            let mut request =
                link.bot.get_updates().timeout(timeout).allowed_updates([AllowedUpdate::Message]);
            if let Some(offset) = *offset {
                request = request.offset(offset);
            }
            let result = tokio::select! {
                _ = link.shutdown.cancelled() => return Polled::Stopped,
                // Dropped unanswered: whatever it would have fetched stays unconfirmed, and
                // the next poller gets it.
                () = claim.lost() => return Polled::Lost,
                result = request => result,
            };
            // A batch teloxide cannot read is read again here, so that one bad update is skipped
            // instead of stalling the offset for everyone.
            let updates = match result.or_else(salvage::batch) {
                Ok(updates) => updates,
                Err(err) => match Failure::classify(&err, &link.token) {
                    Failure::Unauthorized(detail) => return Polled::Refused(detail),
                    failure => {
                        if failure == Failure::WebhookSet {
                            self.delete_webhook().await;
                        }
                        let delay = backoff(failures, failure.retry_after(), link.max_backoff);
                        failures = failures.saturating_add(1);
                        if !link.retry(&failure.reason(), delay).await {
                            return Polled::Stopped;
                        }
                        continue;
                    }
                },
            };
            if failures > 0 {
                failures = 0;
                info!(bot = %me.username, "telegram polling recovered");
                if !link.emit(AdapterEvent::Connected { bot: me.username.clone() }).await {
                    return Polled::Stopped;
                }
            }
            match self.deliver(updates, me, *offset).await {
                Batch::Settled(next) => {
                    redeliveries = 0;
                    *offset = next;
                }
                Batch::Redeliver(next) => {
                    *offset = next;
                    let delay = backoff(redeliveries, None, link.max_backoff);
                    redeliveries = redeliveries.saturating_add(1);
                    if !link.sleep(delay).await {
                        return Polled::Stopped;
                    }
                }
                Batch::Stopped => return Polled::Stopped,
            }
        }
    }

    /// Removes a webhook set while polling (long polling and a webhook exclude each other).
    async fn delete_webhook(&self) {
        warn!("a webhook was set for this bot while polling; deleting it");
        let result = tokio::select! {
            _ = self.link.shutdown.cancelled() => return,
            result = self.link.bot.delete_webhook() => result,
        };
        if let Err(err) = result {
            let reason = Failure::classify(&err, &self.link.token).reason();
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
            if !self.link.emit(AdapterEvent::Inbound(message)).await {
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
                    _ = self.link.shutdown.cancelled() => {
                        // Settled updates before this one are safe to confirm; the rest are not.
                        if let Some(next) = next && Some(next) != offset {
                            let _ = self.link.events.try_send(AdapterEvent::Cursor(next.to_string()));
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
            && !self.link.emit(AdapterEvent::Cursor(next.to_string())).await
        {
            return Batch::Stopped;
        }
        match dropped {
            Some(_) => Batch::Redeliver(next),
            None => Batch::Settled(next),
        }
    }
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

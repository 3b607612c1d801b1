//! What the poller and the webhook share: `getMe` with retries, and reporting to the gateway.

use std::time::Duration;

use herald_core::{AdapterError, AdapterEvent, Platform, backoff};
use teloxide::Bot;
use teloxide::requests::Requester;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::TelegramSettings;
use crate::error::Failure;
use crate::inbound::BotIdentity;

/// Where to look when Telegram refuses the token.
const TOKEN_HINT: &str = "TELEGRAM_BOT_TOKEN (or the variable named by telegram.token_env)";

/// One way of receiving updates, talking to Telegram and to the gateway.
pub(crate) struct Link {
    pub(crate) bot: Bot,
    pub(crate) token: String,
    pub(crate) max_backoff: Duration,
    pub(crate) events: mpsc::Sender<AdapterEvent>,
    pub(crate) shutdown: CancellationToken,
}

impl Link {
    /// A link that reports through `events` until `shutdown` is cancelled.
    pub(crate) fn new(
        bot: Bot,
        settings: &TelegramSettings,
        events: mpsc::Sender<AdapterEvent>,
        shutdown: CancellationToken,
    ) -> Link {
        Link {
            bot,
            token: settings.token.clone(),
            max_backoff: settings.max_backoff,
            events,
            shutdown,
        }
    }

    /// Calls `getMe` until it answers, then `removing_webhook` when polling; `None` on shutdown.
    pub(crate) async fn connect(
        &self,
        removing_webhook: bool,
    ) -> Result<Option<BotIdentity>, AdapterError> {
        let mut attempt = 0u32;
        loop {
            let step = async {
                let me = self.bot.get_me().await?;
                // Polling and a webhook exclude each other. Pending updates are kept, so a bot
                // moved back from webhooks loses nothing.
                if removing_webhook && self.bot.get_webhook_info().await?.url.is_some() {
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
                        if !self.retry(&failure.reason(), delay).await {
                            return Ok(None);
                        }
                    }
                },
            }
        }
    }

    /// Reports a failed call, then waits `delay`; `false` on shutdown.
    pub(crate) async fn retry(&self, error: &str, delay: Duration) -> bool {
        warn!(retry_in_ms = delay.as_millis(), "telegram: {error}; retrying");
        let event = AdapterEvent::Retrying { error: error.to_owned(), retry_in: delay };
        self.emit(event).await && self.sleep(delay).await
    }

    /// Waits `delay`; `false` on shutdown.
    pub(crate) async fn sleep(&self, delay: Duration) -> bool {
        tokio::select! {
            _ = self.shutdown.cancelled() => false,
            () = tokio::time::sleep(delay) => true,
        }
    }

    /// Sends an event to the gateway; `false` on shutdown or when nobody listens.
    pub(crate) async fn emit(&self, event: AdapterEvent) -> bool {
        tokio::select! {
            // Sending first: the last cursor of a stopping adapter still goes out when there
            // is room, and only a full channel gives way to the shutdown.
            biased;
            sent = self.events.send(event) => sent.is_ok(),
            _ = self.shutdown.cancelled() => false,
        }
    }
}

/// The error for a token Telegram refuses.
pub(crate) fn unauthorized(detail: String) -> AdapterError {
    AdapterError::Unauthorized { platform: Platform::Telegram, detail, hint: TOKEN_HINT.into() }
}

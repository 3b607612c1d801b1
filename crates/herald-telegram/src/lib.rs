//! herald's Telegram adapter: long polling with an offset that only moves past settled messages
//! (by one replica at a time, the holder of the `telegram:poller` claim), or a webhook that
//! answers each update only once it is settled; replies converted to Telegram HTML, split to 4096
//! UTF-16 units.
//!
//! Depends only on herald-core; no teloxide type leaves this crate. The bot token is a secret: it
//! is never logged and is scrubbed from every error text before that text leaves the crate.

mod adapter;
mod error;
mod inbound;
mod link;
mod markup;
mod poll;
mod salvage;
mod send;
mod split;
mod webhook;

use std::time::Duration;

use herald_core::{Adapter, AdapterContext, AdapterError, Capabilities, Platform, ReplyStyle};
use tokio_util::sync::CancellationToken;

pub use markup::{escape_html, to_telegram_html};
pub use webhook::{MAX_CONNECTIONS, WebhookSettings, derived_secret, is_valid_secret};

/// The longest message Telegram accepts, in UTF-16 code units.
pub const MAX_MESSAGE_LEN: usize = 4096;

/// How the adapter reaches Telegram and how hard it tries.
#[derive(Clone)]
pub struct TelegramSettings {
    /// The bot token from @BotFather (a secret).
    pub token: String,
    /// The Bot API base URL, `https://api.telegram.org` unless testing.
    pub api_url: String,
    /// How long one `getUpdates` long poll waits for messages.
    pub poll_timeout: Duration,
    /// How many times one message is tried before the send fails.
    pub send_attempts: u32,
    /// The longest wait between two retries.
    pub max_backoff: Duration,
    /// Receive updates through this webhook instead of long polling.
    pub webhook: Option<WebhookSettings>,
}

impl TelegramSettings {
    /// Settings with the defaults: 25 s long polls, 5 send attempts, backoff capped at 30 s.
    pub fn new(token: impl Into<String>, api_url: impl Into<String>) -> Self {
        TelegramSettings {
            token: token.into(),
            api_url: api_url.into(),
            poll_timeout: Duration::from_secs(25),
            send_attempts: 5,
            max_backoff: Duration::from_secs(30),
            webhook: None,
        }
    }
}

// Hand-written so that the token never reaches a log through `{:?}`.
impl std::fmt::Debug for TelegramSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TelegramSettings")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("poll_timeout", &self.poll_timeout)
            .field("send_attempts", &self.send_attempts)
            .field("max_backoff", &self.max_backoff)
            .field("webhook", &self.webhook)
            .finish()
    }
}

/// A Telegram bot, driven by the gateway through [`Adapter::run`].
#[derive(Debug)]
pub struct TelegramAdapter {
    settings: TelegramSettings,
}

impl TelegramAdapter {
    /// An adapter that connects with `settings` when run.
    pub fn new(settings: TelegramSettings) -> Self {
        TelegramAdapter { settings }
    }
}

impl Adapter for TelegramAdapter {
    fn platform(&self) -> Platform {
        Platform::Telegram
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            typing: true,
            typing_lasts: Duration::from_secs(5),
            reply_style: ReplyStyle::Quote,
        }
    }

    async fn run(
        self,
        ctx: AdapterContext,
        shutdown: CancellationToken,
    ) -> Result<(), AdapterError> {
        adapter::run(self.settings, ctx, shutdown).await
    }
}

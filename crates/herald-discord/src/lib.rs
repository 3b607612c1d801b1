//! herald's Discord adapter: the Gateway WebSocket and REST through serenity.
//!
//! Messages arrive in the order Discord dispatched them, each channel's newest settled message
//! id goes back to the gateway as that channel's cursor, and after a start or a session that
//! could not be resumed the messages of the gap are fetched over REST from those cursors; the
//! gateway's dedupe answers a message once however often it arrives. Replies carry a `nonce`
//! with `enforce_nonce`, so a resend after a crash returns the message already posted.
//!
//! Depends only on herald-core; no serenity type leaves this crate. The bot token is a secret:
//! it is never logged and is scrubbed from every error text before that text leaves the crate.

mod backfill;
mod commands;
mod connect;
mod error;
mod intake;
mod send;
mod shards;
mod slash;

use std::time::Duration;

use herald_core::{Adapter, AdapterContext, AdapterError, Capabilities, Platform, ReplyStyle};
use tokio_util::sync::CancellationToken;

/// The longest message Discord accepts, in characters.
pub const MAX_MESSAGE_LEN: usize = 2000;

/// How the adapter reaches Discord and how it behaves.
#[derive(Clone)]
pub struct DiscordSettings {
    /// The bot token from the developer portal (a secret).
    pub token: String,
    /// Where the REST API is, when not Discord itself (a proxy, or a fake for tests). Then
    /// serenity's own rate limiter is off, as it must be behind a proxy, and the adapter backs
    /// off from a 429 by itself.
    pub api_url: Option<String>,
    /// The variable the token came from, named when Discord refuses it.
    pub token_env: String,
    /// A mention in a server channel opens a thread on the message, and the conversation goes
    /// on there.
    pub auto_thread: bool,
    /// At most this many messages per channel are fetched after a gap (1 to 100).
    pub backfill_limit: u8,
    /// Messages older than this are not fetched after a gap.
    pub backfill_max_age: Duration,
    /// Register the slash commands with Discord (only when the set changed).
    pub register_commands: bool,
    /// How many times one message is tried before the send fails.
    pub send_attempts: u32,
    /// The longest wait between two retries, and between two connection attempts.
    pub max_backoff: Duration,
    /// How many shards the bot's servers are spread over (Discord's total shard count); each
    /// is connected by the one replica holding its claim `discord:shard:{id}`.
    pub shards: u32,
}

impl DiscordSettings {
    /// Settings with the defaults: Discord itself, no auto threads, 50 messages per channel
    /// from the last day after a gap, commands registered, 5 send attempts, 30 s backoff cap,
    /// one shard.
    pub fn new(token: impl Into<String>) -> Self {
        DiscordSettings {
            token: token.into(),
            api_url: None,
            token_env: "DISCORD_BOT_TOKEN".into(),
            auto_thread: false,
            backfill_limit: 50,
            backfill_max_age: Duration::from_secs(24 * 3600),
            register_commands: true,
            send_attempts: 5,
            max_backoff: Duration::from_secs(30),
            shards: 1,
        }
    }
}

// Hand-written so that the token never reaches a log through `{:?}`.
impl std::fmt::Debug for DiscordSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiscordSettings")
            .field("token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("token_env", &self.token_env)
            .field("auto_thread", &self.auto_thread)
            .field("backfill_limit", &self.backfill_limit)
            .field("backfill_max_age", &self.backfill_max_age)
            .field("register_commands", &self.register_commands)
            .field("send_attempts", &self.send_attempts)
            .field("max_backoff", &self.max_backoff)
            .field("shards", &self.shards)
            .finish()
    }
}

/// A Discord bot, driven by the gateway through [`Adapter::run`].
#[derive(Debug)]
pub struct DiscordAdapter {
    settings: DiscordSettings,
}

impl DiscordAdapter {
    /// An adapter that connects with `settings` when run.
    pub fn new(settings: DiscordSettings) -> Self {
        DiscordAdapter { settings }
    }
}

impl Adapter for DiscordAdapter {
    fn platform(&self) -> Platform {
        Platform::Discord
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            typing: true,
            // Discord shows "typing" for 10 s after each trigger.
            typing_lasts: Duration::from_secs(10),
            reply_style: if self.settings.auto_thread {
                ReplyStyle::Thread
            } else {
                ReplyStyle::Quote
            },
        }
    }

    async fn run(
        self,
        ctx: AdapterContext,
        shutdown: CancellationToken,
    ) -> Result<(), AdapterError> {
        connect::run(self.settings, ctx, shutdown).await
    }
}

#[cfg(test)]
mod replicas;
#[cfg(test)]
mod smoke;

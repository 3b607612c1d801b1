//! The platform sections: `[telegram]`, `[discord]` and `[slack]`.

use std::time::Duration;

use herald_core::Platform;
use herald_discord::DiscordSettings;
use herald_gateway::{Access, DmPolicy};
use herald_slack::{SLACK_API_URL, SlackSettings};
use herald_telegram::{TelegramSettings, WebhookSettings, is_valid_secret};
use serde::Deserialize;

use super::{Secret, SecretRef};

/// What every platform section has in common: the access rules `allowed_users`, `dm_policy`,
/// `require_mention` and `allowed_channels`, read and reloaded the same way for each platform.
///
/// The rules stay plain fields of each section rather than one `#[serde(flatten)]` struct:
/// serde's flatten drops the key path and line of an error inside it, and every config error
/// must name its key.
pub trait PlatformSection {
    /// The platform the section configures.
    const PLATFORM: Platform;
    /// The dotted keys of the access rules, for the reload report.
    const ACCESS_KEYS: [&'static str; 4];

    /// The section's access rules, as the gateway applies them.
    fn access(&self) -> Access;

    /// Takes the access rules of `other` (a reload), keeping everything else.
    fn set_access(&mut self, access: Access);
}

macro_rules! platform_section {
    ($section:ty, $platform:expr, $name:literal) => {
        impl PlatformSection for $section {
            const PLATFORM: Platform = $platform;
            const ACCESS_KEYS: [&'static str; 4] = [
                concat!($name, ".allowed_users"),
                concat!($name, ".dm_policy"),
                concat!($name, ".require_mention"),
                concat!($name, ".allowed_channels"),
            ];

            fn access(&self) -> Access {
                Access {
                    allowed_users: self.allowed_users.clone(),
                    dm_policy: self.dm_policy,
                    require_mention: self.require_mention,
                    allowed_channels: self.allowed_channels.clone(),
                }
            }

            fn set_access(&mut self, access: Access) {
                let Access { allowed_users, dm_policy, require_mention, allowed_channels } = access;
                self.allowed_users = allowed_users;
                self.dm_policy = dm_policy;
                self.require_mention = require_mention;
                self.allowed_channels = allowed_channels;
            }
        }
    };
}

platform_section!(TelegramConfig, Platform::Telegram, "telegram");
platform_section!(DiscordConfig, Platform::Discord, "discord");
platform_section!(SlackConfig, Platform::Slack, "slack");

/// `[telegram]`: a Telegram bot.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct TelegramConfig {
    /// The environment variable holding the bot token.
    pub token_env: String,
    /// The Bot API root (a local Bot API server, or a fake in tests).
    pub api_url: String,
    /// Platform user ids allowed to talk to the bot; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// Who may start a conversation in a direct message.
    pub dm_policy: DmPolicy,
    /// In groups, answer only when mentioned or replied to.
    pub require_mention: bool,
    /// Group chat ids the bot answers in (a forum topic counts as its group); empty: any.
    pub allowed_channels: Vec<String>,
    /// The public URL Telegram posts updates to (webhook mode); unset: long polling.
    pub webhook_url: Option<String>,
    /// Where this replica's webhook listener binds, like `0.0.0.0:8443`.
    pub webhook_listen: Option<String>,
    /// The environment variable holding the webhook's secret token; unset: derived from the
    /// bot token, the same on every replica.
    pub webhook_secret_env: Option<String>,
    /// How many updates Telegram may post at once, 1 to 100 (each post waits until herald
    /// has stored its update).
    pub webhook_max_connections: u32,
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
            allowed_channels: Vec::new(),
            webhook_url: None,
            webhook_listen: None,
            webhook_secret_env: None,
            webhook_max_connections: u32::from(herald_telegram::MAX_CONNECTIONS),
        }
    }
}

impl TelegramConfig {
    /// The adapter's settings, with `token` and the webhook secret read from the variables
    /// the section names; why not, in one line.
    pub fn settings(&self, token: &Secret) -> Result<TelegramSettings, String> {
        let mut settings = TelegramSettings::new(token.expose(), &self.api_url);
        let (Some(url), Some(listen)) = (&self.webhook_url, &self.webhook_listen) else {
            return Ok(settings);
        };
        let listen = listen.trim().parse().map_err(|_| {
            format!("telegram.webhook_listen `{listen}` is not IP:PORT, like \"0.0.0.0:8443\"")
        })?;
        let mut webhook = WebhookSettings::new(url, listen, token.expose());
        webhook.max_connections = u8::try_from(self.webhook_max_connections)
            .ok()
            .filter(|n| (1..=herald_telegram::MAX_CONNECTIONS).contains(n))
            .ok_or_else(|| {
                format!(
                    "telegram.webhook_max_connections is {}; Telegram takes 1 to 100",
                    self.webhook_max_connections
                )
            })?;
        if let Some(var) = &self.webhook_secret_env {
            let secret = super::resolve(var)
                .map_err(|missing| format!("{missing} (telegram.webhook_secret_env names it)"))?;
            let secret = secret.expose().trim();
            if !is_valid_secret(secret) {
                return Err(format!(
                    "the environment variable {var} does not hold a secret token Telegram \
                     accepts: 1 to 256 of A-Z a-z 0-9 _ -"
                ));
            }
            secret.clone_into(&mut webhook.secret);
        }
        settings.webhook = Some(webhook);
        Ok(settings)
    }
}

/// `[discord]`: a Discord bot.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// The environment variable holding the bot token.
    pub token_env: String,
    /// The Discord API root (a proxy, or the fake in trials and tests).
    pub api_url: String,
    /// Platform user ids allowed to talk to the bot; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// Who may start a conversation in a direct message.
    pub dm_policy: DmPolicy,
    /// In servers, answer only when mentioned or replied to.
    pub require_mention: bool,
    /// Server channel ids the bot answers in (a thread counts as its parent); empty: any.
    pub allowed_channels: Vec<String>,
    /// A mention in a server channel opens a thread on the message, where the talk goes on.
    pub auto_thread: bool,
    /// At most this many messages per channel are fetched after a gap (1 to 100).
    pub backfill_limit: u32,
    /// Messages older than this are not fetched after a gap, in seconds.
    pub backfill_max_age_s: u64,
    /// Register the slash commands with Discord at start (only when the set changed).
    pub register_commands: bool,
    /// How many shards the bot's servers are spread over (1 to 1024); with replicas, each
    /// shard is connected by the one replica holding it.
    pub shards: u32,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: DISCORD_API.into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
            allowed_channels: Vec::new(),
            auto_thread: false,
            backfill_limit: 50,
            backfill_max_age_s: 24 * 3600,
            register_commands: true,
            shards: 1,
        }
    }
}

/// Discord itself, where the adapter needs no `api_url`.
const DISCORD_API: &str = "https://discord.com";

impl DiscordConfig {
    /// The adapter's settings, with `token` read from the variable `token_env` names.
    pub fn settings(&self, token: &Secret) -> DiscordSettings {
        DiscordSettings {
            api_url: self.custom_api_url(),
            token_env: self.token_env.clone(),
            auto_thread: self.auto_thread,
            // Validated to 1..=100 when the file loads; clamped so that it fits whatever built it.
            backfill_limit: u8::try_from(self.backfill_limit.clamp(1, 100)).unwrap_or(100),
            backfill_max_age: Duration::from_secs(self.backfill_max_age_s),
            register_commands: self.register_commands,
            shards: self.shards,
            ..DiscordSettings::new(token.expose())
        }
    }

    /// `api_url` without a trailing slash, when it is not Discord itself: the adapter turns
    /// serenity's own rate limiter off for another root, so Discord's URL (with or without a
    /// trailing slash) must not count as one.
    fn custom_api_url(&self) -> Option<String> {
        let url = self.api_url.trim_end_matches('/');
        (!url.eq_ignore_ascii_case(DISCORD_API)).then(|| url.to_owned())
    }
}

/// `[slack]`: a Slack app in Socket Mode.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SlackConfig {
    /// The environment variable holding the bot token (`xoxb-`).
    pub bot_token_env: String,
    /// The environment variable holding the app-level token (`xapp-`, Socket Mode).
    pub app_token_env: String,
    /// The Web API root, `/api` included.
    pub api_url: String,
    /// Platform user ids allowed to talk to the app; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// Who may start a conversation in a direct message.
    pub dm_policy: DmPolicy,
    /// In channels, answer only mentions (and follow-ups in the bot's threads).
    pub require_mention: bool,
    /// Channel ids the app answers in (a thread counts as its channel); empty: any.
    pub allowed_channels: Vec<String>,
    /// A mention at the top of a channel is answered in a thread on it.
    pub reply_in_thread: bool,
    /// Messages in a thread the bot answered in need no new mention.
    pub thread_follow_ups: bool,
    /// Socket Mode connections this process keeps open, 1 to 10; replicas × this must stay
    /// within Slack's 10 per app.
    pub socket_connections: u32,
    /// Seconds one Web API call may take before it is given up (and, for a post, looked for
    /// before it goes again).
    pub api_timeout_s: u64,
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            api_url: SLACK_API_URL.into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
            allowed_channels: Vec::new(),
            reply_in_thread: true,
            thread_follow_ups: true,
            socket_connections: herald_slack::DEFAULT_SOCKET_CONNECTIONS,
            api_timeout_s: herald_slack::DEFAULT_API_TIMEOUT.as_secs(),
        }
    }
}

impl SlackConfig {
    /// The two tokens the section names, with the prefix each kind of token starts with (a
    /// swapped pair is the likeliest mistake, and Slack's own answer to it is obscure).
    pub fn secrets(&self) -> [SecretRef; 2] {
        let entry = |key, var: &String, prefix| SecretRef {
            key,
            var: var.clone(),
            required: true,
            prefix: Some(prefix),
        };
        [
            entry("slack.bot_token_env", &self.bot_token_env, BOT_TOKEN_PREFIX),
            entry("slack.app_token_env", &self.app_token_env, APP_TOKEN_PREFIX),
        ]
    }

    /// The adapter's settings, with the tokens read from the variables the section names.
    pub fn settings(&self, bot_token: &Secret, app_token: &Secret) -> SlackSettings {
        let url = self.api_url.trim_end_matches('/');
        SlackSettings {
            // slack-morphism has Slack's URL built in; passing it again changes nothing, but
            // `None` keeps the connector https-only for Slack itself.
            api_url: (!url.eq_ignore_ascii_case(SLACK_API_URL)).then(|| url.to_owned()),
            bot_token_env: self.bot_token_env.clone(),
            app_token_env: self.app_token_env.clone(),
            reply_in_thread: self.reply_in_thread,
            thread_follow_ups: self.thread_follow_ups,
            socket_connections: self.socket_connections,
            api_timeout: Duration::from_secs(self.api_timeout_s),
            ..SlackSettings::new(bot_token.expose(), app_token.expose())
        }
    }
}

/// How a bot token (OAuth & Permissions) starts.
const BOT_TOKEN_PREFIX: &str = "xoxb-";
/// How an app-level token (Basic Information, App-Level Tokens) starts.
const APP_TOKEN_PREFIX: &str = "xapp-";

//! The platform sections: `[telegram]`, `[discord]` and `[slack]`.

use serde::Deserialize;

/// Who may start a conversation in a direct message.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Unknown users get a one-time code the operator approves with `herald pairing approve`.
    #[default]
    Pair,
    /// Only `allowed_users` and approved users; others are ignored.
    Allowlist,
    /// Everyone.
    Open,
}

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
}

impl Default for TelegramConfig {
    fn default() -> Self {
        TelegramConfig {
            token_env: "TELEGRAM_BOT_TOKEN".into(),
            api_url: "https://api.telegram.org".into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
        }
    }
}

/// `[discord]`: a Discord bot.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DiscordConfig {
    /// The environment variable holding the bot token.
    pub token_env: String,
    /// The Discord API root.
    pub api_url: String,
    /// Platform user ids allowed to talk to the bot; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// Who may start a conversation in a direct message.
    pub dm_policy: DmPolicy,
    /// In servers, answer only when mentioned or replied to.
    pub require_mention: bool,
}

impl Default for DiscordConfig {
    fn default() -> Self {
        DiscordConfig {
            token_env: "DISCORD_BOT_TOKEN".into(),
            api_url: "https://discord.com".into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
        }
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
    /// The Web API root.
    pub api_url: String,
    /// Platform user ids allowed to talk to the app; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// Who may start a conversation in a direct message.
    pub dm_policy: DmPolicy,
    /// In channels, answer only when mentioned or replied to.
    pub require_mention: bool,
}

impl Default for SlackConfig {
    fn default() -> Self {
        SlackConfig {
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            api_url: "https://slack.com/api".into(),
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
        }
    }
}

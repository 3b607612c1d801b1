//! The configuration file of SPEC section 3: one strict TOML file, every key optional.
//!
//! Parsing is strict (`deny_unknown_fields` everywhere) and every problem becomes one
//! [`ConfigError`] line naming the file, the dotted key, the line and the fix. Secrets are
//! never in the file: sections name the environment variables that hold them.

mod error;
mod load;
mod platforms;
mod secret;
mod spans;
mod validate;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use herald_core::Platform;
use herald_gateway::Access;
use herald_store::StoreOptions;
use serde::Deserialize;
use serde::de::{self, Deserializer};

pub use error::ConfigError;
pub use herald_gateway::{BusyInput, DmPolicy};
pub use load::{Env, Loaded, candidates, load, parse};
pub use platforms::{DiscordConfig, PlatformSection, SlackConfig, TelegramConfig};
pub use secret::{MissingSecret, Secret, SecretError, SecretRef, check_secrets, resolve};
pub use validate::store_url as check_store_url;

/// `config/herald.example.toml`: every key, commented, set to its default.
pub const EXAMPLE: &str = include_str!("../../../../config/herald.example.toml");

/// The persona used when `[agent]` sets neither `persona` nor `persona_file`.
pub const DEFAULT_PERSONA: &str = "You are Herald, a concise and helpful assistant.";

/// The whole configuration; a missing section means its defaults.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    /// Where the session store lives and how patient its writes are.
    pub store: StoreConfig,
    /// The OpenAI-compatible model endpoint.
    pub model: ModelConfig,
    /// What the agent is told about itself.
    pub agent: AgentConfig,
    /// When long conversations are compressed.
    pub compression: CompressionConfig,
    /// The daemon's concurrency, queueing and shutdown.
    pub gateway: GatewayConfig,
    /// The Telegram bot, enabled by the section's presence.
    pub telegram: Option<TelegramConfig>,
    /// The Discord bot, enabled by the section's presence.
    pub discord: Option<DiscordConfig>,
    /// The Slack app, enabled by the section's presence.
    pub slack: Option<SlackConfig>,
}

/// `[store]`: the session store, a SQLite file (the default) or a PostgreSQL database.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct StoreConfig {
    /// The database file; after loading always absolute, `~` expanded
    /// (default `$HERALD_HOME/state.db`).
    #[serde(deserialize_with = "named_path")]
    pub path: PathBuf,
    /// `postgres://user@host:port/database` for a PostgreSQL store shared by replicas. After
    /// loading only a PostgreSQL URL is kept here: `sqlite://PATH` becomes `path`.
    pub url: Option<String>,
    /// The variable holding the PostgreSQL password (never the file).
    pub password_env: String,
    /// Most connections in the store's pool (default 8 on SQLite, 4 on PostgreSQL).
    pub max_connections: Option<u32>,
    /// SQLite's own busy wait per attempt, in milliseconds.
    pub busy_timeout_ms: u64,
    /// Total time one write keeps retrying before it fails, in milliseconds.
    pub write_patience_ms: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        // The empty path stands for "not set"; loading replaces it with the default.
        StoreConfig {
            path: PathBuf::new(),
            url: None,
            password_env: "HERALD_STORE_PASSWORD".to_owned(),
            max_connections: None,
            busy_timeout_ms: 1000,
            write_patience_ms: 20_000,
        }
    }
}

impl StoreConfig {
    /// Where the store is, for messages: the file, or the URL (which holds no password).
    pub fn location(&self) -> String {
        match &self.url {
            Some(url) => url.clone(),
            None => self.path.display().to_string(),
        }
    }
}

/// A path as written, refused when empty: leaving the key out is how to ask for the default,
/// and `""` is more likely a value that went missing than that request.
fn named_path<'de, D: Deserializer<'de>>(deserializer: D) -> Result<PathBuf, D::Error> {
    let path = PathBuf::deserialize(deserializer)?;
    if path.as_os_str().is_empty() {
        return Err(de::Error::custom(
            "is empty; remove the key to use the default ($HERALD_HOME/state.db), or name the \
             database file",
        ));
    }
    Ok(path)
}

/// `[model]`: the OpenAI-compatible endpoint the agent talks to.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ModelConfig {
    /// The API root, ending before `/chat/completions`.
    pub base_url: String,
    /// The model name sent with every request.
    pub model: String,
    /// The environment variable holding the API key (may be unset for local servers).
    pub api_key_env: String,
    /// How long one model request may take, in seconds.
    pub request_timeout_s: u64,
    /// The most model calls for one inbound message.
    pub max_iterations: u32,
    /// The model's context window, in tokens.
    pub context_window: u64,
}

impl Default for ModelConfig {
    fn default() -> Self {
        ModelConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4o-mini".into(),
            api_key_env: "HERALD_API_KEY".into(),
            request_timeout_s: 120,
            max_iterations: 90,
            context_window: 128_000,
        }
    }
}

/// `[compression]`: a conversation near the context window continues in a new session from a
/// summary; the old one is kept and searchable.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct CompressionConfig {
    /// The fraction of `model.context_window` at which a session is compressed.
    pub threshold: f64,
    /// Tokens of the most recent conversation carried over verbatim.
    pub keep_recent_tokens: u64,
    /// The model that writes summaries (default: the session's model).
    pub summary_model: Option<String>,
    /// How long the summary call may take, in seconds.
    pub summary_timeout_s: u64,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        CompressionConfig {
            threshold: 0.8,
            keep_recent_tokens: 8_000,
            summary_model: None,
            summary_timeout_s: 60,
        }
    }
}

/// `[agent]`: the persona, inline or from a file (not both).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct AgentConfig {
    /// The persona text.
    pub persona: Option<String>,
    /// A file holding the persona text; after loading absolute, `~` expanded.
    pub persona_file: Option<PathBuf>,
}

impl AgentConfig {
    /// The persona text: inline, read from `persona_file`, or [`DEFAULT_PERSONA`].
    pub fn persona_text(&self) -> std::io::Result<String> {
        match (&self.persona, &self.persona_file) {
            (Some(text), _) => Ok(text.clone()),
            (None, Some(file)) => std::fs::read_to_string(file),
            (None, None) => Ok(DEFAULT_PERSONA.to_owned()),
        }
    }
}

/// `[gateway]`: the daemon's limits and behaviour.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GatewayConfig {
    /// The most agent runs at once, across all sessions.
    pub max_concurrent_runs: u32,
    /// What a message does while its session's agent is running.
    pub busy_input: BusyInput,
    /// In groups, whether each user gets their own session.
    pub group_sessions_per_user: bool,
    /// On shutdown, how long running turns may finish, in seconds.
    pub drain_timeout_s: u64,
    /// Where to serve `/healthz` and `/metrics` (off when unset).
    pub health_listen: Option<SocketAddr>,
}

impl Default for GatewayConfig {
    fn default() -> Self {
        GatewayConfig {
            max_concurrent_runs: 16,
            busy_input: BusyInput::Queue,
            group_sessions_per_user: true,
            drain_timeout_s: 30,
            health_listen: None,
        }
    }
}

impl Config {
    /// The `[store]` section as the store's open options.
    /// The PostgreSQL password comes from the variable `store.password_env` names, read now.
    pub fn store_options(&self) -> StoreOptions {
        let store = &self.store;
        let base = match &store.url {
            Some(url) => {
                let password = std::env::var(&store.password_env).ok().filter(|p| !p.is_empty());
                StoreOptions::postgres(url.clone(), password)
            }
            None => StoreOptions::new(&store.path),
        };
        StoreOptions {
            busy_timeout: Duration::from_millis(store.busy_timeout_ms),
            write_patience: Duration::from_millis(store.write_patience_ms),
            max_connections: store.max_connections.unwrap_or(base.max_connections),
            ..base
        }
    }

    /// Each configured platform's access rules, as the gateway applies them.
    pub fn access(&self) -> HashMap<Platform, Access> {
        let mut all = HashMap::new();
        let mut add = |platform, access: Option<Access>| {
            if let Some(access) = access {
                all.insert(platform, access);
            }
        };
        add(TelegramConfig::PLATFORM, self.telegram.as_ref().map(PlatformSection::access));
        add(DiscordConfig::PLATFORM, self.discord.as_ref().map(PlatformSection::access));
        add(SlackConfig::PLATFORM, self.slack.as_ref().map(PlatformSection::access));
        all
    }

    /// The names of the platforms whose sections are present, in display order.
    pub fn platforms(&self) -> Vec<&'static str> {
        [
            self.telegram.as_ref().map(|_| "telegram"),
            self.discord.as_ref().map(|_| "discord"),
            self.slack.as_ref().map(|_| "slack"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

#[cfg(test)]
mod tests;

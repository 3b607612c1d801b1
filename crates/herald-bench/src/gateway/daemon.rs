//! The gateway under test, in its own process (spawned by `gateway`) so that its peak RSS is
//! herald's alone, not the fake platform's: the real adapter and gateway over a store, with a
//! model that answers at once, until its stdin closes.

use std::time::Duration;

use anyhow::Context;
use herald_agent::{ChatRequest, Completion, Message, Provider, ProviderError, Usage};
use herald_core::Platform;
use herald_discord::{DiscordAdapter, DiscordSettings};
use herald_gateway::{Access, Gateway, GatewaySettings, history};
use herald_slack::{SlackAdapter, SlackSettings};
use herald_store::Store;
use herald_telegram::{TelegramAdapter, TelegramSettings, WebhookSettings};

use super::BenchPlatform;
use tokio::io::AsyncReadExt;

/// Arguments of the hidden `gateway-daemon` command.
#[derive(Debug, Clone, clap::Args)]
pub struct DaemonArgs {
    /// A platform to serve (repeated for several, each with its `--api-url` and `--token` in
    /// the same order).
    #[arg(long, value_enum, required = true)]
    pub platform: Vec<BenchPlatform>,
    /// The fake platform's API root, one per `--platform`.
    #[arg(long)]
    pub api_url: Vec<String>,
    /// The store's URL (sqlite://PATH or postgres://...; the password from
    /// HERALD_STORE_PASSWORD).
    #[arg(long)]
    pub store: String,
    /// Telegram in webhook mode: the public URL (the balancer's).
    #[arg(long)]
    pub webhook_url: Option<String>,
    /// Telegram in webhook mode: where this process listens.
    #[arg(long)]
    pub webhook_listen: Option<std::net::SocketAddr>,
    /// The bot token the fake accepts, one per `--platform`.
    #[arg(long)]
    pub token: Vec<String>,
    /// The app-level token the fake accepts (Slack's Socket Mode).
    #[arg(long)]
    pub app_token: Option<String>,
    /// Connections in the store's pool (default: the store's).
    #[arg(long)]
    pub max_connections: Option<u32>,
}

/// A model that answers every call at once with a short text, reporting token counts as a
/// real endpoint does (about four bytes a token).
#[derive(Debug)]
struct Instant0;

impl Provider for Instant0 {
    async fn complete(&self, request: ChatRequest<'_>) -> Result<Completion, ProviderError> {
        let said = request.messages.last().map_or("", |m| m.content.as_str());
        let reply = format!("re {said}");
        let bytes: usize = request.messages.iter().map(|m| m.content.len() + 16).sum();
        let usage = Usage {
            prompt_tokens: (bytes / 4) as u64,
            completion_tokens: (reply.len() / 4 + 1) as u64,
        };
        Ok(Completion { message: Message::assistant(reply), usage: Some(usage) })
    }
}

/// Runs the gateway until stdin closes; the gateway's default settings, everyone allowed.
pub async fn run(args: DaemonArgs) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.api_url.len() == args.platform.len() && args.token.len() == args.platform.len(),
        "one --api-url and one --token for each --platform"
    );
    let mut options = crate::db::default_options(&args.store);
    if let Some(max) = args.max_connections {
        options.max_connections = max;
    }
    let store = Store::open(options).await.context("opening the store")?;
    let everyone = Access { allowed_users: vec!["*".into()], ..Access::default() };
    let mut settings = GatewaySettings::new("You are Herald.", "instant");
    for platform in &args.platform {
        let platform = match platform {
            BenchPlatform::Telegram => Platform::Telegram,
            BenchPlatform::Discord => Platform::Discord,
            BenchPlatform::Slack => Platform::Slack,
            BenchPlatform::All => anyhow::bail!("the gateway process serves named platforms"),
        };
        settings = settings.with_access(platform, everyone.clone());
    }
    let tools = history::tools(&store);
    let mut gateway = Gateway::new(store, Instant0, tools, settings);
    for ((platform, api_url), token) in args.platform.iter().zip(&args.api_url).zip(&args.token) {
        match platform {
            BenchPlatform::Telegram => {
                let mut telegram = TelegramSettings::new(token, api_url);
                telegram.poll_timeout = Duration::from_secs(5);
                if let (Some(url), Some(listen)) = (&args.webhook_url, args.webhook_listen) {
                    telegram.webhook = Some(WebhookSettings::new(url, listen, token));
                }
                gateway.add_adapter(TelegramAdapter::new(telegram)).await?;
            }
            BenchPlatform::Discord => {
                let mut discord = DiscordSettings::new(token);
                discord.api_url = Some(api_url.clone());
                gateway.add_adapter(DiscordAdapter::new(discord)).await?;
            }
            BenchPlatform::Slack => {
                let app_token = args.app_token.as_deref().context("slack needs --app-token")?;
                let mut slack = SlackSettings::new(token, app_token);
                slack.api_url = Some(api_url.clone());
                gateway.add_adapter(SlackAdapter::new(slack)).await?;
            }
            BenchPlatform::All => anyhow::bail!("the gateway process serves named platforms"),
        }
    }
    gateway
        .run(async {
            // The parent closes our stdin (or dies) when the run is over.
            let mut sink = Vec::new();
            let _ = tokio::io::stdin().read_to_end(&mut sink).await;
        })
        .await?;
    Ok(())
}

//! `herald gateway`: the daemon. Every configured platform is started; one that cannot start
//! is reported and the others keep running, and when none is left the daemon exits with 1. Around the gateway run the service parts of
//! [`crate::daemon`]: systemd notifications and watchdog, `/healthz` and `/metrics`, and the
//! reload on SIGHUP.

use std::future::Future;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use herald_agent::Provider;
use herald_core::{Adapter, Platform};
use herald_discord::DiscordAdapter;
use herald_gateway::compress::CompressionSettings;
use herald_gateway::{Gateway, GatewayError, GatewaySettings, Reloadable, history};
use herald_slack::SlackAdapter;
use herald_store::Store;
use herald_telegram::TelegramAdapter;
use tokio::signal::unix::{SignalKind, signal};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

use crate::config::{
    self, Config, ConfigError, DiscordConfig, Env, Loaded, SlackConfig, TelegramConfig,
};
use crate::daemon::health::{self, HealthState};
use crate::daemon::notify::{self, Notifier};
use crate::daemon::reload;
use crate::daemon::watchdog::{self, Phases, Probe};
use crate::wiring;

/// Runs the gateway until SIGTERM or SIGINT.
pub async fn run(loaded: &Loaded) -> anyhow::Result<ExitCode> {
    let shutdown = shutdown_signal()?;
    serve(loaded, shutdown).await
}

/// Runs the gateway until `shutdown` resolves (tests pass their own).
pub async fn serve(
    loaded: &Loaded,
    shutdown: impl Future<Output = ()>,
) -> anyhow::Result<ExitCode> {
    let config = &loaded.config;
    if config.platforms().is_empty() {
        return Err(ConfigError::for_key(
            loaded.path.as_deref(),
            "telegram",
            "no platform is configured: add a [telegram], [discord] or [slack] section (see \
             `herald config example`)",
        )
        .into());
    }
    // SIGHUP's default action ends the process: take it over before anything can take long.
    let hangups = signal(SignalKind::hangup()).context("could not listen for SIGHUP")?;
    let provider = wiring::provider(config)?;
    let settings = settings(config)?;
    let health_listener = match config.gateway.health_listen {
        Some(addr) => Some(health::bind(addr).await?),
        None => None,
    };
    let store = Store::open(config.store_options()).await?;
    let tools = history::tools(&store);
    let mut gateway = Gateway::new(store.clone(), provider, tools, settings.clone());
    let mut started = Vec::new();
    if let Some(telegram) = &config.telegram {
        start(&mut gateway, &mut started, Platform::Telegram, telegram_adapter(telegram)).await?;
    }
    if let Some(discord) = &config.discord {
        start(&mut gateway, &mut started, Platform::Discord, discord_adapter(discord)).await?;
    }
    if let Some(slack) = &config.slack {
        start(&mut gateway, &mut started, Platform::Slack, slack_adapter(slack)).await?;
    }
    if started.is_empty() {
        anyhow::bail!("no platform could start; see the errors above");
    }
    info!(platforms = ?started, store = %config.store.location(), "gateway starting");

    let phases = Phases { stopping: CancellationToken::new(), stopped: CancellationToken::new() };
    let tasks = TaskTracker::new();
    let probe = Probe {
        started: gateway.started(),
        heartbeat: gateway.heartbeat(),
        states: gateway.states(),
        metrics: gateway.metrics(),
    };
    if let Some(listener) = health_listener {
        let state = HealthState {
            states: probe.states.clone(),
            metrics: probe.metrics.clone(),
            store: store.clone(),
            backlog: gateway.backlog(),
            stopping: phases.stopping.clone(),
        };
        tasks.spawn(health::serve(listener, state, phases.stopped.clone()));
    }
    tasks.spawn(health::watch_writes(store, phases.stopped.clone()));
    let notifier = Notifier::from_env();
    tasks.spawn(watchdog::supervise(notifier, probe, notify::watchdog_from_env(), phases.clone()));
    tasks.spawn(reload::on_sighup(
        hangups,
        loaded.path.clone(),
        config.clone(),
        settings,
        phases.stopping.clone(),
    ));

    let stopping = phases.stopping.clone();
    let result = gateway
        .run(async move {
            shutdown.await;
            stopping.cancel();
        })
        .await;
    // Stopped by itself (every platform gone), the shutdown never came: end what waits for it.
    phases.stopping.cancel();
    phases.stopped.cancel();
    tasks.close();
    tasks.wait().await;
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        // Its own line: the reason a restart policy acts on.
        Err(stopped @ GatewayError::PlatformsStopped(_)) => Err(stopped.into()),
        Err(e) => Err(anyhow::Error::from(e).context("the gateway stopped with an error")),
    }
}

/// The gateway's settings from `[gateway]`, `[model]`, `[agent]` and the platform sections.
pub fn settings(config: &Config) -> anyhow::Result<GatewaySettings> {
    let live = reloadable(config)?;
    let gateway = &config.gateway;
    let settings = GatewaySettings {
        max_concurrent_runs: usize::try_from(gateway.max_concurrent_runs).unwrap_or(usize::MAX),
        busy_input: gateway.busy_input,
        group_sessions_per_user: gateway.group_sessions_per_user,
        drain_timeout: Duration::from_secs(gateway.drain_timeout_s),
        max_iterations: config.model.max_iterations,
        compression: compression(config),
        ..GatewaySettings::new(String::new(), config.model.model.clone())
    };
    settings.update(|current| *current = live);
    Ok(settings)
}

/// The compression settings of `[model]` and `[compression]`.
pub fn compression(config: &Config) -> CompressionSettings {
    CompressionSettings {
        context_window: config.model.context_window,
        threshold: config.compression.threshold,
        keep_recent_tokens: config.compression.keep_recent_tokens,
        summary_model: config.compression.summary_model.clone(),
        summary_timeout: Duration::from_secs(config.compression.summary_timeout_s),
    }
}

/// What a reload may change: the persona from `[agent]`, the access rules of every platform
/// section.
pub fn reloadable(config: &Config) -> anyhow::Result<Reloadable> {
    let persona = config.agent.persona_text().context("could not read agent.persona_file")?;
    Ok(Reloadable { persona, access: config.access() })
}

/// Starts one platform's adapter, or reports why it cannot start while the others go on.
async fn start<A: Adapter, P: Provider + 'static>(
    gateway: &mut Gateway<P>,
    started: &mut Vec<Platform>,
    platform: Platform,
    adapter: Result<A, String>,
) -> anyhow::Result<()> {
    match adapter {
        Ok(adapter) => {
            gateway.add_adapter(adapter).await?;
            started.push(platform);
        }
        Err(why) => error!(%platform, "cannot start: {why}"),
    }
    Ok(())
}

/// The Telegram adapter of `[telegram]`, or why it cannot be built.
fn telegram_adapter(section: &TelegramConfig) -> Result<TelegramAdapter, String> {
    let token = config::resolve(&section.token_env)
        .map_err(|missing| format!("{missing} (telegram.token_env names the variable)"))?;
    Ok(TelegramAdapter::new(section.settings(&token)?))
}

/// The Discord adapter of `[discord]`, or why it cannot be built.
fn discord_adapter(section: &DiscordConfig) -> Result<DiscordAdapter, String> {
    let token = config::resolve(&section.token_env)
        .map_err(|missing| format!("{missing} (discord.token_env names the variable)"))?;
    Ok(DiscordAdapter::new(section.settings(&token)))
}

/// The Slack adapter of `[slack]`, or why it cannot be built: a token unset or of the wrong
/// kind is named by its variable here, before Slack answers something obscure.
fn slack_adapter(section: &SlackConfig) -> Result<SlackAdapter, String> {
    let env = Env::process();
    let [bot, app] = section.secrets().map(|secret| {
        secret
            .resolve_in(&env)
            .map_err(|problem| format!("{problem} ({} names the variable)", secret.key))
    });
    Ok(SlackAdapter::new(section.settings(&bot?, &app?)))
}

/// Resolves on the first SIGTERM or SIGINT.
fn shutdown_signal() -> anyhow::Result<impl Future<Output = ()>> {
    let mut term = signal(SignalKind::terminate()).context("could not listen for SIGTERM")?;
    let mut int = signal(SignalKind::interrupt()).context("could not listen for SIGINT")?;
    Ok(async move {
        tokio::select! {
            _ = term.recv() => info!("SIGTERM received"),
            _ = int.recv() => info!("SIGINT received"),
        }
    })
}

//! `gateway`: N chats sending M messages each through the fake Telegram Bot API, the real
//! Telegram adapter (teloxide) and the real gateway, with a model that answers at once. Reports
//! messages/s end to end, the latency from an update becoming available to its reply reaching
//! the fake, and the process's peak RSS.

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context;
use herald_agent::{ChatRequest, Completion, Message, Provider, ProviderError};
use herald_core::Platform;
use herald_fakes::telegram::FakeTelegram;
use herald_gateway::{Access, Gateway, GatewaySettings, history};
use herald_store::{Store, StoreOptions};
use herald_telegram::{TelegramAdapter, TelegramSettings};
use serde::Serialize;

use crate::Outcome;
use crate::db::ScratchDb;
use crate::stats::{Latencies, rate, round};

/// Arguments of `gateway`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Chats writing to the bot.
    #[arg(long, default_value_t = 1000)]
    pub chats: u32,
    /// Messages each chat sends.
    #[arg(long, default_value_t = 10)]
    pub messages: u32,
    /// Messages per second offered, spread over the chats (0: all at once).
    #[arg(long, default_value_t = 1000)]
    pub rate: u32,
    /// The database file (default: a temporary one).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct GatewayLine {
    scenario: &'static str,
    chats: u32,
    messages: u32,
    offered_per_s: u32,
    answered: usize,
    msgs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    peak_rss_mb: f64,
}

/// A model that answers every call at once with a short text.
#[derive(Debug)]
struct Instant0;

impl Provider for Instant0 {
    async fn complete(&self, request: ChatRequest<'_>) -> Result<Completion, ProviderError> {
        let said = request.messages.last().map_or("", |m| m.content.as_str());
        Ok(Completion { message: Message::assistant(format!("re {said}")), usage: None })
    }
}

/// Runs the scenario.
pub async fn run(args: GatewayArgs) -> anyhow::Result<Outcome> {
    let scratch = ScratchDb::resolve(args.db.clone(), "gateway")?;
    let store =
        Store::open(StoreOptions::new(scratch.path())).await.context("opening the store")?;
    let fake = FakeTelegram::start().await;
    let settings = GatewaySettings {
        max_concurrent_runs: 64,
        ..GatewaySettings::new("You are Herald.", "instant")
    }
    .with_access(
        Platform::Telegram,
        Access { allowed_users: vec!["*".into()], ..Access::default() },
    );
    let tools = history::tools(&store);
    let mut gateway = Gateway::new(store.clone(), Instant0, tools, settings);
    let mut telegram = TelegramSettings::new(FakeTelegram::TOKEN, fake.api_url());
    telegram.poll_timeout = Duration::from_secs(5);
    gateway.add_adapter(TelegramAdapter::new(telegram)).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let daemon = tokio::spawn(gateway.run(async {
        let _ = stopped.await;
    }));
    // Warm up: one message through, so connection set-up is not measured.
    fake.dm(1, "warm-up");
    let warm = fake.wait_sent(1, Duration::from_secs(30)).await;
    anyhow::ensure!(!warm.is_empty(), "the warm-up message was never answered");

    let total = (args.chats * args.messages) as usize;
    let gap = if args.rate == 0 { Duration::ZERO } else { Duration::from_secs(1) / args.rate };
    let started = Instant::now();
    let injector = {
        let fake = fake.clone();
        let chats = args.chats;
        let messages = args.messages;
        tokio::spawn(async move {
            let mut at = HashMap::with_capacity(total);
            let mut next = Instant::now();
            for m in 0..messages {
                for c in 0..chats {
                    if !gap.is_zero() {
                        let now = Instant::now();
                        if next > now {
                            tokio::time::sleep(next - now).await;
                        }
                        next += gap;
                    }
                    let text = format!("c{c}m{m}");
                    at.insert(format!("re {text}"), Instant::now());
                    fake.dm(1000 + i64::from(c), &text);
                }
            }
            at
        })
    };
    let mut seen = warm.len();
    let mut arrived: Vec<(String, Instant)> = Vec::with_capacity(total);
    let deadline = Instant::now() + Duration::from_secs(300);
    while arrived.len() < total && Instant::now() < deadline {
        let new = fake.wait_sent_after(seen, Duration::from_secs(5)).await;
        let now = Instant::now();
        seen += new.len();
        arrived.extend(new.into_iter().map(|m| (m.text, now)));
    }
    let elapsed = started.elapsed().as_secs_f64();
    let injected = injector.await.context("the injector failed")?;
    let _ = stop.send(());
    // The gateway closes the store when it stops.
    daemon.await.context("the gateway task failed")??;

    let latencies: Vec<f64> = arrived
        .iter()
        .filter_map(|(text, when)| {
            injected.get(text).map(|at| when.duration_since(*at).as_secs_f64() * 1000.0)
        })
        .collect();
    let answered = latencies.len();
    let latencies = Latencies::from_ms(latencies);
    let line = GatewayLine {
        scenario: "gateway",
        chats: args.chats,
        messages: args.messages,
        offered_per_s: args.rate,
        answered,
        msgs_per_s: rate(answered as u64, elapsed),
        p50_ms: round(latencies.percentile(50.0), 2),
        p99_ms: round(latencies.percentile(99.0), 2),
        max_ms: round(latencies.percentile(100.0), 2),
        peak_rss_mb: round(peak_rss_mb(), 1),
    };
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: answered == total })
}

/// The process's peak resident set size (VmHWM), in MiB; 0 where /proc is not available.
fn peak_rss_mb() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

//! `gateway`: N chats sending M messages each through a fake platform (Telegram's Bot API,
//! Discord's Gateway and REST, or Slack's Socket Mode and Web API), the real adapter (teloxide,
//! serenity, slack-morphism) and the real gateway, with a model that answers at once. Reports
//! messages/s end to end, the latency from a message becoming available to its reply reaching
//! the fake, replies lost and doubled, and the gateway process's peak RSS. On Slack also how
//! long envelopes waited for their acknowledgement (Slack redelivers after 3 s), over every
//! envelope the fake sent: the users' DMs and the bot's own answers, which the fake sends back
//! as events as Slack does (`echo_own_posts` left on), so the adapter acknowledges two
//! envelopes per message. `--platform all` runs the three fakes and one gateway process with
//! the three adapters, chat `c` on platform `c % 3`, and also counts replies that came out on
//! another platform than their message (`crossed`).

pub mod daemon;
mod fake;

use std::collections::HashMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::process::Stdio;

use anyhow::Context;
use serde::Serialize;
use tokio::process::Command;

use crate::Outcome;
use crate::db::{Place, StoreArgs};
use crate::stats::{Latencies, rate, round};
pub use fake::BenchPlatform;
use fake::Fake;
use herald_fakes::slack::Delivery;

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
    /// Gateway processes sharing the store (PostgreSQL only beyond 1; Telegram then runs in
    /// webhook mode behind a round-robin balancer). The run first measures one replica the
    /// same way, then all of them, a line each.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    #[command(flatten)]
    pub store: StoreArgs,
    /// The platform the chats write on.
    #[arg(long, value_enum, default_value_t = BenchPlatform::Telegram)]
    pub platform: BenchPlatform,
}

#[derive(Debug, Serialize)]
struct GatewayLine {
    scenario: &'static str,
    platform: BenchPlatform,
    store: &'static str,
    replicas: u32,
    chats: u32,
    messages: u32,
    offered_per_s: u32,
    answered: usize,
    lost: usize,
    doubled: usize,
    msgs_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    max_ms: f64,
    peak_rss_mb: f64,
    /// Replies posted on another platform than their message's (with `all`).
    #[serde(skip_serializing_if = "Option::is_none")]
    crossed: Option<usize>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    acks: Option<Acks>,
}

/// How Slack's envelopes were acknowledged.
#[derive(Debug, Serialize)]
struct Acks {
    /// Envelopes the fake sent (redeliveries included).
    envelopes: usize,
    /// Envelopes never acknowledged.
    unacked: usize,
    /// Envelopes that were a redelivery (`retry_attempt` above 0).
    redelivered: usize,
    ack_p50_ms: f64,
    ack_p99_ms: f64,
    ack_max_ms: f64,
}

impl Acks {
    fn of(deliveries: &[Delivery]) -> Acks {
        let delays: Vec<f64> = deliveries
            .iter()
            .filter_map(Delivery::ack_delay)
            .map(|d| d.as_secs_f64() * 1000.0)
            .collect();
        let unacked = deliveries.len() - delays.len();
        let delays = Latencies::from_ms(delays);
        Acks {
            envelopes: deliveries.len(),
            unacked,
            redelivered: deliveries.iter().filter(|d| d.retry_attempt > 0).count(),
            ack_p50_ms: round(delays.percentile(50.0), 2),
            ack_p99_ms: round(delays.percentile(99.0), 2),
            ack_max_ms: round(delays.percentile(100.0), 2),
        }
    }
}

/// A port nobody listens on right now, for a replica's webhook listener.
fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(listener.local_addr()?.port())
}

/// The first chat's user id (clear of the fake bot's own id).
const FIRST_USER: i64 = 100_000;
/// How long the run waits for a reply before it reports what is missing.
const STALL: Duration = Duration::from_secs(30);

/// Runs the scenario; with several replicas, first with one the same way.
pub async fn run(args: GatewayArgs) -> anyhow::Result<Outcome> {
    if args.replicas <= 1 {
        let place = args.store.place(args.db.clone(), "gateway.db").await?;
        let outcome = measure(&args, &place, 1, false).await;
        args.store.discard(place).await?;
        return outcome;
    }
    anyhow::ensure!(
        args.store.is_postgres(),
        "--replicas {} needs a shared store: --store postgres://...",
        args.replicas
    );
    anyhow::ensure!(
        args.platform == BenchPlatform::Telegram,
        "--replicas is measured on --platform telegram (webhook mode behind a balancer)"
    );
    let place = args.store.place(None, "gateway.db").await?;
    let one = measure(&args, &place, 1, true).await;
    args.store.discard(place).await?;
    let place = args.store.place(None, "gateway.db").await?;
    let all = measure(&args, &place, args.replicas, true).await;
    args.store.discard(place).await?;
    let (one, all) = (one?, all?);
    Ok(Outcome { line: format!("{}\n{}", one.line, all.line), ok: one.ok && all.ok })
}

/// The gateway processes of one measurement, stopped when dropped.
struct Daemons {
    children: Vec<tokio::process::Child>,
    stops: Vec<tokio::process::ChildStdin>,
}

/// One measurement: `replicas` gateway processes on the store at `place`; Telegram through a
/// webhook and a balancer when `webhook`.
async fn measure(
    args: &GatewayArgs,
    place: &Place,
    replicas: u32,
    webhook: bool,
) -> anyhow::Result<Outcome> {
    let fakes = Fake::start(args.platform).await;
    let exe = std::env::current_exe().context("could not find this binary to spawn the gateway")?;
    let ports: Vec<u16> = (0..replicas).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
    let balancer = match webhook {
        true => {
            let backends = ports.iter().map(|p| format!("http://127.0.0.1:{p}")).collect();
            Some(herald_fakes::balancer::Balancer::start(backends).await?)
        }
        false => None,
    };
    let mut daemons = Daemons { children: Vec::new(), stops: Vec::new() };
    for port in &ports {
        let mut daemon = Command::new(&exe);
        daemon.arg("gateway-daemon").args(["--store", &place.url()]);
        if let Some(max) = args.store.max_connections {
            daemon.args(["--max-connections", &max.to_string()]);
        }
        if let Some(balancer) = &balancer {
            daemon
                .args(["--webhook-url", &format!("{}/telegram", balancer.url())])
                .args(["--webhook-listen", &format!("127.0.0.1:{port}")]);
        }
        for fake in &fakes {
            daemon
                .args(["--platform", fake.platform().name()])
                .args(["--api-url", &fake.api_url()])
                .args(["--token", fake.token()]);
            if let Some(app_token) = fake.app_token() {
                daemon.args(["--app-token", app_token]);
            }
        }
        let mut daemon = daemon
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .context("could not spawn the gateway process")?;
        daemons.stops.push(daemon.stdin.take().context("the gateway process has no stdin")?);
        daemons.children.push(daemon);
    }
    if let (Some(Fake::Telegram(telegram)), true) = (fakes.first(), webhook) {
        let started = Instant::now();
        while telegram.webhook_url().is_none() {
            anyhow::ensure!(started.elapsed() < Duration::from_secs(30), "no webhook was set");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let pids: Vec<u32> = daemons.children.iter().filter_map(tokio::process::Child::id).collect();
    let daemon = &mut daemons.children[0];
    let mut seen = Vec::with_capacity(fakes.len());
    for fake in &fakes {
        fake.wait_connected(daemon).await?;
        // Warm up: one message through, so connection set-up is not measured.
        fake.dm(1, "warm-up");
        let warm = fake.wait_sent_after(0, Duration::from_secs(30)).await;
        anyhow::ensure!(!warm.is_empty(), "the warm-up message was never answered");
        seen.push(warm.len());
    }

    let total = (args.chats * args.messages) as usize;
    let gap = if args.rate == 0 { Duration::ZERO } else { Duration::from_secs(1) / args.rate };
    let started = Instant::now();
    // Chat `c` writes on fake `c % fakes.len()`: a third of the chats on each with `all`.
    let injector = {
        let fakes = fakes.clone();
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
                    let on = c as usize % fakes.len();
                    at.insert(format!("re {text}"), (Instant::now(), on));
                    fakes[on].dm(FIRST_USER + i64::from(c), &text);
                }
            }
            at
        })
    };
    let mut replies = fake::follow(&fakes, seen);
    let mut arrived: Vec<(usize, String, Instant)> = Vec::with_capacity(total);
    let mut last_progress = Instant::now();
    while arrived.len() < total {
        match tokio::time::timeout(Duration::from_secs(1), replies.recv()).await {
            Ok(Some(reply)) => {
                last_progress = Instant::now();
                arrived.push(reply);
            }
            Ok(None) => break,
            Err(_) if injector.is_finished() && last_progress.elapsed() > STALL => {
                eprintln!(
                    "herald-bench: no reply for {} s; {} of {total} answered",
                    STALL.as_secs(),
                    arrived.len()
                );
                break;
            }
            Err(_) => {}
        }
    }
    drop(replies);
    let elapsed = started.elapsed().as_secs_f64();
    let injected = injector.await.context("the injector failed")?;
    // The high-water mark, read before the process goes.
    let peak_rss = pids.iter().map(|pid| peak_rss_mb(*pid)).fold(0.0, f64::max);
    let mut acks = None;
    for fake in &fakes {
        acks = acks.or(fake.deliveries().await.map(|deliveries| Acks::of(&deliveries)));
    }
    drop(daemons.stops);
    for daemon in &mut daemons.children {
        let status = daemon.wait().await.context("a gateway process was lost")?;
        anyhow::ensure!(status.success(), "a gateway process exited with {status}");
    }
    if let Some(balancer) = balancer {
        balancer.shutdown();
    }

    // The first copy of each reply counts; a second one is a doubled answer, one on another
    // platform than its message's a crossed one (and not an answer).
    let mut first = std::collections::HashSet::with_capacity(arrived.len());
    let (mut doubled, mut crossed) = (0, 0);
    let mut latencies = Vec::with_capacity(arrived.len());
    for (on, text, when) in &arrived {
        if !first.insert(text.as_str()) {
            doubled += 1;
        } else if let Some((at, expected)) = injected.get(text) {
            if on == expected {
                latencies.push(when.duration_since(*at).as_secs_f64() * 1000.0);
            } else {
                crossed += 1;
            }
        }
    }
    if std::env::var_os("HERALD_BENCH_TRACE").is_some() {
        // HERALD_BENCH_TRACE: replies in arrival order, 500 at a time, to see where in the run
        // the slow ones are (the first round creates every session)
        for (i, window) in latencies.chunks(500).enumerate() {
            let mut w = window.to_vec();
            w.sort_by(f64::total_cmp);
            eprintln!("window {i}: p50 {:.1} max {:.1}", w[w.len() / 2], w[w.len() - 1]);
        }
    }
    let answered = latencies.len();
    let lost = total.saturating_sub(answered);
    let latencies = Latencies::from_ms(latencies);
    let line = GatewayLine {
        scenario: "gateway",
        platform: args.platform,
        store: place.backend(),
        replicas,
        chats: args.chats,
        messages: args.messages,
        offered_per_s: args.rate,
        answered,
        lost,
        doubled,
        msgs_per_s: rate(answered as u64, elapsed),
        p50_ms: round(latencies.percentile(50.0), 2),
        p99_ms: round(latencies.percentile(99.0), 2),
        max_ms: round(latencies.percentile(100.0), 2),
        peak_rss_mb: round(peak_rss, 1),
        crossed: (fakes.len() > 1).then_some(crossed),
        acks,
    };
    let acked = line.acks.as_ref().is_none_or(|acks| acks.unacked == 0);
    let ok = lost == 0 && doubled == 0 && crossed == 0 && acked;
    Ok(Outcome { line: serde_json::to_string(&line)?, ok })
}

/// A process's peak resident set size (VmHWM), in MiB; 0 where /proc is not available.
fn peak_rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

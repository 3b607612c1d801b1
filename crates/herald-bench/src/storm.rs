//! `store-storm`: several OS processes, each with many concurrent chats, persisting turns into
//! one database file the way the gateway does, then a check that nothing acknowledged is lost.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use herald_store::Store;
use serde::Serialize;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{Child, ChildStdin, ChildStdout, Command};
use tokio::task::JoinSet;

use crate::Outcome;
use crate::db::{Place, StoreArgs};
use crate::stats::{Latencies, rate, round};
use crate::verify::lost_turns;
use crate::worker::{Event, Report};

/// Messages in a turn: the inbound one and a three-message reply.
const MESSAGES_PER_TURN: u64 = 4;

/// Arguments of `store-storm`.
#[derive(Debug, Clone, clap::Args)]
pub struct StormArgs {
    /// Worker processes writing at once.
    #[arg(long, default_value_t = 4)]
    processes: u32,
    /// Concurrent chats in each process.
    #[arg(long, default_value_t = 128)]
    chats: u32,
    /// Turns per chat.
    #[arg(long, default_value_t = 25)]
    turns: u32,
    /// The database file (default: one in a temporary directory, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
    #[command(flatten)]
    store: StoreArgs,
}

/// The JSON line of `store-storm`.
#[derive(Debug, Serialize)]
struct StormLine {
    scenario: &'static str,
    store: &'static str,
    processes: u32,
    chats: u32,
    turns: u32,
    turns_total: u64,
    turns_per_s: f64,
    msgs_per_s: f64,
    turn_p50_ms: f64,
    turn_p99_ms: f64,
    errors: u64,
    busy_retries: u64,
    lost_turns: u64,
    wall_s: f64,
    /// From the last turn acknowledged until every message was searchable; null when the
    /// indexing failed (counted in `errors`).
    index_catchup_s: Option<f64>,
}

/// Runs the storm and verifies the store afterwards; with `--store postgres://...`, first on a
/// temporary SQLite file, then on PostgreSQL, one line each.
pub async fn run(args: StormArgs) -> anyhow::Result<Outcome> {
    if !args.store.is_postgres() {
        let place = args.store.place(args.db.clone(), "storm.db").await?;
        let outcome = storm(&args, &place).await;
        args.store.discard(place).await?;
        return outcome;
    }
    let sqlite = storm(&args, &args.store.sqlite_place("storm.db")?).await?;
    let place = args.store.place(None, "storm.db").await?;
    let postgres = storm(&args, &place).await;
    args.store.discard(place).await?;
    let postgres = postgres?;
    Ok(Outcome {
        line: format!("{}\n{}", sqlite.line, postgres.line),
        ok: sqlite.ok && postgres.ok,
    })
}

/// One storm on the store at `place`.
async fn storm(args: &StormArgs, place: &Place) -> anyhow::Result<Outcome> {
    eprintln!("store-storm: on {}", place.backend());
    let url = place.url();
    let options = args.store.options(&url);
    // Created and migrated once here, so the workers race on writes, not on the schema.
    Store::open(options.clone()).await.context("could not create the store")?.close().await;

    let exe = std::env::current_exe().context("could not find this binary to spawn workers")?;
    let mut workers = Vec::new();
    for index in 0..args.processes {
        workers.push(WorkerProcess::spawn(&exe, index, args, &url)?);
    }
    for worker in &mut workers {
        worker.ready().await?;
    }
    eprintln!("store-storm: {} workers ready, go", workers.len());
    let started = Instant::now();
    for worker in &mut workers {
        worker.stdin.write_all(b"go\n").await.context("could not start a worker")?;
        worker.stdin.flush().await?;
    }
    let mut running = JoinSet::new();
    for mut worker in workers {
        running.spawn(async move {
            let reported = worker.report().await;
            (worker, reported)
        });
    }
    let mut reports = Vec::new();
    let mut reported = Vec::new();
    let mut failed = 0;
    let mut last_done = started;
    while let Some(joined) = running.join_next().await {
        let (worker, outcome) = joined.context("a worker supervisor task died")?;
        let index = worker.index;
        match outcome {
            Ok((report, done)) => {
                let own = Latencies::from_micros(report.latencies_us.iter().copied());
                eprintln!(
                    "store-storm: worker {index} done after {:.2} s: {} turns, p50 {} ms, \
                     p99 {} ms, {} errors, {} busy retries",
                    done.duration_since(started).as_secs_f64(),
                    own.count(),
                    own.percentile(50.0),
                    own.percentile(99.0),
                    report.errors,
                    report.busy_retries,
                );
                last_done = last_done.max(done);
                reports.push(report);
                reported.push(worker);
            }
            Err(e) => {
                eprintln!("store-storm: worker {index} failed: {e:#}");
                failed += 1;
            }
        }
    }
    let wall = last_done.duration_since(started).as_secs_f64();
    // Only now may the workers close their stores (indexing what they wrote): one that
    // finished early would otherwise hold up the turns of those still writing.
    let closing: Vec<_> = reported.into_iter().map(WorkerProcess::close).collect();
    for (index, mut child) in closing {
        let status = child.wait().await?;
        if !status.success() {
            eprintln!("store-storm: worker {index} reported, then exited with {status}");
            failed += 1;
        }
    }

    // The workers exited after indexing what they wrote; whatever is left is indexed here.
    let store = Store::open(options).await.context("could not reopen the store to verify it")?;
    // A failure here is one more error in the line, not a run without a line.
    let index_catchup_s = match store.index_pending().await {
        Ok(_) => Some(round(last_done.elapsed().as_secs_f64(), 3)),
        Err(e) => {
            eprintln!("store-storm: could not finish the search index: {e}");
            failed += 1;
            None
        }
    };
    let lost = lost_turns(&store, &reports).await?;
    store.close().await;

    let turns_total: u64 =
        reports.iter().flat_map(|r| &r.sessions).map(|s| s.turns.len() as u64).sum();
    let latencies =
        Latencies::from_micros(reports.iter().flat_map(|r| r.latencies_us.iter().copied()));
    let errors = failed + reports.iter().map(|r| r.errors).sum::<u64>();
    let line = StormLine {
        scenario: "store-storm",
        store: place.backend(),
        processes: args.processes,
        chats: args.chats,
        turns: args.turns,
        turns_total,
        turns_per_s: rate(turns_total, wall),
        msgs_per_s: rate(turns_total * MESSAGES_PER_TURN, wall),
        turn_p50_ms: latencies.percentile(50.0),
        turn_p99_ms: latencies.percentile(99.0),
        errors,
        busy_retries: reports.iter().map(|r| r.busy_retries).sum(),
        lost_turns: lost,
        index_catchup_s,
        wall_s: round(wall, 3),
    };
    if lost > 0 {
        eprintln!("store-storm: {lost} acknowledged turns are missing from the store");
    }
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: errors == 0 && lost == 0 })
}

/// A spawned worker and the pipes to it.
#[derive(Debug)]
struct WorkerProcess {
    index: u32,
    child: Child,
    stdin: ChildStdin,
    lines: Lines<BufReader<ChildStdout>>,
}

impl WorkerProcess {
    fn spawn(exe: &Path, index: u32, args: &StormArgs, url: &str) -> anyhow::Result<Self> {
        let mut child = Command::new(exe)
            .arg("worker")
            .args(["--url", url])
            .args(["--index", &index.to_string()])
            .args(["--chats", &args.chats.to_string()])
            .args(["--turns", &args.turns.to_string()])
            .args(["--busy-timeout-ms", &args.store.busy_timeout_ms.to_string()])
            .args(["--write-patience-ms", &args.store.write_patience_ms.to_string()])
            .args(args.store.max_connections.map(|n| format!("--max-connections={n}")))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("could not spawn worker {index}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            bail!("worker {index} has no pipes");
        };
        Ok(WorkerProcess { index, child, stdin, lines: BufReader::new(stdout).lines() })
    }

    /// The next event, or an error for a closed pipe or a line that is not an event.
    async fn next_event(&mut self) -> anyhow::Result<Event> {
        let Some(line) = self.lines.next_line().await? else {
            let status = self.child.wait().await?;
            bail!("worker {} exited ({status}) before reporting", self.index);
        };
        serde_json::from_str(&line)
            .with_context(|| format!("worker {} printed a bad line: {line:?}", self.index))
    }

    async fn ready(&mut self) -> anyhow::Result<()> {
        let ready = tokio::time::timeout(Duration::from_secs(60), self.next_event()).await;
        match ready.with_context(|| format!("worker {} was not ready in 60 s", self.index))?? {
            Event::Ready => Ok(()),
            other => bail!("worker {} said {other:?} instead of ready", self.index),
        }
    }

    /// Waits for the report; returns it and when it arrived.
    async fn report(&mut self) -> anyhow::Result<(Report, Instant)> {
        loop {
            if let Event::Done(report) = self.next_event().await? {
                return Ok((report, Instant::now()));
            }
        }
    }

    /// Closes the worker's stdin, which tells it to close its store and exit.
    fn close(self) -> (u32, Child) {
        drop(self.stdin);
        (self.index, self.child)
    }
}

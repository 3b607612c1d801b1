//! One storm worker process: opens the store, says it is ready, waits for `go`, then runs its
//! chats concurrently and reports on stdout, one JSON event a line; it closes the store once
//! stdin ends.

use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use anyhow::{Context, bail};
use herald_core::Platform;
use herald_store::{Appended, NewMessage, NewSession, Store};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

use crate::db::StoreArgs;
use crate::turn::{EchoedMessage, SYSTEM_PROMPT, Turn};

/// The hidden `worker` subcommand, spawned by `store-storm`.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkerArgs {
    /// The store's URL (sqlite://PATH or postgres://...; created if missing).
    #[arg(long)]
    pub url: String,
    /// This worker's number, part of every chat id.
    #[arg(long, default_value_t = 0)]
    pub index: u32,
    /// Concurrent chats.
    #[arg(long)]
    pub chats: u32,
    /// Turns per chat.
    #[arg(long)]
    pub turns: u32,
    /// Also print each session created and each turn acknowledged, with its messages.
    #[arg(long)]
    pub print_acks: bool,
    #[command(flatten)]
    pub store: StoreArgs,
}

/// A line of the worker's stdout.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// The store is open; waiting for `go` on stdin.
    Ready,
    /// A session was created (with `--print-acks`).
    Session { id: String, chat_id: String, user_id: String, system_prompt: String },
    /// A turn is durable: both writes returned (with `--print-acks`).
    Ack { session: String, turn: u32, ids: Vec<i64>, messages: Vec<EchoedMessage> },
    /// Every chat is done.
    Done(Report),
}

/// What a worker measured.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Report {
    /// Latency of each acknowledged turn (both writes), in microseconds.
    pub latencies_us: Vec<u64>,
    /// Failed writes: session creations and turns.
    pub errors: u64,
    /// `Store::busy_retries()` at the end.
    pub busy_retries: u64,
    /// The turns acknowledged, per session.
    pub sessions: Vec<SessionAcks>,
}

/// The acknowledged turns of one session.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct SessionAcks {
    /// The session id.
    pub id: String,
    /// The turn numbers acknowledged.
    pub turns: Vec<u32>,
}

/// Runs the worker until every chat is done.
pub async fn run(args: WorkerArgs) -> anyhow::Result<()> {
    let store = Store::open(args.store.options(&args.url)).await.context("worker: open store")?;
    // Every text is drawn before `go`, so the storm measures the store, not the generator.
    let scripts: Vec<Vec<Turn>> = (0..args.chats)
        .map(|_| (0..args.turns).map(|_| Turn::synthetic(&mut rand::rng())).collect())
        .collect();
    emit(&Event::Ready)?;
    let line = read_stdin_line().await?;
    if line.trim() != "go" {
        bail!("worker {}: expected `go` on stdin, got {line:?}", args.index);
    }
    let mut chats = JoinSet::new();
    for (chat, script) in (0..args.chats).zip(scripts) {
        chats.spawn(run_chat(store.clone(), args.clone(), chat, script));
    }
    let mut report = Report::default();
    while let Some(done) = chats.join_next().await {
        match done {
            Ok(mut chat) => {
                report.sessions.extend(chat.acks);
                report.latencies_us.append(&mut chat.latencies_us);
                report.errors += chat.errors;
            }
            Err(e) => {
                eprintln!("worker {}: a chat task died: {e}", args.index);
                report.errors += 1;
            }
        }
    }
    report.busy_retries = store.busy_retries();
    // Every turn is durable now; the search index may still trail. Report first, then let
    // close() index what is left: the parent times that as the index catching up. Not before
    // the parent says so (closes stdin), when every worker is done: indexing here while other
    // workers still write would hold their turns up, and the storm measures turns.
    emit(&Event::Done(report))?;
    read_stdin_line().await?;
    store.close().await;
    Ok(())
}

/// One line of stdin (empty at its end), read by a blocking thread.
async fn read_stdin_line() -> anyhow::Result<String> {
    let line = tokio::task::spawn_blocking(|| {
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map(|_| line)
    })
    .await??;
    Ok(line)
}

/// What one chat task did.
#[derive(Debug, Default)]
struct ChatOutcome {
    acks: Option<SessionAcks>,
    latencies_us: Vec<u64>,
    errors: u64,
}

/// One chat: a session, then the turns of its script written as the gateway writes them.
async fn run_chat(store: Store, args: WorkerArgs, chat: u32, script: Vec<Turn>) -> ChatOutcome {
    let name = format!("bench-{}-{chat}", args.index);
    let user_id = format!("user-{name}");
    let new = NewSession {
        session_key: Some(format!("telegram:dm:{name}")),
        chat_id: Some(name.clone()),
        user_id: Some(user_id.clone()),
        chat_type: Some("dm".into()),
        ..NewSession::new(Platform::Telegram, SYSTEM_PROMPT)
    };
    let session = match store.create_session(&new).await {
        Ok(session) => session,
        Err(e) => {
            report_error(args.index, &format!("create the session of {name}: {e}"));
            return ChatOutcome { errors: 1, ..ChatOutcome::default() };
        }
    };
    let mut out = ChatOutcome {
        acks: Some(SessionAcks { id: session.id.clone(), turns: Vec::new() }),
        latencies_us: Vec::with_capacity(args.turns as usize),
        errors: 0,
    };
    if args.print_acks {
        let id = session.id.clone();
        let system_prompt = SYSTEM_PROMPT.into();
        if emit(&Event::Session { id, chat_id: name.clone(), user_id, system_prompt }).is_err() {
            out.errors += 1;
        }
    }
    for (turn, Turn { user, reply }) in (0..args.turns).zip(script) {
        let user = user.with_platform_id(format!("{}:{turn}", session.id));
        let echo = args
            .print_acks
            .then(|| std::iter::once(&user).chain(&reply).map(EchoedMessage::from).collect());
        let started = Instant::now();
        match write_turn(&store, &session.id, user, reply).await {
            Ok(ids) => {
                out.latencies_us
                    .push(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
                if let Some(acks) = &mut out.acks {
                    acks.turns.push(turn);
                }
                if let Some(messages) = echo {
                    let ack = Event::Ack { session: session.id.clone(), turn, ids, messages };
                    if emit(&ack).is_err() {
                        out.errors += 1;
                    }
                }
            }
            Err(e) => {
                out.errors += 1;
                report_error(args.index, &format!("turn {turn} of {name}: {e:#}"));
            }
        }
    }
    out
}

/// Persists a turn the way the gateway does: the inbound message with its platform id (the
/// dedupe record in the same transaction), then the agent's reply. Returns all message ids.
async fn write_turn(
    store: &Store,
    session: &str,
    user: NewMessage,
    reply: Vec<NewMessage>,
) -> anyhow::Result<Vec<i64>> {
    let platform_id = user.platform_message_id.clone().unwrap_or_default();
    let inbound = store.append_inbound(session, Platform::Telegram, &platform_id, user).await;
    let mut ids = match inbound.context("inbound")? {
        Appended::Stored(ids) => ids,
        Appended::Duplicate => bail!("the inbound message was taken for a duplicate"),
    };
    ids.extend(store.append_messages(session, reply).await.context("reply")?);
    Ok(ids)
}

/// Prints the first few errors of a worker on stderr; all of them are counted.
fn report_error(index: u32, what: &str) {
    static SHOWN: AtomicU32 = AtomicU32::new(0);
    if SHOWN.fetch_add(1, Ordering::Relaxed) < 5 {
        eprintln!("worker {index}: {what}");
    }
}

/// Writes one event line on stdout and flushes it, so the reader sees it at once.
fn emit(event: &Event) -> anyhow::Result<()> {
    let line = serde_json::to_string(event)?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{line}").and_then(|()| out.flush()).context("worker: write to stdout")
}

//! Filling a store for `search`: many sessions of varied messages from several sources and
//! users, written through `Store::append_messages` by many tasks at once so group commit
//! batches them.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use herald_core::Platform;
use herald_store::{NewMessage, NewSession, Store};
use rand::{Rng, RngExt};
use tokio::task::JoinSet;

use crate::turn::SYSTEM_PROMPT;
use crate::vocab::Vocabulary;

/// Messages per session.
const SESSION_LEN: u64 = 50;

/// Sessions written at once; each session's messages are one append.
const WRITERS: usize = 64;

/// Distinct platform users.
pub const USERS: u64 = 500;

/// Phrases planted in about one message in 500, for phrase and punctuation queries.
pub const PLANTED: &[&str] = &[
    "TODO: fix the flaky retry test",
    "chat-send failed with code 42",
    "upgrade to v2.1 before friday",
    "database is locked",
    "memory leak in the router",
    "see config.toml line 12",
];

const TOOLS: &[&str] = &["session_search", "web_fetch", "shell", "read_file"];

/// Appends `messages` messages in new sessions and returns how long it took.
pub async fn fill(store: &Store, messages: u64) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let sessions = messages.div_ceil(SESSION_LEN);
    let next = Arc::new(AtomicU64::new(0));
    let written = Arc::new(AtomicU64::new(0));
    let mut writers = JoinSet::new();
    for _ in 0..WRITERS {
        let (store, next, written) = (store.clone(), next.clone(), written.clone());
        writers.spawn(async move {
            loop {
                let n = next.fetch_add(1, Ordering::Relaxed);
                if n >= sessions {
                    return anyhow::Ok(());
                }
                let len = SESSION_LEN.min(messages - n * SESSION_LEN);
                let session = store.create_session(&session(n)).await?;
                let batch = conversation(&mut rand::rng(), len);
                store.append_messages(&session.id, batch).await?;
                written.fetch_add(len, Ordering::Relaxed);
            }
        });
    }
    let progress = tokio::spawn(report_progress(written, messages, started));
    while let Some(done) = writers.join_next().await {
        done.context("a fill task died")?.context("filling the store failed")?;
    }
    progress.abort();
    let elapsed = started.elapsed();
    eprintln!("search: filled {messages} messages in {:.1} s", elapsed.as_secs_f64());
    Ok(elapsed)
}

async fn report_progress(written: Arc<AtomicU64>, total: u64, started: Instant) {
    loop {
        tokio::time::sleep(Duration::from_secs(5)).await;
        let done = written.load(Ordering::Relaxed);
        let rate = done as f64 / started.elapsed().as_secs_f64();
        eprintln!("search: fill {done}/{total} messages ({rate:.0} msg/s)");
    }
}

/// Session `n`: sources in turn, users spread over [`USERS`].
fn session(n: u64) -> NewSession {
    let source = Platform::ALL[(n % 4) as usize];
    NewSession {
        chat_id: Some(format!("chat-{n}")),
        user_id: Some(format!("u{}", n % USERS)),
        session_key: Some(format!("{source}:dm:chat-{n}")),
        ..NewSession::new(source, SYSTEM_PROMPT)
    }
}

/// `len` messages in the rhythm of a conversation: a question, a tool call, its result, an
/// answer, of varied lengths, some with a planted phrase.
fn conversation<R: Rng + ?Sized>(rng: &mut R, len: u64) -> Vec<NewMessage> {
    let vocab = Vocabulary::global();
    let mut call = String::new();
    let mut tool = TOOLS[0];
    (0..len)
        .map(|i| {
            let bytes = match i % 4 {
                0 => rng.random_range(40..300),
                1 => 0,
                2 => rng.random_range(100..700),
                _ => rng.random_range(60..400),
            };
            let mut text = vocab.text(rng, bytes);
            if i % 4 != 1 && rng.random_ratio(1, 500) {
                let phrase = PLANTED[rng.random_range(0..PLANTED.len())];
                text = format!("{text} {phrase}. {}", vocab.text(rng, 30));
            }
            match i % 4 {
                0 => NewMessage::user(text),
                1 => {
                    call = format!("call_{:016x}", rng.random::<u64>());
                    tool = TOOLS[rng.random_range(0..TOOLS.len())];
                    let args = serde_json::json!({ "query": vocab.text(rng, 15) }).to_string();
                    let calls = serde_json::json!([{
                        "id": call, "type": "function",
                        "function": { "name": tool, "arguments": args },
                    }]);
                    NewMessage::assistant(text).with_tool_calls(calls)
                }
                2 => NewMessage::tool(call.clone(), tool, text),
                _ => NewMessage::assistant(text),
            }
        })
        .collect()
}

//! `compress`: compressing long sessions through the turn pipeline against a model that answers
//! at once, measuring herald's own time per compression (reading the session, cutting the tail,
//! the transcript, the child's transaction) with the model's time taken out; then a turn in
//! each new child against a turn in a fresh session of the same length.

use std::path::PathBuf;
use std::time::Duration;

use herald::wiring;
use herald_agent::{Agent, ToolContext};
use herald_core::Platform;
use herald_fakes::{FakeModel, Reply};
use herald_gateway::compress::{CompressionSettings, Compressor};
use herald_gateway::pipeline::{Said, Turn};
use herald_store::{NewMessage, NewSession, Session, Store};
use rand::SeedableRng;
use serde::Serialize;

use crate::Outcome;
use crate::agent::{Timed, model_and_store};
use crate::db::ScratchDb;
use crate::stats::{Latencies, round};
use crate::vocab::Vocabulary;

/// Arguments of `compress`.
#[derive(Debug, Clone, clap::Args)]
pub struct CompressArgs {
    /// Messages in each session compressed.
    #[arg(long, default_value_t = 2000)]
    pub messages: u32,
    /// Sessions compressed (one measurement each).
    #[arg(long, default_value_t = 30)]
    pub runs: u32,
    /// The database file (default: a temporary one).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct CompressLine {
    scenario: &'static str,
    messages: u32,
    runs: u32,
    /// herald's own time per compression, without the model's.
    own_p50_ms: f64,
    own_p99_ms: f64,
    model_p50_ms: f64,
    /// Messages carried over verbatim (median).
    kept: u64,
    /// herald's own time of the turn right after a compression, and of a turn in a fresh
    /// session holding as many messages.
    after_turn_p50_ms: f64,
    fresh_turn_p50_ms: f64,
    /// after / fresh: at most about 1 means the child costs no more than any session its size.
    after_vs_fresh: f64,
}

const SYSTEM_PROMPT: &str = crate::turn::SYSTEM_PROMPT;
const SUMMARY: &str = "The user planned a deployment of /srv/app (ticket 4711); decided on \
    blue-green; open: the database migration and the rollback plan.";

/// Runs the scenario.
pub async fn run(args: CompressArgs) -> anyhow::Result<Outcome> {
    let db = ScratchDb::resolve(args.db.clone(), "compress.db")?;
    let (store, fake, provider) = model_and_store(&db).await?;
    let tools = wiring::tools(&store);
    let compressor = Compressor::new(CompressionSettings::default());
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);

    let (mut own, mut model, mut kept, mut after, mut fresh) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for run in 0..args.runs {
        let session = filled(&store, &mut rng, &format!("u{run}"), args.messages).await?;
        store.index_pending().await?;
        let turn = pipeline(&store, &provider, &tools, &compressor, &session);
        fake.push_reply(Reply::text(SUMMARY));
        provider.reset();
        let began = std::time::Instant::now();
        let done = turn.compress_now(&compressor, &Default::default()).await?;
        let total = began.elapsed();
        let spent = provider.spent();
        own.push(total.saturating_sub(spent));
        model.push(spent);
        kept.push(done.kept as u64);

        // The turn after it, and one in a fresh session as long as the child.
        let child = (done.child, session.1.clone());
        let length = u32::try_from(store.history(&child.0.id).await?.len()).unwrap_or(u32::MAX);
        let twin = filled(&store, &mut rng, &format!("t{run}"), length).await?;
        // Both indexed and read once before, and taken in turns first, so neither pays for
        // the other's background work.
        store.index_pending().await?;
        store.history(&twin.0.id).await?;
        let mut pair = [(&child, &mut after), (&twin, &mut fresh)];
        if run % 2 == 1 {
            pair.reverse();
        }
        for (session, into) in pair {
            let turn = pipeline(&store, &provider, &tools, &compressor, session);
            provider.reset();
            let began = std::time::Instant::now();
            turn.run(Said::Line("and where do we stand now?"), None, &Default::default()).await?;
            into.push(began.elapsed().saturating_sub(provider.spent()));
        }
    }
    store.close().await;

    let micros = |v: &[Duration]| Latencies::from_micros(v.iter().map(|d| d.as_micros() as u64));
    let (own, model) = (micros(&own), micros(&model));
    let (after, fresh) = (micros(&after), micros(&fresh));
    kept.sort_unstable();
    let kept = kept.get(kept.len() / 2).copied().unwrap_or(0);
    let after_p50 = after.percentile(50.0);
    let fresh_p50 = fresh.percentile(50.0);
    let line = CompressLine {
        scenario: "compress",
        messages: args.messages,
        runs: args.runs,
        own_p50_ms: own.percentile(50.0),
        own_p99_ms: own.percentile(99.0),
        model_p50_ms: model.percentile(50.0),
        kept,
        after_turn_p50_ms: after_p50,
        fresh_turn_p50_ms: fresh_p50,
        after_vs_fresh: round(after_p50 / fresh_p50.max(0.001), 2),
    };
    eprintln!("compress: {} sessions of {} messages", args.runs, args.messages);
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: true })
}

fn pipeline<'a>(
    store: &'a Store,
    provider: &'a Timed,
    tools: &'a herald_agent::ToolRegistry,
    compressor: &'a Compressor,
    session: &'a (Session, String),
) -> Turn<'a, Timed> {
    Turn {
        store,
        agent: Agent {
            provider,
            tools,
            model: FakeModel::MODEL,
            system_prompt: &session.1,
            max_iterations: 8,
        },
        context: ToolContext {
            platform: Platform::Telegram,
            user_id: session.0.user_id.clone(),
            session_id: session.0.id.clone(),
        },
        compressor: Some(compressor),
        runs: None,
    }
}

/// A session of `messages` messages of varied text, with its stored system prompt.
async fn filled(
    store: &Store,
    rng: &mut rand::rngs::StdRng,
    user: &str,
    messages: u32,
) -> anyhow::Result<(Session, String)> {
    let vocab = Vocabulary::global();
    let new = NewSession {
        user_id: Some(user.to_owned()),
        ..NewSession::new(Platform::Telegram, SYSTEM_PROMPT)
    };
    let session = store.create_session(&new).await?;
    let history: Vec<NewMessage> = (0..messages)
        .map(|i| {
            if i % 2 == 0 {
                NewMessage::user(vocab.text(rng, 200))
            } else {
                NewMessage::assistant(vocab.text(rng, 400))
            }
        })
        .collect();
    store.append_messages(&session.id, history).await?;
    let prompt = store.system_prompt(&session.id).await?.unwrap_or_default();
    Ok((session, prompt))
}

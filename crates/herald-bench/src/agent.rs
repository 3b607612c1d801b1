//! `agent-overhead`: turns through the turn pipeline the gateway and `herald chat` use, against a
//! model that answers at once, measuring herald's own time per turn (storing the line, reading
//! history, building the request, storing the delta), with the model's time taken out. Each
//! session's stored system prompt is read once, when the session is opened, as the gateway and
//! `herald chat` do.

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::Context;
use herald::wiring;
use herald_agent::{
    Agent, ChatRequest, Completion, OpenAiProvider, Provider, ProviderError, RetryPolicy,
    ToolContext,
};
use herald_core::Platform;
use herald_fakes::FakeModel;
use herald_gateway::pipeline::{Said, Turn};
use herald_store::{NewMessage, NewSession, Store, StoreOptions};
use rand::SeedableRng;
use serde::Serialize;

use crate::Outcome;
use crate::db::ScratchDb;
use crate::stats::{Latencies, rate, round};
use crate::vocab::Vocabulary;

/// Arguments of `agent-overhead`.
#[derive(Debug, Clone, clap::Args)]
pub struct AgentArgs {
    /// Turns to measure.
    #[arg(long, default_value_t = 2000)]
    pub turns: u32,
    /// Messages already in each session before the first measured turn.
    #[arg(long, default_value_t = 200)]
    pub history: u32,
    /// Sessions the turns rotate over (so histories grow slowly).
    #[arg(long, default_value_t = 50)]
    pub sessions: u32,
    /// The database file (default: a temporary one).
    #[arg(long)]
    pub db: Option<PathBuf>,
}

#[derive(Debug, Serialize)]
struct AgentLine {
    scenario: &'static str,
    turns: u32,
    history: u32,
    turns_per_s: f64,
    own_p50_ms: f64,
    own_p99_ms: f64,
    model_p50_ms: f64,
    turn_p99_ms: f64,
    /// Reading the history back from the store.
    read_p50_ms: f64,
    read_p99_ms: f64,
    /// Storing the agent's messages (the line is stored before the history is read).
    store_p50_ms: f64,
    store_p99_ms: f64,
}

/// The real provider, timing each call so herald's own time can be told apart.
pub(crate) struct Timed {
    pub(crate) inner: OpenAiProvider,
    pub(crate) spent: Mutex<Duration>,
}

impl Timed {
    /// Starts counting the model's time afresh.
    pub(crate) fn reset(&self) {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) = Duration::ZERO;
    }

    /// The model's time since the last reset.
    pub(crate) fn spent(&self) -> Duration {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Provider for Timed {
    async fn complete(&self, request: ChatRequest<'_>) -> Result<Completion, ProviderError> {
        let started = Instant::now();
        let result = self.inner.complete(request).await;
        *self.spent.lock().unwrap_or_else(|p| p.into_inner()) += started.elapsed();
        result
    }
}

/// A store on `db`, the fake model, and the real provider pointed at it, timed.
pub(crate) async fn model_and_store(db: &ScratchDb) -> anyhow::Result<(Store, FakeModel, Timed)> {
    let store =
        Store::open(StoreOptions::new(db.path())).await.context("could not open the store")?;
    let fake = FakeModel::start().await;
    let inner = OpenAiProvider::new(
        &fake.base_url(),
        None,
        Duration::from_secs(30),
        RetryPolicy::default(),
    )?;
    Ok((store, fake, Timed { inner, spent: Mutex::new(Duration::ZERO) }))
}

/// Runs the scenario.
pub async fn run(args: AgentArgs) -> anyhow::Result<Outcome> {
    let db = ScratchDb::resolve(args.db.clone(), "agent.db")?;
    // The fake model stops when dropped: it is kept to the end of the run.
    let (store, _fake, provider) = model_and_store(&db).await?;
    let tools = wiring::tools(&store);

    let vocab = Vocabulary::global();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    let mut sessions = Vec::new();
    for s in 0..args.sessions {
        let new = NewSession {
            user_id: Some(format!("u{s}")),
            ..NewSession::new(Platform::Telegram, crate::turn::SYSTEM_PROMPT)
        };
        let session = store.create_session(&new).await?;
        let history = (0..args.history)
            .map(|i| {
                if i % 2 == 0 {
                    NewMessage::user(vocab.text(&mut rng, 200))
                } else {
                    NewMessage::assistant(vocab.text(&mut rng, 400))
                }
            })
            .collect();
        store.append_messages(&session.id, history).await?;
        // Read back once per session, as the gateway's worker and `herald chat` do when they
        // open one: the stored text, verbatim, for every turn after.
        let system_prompt = store.system_prompt(&session.id).await?.unwrap_or_default();
        sessions.push((session, system_prompt));
    }
    store.index_pending().await?;

    let mut own = Vec::with_capacity(args.turns as usize);
    let mut model = Vec::with_capacity(args.turns as usize);
    let mut whole = Vec::with_capacity(args.turns as usize);
    let mut reads = Vec::with_capacity(args.turns as usize);
    let mut stores = Vec::with_capacity(args.turns as usize);
    let started = Instant::now();
    for turn in 0..args.turns {
        let (session, system_prompt) = &sessions[turn as usize % sessions.len()];
        let line = vocab.text(&mut rng, 200);
        *provider.spent.lock().unwrap_or_else(|p| p.into_inner()) = Duration::ZERO;
        let turn = Turn {
            store: &store,
            agent: Agent {
                provider: &provider,
                tools: &tools,
                model: FakeModel::MODEL,
                system_prompt,
                max_iterations: 8,
            },
            context: ToolContext {
                platform: Platform::Telegram,
                user_id: session.user_id.clone(),
                session_id: session.id.clone(),
            },
            compressor: None,
            runs: None,
        };
        let began = Instant::now();
        let answer = turn.run(Said::Line(&line), None, &Default::default()).await?;
        reads.push(answer.read);
        stores.push(answer.stored);
        let total = began.elapsed();
        let spent = *provider.spent.lock().unwrap_or_else(|p| p.into_inner());
        whole.push(total);
        model.push(spent);
        own.push(total.saturating_sub(spent));
    }
    let elapsed = started.elapsed().as_secs_f64();
    store.close().await;

    let micros = |v: &[Duration]| Latencies::from_micros(v.iter().map(|d| d.as_micros() as u64));
    let (own, model, whole) = (micros(&own), micros(&model), micros(&whole));
    let (reads, stores) = (micros(&reads), micros(&stores));
    let line = AgentLine {
        scenario: "agent-overhead",
        turns: args.turns,
        history: args.history,
        turns_per_s: rate(u64::from(args.turns), elapsed),
        own_p50_ms: own.percentile(50.0),
        own_p99_ms: own.percentile(99.0),
        model_p50_ms: model.percentile(50.0),
        turn_p99_ms: round(whole.percentile(99.0), 3),
        read_p50_ms: reads.percentile(50.0),
        read_p99_ms: reads.percentile(99.0),
        store_p50_ms: stores.percentile(50.0),
        store_p99_ms: stores.percentile(99.0),
    };
    eprintln!("agent-overhead: {} turns in {elapsed:.2} s", args.turns);
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: true })
}

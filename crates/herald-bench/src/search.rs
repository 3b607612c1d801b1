//! `search`: fills a store with many varied messages, then times a fixed set of queries
//! through `Store::search`, overall and per kind of query.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use anyhow::{Context, bail};
use herald_store::{SearchQuery, Store, StoreOptions};
use serde::Serialize;

use crate::Outcome;
use crate::db::ScratchDb;
use crate::fill::fill;
use crate::queries::fixed;
use crate::stats::{Latencies, round};

/// Arguments of `search`.
#[derive(Debug, Clone, clap::Args)]
pub struct SearchArgs {
    /// Messages in the store; an existing `--db` with exactly this many is searched as is.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Timed runs of each query, after one untimed run.
    #[arg(long, default_value_t = 5)]
    repeat: u32,
    /// The database file (default: one in a temporary directory, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
}

/// The JSON line of `search`.
#[derive(Debug, Serialize)]
struct SearchLine {
    scenario: &'static str,
    messages: u64,
    queries: usize,
    runs: usize,
    p50_ms: f64,
    p99_ms: f64,
    /// Seconds the fill took; null when an existing store was reused.
    fill_s: Option<f64>,
    /// Seconds of the first search, which includes any indexing the store deferred.
    first_query_s: f64,
    by_kind: BTreeMap<&'static str, KindLine>,
}

/// Latency of one kind of query.
#[derive(Debug, Serialize)]
struct KindLine {
    queries: usize,
    p50_ms: f64,
    p99_ms: f64,
    /// Hits of the kind's queries, averaged (at most the limit, 20).
    mean_hits: f64,
}

/// Fills (unless already filled) and searches.
pub async fn run(args: SearchArgs) -> anyhow::Result<Outcome> {
    let db = ScratchDb::resolve(args.db.clone(), "search.db")?;
    let store =
        Store::open(StoreOptions::new(db.path())).await.context("could not open the store")?;
    let present = u64::try_from(store.stats().await?.messages).unwrap_or(0);
    let fill_s = match present {
        n if n == args.messages => {
            eprintln!("search: reusing {} with {n} messages", db.path().display());
            None
        }
        n if n < args.messages => {
            Some(round(fill(&store, args.messages - n).await?.as_secs_f64(), 1))
        }
        n => bail!(
            "{} holds {n} messages, more than --messages {}",
            db.path().display(),
            args.messages
        ),
    };

    let started = Instant::now();
    store.search(&SearchQuery::new("herald")).await.context("the first search failed")?;
    let first_query_s = round(started.elapsed().as_secs_f64(), 3);
    eprintln!("search: first query after {first_query_s} s");

    let queries = fixed();
    let mut all = Vec::new();
    let mut by_kind: BTreeMap<&'static str, KindRuns> = BTreeMap::new();
    for query in &queries {
        let hits = store
            .search(&query.search)
            .await
            .with_context(|| format!("query {:?}", query.search.text))?;
        let mut times = Vec::new();
        for _ in 0..args.repeat {
            let started = Instant::now();
            store.search(&query.search).await?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let own = Latencies::from_ms(times.clone());
        eprintln!(
            "search: {:<8} {:<40} {:>2} hits  p50 {:>8.3} ms  max {:>8.3} ms",
            query.kind,
            format!("{:?}", query.search.text),
            hits.len(),
            own.percentile(50.0),
            own.percentile(100.0),
        );
        let kind = by_kind.entry(query.kind).or_default();
        kind.times_ms.extend_from_slice(&times);
        kind.queries += 1;
        kind.hits += hits.len();
        all.extend(times);
    }
    store.close().await;

    let all = Latencies::from_ms(all);
    let line = SearchLine {
        scenario: "search",
        messages: args.messages,
        queries: queries.len(),
        runs: all.count(),
        p50_ms: all.percentile(50.0),
        p99_ms: all.percentile(99.0),
        fill_s,
        first_query_s,
        by_kind: by_kind.into_iter().map(|(kind, runs)| (kind, runs.line())).collect(),
    };
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: true })
}

/// The runs of one kind of query, gathered.
#[derive(Debug, Default)]
struct KindRuns {
    times_ms: Vec<f64>,
    queries: usize,
    hits: usize,
}

impl KindRuns {
    fn line(self) -> KindLine {
        let latencies = Latencies::from_ms(self.times_ms);
        KindLine {
            queries: self.queries,
            p50_ms: latencies.percentile(50.0),
            p99_ms: latencies.percentile(99.0),
            mean_hits: round(self.hits as f64 / self.queries.max(1) as f64, 1),
        }
    }
}

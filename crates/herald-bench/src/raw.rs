//! `store-raw`: the machine's ceiling for the storm's turns, one connection committing one turn
//! at a time with none of the store's queueing, through `herald_store::write_turns_raw`.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use serde::Serialize;

use crate::Outcome;
use crate::db::ScratchDb;
use crate::stats::{rate, round};
use crate::turn::Turn;

/// Turns written with one drawn text before the next is drawn: `write_turns_raw` repeats a
/// single turn, and a text indexed ten thousand times would flatter the full-text index.
const TURNS_PER_TEXT: usize = 1000;

/// Arguments of `store-raw`.
#[derive(Debug, Clone, clap::Args)]
pub struct RawArgs {
    /// Turns to write (four messages each, one commit each).
    #[arg(long, default_value_t = 10_000)]
    turns: usize,
    /// The database file (default: one in a temporary directory, removed afterwards).
    #[arg(long)]
    db: Option<PathBuf>,
}

/// The JSON line of `store-raw`.
#[derive(Debug, Serialize)]
struct RawLine {
    scenario: &'static str,
    turns: usize,
    turns_per_s: f64,
    msgs_per_s: f64,
    write_s: f64,
}

/// Writes the turns and reports the rate of the timed writes alone.
pub async fn run(args: RawArgs) -> anyhow::Result<Outcome> {
    let db = ScratchDb::resolve(args.db.clone(), "raw.db")?;
    let mut elapsed = Duration::ZERO;
    let mut written = 0;
    while written < args.turns {
        let turns = TURNS_PER_TEXT.min(args.turns - written);
        let mut turn = Turn::synthetic(&mut rand::rng());
        turn.user.platform_message_id = Some("raw".into());
        let messages = turn.messages();
        elapsed += herald_store::write_turns_raw(db.path(), turns, &messages)
            .await
            .context("raw writes failed")?;
        written += turns;
        eprintln!("store-raw: {written}/{} turns", args.turns);
    }
    let seconds = elapsed.as_secs_f64();
    let turns = args.turns as u64;
    let line = RawLine {
        scenario: "store-raw",
        turns: args.turns,
        turns_per_s: rate(turns, seconds),
        msgs_per_s: rate(turns * 4, seconds),
        write_s: round(seconds, 3),
    };
    Ok(Outcome { line: serde_json::to_string(&line)?, ok: true })
}

//! herald-bench: measures herald's session store as the gateway uses it, each scenario printing
//! one JSON line on stdout (progress goes to stderr).
//!
//! - `store-storm`: several processes, many chats each, turns persisted through the store;
//!   then a check that no acknowledged turn is missing.
//! - `store-raw`: the same turns on one bare connection, the machine's ceiling.
//! - `search`: a large filled store and a fixed set of queries.
//! - `agent-overhead`: turns through the agent loop and the store against an instant fake
//!   model; herald's own time per turn.
//! - `gateway`: chats through a fake platform (`--platform telegram`, `discord` or `slack`), the
//!   real adapter and the gateway; on Slack also the envelopes' acknowledgement delays; `all`
//!   runs the three at once in one gateway.
//!
//! All SQL stays in the store; the agent is wired as the `herald` binary wires it.

mod agent;
mod compress;
mod db;
mod fill;
mod gateway;
mod queries;
mod raw;
mod search;
mod stats;
mod storm;
mod turn;
mod verify;
mod vocab;
mod worker;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(name = "herald-bench", version, about = "Benchmarks of herald's session store")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Many processes and chats writing turns into one store at once.
    StoreStorm(storm::StormArgs),
    /// One connection writing turns as fast as SQLite can commit them.
    StoreRaw(raw::RawArgs),
    /// Search latency over a large store.
    Search(search::SearchArgs),
    /// Turns through the agent loop and the store; herald's own time per turn.
    AgentOverhead(agent::AgentArgs),
    /// Chats through a fake platform, the real adapter and the gateway.
    Gateway(gateway::GatewayArgs),
    /// Compressing long sessions; herald's own time per compression and the turn after it.
    Compress(compress::CompressArgs),
    /// The gateway process of `gateway` (spawned by it).
    #[command(hide = true)]
    GatewayDaemon(gateway::daemon::DaemonArgs),
    /// One process of a storm (spawned by `store-storm`).
    #[command(hide = true)]
    Worker(worker::WorkerArgs),
}

/// What a scenario found: its JSON line, and whether the run passed its own checks.
#[derive(Debug)]
struct Outcome {
    line: String,
    ok: bool,
}

#[tokio::main]
async fn main() -> ExitCode {
    // Warnings (a platform retrying, a slow store) go to stderr; RUST_LOG shows more.
    herald::logging::init(tracing::Level::WARN);
    let outcome = match Cli::parse().command {
        Command::StoreStorm(args) => storm::run(args).await,
        Command::StoreRaw(args) => raw::run(args).await,
        Command::Search(args) => search::run(args).await,
        Command::AgentOverhead(args) => agent::run(args).await,
        Command::Gateway(args) => gateway::run(args).await,
        Command::Compress(args) => compress::run(args).await,
        Command::GatewayDaemon(args) => {
            gateway::daemon::run(args).await.map(|()| Outcome { line: String::new(), ok: true })
        }
        Command::Worker(args) => {
            worker::run(args).await.map(|()| Outcome { line: String::new(), ok: true })
        }
    };
    match outcome {
        Ok(Outcome { line, ok }) => {
            if !line.is_empty() {
                println!("{line}");
            }
            if ok { ExitCode::SUCCESS } else { ExitCode::FAILURE }
        }
        Err(e) => {
            eprintln!("herald-bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

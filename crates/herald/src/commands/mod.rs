//! The commands: each writes its output for people or, with `--json`, for scripts, to the
//! writer it is given (stdout), and returns the exit code.

pub mod config;
pub mod doctor;
mod export;
pub mod gateway;
mod lineage;
mod pairing;
mod search;
pub mod service;
mod sessions;
mod show;
mod store;

use std::io::{self, BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use herald_store::Store;

use crate::cli::{Command, ConfigCommand, StoreCommand};
use crate::config::Loaded;

/// Runs a command (other than `config example`, which needs no config) on a small
/// single-threaded runtime, writing to stdout.
pub fn run(command: Command, loaded: &Loaded) -> anyhow::Result<ExitCode> {
    // The daemon uses every core; one-shot commands need only one thread.
    let runtime = match command {
        Command::Gateway => tokio::runtime::Builder::new_multi_thread().enable_all().build(),
        _ => tokio::runtime::Builder::new_current_thread().enable_all().build(),
    }
    .context("could not start the async runtime")?;
    let mut out = BufWriter::new(io::stdout().lock());
    let code = runtime.block_on(dispatch(command, loaded, &mut out))?;
    out.flush()?;
    Ok(code)
}

async fn dispatch(
    command: Command,
    loaded: &Loaded,
    out: &mut dyn Write,
) -> anyhow::Result<ExitCode> {
    match command {
        Command::Chat(args) => crate::chat::run(loaded, args).await,
        Command::Config(ConfigCommand::Check) => config::check(loaded, out),
        Command::Config(ConfigCommand::Example) => config::write_example(out),
        Command::Doctor { json } => doctor::run(loaded, json, out).await,
        Command::Gateway => gateway::run(loaded).await,
        // Only chat and the gateway create a store: these commands look at one, and a typo in
        // the path should not leave an empty database behind.
        Command::Pairing(command) => {
            let store = Store::open_existing(loaded.config.store_options()).await?;
            let result = pairing::run(&store, command, out).await;
            store.close().await;
            result
        }
        Command::Service(command) => service::run(command, loaded, out),
        Command::Store(StoreCommand::Copy { to, to_password_env }) => {
            store::copy(loaded, &to, to_password_env.as_deref(), out).await
        }
        Command::Sessions(command) => {
            let store = Store::open_existing(loaded.config.store_options()).await?;
            let result = sessions::run(&store, command, out).await;
            store.close().await;
            result.map(|()| ExitCode::SUCCESS)
        }
    }
}

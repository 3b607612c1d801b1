//! `herald`: parse the command line, set up logging, load the config, run the command.

use std::io::{self, Write};
use std::process::ExitCode;

use clap::Parser;
use herald::cli::{Cli, Command, ConfigCommand};
use herald::config::{self, ConfigError, Env};
use herald::{commands, logging};

fn main() -> ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log_level());
    let outcome = match cli.command {
        // The example must print even when the current config is broken.
        Command::Config(ConfigCommand::Example) => commands::config::example(),
        command => config::load(cli.config.as_deref(), &Env::process())
            .map_err(anyhow::Error::from)
            .and_then(|loaded| commands::run(command, &loaded)),
    };
    match outcome {
        Ok(code) => code,
        Err(err) => report(&err),
    }
}

/// Prints the error as one line and picks the exit code: 2 for configuration, else 1.
fn report(err: &anyhow::Error) -> ExitCode {
    let broken_pipe = err.chain().any(|e| {
        e.downcast_ref::<io::Error>().is_some_and(|e| e.kind() == io::ErrorKind::BrokenPipe)
    });
    if broken_pipe {
        // The reader (`| head`) has seen enough; that is not a failure.
        return ExitCode::SUCCESS;
    }
    let text = format!("{err:#}");
    let line: Vec<&str> = text.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    // Nothing sensible is left to do if stderr itself is gone.
    let _ = writeln!(io::stderr(), "error: {}", line.join("; "));
    if err.chain().any(|e| e.is::<ConfigError>()) { ExitCode::from(2) } else { ExitCode::FAILURE }
}

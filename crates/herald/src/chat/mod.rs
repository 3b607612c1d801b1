//! `herald chat`: the agent in a terminal, with line editing and history, persisted through
//! the store so a conversation survives quitting and starting again.

mod session;
mod turn;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use herald_gateway::compress::Compressor;
use herald_store::Store;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;

use crate::cli::ChatArgs;
use crate::config::{ConfigError, Loaded};
use crate::wiring;

pub use session::cli_user;

const HELP: &str = "\
/new          start a new session (the current one is kept)
/title NAME   name this session (resume it later with `herald chat -r NAME`)
/compress     summarize this long conversation and go on from the summary in a new session
/help         this list
/exit         quit (also Ctrl-D); Ctrl-C stops a running answer, at the prompt it quits";

/// Runs the chat until the person quits.
pub async fn run(loaded: &Loaded, args: ChatArgs) -> anyhow::Result<ExitCode> {
    let config = &loaded.config;
    let provider = match wiring::provider(config) {
        Ok(provider) => provider,
        Err(e @ wiring::NoModel::NoKey { .. }) => {
            let key = "model.api_key_env";
            return Err(ConfigError::for_key(loaded.path.as_deref(), key, e.to_string()).into());
        }
        Err(e) => return Err(e).context("could not set up the model client"),
    };
    let store = Store::open(config.store_options()).await?;
    let mut chat = session::Chat::start(&store, config, &args).await?;
    let tools = wiring::tools(&store);
    let compressor = Compressor::new(crate::commands::gateway::compression(config));

    let mut editor = DefaultEditor::new().context("could not set up the terminal")?;
    let history_file = config.store.path.with_file_name("chat_history");
    let _ = editor.load_history(&history_file);
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", chat.banner())?;

    loop {
        let (back, read) = read_line(editor).await?;
        editor = back;
        let line = match read {
            Ok(line) => line,
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => break,
            Err(e) => return Err(e).context("could not read from the terminal"),
        };
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let _ = editor.add_history_entry(line);
        match line.split_once(' ').map_or((line, ""), |(c, rest)| (c, rest.trim())) {
            ("/exit" | "/quit", _) => break,
            ("/help", _) => writeln!(stdout, "{HELP}")?,
            ("/new", _) => {
                chat.new_session(&store, config).await?;
                writeln!(stdout, "{}", chat.banner())?;
            }
            ("/title", "") => writeln!(stdout, "usage: /title NAME")?,
            ("/title", name) => match store.rename_session(&chat.session.id, name).await {
                Ok(()) => writeln!(stdout, "this session is now titled \"{name}\"")?,
                Err(e) => eprintln!("error: {e}"),
            },
            ("/compress", _) => {
                match turn::compress(&store, &provider, &tools, &chat, &compressor).await? {
                    Ok((child, line)) => {
                        chat.session = child;
                        writeln!(stdout, "{line}")?;
                    }
                    Err(line) => eprintln!("{line}"),
                }
            }
            // A word like `/usr/bin` is a message; only `/word` is taken as a command.
            (command, _) if is_command(command) => {
                writeln!(stdout, "unknown command {command}; /help lists them")?
            }
            _ => {
                let outcome =
                    turn::run(&store, &provider, &tools, &chat, &compressor, line).await?;
                turn::print(&mut stdout, &outcome)?;
                match &outcome {
                    turn::Outcome::Answered { moved: Some(child), .. } => {
                        chat.session = (**child).clone();
                    }
                    // The turn may have compressed the conversation before it failed.
                    turn::Outcome::Failed(_) | turn::Outcome::Cancelled => {
                        chat.session = store.newest_in_chain(&chat.session.id).await?;
                    }
                    _ => {}
                }
                if let turn::Outcome::Quit = outcome {
                    break;
                }
            }
        }
        stdout.flush()?;
    }
    let _ = editor.save_history(&history_file);
    store.end_session(&chat.session.id, "cli exit").await?;
    store.close().await;
    Ok(ExitCode::SUCCESS)
}

/// Whether the first word of a line is `/word`, in any script; `/usr/bin` is not.
fn is_command(word: &str) -> bool {
    word.strip_prefix('/').is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// Reads one line on a blocking thread, so the runtime stays free.
async fn read_line(
    mut editor: DefaultEditor,
) -> anyhow::Result<(DefaultEditor, Result<String, ReadlineError>)> {
    tokio::task::spawn_blocking(move || {
        let line = editor.readline("you> ");
        (editor, line)
    })
    .await
    .context("the terminal reader stopped")
}

//! One turn of `herald chat`, through the gateway's turn pipeline: the line is stored first,
//! then the agent answers from the stored history and its delta is stored in one transaction.

use std::io::Write;

use herald_agent::{Agent, OpenAiProvider, ToolContext, ToolRegistry};
use herald_core::Platform;
use herald_gateway::compress::{CompressFailed, Compressor};
use herald_gateway::pipeline::{Said, Turn, TurnFailed};
use herald_store::{Session, Store};
use tokio_util::sync::CancellationToken;

use super::session::Chat;

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// The model answered; the turn is stored. `moved`: the conversation was compressed and
    /// goes on in this session.
    Answered {
        /// The answer.
        reply: String,
        /// The new current session, when the turn compressed the conversation.
        moved: Option<Box<Session>>,
    },
    /// The model failed; the line is stored, without an answer.
    Failed(String),
    /// Ctrl-C stopped it; the line is stored, without an answer.
    Cancelled,
    /// A second Ctrl-C: quit.
    Quit,
}

/// The turn pipeline for the chat's current session.
fn pipeline<'a>(
    store: &'a Store,
    provider: &'a OpenAiProvider,
    tools: &'a ToolRegistry,
    chat: &'a Chat,
    compressor: &'a Compressor,
) -> Turn<'a, OpenAiProvider> {
    Turn {
        store,
        agent: Agent {
            provider,
            tools,
            model: &chat.model,
            system_prompt: &chat.system_prompt,
            max_iterations: chat.max_iterations(),
        },
        context: ToolContext {
            platform: Platform::Cli,
            user_id: Some(chat.user.clone()),
            session_id: chat.session.id.clone(),
        },
        compressor: Some(compressor),
        runs: None,
    }
}

/// Runs one turn. Ctrl-C while it runs cancels it; a second Ctrl-C quits.
pub async fn run(
    store: &Store,
    provider: &OpenAiProvider,
    tools: &ToolRegistry,
    chat: &Chat,
    compressor: &Compressor,
    line: &str,
) -> anyhow::Result<Outcome> {
    let turn = pipeline(store, provider, tools, chat, compressor);
    let cancel = CancellationToken::new();
    let running = turn.run(Said::Line(line), None, &cancel);
    tokio::pin!(running);
    let result = tokio::select! {
        result = &mut running => result,
        _ = tokio::signal::ctrl_c() => {
            cancel.cancel();
            eprintln!("(stopping; Ctrl-C again quits)");
            tokio::select! {
                result = &mut running => result,
                _ = tokio::signal::ctrl_c() => return Ok(Outcome::Quit),
            }
        }
    };
    match result {
        Ok(answer) => {
            Ok(Outcome::Answered { reply: answer.reply, moved: answer.session.map(Box::new) })
        }
        Err(TurnFailed::Cancelled) => Ok(Outcome::Cancelled),
        Err(TurnFailed::Model(e)) => Ok(Outcome::Failed(e.to_string())),
        Err(TurnFailed::Store(e)) => Err(e.into()),
    }
}

/// `/compress`: the conversation goes on in a new session from a summary, now. The new
/// session, or a line saying why not.
pub async fn compress(
    store: &Store,
    provider: &OpenAiProvider,
    tools: &ToolRegistry,
    chat: &Chat,
    compressor: &Compressor,
) -> anyhow::Result<Result<(Session, String), String>> {
    let turn = pipeline(store, provider, tools, chat, compressor);
    Ok(match turn.compress_now(compressor, &CancellationToken::new()).await {
        Ok(done) => {
            let line = format!(
                "compressed: {} earlier messages are now a summary, the last {} kept as they were; \
                 this conversation goes on in session {} (the earlier one is kept and searchable)",
                done.summarized, done.kept, done.child.id
            );
            Ok((done.child, line))
        }
        Err(CompressFailed::Store(e)) => return Err(e.into()),
        Err(e) => Err(format!("could not compress: {e}; nothing changed")),
    })
}

/// Shows the outcome: the answer on stdout, trouble on stderr.
pub fn print(out: &mut impl Write, outcome: &Outcome) -> std::io::Result<()> {
    match outcome {
        Outcome::Answered { reply, moved } => {
            if let Some(child) = moved {
                eprintln!("(the conversation was compressed; it goes on in session {})", child.id);
            }
            writeln!(out, "herald> {reply}")
        }
        Outcome::Failed(error) => {
            eprintln!("error: {error} (your message is saved; write again to go on)");
            Ok(())
        }
        Outcome::Cancelled => {
            eprintln!("(stopped; your message is saved, without an answer)");
            Ok(())
        }
        Outcome::Quit => Ok(()),
    }
}

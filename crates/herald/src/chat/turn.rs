//! One turn of `herald chat`, through the gateway's turn pipeline: the line is stored first,
//! then the agent answers from the stored history and its delta is stored in one transaction.

use std::io::Write;

use herald_agent::{Agent, OpenAiProvider, ToolContext, ToolRegistry};
use herald_core::Platform;
use herald_gateway::pipeline::{Said, Turn, TurnFailed};
use herald_store::Store;
use tokio_util::sync::CancellationToken;

use super::session::Chat;

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// The model answered; the turn is stored.
    Answered(String),
    /// The model failed; the line is stored, without an answer.
    Failed(String),
    /// Ctrl-C stopped it; the line is stored, without an answer.
    Cancelled,
    /// A second Ctrl-C: quit.
    Quit,
}

/// Runs one turn. Ctrl-C while it runs cancels it; a second Ctrl-C quits.
pub async fn run(
    store: &Store,
    provider: &OpenAiProvider,
    tools: &ToolRegistry,
    chat: &Chat,
    line: &str,
) -> anyhow::Result<Outcome> {
    let turn = Turn {
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
    };
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
        Ok(answer) => Ok(Outcome::Answered(answer.reply)),
        Err(TurnFailed::Cancelled) => Ok(Outcome::Cancelled),
        Err(TurnFailed::Model(e)) => Ok(Outcome::Failed(e.to_string())),
        Err(TurnFailed::Store(e)) => Err(e.into()),
    }
}

/// Shows the outcome: the answer on stdout, trouble on stderr.
pub fn print(out: &mut impl Write, outcome: &Outcome) -> std::io::Result<()> {
    match outcome {
        Outcome::Answered(reply) => writeln!(out, "herald> {reply}"),
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

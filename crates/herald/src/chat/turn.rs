//! One turn of `herald chat`: the stored history and the new line through the agent, then the
//! user's message and the agent's delta stored in one transaction.

use std::io::Write;

use herald_agent::{Agent, Message, OpenAiProvider, ToolContext, ToolRegistry, TurnError};
use herald_core::Platform;
use herald_store::Store;
use tokio_util::sync::CancellationToken;

use super::session::Chat;
use crate::wiring;

/// How a turn ended.
#[derive(Debug)]
pub enum Outcome {
    /// The model answered; the turn is stored.
    Answered(String),
    /// The model failed; nothing was stored.
    Failed(String),
    /// Ctrl-C stopped it; nothing was stored.
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
    let mut history: Vec<Message> =
        store.history(&chat.session.id).await?.into_iter().map(wiring::to_agent).collect();
    history.push(Message::user(line));
    let agent = Agent {
        provider,
        tools,
        model: &chat.model,
        system_prompt: &chat.system_prompt,
        max_iterations: chat.max_iterations(),
    };
    let context = ToolContext {
        platform: Platform::Cli,
        user_id: Some(chat.user.clone()),
        session_id: chat.session.id.clone(),
    };
    let cancel = CancellationToken::new();
    let turn = agent.run(&history, &context, &cancel);
    tokio::pin!(turn);
    let result = tokio::select! {
        result = &mut turn => result,
        _ = tokio::signal::ctrl_c() => {
            cancel.cancel();
            eprintln!("(stopping; Ctrl-C again quits)");
            tokio::select! {
                result = &mut turn => result,
                _ = tokio::signal::ctrl_c() => return Ok(Outcome::Quit),
            }
        }
    };
    match result {
        Ok(output) => {
            let mut delta = vec![wiring::to_store(&Message::user(line))];
            delta.extend(output.messages.iter().map(wiring::to_store));
            store.append_turn(&chat.session.id, delta, wiring::usage(output.usage)).await?;
            Ok(Outcome::Answered(output.reply().to_owned()))
        }
        Err(TurnError::Cancelled) => Ok(Outcome::Cancelled),
        Err(TurnError::Provider(e)) => Ok(Outcome::Failed(e.to_string())),
    }
}

/// Shows the outcome: the answer on stdout, trouble on stderr.
pub fn print(out: &mut impl Write, outcome: &Outcome) -> std::io::Result<()> {
    match outcome {
        Outcome::Answered(reply) => writeln!(out, "herald> {reply}"),
        Outcome::Failed(error) => {
            eprintln!("error: {error} (nothing was saved; try again)");
            Ok(())
        }
        Outcome::Cancelled => {
            eprintln!("(stopped; nothing was saved)");
            Ok(())
        }
        Outcome::Quit => Ok(()),
    }
}

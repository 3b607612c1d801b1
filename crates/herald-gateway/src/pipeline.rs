//! One turn, the same for the gateway, `herald chat` and the benchmark: what the person said is
//! stored first (so a failed or stopped turn never loses it), the session's history is read
//! back, the agent runs over it, and everything it produced is stored in one transaction with
//! the reply's outbox entry when the reply has somewhere to go.

use std::time::{Duration, Instant};

use herald_agent::{Agent, Message, Provider, ProviderError, ToolContext, TurnError};
use herald_core::ChatRef;
use herald_store::{Delivery, NewMessage, Store, StoreError};
use tokio_util::sync::CancellationToken;

use crate::history;

/// What the person said, and where it is.
#[derive(Debug, Clone, Copy)]
pub enum Said<'a> {
    /// Already in the history: stored when it arrived, or a turn resumed after a restart.
    Stored,
    /// Queued while the session was busy (`inbound_queue` positions): moved into the history.
    Queued(&'a [i64]),
    /// A line typed at the terminal: appended to the history.
    Line(&'a str),
}

/// Where a reply goes when a platform delivers it.
#[derive(Debug, Clone)]
pub struct Destination {
    /// The chat.
    pub chat: ChatRef,
    /// The platform message the reply answers.
    pub reply_to: Option<String>,
}

/// One turn of one session.
#[derive(Debug)]
pub struct Turn<'a, P> {
    /// Where the session lives.
    pub store: &'a Store,
    /// The model, the tools and the session's stored system prompt.
    pub agent: Agent<'a, P>,
    /// Who is asking, in which session (what the tools may see).
    pub context: ToolContext,
}

/// A turn that produced an answer, stored.
#[derive(Debug, Clone)]
pub struct Answer {
    /// The text to show or send (never empty).
    pub reply: String,
    /// Its outbox entry, when it was given a destination.
    pub outbox: Option<i64>,
    /// How long reading the history took.
    pub read: Duration,
    /// How long storing the turn took.
    pub stored: Duration,
}

/// Why a turn produced no answer. What the person said stays stored either way.
#[derive(Debug, thiserror::Error)]
pub enum TurnFailed {
    /// The model failed.
    #[error("{0}")]
    Model(ProviderError),
    /// The store failed.
    #[error("{0}")]
    Store(#[from] StoreError),
    /// Stopped before the answer was stored.
    #[error("the answer was stopped")]
    Cancelled,
}

/// What is stored and sent when the model answers with nothing.
pub const EMPTY_REPLY: &str = "(the model gave an empty answer)";

impl<P: Provider> Turn<'_, P> {
    /// Runs the turn; `cancel` stops it at the agent's next boundary, storing nothing of the
    /// answer.
    pub async fn run(
        &self,
        said: Said<'_>,
        to: Option<Destination>,
        cancel: &CancellationToken,
    ) -> Result<Answer, TurnFailed> {
        let session = self.context.session_id.as_str();
        match said {
            Said::Stored => {}
            Said::Queued(positions) => {
                self.store.take_queued(session, positions).await?;
            }
            Said::Line(line) => {
                self.store.append_messages(session, vec![NewMessage::user(line)]).await?;
            }
        }
        let began = Instant::now();
        let history: Vec<Message> =
            self.store.history(session).await?.into_iter().map(history::to_agent).collect();
        let read = began.elapsed();
        let output = match self.agent.run(&history, &self.context, cancel).await {
            Ok(output) => output,
            Err(TurnError::Cancelled | TurnError::Provider(ProviderError::Cancelled)) => {
                return Err(TurnFailed::Cancelled);
            }
            Err(TurnError::Provider(e)) => return Err(TurnFailed::Model(e)),
        };
        let reply = match output.reply().trim() {
            "" => EMPTY_REPLY.to_owned(),
            reply => reply.to_owned(),
        };
        let delta: Vec<_> = output.messages.iter().map(history::to_store).collect();
        let usage = history::usage(output.usage);
        let storing = Instant::now();
        let outbox = match to {
            // The reply goes into the outbox with the turn: a crash before the platform takes
            // it leaves it there for the next start to send.
            Some(Destination { chat, reply_to }) => {
                let delivery = Delivery { chat, reply_to, text: reply.clone() };
                let ids = self.store.append_reply(session, delta, usage, delivery).await?;
                ids.last().copied()
            }
            None => {
                self.store.append_turn(session, delta, usage).await?;
                None
            }
        };
        Ok(Answer { reply, outbox, read, stored: storing.elapsed() })
    }
}

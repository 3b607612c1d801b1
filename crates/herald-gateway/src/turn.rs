//! One agent run for one session: the stored history through a fresh agent, the delta stored
//! in one transaction with the reply, which the outbox then delivers.

use std::sync::Arc;
use std::time::{Duration, Instant};

use herald_agent::{Agent, Provider, ProviderError, ToolContext};
use herald_core::{ChatRef, UserRef};
use herald_store::{Session, now_ms};
use tokio_util::sync::CancellationToken;
use tracing::{debug, error, warn};

use crate::outbox::Parcel;
use crate::pipeline::{Answer, Destination, Said, Turn, TurnFailed};
use crate::shared::Shared;

/// The session a worker talks to, with its stored system prompt.
#[derive(Debug, Clone)]
pub(crate) struct SessionInfo {
    pub(crate) session: Session,
    pub(crate) system_prompt: Arc<str>,
}

/// What one turn is asked to do.
#[derive(Debug)]
pub(crate) struct TurnJob {
    pub(crate) session: SessionInfo,
    pub(crate) chat: ChatRef,
    pub(crate) user: UserRef,
    /// Queued inbound messages to move into the history before the run.
    pub(crate) take: Vec<i64>,
    /// The platform message to reply to (in groups).
    pub(crate) reply_to: Option<String>,
    /// A new session's first message, just stored: the history, not read back.
    pub(crate) first: Option<String>,
    pub(crate) cancel: CancellationToken,
}

/// How a turn ended.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum TurnEnd {
    /// Answered: the reply is stored and on its way (see the outbox). `moved` is the session
    /// the conversation continues in when the turn compressed it.
    Answered { moved: Option<Box<Session>> },
    /// The model or the store failed; the user was told.
    Failed,
    /// Stopped by `/stop`, a newer message, or the end of the drain.
    Cancelled,
    /// Nothing was left to answer: the queued messages it was to take in had been taken
    /// already, by the turn that answers them.
    Nothing,
}

/// Runs one turn. At most `max_concurrent_runs` turns call the model at once (see the
/// pipeline's `runs`).
pub(crate) async fn run<P: Provider>(shared: Arc<Shared<P>>, job: TurnJob) -> TurnEnd {
    let running = shared.metrics.turn_running();
    let typing = typing(&shared, &job.chat);
    let _stop_typing = typing.clone().drop_guard();
    let began = Instant::now();
    let outcome = think(&shared, &job).await;
    typing.cancel();
    drop(running);
    if !matches!(outcome, Err(Failure::Cancelled | Failure::Taken)) {
        shared.metrics.run_ended(began.elapsed(), outcome.is_err());
    }
    match outcome {
        Ok(Answer { reply, outbox, session: moved, .. }) => {
            shared
                .outbox
                .carry(Parcel {
                    outbox,
                    chat: job.chat.clone(),
                    reply_to: job.reply_to.clone(),
                    answers: None,
                    text: reply,
                    stored_at: now_ms(),
                    again: false,
                    pieces: 0,
                })
                .await;
            TurnEnd::Answered { moved: moved.map(Box::new) }
        }
        Err(Failure::Cancelled) => TurnEnd::Cancelled,
        Err(Failure::Taken) => TurnEnd::Nothing,
        Err(failure) => {
            let line = format!(
                "Sorry, {}. Your message is saved: send /retry or write again.",
                failure.for_user()
            );
            tell_failure(&shared, &job, line).await;
            TurnEnd::Failed
        }
    }
}

/// Why a turn did not produce an answer.
#[derive(Debug)]
enum Failure {
    Model(ProviderError),
    Store,
    Cancelled,
    /// The queued messages were taken in already (see [`TurnEnd::Nothing`]).
    Taken,
}

impl Failure {
    /// One short phrase for the person chatting; the details go to the log.
    fn for_user(&self) -> &'static str {
        match self {
            Failure::Model(ProviderError::Timeout { .. }) => "the model took too long to answer",
            Failure::Model(ProviderError::RateLimited { .. }) => "the model is busy right now",
            Failure::Model(ProviderError::Unreachable { .. } | ProviderError::Server { .. }) => {
                "the model could not be reached"
            }
            Failure::Model(ProviderError::ContextTooLong { .. }) => {
                "the conversation is too long for the model"
            }
            Failure::Model(_) => "the model refused the request",
            Failure::Store => "I could not save the conversation",
            Failure::Cancelled | Failure::Taken => "the answer was stopped",
        }
    }
}

/// The turn pipeline for a session of this gateway.
pub(crate) fn pipeline<'a, P>(
    shared: &'a Shared<P>,
    session: &'a SessionInfo,
    chat: &ChatRef,
    user: &UserRef,
) -> Turn<'a, P> {
    Turn {
        store: &shared.store,
        agent: Agent {
            provider: &shared.provider,
            tools: &shared.tools,
            model: session.session.model.as_deref().unwrap_or(&shared.settings.model),
            system_prompt: &session.system_prompt,
            max_iterations: shared.settings.max_iterations,
        },
        context: ToolContext {
            platform: chat.platform,
            user_id: Some(user.id.clone()),
            session_id: session.session.id.clone(),
        },
        compressor: Some(&shared.compressor),
        runs: Some(&*shared.runs),
    }
}

/// The agent run and the stored delta, through the one turn pipeline.
async fn think<P: Provider>(shared: &Shared<P>, job: &TurnJob) -> Result<Answer, Failure> {
    let session_id = &job.session.session.id;
    // Queued messages go into the history first. None left to take means another turn took
    // them, and answers them: a notification or a pull can arrive after that take.
    if !job.take.is_empty() {
        match shared.store.take_queued(session_id, &job.take).await {
            Ok(taken) if taken.is_empty() => {
                debug!(session = %session_id, "the queued messages were taken already; nothing to answer");
                return Err(Failure::Taken);
            }
            Ok(_) => {}
            Err(e) => {
                error!(session = %session_id, error = %e, "the store failed during a turn");
                return Err(Failure::Store);
            }
        }
    }
    let turn = pipeline(shared, &job.session, &job.chat, &job.user);
    let to = Destination { chat: job.chat.clone(), reply_to: job.reply_to.clone() };
    let said = job.first.as_deref().map_or(Said::Stored, Said::First);
    match turn.run(said, Some(to), &job.cancel).await {
        Ok(answer) => Ok(answer),
        Err(TurnFailed::Cancelled) => Err(Failure::Cancelled),
        Err(TurnFailed::Model(e)) => {
            warn!(session = %session_id, error = %e, "the model failed; the user is told");
            Err(Failure::Model(e))
        }
        Err(TurnFailed::Store(e)) => {
            error!(session = %session_id, error = %e, "the store failed during a turn");
            Err(Failure::Store)
        }
    }
}

/// Tells the user a turn failed. The line is not stored: the question is, and /retry or the
/// next message answers it.
async fn tell_failure<P>(shared: &Shared<P>, job: &TurnJob, line: String) {
    // Behind the chat's earlier replies, like any answer.
    shared.outbox.carry(Parcel::unstored(job.chat.clone(), job.reply_to.clone(), line)).await;
}

/// How long an answer may take before the typing indicator goes on: a quicker answer needs no
/// sign of work, and saves the platform a call (or, on Slack, two).
const TYPING_AFTER: Duration = Duration::from_secs(1);

/// Keeps the typing indicator on, from [`TYPING_AFTER`] on, until the returned token is
/// cancelled.
fn typing<P>(shared: &Shared<P>, chat: &ChatRef) -> CancellationToken {
    let stop = CancellationToken::new();
    let Some(link) = shared.links.get(&chat.platform).cloned() else { return stop };
    if !link.caps.typing {
        return stop;
    }
    let every =
        link.caps.typing_lasts.saturating_sub(Duration::from_secs(1)).max(Duration::from_secs(1));
    let chat = chat.clone();
    let token = stop.clone();
    tokio::spawn(async move {
        let mut wait = TYPING_AFTER;
        loop {
            tokio::select! {
                () = token.cancelled() => break,
                () = tokio::time::sleep(wait) => {}
            }
            link.typing(&chat);
            wait = every;
        }
    });
    stop
}

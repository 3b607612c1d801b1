//! One turn, the same for the gateway, `herald chat` and the benchmark: the session's history
//! is read back, the agent runs over it, and everything it produced is stored in one
//! transaction with the reply's outbox entry when the reply has somewhere to go. What the person
//! said is never lost: a platform message is stored when it arrives, before the turn; a typed
//! line is stored with the answer, or on its own when the model fails or the turn is stopped.
//! Compression happens here, once, for all three.

use std::time::{Duration, Instant};

use herald_agent::{Agent, Message, Provider, ProviderError, ToolContext, TurnError, TurnOutput};
use herald_core::{ChatRef, Role};
use herald_store::{Delivery, Session, Store, StoreError, TokenUsage};
use tokio::sync::{Semaphore, SemaphorePermit};
use tokio_util::sync::CancellationToken;

use crate::compress::{self, CompressFailed, Compressed, Compressor};
use crate::history;

/// What the person said, and where it is.
#[derive(Debug, Clone, Copy)]
pub enum Said<'a> {
    /// Already in the history: stored when it arrived (or taken in from the queue), or a
    /// turn resumed after a restart.
    Stored,
    /// A line typed at the terminal: appended to the history.
    Line(&'a str),
    /// A new session's first message, stored already: the history is that message alone, and
    /// is not read back.
    First(&'a str),
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
    /// Compresses the conversation when it nears the context window; `None`: never.
    pub compressor: Option<&'a Compressor>,
    /// Bounds the turns of all sessions that call the model at once; `None`: no bound. A turn
    /// holds a permit while the model works, not while its history is read or stored, so a
    /// slow store does not hold the model's capacity back.
    pub runs: Option<&'a Semaphore>,
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
    /// The session the conversation moved to, when the turn compressed it.
    pub session: Option<Session>,
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
    /// answer. With a compressor, a conversation near the context window is compressed first,
    /// and a request the model refuses as too long is compressed (or cut) and tried once more.
    pub async fn run(
        &self,
        said: Said<'_>,
        to: Option<Destination>,
        cancel: &CancellationToken,
    ) -> Result<Answer, TurnFailed> {
        let first = self.context.session_id.as_str();
        // A typed line is stored with the answer, in one write, or alone when no answer comes.
        let mut pending = None;
        let began = Instant::now();
        let mut history = match said {
            Said::First(text) => vec![Message::user(text)],
            Said::Stored => self.history(first).await?,
            Said::Line(line) => {
                pending = Some(Message::user(line));
                self.history(first).await?
            }
        };
        let read = began.elapsed();
        history.extend(pending.clone());
        let mut child: Option<Session> = None;
        let thought = match self.permit(cancel).await {
            Ok(_permit) => self.think(&mut history, &mut child, pending.as_ref(), cancel).await,
            Err(cancelled) => Err(cancelled),
        };
        let output = match thought {
            Ok(output) => output,
            Err(failed) => {
                if let Some(line) = &pending {
                    let session = child.as_ref().map_or(first, |c| c.id.as_str());
                    self.store.append_messages(session, vec![history::to_store(line)]).await?;
                }
                return Err(failed);
            }
        };
        let session = child.as_ref().map_or(first, |c| c.id.as_str());
        let reply = match output.reply().trim() {
            "" => EMPTY_REPLY.to_owned(),
            reply => reply.to_owned(),
        };
        let delta: Vec<_> = pending.iter().chain(&output.messages).map(history::to_store).collect();
        let usage = TokenUsage {
            context: i64::try_from(output.context_tokens).unwrap_or(i64::MAX),
            ..history::usage(output.usage)
        };
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
        if let Some(compressor) = self.compressor {
            compressor.note_counted(session, output.context_tokens);
        }
        Ok(Answer { reply, outbox, read, stored: storing.elapsed(), session: child })
    }

    /// A permit to call the model, when the turns calling it at once are bounded.
    async fn permit(
        &self,
        cancel: &CancellationToken,
    ) -> Result<Option<SemaphorePermit<'_>>, TurnFailed> {
        let Some(runs) = self.runs else { return Ok(None) };
        tokio::select! {
            permit = runs.acquire() => Ok(permit.ok()),
            () = cancel.cancelled() => Err(TurnFailed::Cancelled),
        }
    }

    /// Compression when due, then the agent's answer (compressing, or cutting, and trying once
    /// more when the model refuses the request as too long). `history` is the request: the
    /// stored conversation, then the `pending` line when there is one.
    async fn think(
        &self,
        history: &mut Vec<Message>,
        child: &mut Option<Session>,
        pending: Option<&Message>,
        cancel: &CancellationToken,
    ) -> Result<TurnOutput, TurnFailed> {
        let first = self.context.session_id.as_str();
        let Some(compressor) = self.compressor else {
            return self.answer(history, None, cancel).await;
        };
        let tokens = self.prompt_tokens(compressor, first, history).await?;
        let over = tokens >= compressor.settings.limit();
        let tried = compressor.due(first, tokens);
        if tried {
            self.compress(compressor, history, child, pending, cancel).await?;
        }
        // The oldest messages are left out of a request that would not fit (not compressed, or
        // it failed); the conversation itself, which a later compression summarizes, keeps them.
        let system = compress::estimate(self.agent.system_prompt);
        let cut = |history: &[Message], budget: u64| {
            history[compress::tail_start(history, budget.saturating_sub(system))..].to_vec()
        };
        let request = match child {
            None if tokens > compressor.settings.context_window => {
                cut(history, compressor.settings.limit())
            }
            _ => history.clone(),
        };
        match self.answer(&request, child.as_ref(), cancel).await {
            // The model says it does not fit, whatever the estimate said: compress now (unless
            // this turn already tried, or a failure's backoff holds it), or cut deeper, and try
            // once more.
            Err(TurnFailed::Model(ProviderError::ContextTooLong { .. })) => {
                let compressed = child.is_none()
                    && !tried
                    && !over
                    && self.compress(compressor, history, child, pending, cancel).await?;
                let request = match compressed {
                    true => history.clone(),
                    false => cut(history, compressor.settings.limit() / 2),
                };
                self.answer(&request, child.as_ref(), cancel).await
            }
            answered => answered,
        }
    }

    /// Compresses the session now (`/compress`), whatever its size.
    pub async fn compress_now(
        &self,
        compressor: &Compressor,
        cancel: &CancellationToken,
    ) -> Result<Compressed, CompressFailed> {
        let session = self.current().await?;
        let history = self.history(&session.id).await?;
        compressor.compress(self.store, self.agent.provider, &session, &history, cancel).await
    }

    async fn history(&self, session: &str) -> Result<Vec<Message>, StoreError> {
        Ok(self.store.history(session).await?.into_iter().map(history::to_agent).collect())
    }

    async fn current(&self) -> Result<Session, StoreError> {
        let id = &self.context.session_id;
        self.store.session(id).await?.ok_or_else(|| StoreError::SessionNotFound(id.clone()))
    }

    /// How large the next prompt is: what the model counted at the session's last call plus an
    /// estimate of what was said since, or an estimate of the whole conversation when that is
    /// larger (no count yet, or the last request had to leave the oldest messages out).
    async fn prompt_tokens(
        &self,
        compressor: &Compressor,
        session: &str,
        history: &[Message],
    ) -> Result<u64, StoreError> {
        let counted = match compressor.counted(session) {
            Some(counted) => counted,
            None => {
                let stored = self.store.session(session).await?.map_or(0, |s| s.context_tokens);
                u64::try_from(stored).unwrap_or(0)
            }
        };
        let since: u64 = history
            .iter()
            .rev()
            .take_while(|m| m.role == Role::User)
            .map(compress::message_tokens)
            .sum();
        let whole = compress::estimate(self.agent.system_prompt)
            + history.iter().map(compress::message_tokens).sum::<u64>();
        Ok((counted + since).max(whole))
    }

    /// Compresses the session into a child, switching `history` to the child's (then the
    /// `pending` line); whether it did. A failure leaves the conversation as it was (the
    /// compressor tries again later).
    async fn compress(
        &self,
        compressor: &Compressor,
        history: &mut Vec<Message>,
        child: &mut Option<Session>,
        pending: Option<&Message>,
        cancel: &CancellationToken,
    ) -> Result<bool, TurnFailed> {
        let session = match child {
            Some(current) => current.clone(),
            None => self.current().await?,
        };
        let stored = &history[..history.len() - usize::from(pending.is_some())];
        let provider = self.agent.provider;
        match compressor.compress(self.store, provider, &session, stored, cancel).await {
            Ok(done) => {
                *history = self.history(&done.child.id).await?;
                history.extend(pending.cloned());
                *child = Some(done.child);
                Ok(true)
            }
            Err(CompressFailed::Cancelled) => Err(TurnFailed::Cancelled),
            Err(_) => Ok(false),
        }
    }

    /// The agent's run over `history`, in the current session.
    async fn answer(
        &self,
        history: &[Message],
        child: Option<&Session>,
        cancel: &CancellationToken,
    ) -> Result<TurnOutput, TurnFailed> {
        let moved;
        let context = match child {
            Some(child) => {
                moved = ToolContext { session_id: child.id.clone(), ..self.context.clone() };
                &moved
            }
            None => &self.context,
        };
        match self.agent.run(history, context, cancel).await {
            Ok(output) => Ok(output),
            Err(TurnError::Cancelled | TurnError::Provider(ProviderError::Cancelled)) => {
                Err(TurnFailed::Cancelled)
            }
            Err(TurnError::Provider(e)) => Err(TurnFailed::Model(e)),
        }
    }
}

//! Replies on their way out: split at 2000 characters outside code fences, posted with a
//! `nonce` Discord enforces (a resend returns the message already posted), never pinging
//! anyone, into the thread the gateway placed them in (opened on the user's message if it does
//! not exist yet), or as the answer of a slash command.

use std::future::Future;
use std::sync::{Arc, PoisonError};

use herald_core::{
    ChatRef, LengthUnit, Outbound, SendError, SentId, Tracking, backoff, chunk, first_piece,
};
use serenity::all::{
    ChannelId, CreateAllowedMentions, CreateInteractionResponse, CreateInteractionResponseFollowup,
    CreateInteractionResponseMessage, CreateMessage, CreateThread, EditInteractionResponse,
    EditMessage, MessageId, MessageReference, Nonce,
};
use tracing::{debug, warn};

use crate::MAX_MESSAGE_LEN;
use crate::error::{Failure, THREAD_ALREADY_CREATED, classify};
use crate::intake::{Inner, Place};
use crate::slash::{Answered, PendingCommand};

/// Carries the gateway's requests to Discord.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    inner: Arc<Inner>,
}

/// Mentions Discord may act on in what the bot posts: none, so no model output can ping
/// `@everyone`, `@here`, a role or a user.
fn no_pings() -> CreateAllowedMentions {
    CreateAllowedMentions::new()
}

impl Sender {
    pub(crate) fn new(inner: Arc<Inner>) -> Self {
        Sender { inner }
    }

    /// Serves one request; a send's outcome goes back on its `done` channel.
    pub(crate) async fn handle(&self, request: Outbound) {
        match request {
            Outbound::Send { chat, text, reply_to, answers, track, done } => {
                let result = self.send(&chat, &text, reply_to, answers, track.as_ref()).await;
                if let Err(e) = &result {
                    debug!(chat = %chat.id, error = %e, "a reply was not delivered");
                }
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            }
            Outbound::Edit { chat, message, text } => {
                let Ok(message) = message.parse::<u64>() else { return };
                let edit = || async {
                    let channel = self.target(&chat).await?;
                    let builder = EditMessage::new().content(&text).allowed_mentions(no_pings());
                    self.retrying(|| {
                        channel.edit_message(
                            &self.inner.http,
                            MessageId::new(message),
                            builder.clone(),
                        )
                    })
                    .await
                };
                if let Err(e) = edit().await {
                    warn!(chat = %chat.id, error = %e, "could not edit a message");
                }
            }
            Outbound::Typing { chat } => {
                if let Ok(channel) = self.target(&chat).await
                    && let Err(e) = channel.broadcast_typing(&self.inner.http).await
                {
                    let error = classify(&e, &self.inner.settings.token);
                    debug!(chat = %chat.id, error = error.text(), "typing was not shown");
                }
            }
        }
    }

    async fn send(
        &self,
        chat: &ChatRef,
        text: &str,
        reply_to: Option<String>,
        answers: Option<String>,
        track: Option<&Tracking>,
    ) -> Result<Vec<SentId>, SendError> {
        let parts = chunk(text, MAX_MESSAGE_LEN, LengthUnit::Chars);
        if parts.is_empty() {
            return Err(SendError::Rejected("the reply is empty".into()));
        }
        let command = answers.and_then(|id| {
            self.inner.commands.lock().unwrap_or_else(PoisonError::into_inner).remove(&id)
        });
        if let Some(command) = command {
            return self.answer_command(command, &parts).await;
        }
        let channel = self.target(chat).await?;
        let reference = reply_to.and_then(|id| id.parse::<u64>().ok()).map(|id| {
            // A reply to a message deleted meanwhile is still posted, without the reference.
            MessageReference::from((channel, MessageId::new(id))).fail_if_not_exists(false)
        });
        let from = first_piece(track, parts.len());
        let mut sent = Vec::with_capacity(parts.len() - from);
        for (index, part) in parts.iter().enumerate().skip(from) {
            let mut message = CreateMessage::new().content(part).allowed_mentions(no_pings());
            if index == 0
                && let Some(reference) = &reference
            {
                message = message.reference_message(reference.clone());
            }
            if let Some(track) = track {
                // The same on every try of this part, so Discord returns the message it took.
                let nonce = format!("h{}.{index}", track.key);
                message = message.nonce(Nonce::String(nonce)).enforce_nonce(true);
            }
            let posted =
                self.retrying(|| channel.send_message(&self.inner.http, message.clone())).await?;
            sent.push(posted.id.to_string());
            if let Some(track) = track {
                track.taken(index, parts.len());
            }
        }
        Ok(sent)
    }

    /// A slash command's answer: the response itself when it was not acknowledged yet, or the
    /// deferred response edited; the rest as follow-ups.
    pub(crate) async fn answer_command(
        &self,
        command: PendingCommand,
        parts: &[String],
    ) -> Result<Vec<SentId>, SendError> {
        let http = &self.inner.http;
        let interaction = &command.interaction;
        let mut answered = command.answered.lock().await;
        let mut sent = Vec::with_capacity(parts.len());
        for (index, part) in parts.iter().enumerate() {
            let posted = if index == 0 && *answered == Answered::Not {
                let message = CreateInteractionResponseMessage::new()
                    .content(part)
                    .ephemeral(command.private)
                    .allowed_mentions(no_pings());
                let response = CreateInteractionResponse::Message(message);
                self.retrying(|| interaction.create_response(http, response.clone())).await?;
                *answered = Answered::Responded;
                // Such a response has no message id without asking again; the interaction's
                // stands for it.
                sent.push(interaction.id.to_string());
                continue;
            } else if index == 0 && *answered == Answered::Deferred {
                let edit =
                    EditInteractionResponse::new().content(part).allowed_mentions(no_pings());
                self.retrying(|| interaction.edit_response(http, edit.clone())).await?
            } else {
                let followup = CreateInteractionResponseFollowup::new()
                    .content(part)
                    .ephemeral(command.private)
                    .allowed_mentions(no_pings());
                self.retrying(|| interaction.create_followup(http, followup.clone())).await?
            };
            sent.push(posted.id.to_string());
        }
        Ok(sent)
    }

    /// The channel a chat's messages go to: the chat itself, or its thread, opened on the
    /// message that names it when nobody did yet (Discord gives such a thread the message's id).
    async fn target(&self, chat: &ChatRef) -> Result<ChannelId, SendError> {
        let channel = parse_channel(&chat.id)?;
        let Some(thread) = &chat.thread else { return Ok(channel) };
        let thread = parse_channel(thread)?;
        let known = self
            .inner
            .places
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&thread.get())
            .copied();
        if matches!(known, Some(Place::Thread { .. })) {
            return Ok(thread);
        }
        let name = self
            .inner
            .thread_names
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&thread.get())
            .cloned()
            .unwrap_or_else(|| "conversation".to_owned());
        let open = CreateThread::new(name);
        let opened = self
            .attempts(|| {
                channel.create_thread_from_message(
                    &self.inner.http,
                    MessageId::new(thread.get()),
                    open.clone(),
                )
            })
            .await;
        match opened {
            Ok(_) => debug!(thread = %thread, "opened a thread on the message"),
            // Opened before (a redelivery, a restart), or a thread not opened on a message.
            Err(Failure::Refused { code, .. }) if code == THREAD_ALREADY_CREATED => {}
            Err(Failure::Refused { error, .. }) => {
                debug!(thread = %thread, %error, "no thread opened; posting to the channel id given");
            }
            Err(Failure::Retry { error, .. }) => return Err(SendError::Unreachable(error)),
        }
        self.inner.thread_seen(thread.get(), channel.get());
        Ok(thread)
    }

    /// Calls Discord until it answers, refuses, or the attempts run out.
    async fn retrying<T, F, Fut>(&self, call: F) -> Result<T, SendError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = serenity::Result<T>>,
    {
        self.attempts(call).await.map_err(|failure| match failure {
            Failure::Refused { error, .. } => SendError::Rejected(error),
            Failure::Retry { error, .. } => SendError::Unreachable(error),
        })
    }

    async fn attempts<T, F, Fut>(&self, call: F) -> Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = serenity::Result<T>>,
    {
        let settings = &self.inner.settings;
        let mut attempt = 0;
        loop {
            let failure = match call().await {
                Ok(value) => return Ok(value),
                Err(e) => classify(&e, &settings.token),
            };
            attempt += 1;
            let Failure::Retry { error, after } = &failure else { return Err(failure) };
            if attempt >= settings.send_attempts.max(1) {
                return Err(failure);
            }
            let wait =
                backoff(attempt - 1, None, settings.max_backoff).max(after.unwrap_or_default());
            debug!(%error, attempt, wait_ms = wait.as_millis() as u64, "retrying a Discord call");
            tokio::time::sleep(wait).await;
        }
    }
}

fn parse_channel(id: &str) -> Result<ChannelId, SendError> {
    match id.parse::<u64>() {
        Ok(id) if id != 0 => Ok(ChannelId::new(id)),
        _ => Err(SendError::Rejected(format!("`{id}` is not a Discord channel id"))),
    }
}

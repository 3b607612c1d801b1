//! Carrying `Outbound` requests to Telegram: HTML with a plain-text fallback, retried with backoff.

use std::future::Future;
use std::time::Duration;

use herald_core::{ChatRef, Outbound, SendError, SentId, Tracking, backoff, first_piece};
use teloxide::payloads::{EditMessageTextSetters, SendChatActionSetters, SendMessageSetters};
use teloxide::requests::Requester;
use teloxide::types::{ChatAction, ChatId, MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide::{ApiError, Bot, RequestError};
use tracing::{debug, error, warn};

use crate::TelegramSettings;
use crate::error::Failure;
use crate::split::{Piece, pieces};

/// The sending half of the adapter; shared by every in-flight request.
pub(crate) struct Sender {
    bot: Bot,
    token: String,
    attempts: u32,
    max_backoff: Duration,
}

/// A chat (and topic) to send to, in Telegram's terms.
#[derive(Clone, Copy)]
struct Target {
    chat: ChatId,
    thread: Option<ThreadId>,
}

impl Sender {
    /// A sender that tries each message up to `settings.send_attempts` times.
    pub(crate) fn new(bot: Bot, settings: &TelegramSettings) -> Self {
        Sender {
            bot,
            token: settings.token.clone(),
            attempts: settings.send_attempts.max(1),
            max_backoff: settings.max_backoff,
        }
    }

    /// Carries out one request; a `Send` reports through its `done`, the others only log.
    pub(crate) async fn handle(&self, request: Outbound) {
        match request {
            Outbound::Send { chat, text, reply_to, track, done, .. } => {
                let result = self.send(&chat, &text, reply_to.as_deref(), track.as_ref()).await;
                match &result {
                    Ok(ids) => debug!(chat = %chat.id, messages = ids.len(), "reply sent"),
                    Err(err) => error!(chat = %chat.id, "reply not delivered: {err}"),
                }
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            }
            Outbound::Edit { chat, message, text } => {
                if let Err(err) = self.edit(&chat, &message, &text).await {
                    warn!(chat = %chat.id, %message, "edit not delivered: {err}");
                }
            }
            Outbound::Typing { chat } => self.typing(&chat).await,
        }
    }

    /// Sends every piece of `markdown` in order, replying to `reply_to` with the first.
    async fn send(
        &self,
        chat: &ChatRef,
        markdown: &str,
        reply_to: Option<&str>,
        track: Option<&Tracking>,
    ) -> Result<Vec<SentId>, SendError> {
        let target = target(chat)?;
        let mut reply = reply_to
            .and_then(message_id)
            .map(|id| ReplyParameters::new(id).allow_sending_without_reply());
        let pieces = pieces(markdown);
        if pieces.is_empty() {
            return Err(SendError::Rejected("the reply is empty".into()));
        }
        let from = first_piece(track, pieces.len());
        if from > 0 {
            // The first piece was taken already, with its reply.
            reply = None;
        }
        let mut sent = Vec::with_capacity(pieces.len() - from);
        for (index, piece) in pieces.iter().enumerate().skip(from) {
            let reply_now = reply.take();
            let id = self
                .deliver(piece, |text, mode| {
                    let mut request = self.bot.send_message(target.chat, text);
                    if let Some(mode) = mode {
                        request = request.parse_mode(mode);
                    }
                    if let Some(thread) = target.thread {
                        request = request.message_thread_id(thread);
                    }
                    if let Some(reply) = reply_now.clone() {
                        request = request.reply_parameters(reply);
                    }
                    async move { request.await.map(|message| message.id) }
                })
                .await?;
            sent.push(id.0.to_string());
            if let Some(track) = track {
                track.taken(index, pieces.len());
            }
        }
        Ok(sent)
    }

    /// Replaces the text of a message sent before; an unchanged text is no error.
    async fn edit(&self, chat: &ChatRef, message: &str, markdown: &str) -> Result<(), SendError> {
        let target = target(chat)?;
        let id = message_id(message).ok_or_else(|| {
            SendError::Rejected(format!("`{message}` is not a telegram message id"))
        })?;
        let mut pieces = pieces(markdown).into_iter();
        let piece = pieces.next().ok_or_else(|| SendError::Rejected("the text is empty".into()))?;
        if pieces.next().is_some() {
            warn!(chat = %chat.id, "an edit longer than one message was cut to its first part");
        }
        self.deliver(&piece, |text, mode| {
            let mut request = self.bot.edit_message_text(target.chat, id, text);
            if let Some(mode) = mode {
                request = request.parse_mode(mode);
            }
            async move {
                match request.await {
                    Err(RequestError::Api(ApiError::MessageNotModified)) => Ok(id),
                    result => result.map(|message| message.id),
                }
            }
        })
        .await
        .map(drop)
    }

    /// Shows "typing..." once: no retries, since the next one comes within seconds.
    async fn typing(&self, chat: &ChatRef) {
        let Ok(target) = target(chat) else {
            return;
        };
        let mut request = self.bot.send_chat_action(target.chat, ChatAction::Typing);
        if let Some(thread) = target.thread {
            request = request.message_thread_id(thread);
        }
        if let Err(err) = request.await {
            let reason = Failure::classify(&err, &self.token).reason();
            debug!(chat = %chat.id, "typing indicator not shown: {reason}");
        }
    }

    /// Makes `call` deliver `piece`: as HTML first, as plain text when Telegram rejects the
    /// markup, retrying rate limits and transient failures up to the attempt limit.
    async fn deliver<F, Fut>(&self, piece: &Piece, mut call: F) -> Result<MessageId, SendError>
    where
        F: FnMut(String, Option<ParseMode>) -> Fut,
        Fut: Future<Output = Result<MessageId, RequestError>>,
    {
        let mut html = piece.html.as_deref();
        let mut failures = 0u32;
        loop {
            let result = match html {
                Some(html) => call(html.to_owned(), Some(ParseMode::Html)).await,
                None => call(piece.plain.clone(), None).await,
            };
            let err = match result {
                Ok(id) => return Ok(id),
                Err(err) => err,
            };
            let failure = Failure::classify(&err, &self.token);
            match &failure {
                Failure::Markup(reason) if html.is_some() => {
                    warn!("telegram rejected the markup ({reason}); sending plain text");
                    html = None;
                    continue;
                }
                Failure::RateLimited(_) | Failure::Transient(_) => {}
                _ => return Err(SendError::Rejected(failure.reason())),
            }
            failures += 1;
            if failures >= self.attempts {
                return Err(SendError::Unreachable(format!(
                    "{} (after {failures} attempts)",
                    failure.reason()
                )));
            }
            let delay = backoff(failures - 1, failure.retry_after(), self.max_backoff);
            warn!(
                attempt = failures,
                retry_in_ms = delay.as_millis(),
                "telegram: {}; retrying",
                failure.reason()
            );
            tokio::time::sleep(delay).await;
        }
    }
}

fn target(chat: &ChatRef) -> Result<Target, SendError> {
    let id = chat
        .id
        .parse()
        .map_err(|_| SendError::Rejected(format!("`{}` is not a telegram chat id", chat.id)))?;
    let thread = match &chat.thread {
        None => None,
        Some(thread) => Some(ThreadId(message_id(thread).ok_or_else(|| {
            SendError::Rejected(format!("`{thread}` is not a telegram topic id"))
        })?)),
    };
    Ok(Target { chat: ChatId(id), thread })
}

/// A message id as the gateway knows it: Telegram's number, or the inbound id `chat:message`.
fn message_id(id: &str) -> Option<MessageId> {
    let number = id.rsplit(':').next().unwrap_or(id);
    number.trim().parse().ok().map(MessageId)
}

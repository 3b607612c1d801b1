//! Replies on their way out: converted to mrkdwn, split at [`MAX_MESSAGE_LEN`] characters
//! outside code fences, posted into the chat's thread when it has one, retried on 429 (after
//! Slack's `Retry-After`), 5xx and lost connections. A stored reply's pieces carry a mark, and
//! a piece is looked for (`look.rs`) before it goes again after a failure that may hide a
//! success, and before the first try of a reply an earlier try may have sent unseen. The
//! working reaction stands in for a typing indicator, which Slack does not give bots.

use std::future::Future;
use std::sync::Arc;

use herald_core::{
    ChatRef, LengthUnit, Outbound, SendError, SentId, Tracking, backoff, chunk, first_piece,
};
use slack_morphism::api::{
    SlackApiChatPostMessageRequest, SlackApiChatUpdateRequest, SlackApiReactionsAddRequest,
    SlackApiReactionsRemoveRequest,
};
use slack_morphism::errors::SlackClientError;
use slack_morphism::hyper_tokio::SlackHyperClient;
use slack_morphism::prelude::ValueStruct;
use slack_morphism::{SlackApiToken, SlackMessageContent};
use tracing::{debug, warn};

use crate::error::{Failed, Failure, Secrets, timed};
use crate::intake::Intake;
use crate::look;
use crate::markup::to_mrkdwn;
use crate::{MAX_MESSAGE_LEN, SlackSettings};

/// The reaction that says "working on it".
pub(crate) const WORKING: &str = "hourglass_flowing_sand";

/// Carries the gateway's requests to Slack.
#[derive(Debug, Clone)]
pub(crate) struct Sender {
    pub(crate) client: Arc<SlackHyperClient>,
    pub(crate) token: SlackApiToken,
    pub(crate) intake: Arc<Intake>,
    pub(crate) settings: Arc<SlackSettings>,
    pub(crate) secrets: Secrets,
}

/// A tracked reply's piece: its reply, its index, and whether an earlier try of it may have
/// been taken unseen.
#[derive(Debug, Clone, Copy)]
struct Piece<'a> {
    track: &'a Tracking,
    index: usize,
    unsure: bool,
}

/// The send's error for a failure that ends the tries.
fn give_up(failure: Failure) -> SendError {
    match failure {
        Failure::Refused { error, .. } => SendError::Rejected(error),
        Failure::Retry { error, .. } => SendError::Unreachable(error),
    }
}

/// The `thread_ts` of a chat's thread: the thread itself, or the part after the colon of a
/// message id (`channel:ts`) used as one.
fn thread_ts(thread: &str) -> &str {
    thread.rsplit(':').next().unwrap_or(thread)
}

impl Sender {
    /// Serves one request; a send's outcome goes back on its `done` channel.
    pub(crate) async fn handle(&self, request: Outbound) {
        match request {
            Outbound::Send { chat, text, track, done, .. } => {
                let result = self.send(&chat, &text, track.as_ref()).await;
                match &result {
                    Ok(ids) => debug!(chat = %chat.id, messages = ids.len(), "reply sent"),
                    Err(e) => warn!(chat = %chat.id, error = %e, "a reply was not delivered"),
                }
                self.done_working(&chat).await;
                if let Some(done) = done {
                    let _ = done.send(result);
                }
            }
            Outbound::Edit { chat, message, text } => {
                if let Err(e) = self.edit(&chat, &message, &text).await {
                    warn!(chat = %chat.id, error = %e, "could not edit a message");
                }
            }
            Outbound::Typing { chat } => {
                // The wait must not hold one of the send slots.
                let sender = self.clone();
                tokio::spawn(async move { sender.working(&chat).await });
            }
        }
    }

    async fn send(
        &self,
        chat: &ChatRef,
        markdown: &str,
        track: Option<&Tracking>,
    ) -> Result<Vec<SentId>, SendError> {
        let parts = chunk(&to_mrkdwn(markdown), MAX_MESSAGE_LEN, LengthUnit::Chars);
        if parts.is_empty() {
            return Err(SendError::Rejected("the reply is empty".into()));
        }
        let thread = chat.thread.as_deref().map(thread_ts);
        // Followed before the post, not after Slack's answer: the post reaches the thread's
        // readers before that answer reaches us, and a reply written in between must already
        // count as a follow-up.
        if let Some(thread) = thread {
            self.intake.follow(&chat.id, thread);
        }
        let total = parts.len();
        let from = first_piece(track, total);
        let mut sent = Vec::with_capacity(total - from);
        // What the last look found of this reply: one read serves every piece after it.
        let mut found: Option<look::Found> = None;
        // An earlier try may have sent piece `from` unseen, and the pieces after it too (taken
        // by Slack before a crash let their progress reach the store): each is looked for as
        // long as the one before it was found.
        let mut unsure = track.is_some_and(|t| t.again);
        for (index, part) in parts.into_iter().enumerate().skip(from) {
            let mut content = SlackMessageContent::new().with_text(part);
            if let Some(track) = track {
                content = content.with_metadata(look::mark(&track.key, index));
            }
            let request = SlackApiChatPostMessageRequest::new(chat.id.clone().into(), content)
                .opt_thread_ts(thread.map(|t| t.to_owned().into()))
                // Text only: no `@name` linked, no broadcast parsed from it.
                .with_link_names(false)
                .with_parse("none".into());
            let piece = track.map(|t| Piece { track: t, index, unsure });
            let (ts, seen) = self.post(&chat.id, thread, &request, piece, &mut found).await?;
            unsure = seen;
            sent.push(ts);
            if let Some(track) = track {
                track.taken(index, total);
            }
        }
        Ok(sent)
    }

    /// Posts one piece, retried as [`Sender::attempts`] retries; a tracked piece is looked for
    /// first whenever an earlier try may have been taken unseen, and one found counts as
    /// posted. The piece's `ts`, and whether it was found rather than posted. `found` keeps
    /// the last look's findings while nothing was posted since.
    async fn post(
        &self,
        channel: &str,
        thread: Option<&str>,
        request: &SlackApiChatPostMessageRequest,
        piece: Option<Piece<'_>>,
        found: &mut Option<look::Found>,
    ) -> Result<(String, bool), SendError> {
        let settings = &self.settings;
        let mut unsure = piece.as_ref().is_some_and(|p| p.unsure);
        let mut attempt = 0;
        loop {
            if unsure && let Some(Piece { track, index, .. }) = piece {
                let looked = match found.take() {
                    Some(known) => Ok(known),
                    None => self.look().find(channel, thread, &track.key, track.stored_at).await,
                };
                match looked {
                    Ok(known) => {
                        let ts = known.get(&index).cloned();
                        *found = Some(known);
                        if let Some(ts) = ts {
                            debug!(chat = %channel, piece = index, "a piece Slack took unseen was found");
                            return Ok((ts, true));
                        }
                        unsure = false;
                    }
                    Err(Failed { failure: Failure::Refused { error, .. }, .. }) => {
                        // No retry mends a missing scope: sent again, at least once rather
                        // than never.
                        warn!(%error, "could not look for a piece posted already; sending it again");
                        unsure = false;
                    }
                    Err(Failed { failure: Failure::Retry { error, after }, .. }) => {
                        // Posting now could double the piece: the look is tried again.
                        attempt += 1;
                        if attempt >= settings.send_attempts.max(1) {
                            return Err(SendError::Unreachable(error));
                        }
                        let wait = backoff(attempt - 1, None, settings.max_backoff)
                            .max(after.unwrap_or_default());
                        debug!(%error, attempt, wait_ms = wait.as_millis() as u64, "looking again");
                        tokio::time::sleep(wait).await;
                        continue;
                    }
                }
            }
            let session = self.client.open_session(&self.token);
            let call = session.chat_post_message(request);
            let Failed { failure, ambiguous } =
                match timed(settings.api_timeout, "chat.postMessage", &self.secrets, call).await {
                    Ok(posted) => {
                        *found = None;
                        return Ok((posted.ts.value().clone(), false));
                    }
                    Err(failed) => failed,
                };
            attempt += 1;
            let Failure::Retry { error: text, after } = &failure else {
                return Err(give_up(failure));
            };
            if attempt >= settings.send_attempts.max(1) {
                return Err(give_up(failure));
            }
            // A 429 comes before Slack acts; a timeout, a 5xx or a reset may come after. Once
            // unsure, only a look that succeeds makes sure again.
            if ambiguous {
                unsure = true;
                *found = None;
            }
            let wait =
                backoff(attempt - 1, None, settings.max_backoff).max(after.unwrap_or_default());
            debug!(error = %text, attempt, unsure, wait_ms = wait.as_millis() as u64, "retrying a post");
            tokio::time::sleep(wait).await;
        }
    }

    fn look(&self) -> look::Look<'_> {
        look::Look {
            client: &self.client,
            token: &self.token,
            secrets: &self.secrets,
            bot: &self.intake.bot,
            within: self.settings.api_timeout,
        }
    }

    async fn edit(&self, chat: &ChatRef, message: &str, markdown: &str) -> Result<(), SendError> {
        let text = chunk(&to_mrkdwn(markdown), MAX_MESSAGE_LEN, LengthUnit::Chars)
            .into_iter()
            .next()
            .ok_or_else(|| SendError::Rejected("the new text is empty".into()))?;
        let request = SlackApiChatUpdateRequest::new(
            chat.id.clone().into(),
            SlackMessageContent::new().with_text(text),
            message.to_owned().into(),
        )
        .with_link_names(false)
        .with_parse("none".into());
        self.retrying("chat.update", || async {
            self.client.open_session(&self.token).chat_update(&request).await
        })
        .await
        .map(drop)
    }

    /// Puts the working reaction on the chat's newest message, once, unless the answer came
    /// first (the gateway asks only once an answer is slow to come).
    async fn working(&self, chat: &ChatRef) {
        let Some(target) = self.intake.start_working(chat) else { return };
        if !self.intake.still_working(chat, &target) {
            return;
        }
        let (channel, ts) = target;
        let request =
            SlackApiReactionsAddRequest::new(channel.into(), WORKING.into(), ts.clone().into());
        let added = self
            .attempts("reactions.add", || async {
                self.client.open_session(&self.token).reactions_add(&request).await
            })
            .await;
        match added {
            Ok(_) => {}
            Err(failure) if failure.code() == Some("already_reacted") => {}
            Err(failure) => {
                self.intake.stop_working(chat);
                debug!(chat = %chat.id, error = failure.text(), "no working reaction shown");
            }
        }
    }

    /// Takes the working reaction off again, now that the chat got its answer.
    async fn done_working(&self, chat: &ChatRef) {
        let Some((channel, ts)) = self.intake.stop_working(chat) else { return };
        if !self.intake.shown(&(channel.clone(), ts.clone())) {
            return;
        }
        let request = SlackApiReactionsRemoveRequest::new(WORKING.into())
            .with_channel(channel.into())
            .with_timestamp(ts.into());
        let removed = self
            .attempts("reactions.remove", || async {
                self.client.open_session(&self.token).reactions_remove(&request).await
            })
            .await;
        if let Err(failure) = removed
            && failure.code() != Some("no_reaction")
        {
            debug!(chat = %chat.id, error = failure.text(), "the working reaction stayed");
        }
    }

    /// Calls Slack until it answers, refuses, or the attempts run out.
    async fn retrying<T, F, Fut>(&self, method: &str, call: F) -> Result<T, SendError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SlackClientError>>,
    {
        self.attempts(method, call).await.map_err(give_up)
    }

    async fn attempts<T, F, Fut>(&self, method: &str, call: F) -> Result<T, Failure>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, SlackClientError>>,
    {
        let settings = &self.settings;
        let mut attempt = 0;
        loop {
            let failure = match timed(settings.api_timeout, method, &self.secrets, call()).await {
                Ok(value) => return Ok(value),
                Err(failed) => failed.failure,
            };
            attempt += 1;
            let Failure::Retry { error, after } = &failure else { return Err(failure) };
            if attempt >= settings.send_attempts.max(1) {
                return Err(failure);
            }
            // Slack's Retry-After is a floor, never shortened by the cap.
            let wait =
                backoff(attempt - 1, None, settings.max_backoff).max(after.unwrap_or_default());
            debug!(%error, attempt, wait_ms = wait.as_millis() as u64, "retrying a Slack call");
            tokio::time::sleep(wait).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_are_bare_ts_whatever_names_them() {
        assert_eq!(thread_ts("1700000000.000100"), "1700000000.000100");
        assert_eq!(thread_ts("C1:1700000000.000100"), "1700000000.000100");
    }
}

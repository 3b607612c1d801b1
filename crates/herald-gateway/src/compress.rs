//! Context compression: when a session's conversation nears the model's context window, a child
//! session continues it from a summary of the older part and the recent tail verbatim, and the
//! parent is ended (`compressed`), kept and searchable. The store makes the switch one
//! transaction; this module decides when, asks the model for the summary, and cuts the tail.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use herald_agent::{ChatRequest, Message, Provider, ProviderError};
use herald_core::Role;
use herald_store::{NewMessage, Session, Store, StoreError};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::history;

/// How compression is tuned.
#[derive(Debug, Clone, PartialEq)]
pub struct CompressionSettings {
    /// The model's context window, in tokens.
    pub context_window: u64,
    /// The fraction of the window at which a session is compressed.
    pub threshold: f64,
    /// Tokens of the most recent conversation carried over verbatim (at most a quarter of
    /// the window).
    pub keep_recent_tokens: u64,
    /// The model that writes summaries; `None`: the session's own.
    pub summary_model: Option<String>,
    /// How long the summary call may take before the turn goes on without it.
    pub summary_timeout: Duration,
}

impl Default for CompressionSettings {
    fn default() -> Self {
        CompressionSettings {
            context_window: 128_000,
            threshold: 0.8,
            keep_recent_tokens: 8_000,
            summary_model: None,
            summary_timeout: Duration::from_secs(60),
        }
    }
}

impl CompressionSettings {
    /// The prompt size at which a session is compressed.
    pub fn limit(&self) -> u64 {
        (self.context_window as f64 * self.threshold.clamp(0.05, 1.0)) as u64
    }

    fn tail_budget(&self) -> u64 {
        self.keep_recent_tokens.min(self.context_window / 4)
    }
}

/// What the summary call is told. It keeps what later turns need, in the user's own words.
pub const SUMMARY_INSTRUCTIONS: &str = "You are compressing a conversation between a user and \
an assistant so that it can continue in a fresh context. Write a faithful summary that keeps: \
what the user asked for, quoting their own words where they matter; decisions made and why; \
every identifier exactly as written (file paths, ids, numbers, names, URLs, commands); open tasks \
and questions; and where things stand now. Leave out pleasantries. Write it as notes for the \
assistant, in the conversation's language. Do not answer the conversation; only summarize it.";

/// The first line of the summary message a child session starts with.
pub const SUMMARY_HEADING: &str = "[Summary of the earlier conversation. The full history is kept: \
use session_search to look up anything this summary leaves out.]";

/// Why a compression did not happen.
#[derive(Debug, thiserror::Error)]
pub enum CompressFailed {
    /// Too little history to summarize: everything is the recent tail.
    #[error("the conversation is too short to compress")]
    NothingToCompress,
    /// The summary call failed.
    #[error("the summary could not be written: {0}")]
    Summary(ProviderError),
    /// The summary call took longer than `summary_timeout`.
    #[error("the summary took longer than {0:?}")]
    SummaryTimeout(Duration),
    /// The summary would not make the conversation shorter.
    #[error("the summary was not shorter than what it summarizes")]
    NotShorter,
    /// The store refused (another process compressed it first, or the store failed).
    #[error("{0}")]
    Store(#[from] StoreError),
    /// Stopped before the child was created.
    #[error("compression was stopped")]
    Cancelled,
}

/// A compression that happened.
#[derive(Debug, Clone)]
pub struct Compressed {
    /// The new current session.
    pub child: Session,
    /// Messages the summary replaced.
    pub summarized: usize,
    /// Messages carried over verbatim.
    pub kept: usize,
    /// The model's time writing the summary.
    pub model_time: Duration,
}

/// Compression for every session of one process: its settings and, per session, how many
/// compressions failed in a row and how many turns to wait before the next try.
#[derive(Debug, Default)]
pub struct Compressor {
    /// How compression is tuned.
    pub settings: CompressionSettings,
    backoff: Mutex<HashMap<String, (u32, u32)>>,
    /// The tokens each session's last model call reported, as stored with its turn: read here
    /// instead of from the store before every turn.
    counted: Mutex<HashMap<String, u64>>,
}

/// Sessions whose counts are remembered; past it the memory starts over (the store has them).
const COUNTED_CAP: usize = 10_000;

/// The most turns a session waits between two tries after failures (1, 2, 4 ... turns).
/// Counted in turns, not time: a try costs a model call, and only a turn can need one.
const SKIP_CAP: u32 = 32;

impl Compressor {
    /// A compressor with these settings.
    pub fn new(settings: CompressionSettings) -> Compressor {
        Compressor { settings, backoff: Mutex::default(), counted: Mutex::default() }
    }

    /// What the session's last model call counted, if this process saw it.
    pub fn counted(&self, session: &str) -> Option<u64> {
        self.counts().get(session).copied()
    }

    /// Remembers what a session's last model call counted (0: not reported, nothing learned).
    pub fn note_counted(&self, session: &str, tokens: u64) {
        if tokens > 0 {
            self.remember_count(session, tokens);
        }
    }

    /// A session just created has counted nothing yet: no need to ask the store.
    pub fn note_new(&self, session: &str) {
        self.remember_count(session, 0);
    }

    fn remember_count(&self, session: &str, tokens: u64) {
        let mut counts = self.counts();
        if counts.len() >= COUNTED_CAP && !counts.contains_key(session) {
            counts.clear();
        }
        counts.insert(session.to_owned(), tokens);
    }

    /// Forgets a session's count: its history changed outside a turn (`/undo`, `/retry`).
    pub fn forget(&self, session: &str) {
        self.counts().remove(session);
    }

    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<String, u64>> {
        self.counted.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Whether a prompt of `tokens` calls for compression at this turn; a session whose last
    /// try failed sits out a few turns first. Called once per turn.
    pub fn due(&self, session: &str, tokens: u64) -> bool {
        if tokens < self.settings.limit() {
            return false;
        }
        match self.backoffs().get_mut(session) {
            Some((_, skip)) if *skip > 0 => {
                *skip -= 1;
                false
            }
            _ => true,
        }
    }

    fn backoffs(&self) -> std::sync::MutexGuard<'_, HashMap<String, (u32, u32)>> {
        self.backoff.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn failed(&self, session: &str) {
        let mut backoffs = self.backoffs();
        let failures = backoffs.get(session).map_or(0, |(n, _)| *n);
        let skip = (1u32 << failures.min(5)).min(SKIP_CAP);
        backoffs.insert(session.to_owned(), (failures + 1, skip));
    }

    /// Summarizes the older part of `history` (the session's, oldest first) and continues the
    /// session in a child that starts with the summary and the recent tail.
    pub async fn compress<P: Provider>(
        &self,
        store: &Store,
        provider: &P,
        session: &Session,
        history: &[Message],
        cancel: &CancellationToken,
    ) -> Result<Compressed, CompressFailed> {
        let outcome = self.try_compress(store, provider, session, history, cancel).await;
        match &outcome {
            Ok(done) => {
                self.backoffs().remove(&session.id);
                self.counts().remove(&session.id);
                info!(
                    parent = %session.id, child = %done.child.id, summarized = done.summarized,
                    kept = done.kept, "the conversation was compressed into a new session"
                );
            }
            // Nothing to summarize costs no model call: no backoff, and nothing to report.
            Err(CompressFailed::Cancelled | CompressFailed::NothingToCompress) => {}
            Err(e) => {
                self.failed(&session.id);
                warn!(session = %session.id, error = %e, "could not compress the conversation; tried again later");
            }
        }
        outcome
    }

    async fn try_compress<P: Provider>(
        &self,
        store: &Store,
        provider: &P,
        session: &Session,
        history: &[Message],
        cancel: &CancellationToken,
    ) -> Result<Compressed, CompressFailed> {
        let cut = tail_start(history, self.settings.tail_budget());
        let (older, tail) = history.split_at(cut);
        if older.is_empty() {
            return Err(CompressFailed::NothingToCompress);
        }
        let transcript = transcript(older);
        let request = [Message::user(transcript)];
        let model =
            self.settings.summary_model.as_deref().or(session.model.as_deref()).unwrap_or_default();
        let asked = Instant::now();
        let call = provider.complete(ChatRequest {
            model,
            system_prompt: SUMMARY_INSTRUCTIONS,
            messages: &request,
            tools: &[],
        });
        let limit = self.settings.summary_timeout;
        let summary = tokio::select! {
            answer = tokio::time::timeout(limit, call) => match answer {
                Ok(answer) => answer.map_err(CompressFailed::Summary)?,
                Err(_) => return Err(CompressFailed::SummaryTimeout(limit)),
            },
            () = cancel.cancelled() => return Err(CompressFailed::Cancelled),
        };
        let model_time = asked.elapsed();
        let summary = summary.message.content.trim();
        if summary.is_empty() || estimate(summary) >= older.iter().map(message_tokens).sum() {
            return Err(CompressFailed::NotShorter);
        }
        let mut messages = Vec::with_capacity(tail.len() + 1);
        messages.push(NewMessage::user(format!("{SUMMARY_HEADING}\n\n{summary}")));
        messages.extend(tail.iter().map(history::to_store));
        let context = estimate(SUMMARY_HEADING)
            + estimate(summary)
            + tail.iter().map(message_tokens).sum::<u64>();
        if cancel.is_cancelled() {
            return Err(CompressFailed::Cancelled);
        }
        let context = i64::try_from(context).unwrap_or(i64::MAX);
        let child = store.compress_session(&session.id, messages, context).await?;
        Ok(Compressed { child, summarized: older.len(), kept: tail.len(), model_time })
    }
}

/// Where the verbatim tail starts: the most recent messages within `budget` tokens, at least
/// the last one, and never a tool result without the assistant message that called it.
pub fn tail_start(history: &[Message], budget: u64) -> usize {
    let mut start = history.len();
    let mut spent = 0;
    while start > 0 {
        let cost = message_tokens(&history[start - 1]);
        if start < history.len() && spent + cost > budget {
            break;
        }
        spent += cost;
        start -= 1;
    }
    // A tool result belongs with the call before it: the tail takes the call too.
    while start > 0 && start < history.len() && history[start].role == Role::Tool {
        start -= 1;
    }
    start
}

/// The older conversation as one text for the summary call.
fn transcript(messages: &[Message]) -> String {
    let mut text = String::from("The conversation so far:\n\n");
    for message in messages {
        let who = match message.role {
            Role::User => "User",
            Role::Assistant => "Assistant",
            Role::Tool => "Tool result",
            Role::System => "System",
        };
        if let Some(tool) = &message.tool_name {
            text.push_str(&format!("{who} ({tool}): {}\n\n", message.content));
        } else if !message.content.is_empty() {
            text.push_str(&format!("{who}: {}\n\n", message.content));
        }
        for call in &message.tool_calls {
            text.push_str(&format!("{who} called {}({})\n\n", call.name, call.arguments));
        }
    }
    text
}

/// A rough token count: about four bytes a token for ASCII, one a character elsewhere (CJK
/// and most other scripts take at least that).
pub fn estimate(text: &str) -> u64 {
    let (ascii, other) = text
        .chars()
        .fold((0u64, 0u64), |(a, o), c| if c.is_ascii() { (a + 1, o) } else { (a, o + 1) });
    ascii.div_ceil(4) + other
}

/// One message's share of a prompt: its text, its tool calls and a little framing.
pub fn message_tokens(message: &Message) -> u64 {
    let calls: u64 =
        message.tool_calls.iter().map(|c| estimate(&c.name) + estimate(&c.arguments)).sum();
    estimate(&message.content) + calls + 4
}

#[cfg(test)]
mod tests {
    use herald_agent::ToolCall;

    use super::*;

    fn call(id: &str) -> Message {
        Message {
            tool_calls: vec![ToolCall {
                id: id.into(),
                name: "session_search".into(),
                arguments: "{}".into(),
            }],
            ..Message::assistant("")
        }
    }

    #[test]
    fn the_tail_never_starts_with_a_tool_result() {
        let history = vec![
            Message::user("a".repeat(400)),
            call("c1"),
            Message::tool_result("c1", "session_search", "r".repeat(400)),
            Message::tool_result("c1", "session_search", "s".repeat(40)),
            Message::assistant("done"),
        ];
        // A budget that reaches back into the results only: the call comes along.
        let start = tail_start(&history, 30);
        assert_eq!(start, 1, "the call and its results stay together");
        assert_eq!(tail_start(&history, 10), 4, "just the answer fits");
        assert_eq!(tail_start(&history, 0), 4, "at least the last message");
        assert_eq!(tail_start(&history, 10_000), 0, "everything fits");
    }

    #[test]
    fn estimates_count_other_scripts_by_character() {
        assert_eq!(estimate("abcd"), 1);
        assert_eq!(estimate("abcde"), 2);
        assert_eq!(estimate("你好世界"), 4);
        assert_eq!(estimate("привет"), 6);
        assert_eq!(estimate(""), 0);
    }

    #[test]
    fn the_limit_is_the_threshold_of_the_window() {
        let settings = CompressionSettings { context_window: 1000, ..Default::default() };
        assert_eq!(settings.limit(), 800);
        let compressor = Compressor::new(settings);
        assert!(!compressor.due("s", 799));
        assert!(compressor.due("s", 800));
        compressor.failed("s");
        assert!(!compressor.due("s", 900), "the next turn sits out");
        assert!(compressor.due("s", 900), "the one after tries again");
        compressor.failed("s");
        assert!(!compressor.due("s", 900) && !compressor.due("s", 900), "two turns now");
        assert!(compressor.due("s", 900));
        assert!(compressor.due("t", 900), "other sessions are not held back");
    }
}

//! herald's Slack adapter: Socket Mode and the Web API through slack-morphism.
//!
//! Events arrive as `events_api` envelopes on Socket Mode connections, which the adapter keeps
//! itself (slack-morphism serves the Web API and the event types); an envelope is
//! acknowledged only once the gateway settled its message (stored, or deliberately ignored),
//! and at most [`SlackSettings::ack_wait`] after it came, inside Slack's 3 s: a message not
//! settled by then is left to Slack's redelivery, which the dedupe answers once. Replies are
//! converted to mrkdwn and split at [`MAX_MESSAGE_LEN`] characters outside code fences.
//!
//! One post reaches the adapter up to twice (its `message` and `app_mention` events) and each
//! event again when Slack redelivers it. The adapter offers a post once, remembering event ids
//! and posts by channel and `ts`; a channel post offered as not addressed does not hide its
//! `app_mention` copy, which is offered again as addressed (the gateway drops a second copy
//! it stored, by the message id).
//!
//! Message ids and threads: [`herald_core::Inbound::id`] is `{channel}:{ts}`, because Slack
//! documents a `ts` as unique within its channel only and the gateway deduplicates by platform
//! and id. A thread, though, is named by the bare `ts` of its parent (that is what `thread_ts`
//! is, and the session key `slack:group:C:thread:TS` of the spec), so the adapter places a
//! top-level channel post in the thread it will be answered in itself
//! (`ChatRef::group(slack, C).in_thread(ts)` with `reply_in_thread`), and the gateway, seeing
//! a chat already in a thread, leaves it there. A reply sent to a thread written as
//! `channel:ts` posts with the part after the colon, so an id used as a thread still works.
//!
//! Depends only on herald-core; no slack-morphism type leaves this crate. The two tokens are
//! secrets: never logged, and scrubbed from every error text before that text leaves the crate.

mod connect;
mod error;
mod intake;
mod look;
mod markup;
mod send;
mod socket;

use std::time::Duration;

use herald_core::{Adapter, AdapterContext, AdapterError, Capabilities, Platform, ReplyStyle};
use tokio_util::sync::CancellationToken;

pub use markup::to_mrkdwn;

/// The longest reply part posted, in characters: Slack takes up to 40,000 but shows a long
/// message cut behind "show more" past about 4,000, so replies are split below that.
pub const MAX_MESSAGE_LEN: usize = 4000;

/// The Web API Slack itself serves.
pub const SLACK_API_URL: &str = "https://slack.com/api";

/// The most Socket Mode connections Slack keeps open for one app, across all its processes:
/// Slack refuses the next with a `too_many_websockets` disconnect.
pub const MAX_SOCKET_CONNECTIONS: u32 = 10;

/// Socket Mode connections per process by default: one to cover the other while Slack
/// refreshes it, and room for several replicas within [`MAX_SOCKET_CONNECTIONS`].
pub const DEFAULT_SOCKET_CONNECTIONS: u32 = 2;

/// How long one Web API call may take by default. slack-morphism sets no timeout, so without
/// one a half-open connection stalls a post, and the chat's replies behind it, for good; Slack
/// answers within seconds, and a call cut short is treated as one that may have been carried
/// out (the piece is looked for before it goes again).
pub const DEFAULT_API_TIMEOUT: Duration = Duration::from_secs(30);

/// How the adapter reaches Slack and how it behaves.
#[derive(Clone)]
pub struct SlackSettings {
    /// The bot token, `xoxb-…` (a secret).
    pub bot_token: String,
    /// The app-level token with `connections:write`, `xapp-…`, for Socket Mode (a secret).
    pub app_token: String,
    /// The Web API base with its `/api` suffix, when not Slack's ([`SLACK_API_URL`]).
    pub api_url: Option<String>,
    /// The variable the bot token came from, named when Slack refuses it.
    pub bot_token_env: String,
    /// The variable the app token came from, named when Slack refuses it.
    pub app_token_env: String,
    /// A top-level channel post is answered in a thread on it, which is the conversation's
    /// from then on; otherwise answers go to the channel.
    pub reply_in_thread: bool,
    /// Messages in a thread the bot answered in are addressed to it without a new mention.
    pub thread_follow_ups: bool,
    /// How long an envelope waits for its message to be settled before it is left
    /// unacknowledged for Slack to deliver again (Slack waits 3 s).
    pub ack_wait: Duration,
    /// How many Socket Mode connections this process keeps open, 1 to
    /// [`MAX_SOCKET_CONNECTIONS`]; never more at once, and every replica counts against
    /// Slack's limit for the app.
    pub socket_connections: u32,
    /// How many times one message is tried before the send fails.
    pub send_attempts: u32,
    /// The longest wait between two retries, and between two connection attempts.
    pub max_backoff: Duration,
    /// How long one Web API call may take before it is given up ([`DEFAULT_API_TIMEOUT`]).
    pub api_timeout: Duration,
}

impl SlackSettings {
    /// Settings with the defaults: Slack itself, answers in threads that mentions continue
    /// without a new mention, 2.5 s acknowledgement wait, two Socket Mode connections, 5 send
    /// attempts, 30 s backoff cap, 30 s per Web API call.
    pub fn new(bot_token: impl Into<String>, app_token: impl Into<String>) -> Self {
        SlackSettings {
            bot_token: bot_token.into(),
            app_token: app_token.into(),
            api_url: None,
            bot_token_env: "SLACK_BOT_TOKEN".into(),
            app_token_env: "SLACK_APP_TOKEN".into(),
            reply_in_thread: true,
            thread_follow_ups: true,
            ack_wait: Duration::from_millis(2500),
            socket_connections: DEFAULT_SOCKET_CONNECTIONS,
            send_attempts: 5,
            max_backoff: Duration::from_secs(30),
            api_timeout: DEFAULT_API_TIMEOUT,
        }
    }
}

// Hand-written so that the tokens never reach a log through `{:?}`.
impl std::fmt::Debug for SlackSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SlackSettings")
            .field("bot_token", &"<redacted>")
            .field("app_token", &"<redacted>")
            .field("api_url", &self.api_url)
            .field("bot_token_env", &self.bot_token_env)
            .field("app_token_env", &self.app_token_env)
            .field("reply_in_thread", &self.reply_in_thread)
            .field("thread_follow_ups", &self.thread_follow_ups)
            .field("ack_wait", &self.ack_wait)
            .field("socket_connections", &self.socket_connections)
            .field("send_attempts", &self.send_attempts)
            .field("max_backoff", &self.max_backoff)
            .field("api_timeout", &self.api_timeout)
            .finish()
    }
}

/// A Slack app in Socket Mode, driven by the gateway through [`Adapter::run`].
#[derive(Debug)]
pub struct SlackAdapter {
    settings: SlackSettings,
}

impl SlackAdapter {
    /// An adapter that connects with `settings` when run.
    pub fn new(settings: SlackSettings) -> Self {
        SlackAdapter { settings }
    }
}

impl Adapter for SlackAdapter {
    fn platform(&self) -> Platform {
        Platform::Slack
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            // No typing for bots: a reaction on the user's message stands for it, added once
            // and removed with the answer, so a long refresh interval spares calls.
            typing: true,
            typing_lasts: Duration::from_secs(60),
            // Slack has no quote-reply: without threads, "Quote" answers in the channel.
            reply_style: if self.settings.reply_in_thread {
                ReplyStyle::Thread
            } else {
                ReplyStyle::Quote
            },
        }
    }

    async fn run(
        self,
        ctx: AdapterContext,
        shutdown: CancellationToken,
    ) -> Result<(), AdapterError> {
        connect::run(self.settings, ctx, shutdown).await
    }
}

#[cfg(test)]
mod smoke;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_never_shows_the_tokens() {
        let shown = format!("{:?}", SlackSettings::new("xoxb-secret", "xapp-secret"));
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("SLACK_BOT_TOKEN"));
    }
}

//! The boundary between the gateway and one chat platform.
//!
//! Replies cross it as the model wrote them, in markdown. Each adapter turns them into its
//! platform's markup and splits them to its platform's limit (with [`crate::chunk`], which
//! never cuts inside a code fence), because only the adapter knows the markup's escaping, how
//! a conversion changes the length, and what to send again in plain text when the platform
//! rejects the markup. So core names no platform's markup and the gateway never measures a
//! reply: [`Capabilities`] holds only what the gateway itself acts on.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Semaphore, mpsc};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::Platform;
use crate::message::{Inbound, Outbound};
use crate::reply::ReplyStyle;

/// How a platform measures a message's length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthUnit {
    /// UTF-16 code units (Telegram).
    Utf16,
    /// Unicode scalar values (Discord, Slack).
    Chars,
}

impl LengthUnit {
    /// The length of `text` in this unit.
    pub fn len(self, text: &str) -> usize {
        match self {
            LengthUnit::Utf16 => text.encode_utf16().count(),
            LengthUnit::Chars => text.chars().count(),
        }
    }
}

/// What a platform can do that the gateway acts on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// Whether a typing indicator exists.
    pub typing: bool,
    /// How long a typing indicator lasts before it must be sent again.
    pub typing_lasts: Duration,
    /// How answers in group chats are placed, which decides their sessions' keys
    /// ([`crate::Placement`]).
    pub reply_style: ReplyStyle,
}

/// What an adapter reports to the gateway.
#[derive(Debug)]
pub enum AdapterEvent {
    /// Connected (again) to the platform, as the bot named here.
    Connected {
        /// The bot's username or name on the platform.
        bot: String,
    },
    /// The connection failed; the adapter retries after `retry_in`.
    Retrying {
        /// One line saying what went wrong (never a secret).
        error: String,
        /// When the next attempt is made.
        retry_in: Duration,
    },
    /// A message for the bot.
    Inbound(Inbound),
    /// Every inbound message before this position was settled: persist it, and hand it back as
    /// [`AdapterContext::cursor`] on the next start so nothing is replayed or skipped.
    Cursor(String),
    /// Every inbound message of `channel` before `cursor` was settled, for a platform whose
    /// positions are per channel (Discord: the newest handled message id, where a REST backfill
    /// starts). Persisted like [`AdapterEvent::Cursor`], keyed by the channel too.
    ChannelCursor {
        /// The platform's channel id.
        channel: String,
        /// The position in that channel.
        cursor: String,
    },
    /// A value the adapter keeps across restarts (Discord: the hash of the registered command
    /// set), handed back in [`AdapterContext::kept`]. Persisted like a cursor.
    Keep {
        /// The value's name, unique within the platform.
        name: String,
        /// The value.
        value: String,
    },
}

/// What the gateway gives an adapter to run with.
#[derive(Debug)]
pub struct AdapterContext {
    /// Where the adapter sends what happens: a channel of this adapter's own, so the gateway
    /// knows the platform of every event without a tag in it.
    pub events: mpsc::Sender<AdapterEvent>,
    /// What the gateway asks the adapter to send.
    pub outbound: mpsc::Receiver<Outbound>,
    /// The last persisted cursor, if any.
    pub cursor: Option<String>,
    /// The last persisted position of every channel that has one
    /// ([`AdapterEvent::ChannelCursor`]), by channel id.
    pub channel_cursors: BTreeMap<String, String>,
    /// The values kept with [`AdapterEvent::Keep`], by name.
    pub kept: BTreeMap<String, String>,
    /// Names one replica at a time may hold (a poller, a shard): wait for the claim before
    /// using what it names, and stop when it is lost.
    pub claims: crate::Claims,
    /// The saved positions as they are now, for an adapter that took a claim over.
    pub positions: crate::Positions,
}

/// Why an adapter stopped for good.
#[derive(Debug, thiserror::Error)]
pub enum AdapterError {
    /// The platform refused the credentials: retrying cannot help.
    #[error("{platform} refused the token: {detail}; check {hint}")]
    Unauthorized {
        /// The platform.
        platform: Platform,
        /// What the platform said.
        detail: String,
        /// What to check (the variable holding the token).
        hint: String,
    },
    /// Anything else that stops the adapter.
    #[error("{0}")]
    Other(String),
}

/// One chat platform: it turns platform events into [`AdapterEvent`]s and carries
/// [`Outbound`] requests back to the platform, until `shutdown` is cancelled.
///
/// An adapter never gives up on a lost connection: it reports [`AdapterEvent::Retrying`] and
/// reconnects with capped backoff. It returns an error only when retrying cannot help.
pub trait Adapter: Send + 'static {
    /// The platform this adapter speaks to.
    fn platform(&self) -> Platform;

    /// What the platform can do.
    fn capabilities(&self) -> Capabilities;

    /// Runs the adapter. When `shutdown` is cancelled it stops taking new messages but keeps
    /// delivering outbound requests (the gateway's drain) until every sender of `ctx.outbound`
    /// is dropped, then returns.
    fn run(
        self,
        ctx: AdapterContext,
        shutdown: CancellationToken,
    ) -> impl Future<Output = Result<(), AdapterError>> + Send;
}

/// Serves the gateway's requests with `handle`, up to `concurrent` at once, until every sender
/// of `outbound` is dropped and the last request is done: what every adapter's run loop does
/// beside its connection. Waiting for a free slot is the backpressure: the gateway's channel
/// fills up.
pub async fn serve_outbound<H, F>(
    mut outbound: mpsc::Receiver<Outbound>,
    concurrent: usize,
    handle: H,
) where
    H: Fn(Outbound) -> F,
    F: Future<Output = ()> + Send + 'static,
{
    let permits = Arc::new(Semaphore::new(concurrent.max(1)));
    let tracker = TaskTracker::new();
    while let Some(request) = outbound.recv().await {
        let Ok(permit) = permits.clone().acquire_owned().await else { break };
        let work = handle(request);
        tracker.spawn(
            async move {
                work.await;
                drop(permit);
            }
            .in_current_span(),
        );
    }
    tracker.close();
    tracker.wait().await;
}

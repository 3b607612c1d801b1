//! The gateway's side of each platform: where to send replies and what the platform can do.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use herald_core::{Capabilities, ChatRef, Outbound, Platform, SendError, SentId, Tracking};
use tokio::sync::{mpsc, oneshot};

use crate::metrics::Metrics;

/// One connected platform.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) outbound: mpsc::Sender<Outbound>,
    pub(crate) caps: Capabilities,
    pub(crate) metrics: Metrics,
}

impl Link {
    /// Sends a reply and waits until the platform accepted it (or the adapter gave up).
    pub(crate) async fn send(&self, reply: Reply<'_>) -> Result<Vec<SentId>, SendError> {
        let (done, result) = oneshot::channel();
        let chat = reply.chat;
        let request = Outbound::Send {
            chat: chat.clone(),
            text: reply.text,
            reply_to: reply.reply_to,
            answers: reply.answers,
            track: reply.track,
            done: Some(done),
        };
        self.outbound.send(request).await.map_err(|_| SendError::Stopped)?;
        let sent = result.await.unwrap_or(Err(SendError::Stopped));
        if sent.is_ok() {
            self.metrics.sent(chat.platform);
        }
        sent
    }

    /// Sends a reply without waiting for it (pairing notices, command answers); it counts as
    /// sent once queued.
    pub(crate) async fn notify(&self, chat: &ChatRef, text: String) {
        let request = Outbound::Send {
            chat: chat.clone(),
            text,
            reply_to: None,
            answers: None,
            track: None,
            done: None,
        };
        if self.outbound.send(request).await.is_ok() {
            self.metrics.sent(chat.platform);
        }
    }

    /// Shows the typing indicator, if the platform has one; never waits for a full queue.
    pub(crate) fn typing(&self, chat: &ChatRef) {
        if self.caps.typing {
            let _ = self.outbound.try_send(Outbound::Typing { chat: chat.clone() });
        }
    }
}

/// One reply for [`Link::send`]; see [`Outbound::Send`] for the fields.
#[derive(Debug)]
pub(crate) struct Reply<'a> {
    pub(crate) chat: &'a ChatRef,
    pub(crate) text: String,
    pub(crate) reply_to: Option<String>,
    pub(crate) answers: Option<String>,
    pub(crate) track: Option<Tracking>,
}

/// How a platform is doing, for logs, `/healthz` and the service status line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlatformState {
    /// Started, not connected yet.
    Starting,
    /// Connected as this bot.
    Connected {
        /// The bot's name on the platform.
        bot: String,
    },
    /// Lost the connection; retrying.
    Retrying {
        /// The last error.
        error: String,
    },
    /// Stopped for good.
    Failed {
        /// Why.
        error: String,
    },
}

/// Every platform's state, shared with whoever reports health.
#[derive(Debug, Clone, Default)]
pub struct PlatformStates(Arc<Mutex<HashMap<Platform, PlatformState>>>);

impl PlatformStates {
    /// Records a platform's state.
    pub fn set(&self, platform: Platform, state: PlatformState) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(platform, state);
    }

    /// Why every platform stopped, in one line, when every one did for good.
    pub fn all_failed(&self) -> Option<String> {
        let all = self.snapshot();
        let mut reasons = Vec::with_capacity(all.len());
        for (platform, state) in &all {
            let PlatformState::Failed { error } = state else { return None };
            // An adapter's error names its platform already, as a refused token does.
            reasons.push(match error.starts_with(platform.as_str()) {
                true => error.clone(),
                false => format!("{platform}: {error}"),
            });
        }
        (!reasons.is_empty()).then(|| reasons.join("; "))
    }

    /// Every platform's state, in platform order.
    pub fn snapshot(&self) -> Vec<(Platform, PlatformState)> {
        let map = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut all: Vec<_> = map.iter().map(|(p, s)| (*p, s.clone())).collect();
        all.sort_by_key(|(p, _)| *p);
        all
    }
}

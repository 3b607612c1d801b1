//! What every session worker shares: the store, the model, the tools, the settings, the
//! platform links, the outbox, the global run limit and the metrics.

use std::collections::HashMap;
use std::sync::Arc;

use herald_agent::ToolRegistry;
use herald_core::{Platform, ReplyStyle};
use herald_store::Store;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::compress::Compressor;
use crate::link::Link;
use crate::metrics::Metrics;
use crate::outbox::Outbox;
use crate::settings::GatewaySettings;

/// Shared by the router and every worker.
#[derive(Debug)]
pub(crate) struct Shared<P> {
    pub(crate) store: Store,
    pub(crate) provider: P,
    pub(crate) tools: ToolRegistry,
    pub(crate) settings: GatewaySettings,
    pub(crate) links: HashMap<Platform, Link>,
    /// Compresses conversations near the model's context window.
    pub(crate) compressor: Compressor,
    /// Where stored replies wait for their platform, in order per session.
    pub(crate) outbox: Outbox,
    /// One permit per agent run: `max_concurrent_runs` across all sessions.
    pub(crate) runs: Arc<Semaphore>,
    /// Cancelled when the drain time is over: running turns stop at their next boundary.
    pub(crate) stop_turns: CancellationToken,
    /// What `/metrics` reports.
    pub(crate) metrics: Metrics,
}

impl<P> Shared<P> {
    /// How `platform` places its answers in group chats (quoting, unless it says otherwise).
    pub(crate) fn reply_style(&self, platform: Platform) -> ReplyStyle {
        self.links.get(&platform).map_or(ReplyStyle::Quote, |link| link.caps.reply_style)
    }
}

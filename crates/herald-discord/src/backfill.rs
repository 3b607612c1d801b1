//! What arrived while the bot could not hear it: after a start, a session Discord would not
//! resume, or a shard taken over from another replica, every channel the bot knows on that
//! shard is read over REST from its cursor, and the messages are offered like live ones (the
//! gateway's dedupe answers each once).

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use herald_core::backoff;
use serenity::all::{ChannelId, GetMessages, MessageId};
use tracing::{debug, warn};

use crate::error::{Failure, classify};
use crate::intake::{Incoming, Inner, lock};

/// Channels fetched at once after a gap.
const BACKFILL_AT_ONCE: usize = 4;
/// Discord's epoch (2015-01-01) in Unix milliseconds, the base of snowflakes.
const DISCORD_EPOCH_MS: u64 = 1_420_070_400_000;

impl Inner {
    /// Fetches what every known channel on `shard` got since its cursor: after a start, after
    /// a session that could not be resumed (its dispatches are lost), and after this replica
    /// took the shard over. [`Inner::gap_opened`] held the cursors before this began.
    pub(crate) async fn backfill(self: Arc<Self>, shard: u32) {
        let channels: Vec<u64> = lock(&self.cursors).keys().copied().collect();
        if channels.is_empty() {
            return;
        }
        debug!(channels = channels.len(), "fetching what arrived while disconnected");
        let mut pending = channels.into_iter();
        let mut running = tokio::task::JoinSet::new();
        loop {
            while running.len() < BACKFILL_AT_ONCE
                && let Some(channel) = pending.next()
            {
                let this = self.clone();
                running.spawn(async move { this.fill_gap(channel, shard).await });
            }
            if running.join_next().await.is_none() {
                break;
            }
        }
    }

    /// Fetches `channel`'s part of `shard`'s gap, trying again while Discord fails for now,
    /// then lets its cursor move (a channel of another shard has no gap here).
    async fn fill_gap(&self, channel: u64, shard: u32) {
        let mut attempt = 0;
        while self.on_shard(channel, shard).await {
            match self.backfill_channel(channel).await {
                Fetched::Offered | Fetched::Never => break,
                Fetched::Later => {}
            }
            // The cursor stays before the gap meanwhile; gone with the shard, so is the gap.
            if self.shutdown.is_cancelled() || !lock(&self.shards_up).contains_key(&shard) {
                return;
            }
            tokio::time::sleep(backoff(attempt, None, self.settings.max_backoff)).await;
            attempt = attempt.saturating_add(1);
        }
        // Queued behind the messages offered above, so they hold the cursor from here on.
        self.offer(Incoming::GapFilled { channel, shard });
    }

    /// Offers the messages `channel` got after its cursor (at most the configured count, none
    /// older than the configured age), oldest first.
    pub(crate) async fn backfill_channel(&self, channel: u64) -> Fetched {
        let Some(after) = lock(&self.cursors).get(&channel).copied() else {
            return Fetched::Never;
        };
        if self.shutdown.is_cancelled() || after == 0 {
            return Fetched::Never;
        }
        let query = GetMessages::new()
            .after(MessageId::new(after))
            .limit(self.settings.backfill_limit.clamp(1, 100));
        let mut messages = match ChannelId::new(channel).messages(&self.http, query).await {
            Ok(messages) => messages,
            Err(e) => {
                let error = classify(&e, &self.settings.token);
                let refused = matches!(error, Failure::Refused { .. });
                warn!(
                    channel,
                    error = error.text(),
                    retrying = !refused,
                    "could not fetch the messages of a gap"
                );
                return if refused { Fetched::Never } else { Fetched::Later };
            }
        };
        messages.sort_by_key(|message| message.id);
        let oldest = now_ms().saturating_sub(self.settings.backfill_max_age.as_millis() as u64);
        for message in messages {
            if snowflake_ms(message.id.get()) >= oldest {
                self.offer(Incoming::Fetched(Box::new(message)));
            }
        }
        Fetched::Offered
    }
}

/// How a fetch after a gap ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fetched {
    /// What it found was offered.
    Offered,
    /// Nothing to fetch, or Discord refused for good (a channel gone, no access).
    Never,
    /// Discord failed for now: worth another try.
    Later,
}

/// When a snowflake was made, in Unix milliseconds.
fn snowflake_ms(id: u64) -> u64 {
    (id >> 22) + DISCORD_EPOCH_MS
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

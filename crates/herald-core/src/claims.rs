//! Claims: names that one replica at a time may hold, such as the Telegram poller or a Discord
//! shard. An adapter waits for its claim before it opens the connection the name stands for,
//! and closes that connection when the claim is lost. One herald alone holds every claim at once;
//! replicas on PostgreSQL hold them through the store, and a dead holder's claims pass to
//! another replica.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

/// What grants claims; the gateway provides it.
pub trait Claimer: Send + Sync + 'static {
    /// Waits until this process holds `name`.
    fn hold(&self, name: String) -> Pin<Box<dyn Future<Output = Claim> + Send>>;
}

/// A shareable handle on the gateway's [`Claimer`].
#[derive(Clone)]
pub struct Claims(Arc<dyn Claimer>);

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Claims")
    }
}

impl Claims {
    /// Claims granted by `claimer`.
    pub fn new(claimer: impl Claimer) -> Claims {
        Claims(Arc::new(claimer))
    }

    /// Every claim granted at once and never lost: one herald with nobody to share with.
    pub fn solo() -> Claims {
        Claims::new(Solo)
    }

    /// Waits until this process holds `name`.
    pub async fn hold(&self, name: impl Into<String>) -> Claim {
        self.0.hold(name.into()).await
    }
}

/// A held claim. Dropping it gives the name up.
pub struct Claim {
    lost: CancellationToken,
    _release: Option<Box<dyn Send + Sync>>,
}

impl fmt::Debug for Claim {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claim").field("lost", &self.lost.is_cancelled()).finish()
    }
}

impl Claim {
    /// A claim that ends when `lost` is cancelled; `release` is dropped with it (and gives the
    /// name up).
    pub fn new(lost: CancellationToken, release: Option<Box<dyn Send + Sync>>) -> Claim {
        Claim { lost, _release: release }
    }

    /// Resolves when another replica may hold the name now: stop using it at once.
    pub async fn lost(&self) {
        self.lost.cancelled().await
    }

    /// Whether the claim was lost.
    pub fn is_lost(&self) -> bool {
        self.lost.is_cancelled()
    }
}

/// Reads a platform's saved channel positions again, as they are in the store now: a replica
/// that takes a claim over resumes from where the previous holder got to, not from where it
/// itself started.
pub trait PositionSource: Send + Sync + 'static {
    /// Every channel's saved position, by channel id.
    fn channel_cursors(&self) -> Pin<Box<dyn Future<Output = BTreeMap<String, String>> + Send>>;
}

/// A shareable handle on a [`PositionSource`]; with none, nothing is read again.
#[derive(Clone, Default)]
pub struct Positions(Option<Arc<dyn PositionSource>>);

impl fmt::Debug for Positions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Positions")
    }
}

impl Positions {
    /// Positions read from `source`.
    pub fn new(source: impl PositionSource) -> Positions {
        Positions(Some(Arc::new(source)))
    }

    /// Every channel's saved position now (none without a source, or when it cannot be read).
    pub async fn channel_cursors(&self) -> BTreeMap<String, String> {
        match &self.0 {
            Some(source) => source.channel_cursors().await,
            None => BTreeMap::new(),
        }
    }
}

struct Solo;

impl Claimer for Solo {
    fn hold(&self, _name: String) -> Pin<Box<dyn Future<Output = Claim> + Send>> {
        Box::pin(async { Claim::new(CancellationToken::new(), None) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn alone_every_claim_is_held_at_once_and_kept() {
        let claim = Claims::solo().hold("telegram:poller").await;
        assert!(!claim.is_lost());
    }
}

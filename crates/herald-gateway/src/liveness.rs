//! Proof that the gateway is up and its event loop still turns, for the service manager.

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

/// A heartbeat request: the event loop answers it between two events.
pub(crate) type Beat = oneshot::Sender<()>;

/// Heartbeats the watchdog may have waiting; a loop that is stuck lets them wait.
pub(crate) const BEATS_WAITING: usize = 4;

/// Asks the gateway's event loop for a sign of life. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Heartbeat(pub(crate) mpsc::Sender<Beat>);

impl Heartbeat {
    /// Whether the event loop answered; waits as long as the loop does, so callers bound it
    /// with a timeout. `false` once the gateway has stopped.
    pub async fn beat(&self) -> bool {
        let (beat, answered) = oneshot::channel();
        self.0.send(beat).await.is_ok() && answered.await.is_ok()
    }
}

/// Resolves once the gateway runs: the store open, the adapters started, the messages a
/// previous run left picked up.
#[derive(Debug, Clone, Default)]
pub struct Started(pub(crate) CancellationToken);

impl Started {
    /// Waits until the gateway runs (forever, if it never gets there).
    pub async fn wait(&self) {
        self.0.cancelled().await;
    }

    /// Whether the gateway runs (or ran).
    pub fn is_started(&self) -> bool {
        self.0.is_cancelled()
    }
}

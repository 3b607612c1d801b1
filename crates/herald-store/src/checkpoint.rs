//! WAL checkpoints off the write path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its threshold, while that
//! writer holds the write lock: every herald process then waits for the copy and its sync.
//! herald checkpoints from a task of its own, on a pooled connection, holding no write lock: a
//! PASSIVE checkpoint copies what no reader still needs while writers go on appending, and the
//! next writer after a complete one starts the WAL over from its beginning.
//!
//! Under a load that never pauses, a commit lands during every background checkpoint, none of
//! them completes, and the WAL would never start over: SQLite's own checkpoint stays on, at a
//! threshold far above what the background ones leave (see `open.rs`), as the backstop. It
//! then has little left to copy.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::open::Lite;

/// At most one checkpoint per process this often while writes keep coming, which bounds the
/// WAL to what the busiest load writes in that time.
const EVERY: Duration = Duration::from_millis(250);

/// The checkpointing task's bookkeeping, one per process.
#[derive(Debug, Default)]
pub(crate) struct Checkpointer {
    running: Arc<AtomicBool>,
    /// When the last checkpoint started (a monotonic clock: a wall clock set back would stop
    /// checkpoints for as long).
    last_started: Mutex<Option<Instant>>,
}

/// Clears the running flag however the checkpoint task ends (a runtime shut down mid-way).
struct Running(Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl Lite {
    /// Notes a commit: starts a background checkpoint unless one started in the last `EVERY`
    /// or the store is closing.
    pub(crate) fn committed(&self) {
        let checkpointer = &self.inner.checkpointer;
        {
            let mut last = checkpointer.last_started.lock().unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < EVERY)
                || self.inner.pool.is_closed()
                || checkpointer.running.swap(true, Ordering::AcqRel)
            {
                return;
            }
            *last = Some(Instant::now());
        }
        let running = Running(Arc::clone(&checkpointer.running));
        let store = self.clone();
        tokio::spawn(async move {
            let _running = running;
            store.checkpoint().await;
        });
    }

    /// Copies the WAL back into the database as far as readers allow. PASSIVE never waits for
    /// readers or writers; what it cannot copy now waits for the next one.
    pub(crate) async fn checkpoint(&self) {
        let done = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&self.inner.pool).await;
        // A store closed meanwhile: SQLite checkpoints as its last connection closes.
        if let Err(e) = done
            && !self.inner.pool.is_closed()
        {
            warn!(error = %e, "WAL checkpoint failed; the next commit tries again");
        }
    }
}

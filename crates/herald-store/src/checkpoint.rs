//! WAL checkpoints off the write path.
//!
//! SQLite's automatic checkpoint runs inside the commit that crosses its threshold, while that
//! writer holds the write lock: every herald process then waits for the copy and its sync (tens
//! of milliseconds, the worst turns of a busy gateway). herald turns it off on its connections
//! and checkpoints from a task of its own, on a pooled connection, holding no write lock: a
//! PASSIVE checkpoint copies what no reader still needs while writers go on appending, and the
//! next writer after a complete one starts the WAL over from its beginning.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

use tracing::warn;

use crate::open::Store;
use crate::time::now_ms;

/// At most one checkpoint per process this often while writes keep coming, which bounds the
/// WAL to what the busiest load writes in that time.
const EVERY_MS: i64 = 250;

/// The checkpointing task's bookkeeping, one per process.
#[derive(Debug, Default)]
pub(crate) struct Checkpointer {
    running: AtomicBool,
    last_started_ms: AtomicI64,
}

impl Store {
    /// Notes a commit: starts a background checkpoint unless one ran in the last `EVERY_MS`.
    pub(crate) fn committed(&self) {
        let checkpointer = &self.inner.checkpointer;
        let now = now_ms();
        if now - checkpointer.last_started_ms.load(Ordering::Relaxed) < EVERY_MS
            || checkpointer.running.swap(true, Ordering::AcqRel)
        {
            return;
        }
        checkpointer.last_started_ms.store(now, Ordering::Relaxed);
        let store = self.clone();
        tokio::spawn(async move {
            store.checkpoint().await;
            store.inner.checkpointer.running.store(false, Ordering::Release);
        });
    }

    /// Copies the WAL back into the database as far as readers allow. PASSIVE never waits for
    /// readers or writers; what it cannot copy now waits for the next one.
    pub(crate) async fn checkpoint(&self) {
        if let Err(e) =
            sqlx::query("PRAGMA wal_checkpoint(PASSIVE)").execute(&self.inner.pool).await
        {
            warn!(error = %e, "WAL checkpoint failed; the next commit tries again");
        }
    }
}

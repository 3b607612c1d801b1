//! The write path: one writer per process, `BEGIN IMMEDIATE`, whole-transaction retry, and
//! the lock that orders herald's processes (group commit is in `group.rs`).

use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::{Connection, SqliteConnection};
use tracing::warn;

use crate::error::StoreError;
use crate::open::Lite;

/// Runs `$body` (an expression awaiting on `$conn: &mut SqliteConnection`) in a
/// `BEGIN IMMEDIATE` transaction, holding the process's write lock, and runs it again from
/// the start whenever SQLite reports the database busy or locked, until the store's
/// `write_patience` is spent.
///
/// `BEGIN IMMEDIATE` takes the write lock up front: a deferred transaction that reads and
/// then writes gets SQLITE_BUSY_SNAPSHOT at once, whatever the busy timeout.
macro_rules! write_tx {
    ($store:expr, |$conn:ident| $body:expr) => {
        async {
            let store: &$crate::open::Lite = $store;
            let mut writer = store.inner.write_lock.lock().await;
            let writer = writer.as_mut().ok_or($crate::error::StoreError::Closed)?;
            let mut backoff = $crate::write::Backoff::start(store);
            if let Err(e) = store.journals_in_memory(writer, false).await {
                // The write itself will show whether the writer still works (and heal it).
                tracing::debug!(error = %e, "could not move the writer's journals to disk");
            }
            let held = store.inner.process_lock.acquire(&backoff).await;
            let result = match held {
                Err(e) => Err(e),
                Ok(_held) => loop {
                let attempt: Result<_, $crate::error::StoreError> = async {
                    let mut tx =
                        sqlx::Connection::begin_with(&mut *writer, "BEGIN IMMEDIATE").await?;
                    let $conn: &mut sqlx::SqliteConnection = &mut tx;
                    let value = $body.await?;
                    tx.commit().await?;
                    Ok(value)
                }
                .await;
                match attempt {
                    Err(e) if e.is_retryable() => {
                        if let Err(gave_up) = backoff.wait().await {
                            break Err(gave_up);
                        }
                    }
                    done => break done,
                }
                },
            };
            store.inner.write_health.record(result.as_ref().err());
            store.heal_writer(writer, result.is_err()).await;
            if result.is_ok() {
                store.committed();
            }
            result
        }
        .await
    };
}
pub(crate) use write_tx;

impl Lite {
    /// Makes the writer keep the statement journals of its next transactions in memory, or
    /// write them to a temporary file past 64 KiB as SQLite does by default.
    ///
    /// A statement inside a transaction journals the pages it changes, so that it can be undone
    /// alone. Written to disk, that is a file created, written and deleted in every batch, while
    /// the batch holds the lock every other writer waits for. Group commits are bounded by the
    /// writes queued, so their journals are too; any other write (a prune, deleting a long
    /// session) may change the whole file, and journals to disk. The setting changes only when
    /// the kind of write does, outside a transaction, and costs one statement then.
    pub(crate) async fn journals_in_memory(
        &self,
        writer: &mut SqliteConnection,
        in_memory: bool,
    ) -> Result<(), StoreError> {
        let current = &self.inner.journals_in_memory;
        if current.load(Ordering::Relaxed) == in_memory {
            return Ok(());
        }
        let store =
            if in_memory { "PRAGMA temp_store = MEMORY" } else { "PRAGMA temp_store = DEFAULT" };
        sqlx::query(store).execute(&mut *writer).await?;
        current.store(in_memory, Ordering::Relaxed);
        Ok(())
    }

    /// Makes sure the writer connection can begin the next write, after a write that failed
    /// or left it in a transaction.
    ///
    /// A transaction dropped on an error is rolled back by the connection's thread after
    /// the fact; the ping waits for that. If the rollback itself failed (SQLite had already
    /// rolled the transaction back, on a full disk or an I/O error), the connection would
    /// refuse every later `BEGIN` as nested, and if its thread died, every later write: so
    /// a writer still in a transaction, or not answering, is replaced by a new connection.
    pub(crate) async fn heal_writer(&self, writer: &mut SqliteConnection, failed: bool) {
        if !failed && !writer.is_in_transaction() {
            return;
        }
        if writer.ping().await.is_ok() && !writer.is_in_transaction() {
            return;
        }
        match SqliteConnection::connect_with(&self.inner.writer_options).await {
            Ok(fresh) => {
                warn!("the writer connection was left unusable; replaced it with a new one");
                *writer = fresh;
                self.inner.journals_in_memory.store(false, Ordering::Relaxed);
            }
            Err(e) => {
                warn!(error = %e, "the writer connection is unusable and a new one could not be opened")
            }
        }
    }
}

/// Randomized waits between attempts of one write, bounded by the store's patience.
pub(crate) struct Backoff<'a> {
    store: &'a Lite,
    started: Instant,
}

impl<'a> Backoff<'a> {
    pub(crate) fn start(store: &'a Lite) -> Self {
        Backoff { store, started: Instant::now() }
    }

    /// The error for a write that ran out of patience.
    pub(crate) fn busy(&self) -> StoreError {
        let waited_ms = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        StoreError::Busy { waited_ms }
    }

    /// Sleeps before the next attempt, or gives up with [`StoreError::Busy`].
    pub(crate) async fn wait(&mut self) -> Result<(), StoreError> {
        let waited = self.started.elapsed();
        let patience = self.store.inner.write_patience;
        if waited >= patience {
            let waited_ms = u64::try_from(waited.as_millis()).unwrap_or(u64::MAX);
            warn!(waited_ms, "write gave up: the database stayed locked");
            return Err(StoreError::Busy { waited_ms });
        }
        self.store.inner.busy_retries.fetch_add(1, Ordering::Relaxed);
        // Uniform jitter keeps processes that collided from colliding again in step; the
        // range grows once a write has waited for seconds, so a long holder is not hammered.
        let delay = if waited < Duration::from_secs(2) {
            Duration::from_millis(rand::random_range(20..=150))
        } else {
            Duration::from_millis(rand::random_range(100..=600))
        };
        tokio::time::sleep(delay.min(patience - waited)).await;
        Ok(())
    }
}

impl Backoff<'_> {
    /// The patience left to this write.
    fn remaining(&self) -> Duration {
        self.store.inner.write_patience.saturating_sub(self.started.elapsed())
    }
}

/// An advisory lock on `<db>-lock` that herald processes take around every write transaction.
///
/// Without it, processes meet only in SQLite's busy handler, which sleeps 1, 2, 5 ... 100 ms
/// between tries: a process that lost a few times sleeps longest and keeps losing, and some
/// chats wait seconds. The kernel queues `flock` waiters and wakes them as the lock frees, so
/// processes take turns. SQLite's busy timeout and the retries still cover other writers (a
/// `sqlite3` shell, a backup), and they alone keep writes correct: the lock file only orders
/// herald's writers, so a lock lost in a race (an abandoned waiter letting go of the lock its
/// process shares) costs fairness for a moment, never data.
#[derive(Debug)]
pub(crate) struct ProcessLock {
    file: Option<Arc<File>>,
}

/// Held while a write runs; unlocks on drop.
#[derive(Debug)]
pub(crate) struct ProcessLockGuard(Option<Arc<File>>);

impl Drop for ProcessLockGuard {
    fn drop(&mut self) {
        if let Some(file) = &self.0 {
            let _ = file.unlock();
        }
    }
}

/// Between the thread blocked in `flock` and the write that may stop waiting for it.
#[derive(Debug, Default)]
struct Handover {
    locked: bool,
    abandoned: bool,
}

impl ProcessLock {
    /// Opens (creating `0600`) the lock file beside the database. A filesystem that cannot
    /// lock files gets no lock, with one warning; SQLite's busy handling still keeps it safe.
    pub(crate) fn open(db: &Path) -> std::io::Result<ProcessLock> {
        let mut name = db.as_os_str().to_owned();
        name.push("-lock");
        let path = std::path::PathBuf::from(name);
        crate::open::create_private_file(&path)?;
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path)?;
        if let Err(std::fs::TryLockError::Error(e)) = file.try_lock().map(|()| file.unlock()) {
            warn!(path = %path.display(), error = %e, "cannot lock files here; writers will meet in SQLite's busy handler only");
            return Ok(ProcessLock { file: None });
        }
        Ok(ProcessLock { file: Some(Arc::new(file)) })
    }

    /// Waits for the lock, at most the write's remaining patience.
    pub(crate) async fn acquire(
        &self,
        backoff: &Backoff<'_>,
    ) -> Result<ProcessLockGuard, StoreError> {
        let Some(file) = &self.file else { return Ok(ProcessLockGuard(None)) };
        // No quick try first: a process that just let go would win it back before the
        // processes the kernel is waking, and they would wait for rounds.
        let handover = Arc::new(Mutex::new(Handover::default()));
        let waiter = {
            let (file, handover) = (Arc::clone(file), Arc::clone(&handover));
            tokio::task::spawn_blocking(move || {
                let locked = file.lock().is_ok();
                let mut state = handover.lock().unwrap_or_else(|p| p.into_inner());
                if locked && state.abandoned {
                    let _ = file.unlock();
                }
                state.locked = locked;
            })
        };
        let waited = tokio::time::timeout(backoff.remaining(), waiter).await;
        let mut state = handover.lock().unwrap_or_else(|p| p.into_inner());
        if waited.is_err() && !state.locked {
            // The blocked thread lets go of the lock as soon as it gets it.
            state.abandoned = true;
            return Err(backoff.busy());
        }
        Ok(ProcessLockGuard(state.locked.then(|| Arc::clone(file))))
    }
}

//! The write path: one writer per process, `BEGIN IMMEDIATE`, whole-transaction retry, and
//! group commit for appends.

use std::fs::File;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;
use tracing::{debug, warn};

use crate::error::StoreError;
use crate::messages::{self, Append, Appended};
use crate::open::Store;

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
            let store: &$crate::open::Store = $store;
            let _turn = store.inner.write_lock.lock().await;
            let mut backoff = $crate::write::Backoff::start(store);
            let _held = store.inner.process_lock.acquire(&backoff).await?;
            loop {
                let attempt: Result<_, $crate::error::StoreError> = async {
                    let mut tx = store.inner.pool.begin_with("BEGIN IMMEDIATE").await?;
                    let $conn: &mut sqlx::SqliteConnection = &mut tx;
                    let value = $body.await?;
                    tx.commit().await?;
                    Ok(value)
                }
                .await;
                match attempt {
                    Err(e) if e.is_retryable() => backoff.wait().await?,
                    done => break done,
                }
            }
        }
        .await
    };
}
pub(crate) use write_tx;

/// Randomized waits between attempts of one write, bounded by the store's patience.
pub(crate) struct Backoff<'a> {
    store: &'a Store,
    started: Instant,
}

impl<'a> Backoff<'a> {
    pub(crate) fn start(store: &'a Store) -> Self {
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

/// Appends waiting to be committed together.
#[derive(Debug, Default)]
pub(crate) struct AppendQueue {
    pending: Mutex<Vec<Pending>>,
}

#[derive(Debug)]
struct Pending {
    append: Append,
    reply: oneshot::Sender<Result<Appended, StoreError>>,
}

impl Store {
    /// Queues an append and waits until it is committed.
    ///
    /// Whoever finds the queue empty spawns a flusher; the flusher waits for the write lock,
    /// and takes everything queued by then. While one batch commits, the next one gathers, so
    /// a hundred chats writing at once cost a couple of commits, and each caller still returns
    /// only once its own messages are durable. The flusher is a task of its own, so a caller
    /// that gives up waiting cannot abort the batch of others.
    pub(crate) async fn append(&self, append: Append) -> Result<Appended, StoreError> {
        let (reply, done) = oneshot::channel();
        let first = {
            let mut pending = self.inner.appends.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.push(Pending { append, reply });
            pending.len() == 1
        };
        if first {
            let store = self.clone();
            tokio::spawn(async move { store.flush_appends().await });
        }
        done.await.map_err(|_| StoreError::WriterGone)?
    }

    async fn flush_appends(&self) {
        let _turn = self.inner.write_lock.lock().await;
        let batch = std::mem::take(
            &mut *self.inner.appends.pending.lock().unwrap_or_else(|p| p.into_inner()),
        );
        if batch.is_empty() {
            return;
        }
        let mut backoff = Backoff::start(self);
        let held = match self.inner.process_lock.acquire(&backoff).await {
            Ok(held) => held,
            Err(e) => {
                for pending in batch {
                    let _ = pending.reply.send(Err(e.duplicate()));
                }
                return;
            }
        };
        let outcome = loop {
            let attempt: Result<Vec<Result<Appended, StoreError>>, StoreError> = async {
                let mut tx = self.inner.pool.begin_with("BEGIN IMMEDIATE").await?;
                let appends: Vec<&Append> = batch.iter().map(|p| &p.append).collect();
                let results = match messages::apply_batch(&mut tx, &appends).await {
                    Ok(results) => results,
                    Err(e) if e.is_retryable() => return Err(e),
                    // Something in the batch broke a constraint: apply each append alone,
                    // so only the one at fault fails.
                    Err(e) => {
                        debug!(error = %e, appends = appends.len(), "batch refused; applying appends one by one");
                        let mut results = Vec::with_capacity(appends.len());
                        for append in &appends {
                            sqlx::query("SAVEPOINT append").execute(&mut *tx).await?;
                            match messages::apply_batch(&mut tx, &[append]).await {
                                Ok(mut one) => {
                                    sqlx::query("RELEASE append").execute(&mut *tx).await?;
                                    results.push(one.pop().unwrap_or(Err(StoreError::WriterGone)));
                                }
                                Err(e) if e.is_retryable() => return Err(e),
                                Err(e) => {
                                    sqlx::query("ROLLBACK TO append").execute(&mut *tx).await?;
                                    sqlx::query("RELEASE append").execute(&mut *tx).await?;
                                    results.push(Err(e));
                                }
                            }
                        }
                        results
                    }
                };
                tx.commit().await?;
                Ok(results)
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
        };
        drop(held);
        match outcome {
            Ok(results) => {
                let stored = results
                    .iter()
                    .map(|r| match r {
                        Ok(Appended::Stored(ids)) => ids.len() as u64,
                        _ => 0,
                    })
                    .sum();
                self.schedule_indexing(stored);
                for (pending, result) in batch.into_iter().zip(results) {
                    let _ = pending.reply.send(result);
                }
            }
            Err(e) => {
                for pending in batch {
                    let _ = pending.reply.send(Err(e.duplicate()));
                }
            }
        }
    }
}

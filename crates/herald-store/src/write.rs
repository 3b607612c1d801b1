//! The write path: one writer per process, `BEGIN IMMEDIATE`, whole-transaction retry, and
//! group commit for appends.

use std::sync::Mutex;
use std::sync::atomic::Ordering;
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

//! Group commit: the writes of many chats committed in one transaction.
//!
//! Whoever finds the queue empty spawns a flusher; the flusher waits for the write lock and
//! takes everything queued by then. While one batch commits, the next one gathers, so a
//! hundred chats writing at once cost a couple of commits, and each caller still returns only
//! once its own write is durable. The flusher is a task of its own, so a caller that gives up
//! waiting cannot abort the batch of others.
//!
//! Appends of messages and new sessions are applied together, each kind with a few multi-row
//! statements whatever their number; deliveries (outbox rows to drop) with one; [`Job`]s are any
//! other write of the gateway's hot path (routing a new chat, queueing a message for a busy
//! session, a platform cursor). A batch is first tried trusting, everything at once; if a job
//! fails or an append or a new session is refused, it is tried again with each write in a
//! savepoint of its own, so that the one at fault undoes only itself. Writes that depend on one
//! another never meet in a batch: a caller learns the result of one only after it committed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Mutex;

use sqlx::SqliteConnection;
use tokio::sync::oneshot;
use tracing::debug;

use crate::error::StoreError;
use crate::messages::{Append, Appended};
use crate::open::Lite;
use crate::sessions::{NewSession, Session};
use crate::write::Backoff;

mod commit;

use commit::{Attempt, Batch};

/// A job's future, borrowing the batch's connection.
pub(crate) type JobFuture<'c, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'c>>;

/// Writes waiting to be committed together.
#[derive(Debug, Default)]
pub(crate) struct WriteQueue {
    pending: Mutex<Vec<Pending>>,
}

enum Pending {
    Append {
        append: Append,
        reply: oneshot::Sender<Result<Appended, StoreError>>,
    },
    Job(Box<dyn Job>),
    /// A new session: those of a batch are inserted with a few statements for all of them.
    Create {
        new: Box<NewSession>,
        reply: oneshot::Sender<Result<Session, StoreError>>,
    },
    /// A reply the platform took: its outbox row goes, with the others of the batch in one
    /// statement (one for every message the gateway answers).
    Delivered {
        message_id: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Pending::Append { append, .. } => f.debug_tuple("Append").field(append).finish(),
            Pending::Job(_) => f.write_str("Job"),
            Pending::Create { .. } => f.write_str("Create"),
            Pending::Delivered { message_id, .. } => {
                f.debug_tuple("Delivered").field(message_id).finish()
            }
        }
    }
}

/// A write of the batch other than an append.
trait Job: Send {
    /// Runs inside the batch's transaction; again from the start when the batch is retried.
    /// Only an error that makes the whole batch retry is returned; the job's own outcome is
    /// kept for [`Job::finish`].
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> JobFuture<'c, ()>;
    /// Whether the last run failed (its savepoint, or the trusting attempt, is rolled back).
    fn failed(&self) -> bool;
    /// Hands the outcome to the caller once the batch is over.
    fn finish(self: Box<Self>, batch: Result<(), StoreError>);
}

struct Typed<T, F> {
    op: F,
    outcome: Option<Result<T, StoreError>>,
    reply: oneshot::Sender<Result<T, StoreError>>,
}

impl<T, F> Job for Typed<T, F>
where
    T: Send,
    F: for<'c> Fn(&'c mut SqliteConnection) -> JobFuture<'c, T> + Send,
{
    fn run<'c>(&'c mut self, conn: &'c mut SqliteConnection) -> JobFuture<'c, ()> {
        Box::pin(async move {
            self.outcome = None;
            match (self.op)(conn).await {
                Err(e) if e.is_retryable() => Err(e),
                outcome => {
                    self.outcome = Some(outcome);
                    Ok(())
                }
            }
        })
    }

    fn failed(&self) -> bool {
        matches!(self.outcome, Some(Err(_)))
    }

    fn finish(self: Box<Self>, batch: Result<(), StoreError>) {
        let outcome = match batch {
            Ok(()) => self.outcome.unwrap_or(Err(StoreError::WriterGone)),
            Err(e) => Err(e),
        };
        let _ = self.reply.send(outcome);
    }
}

impl Lite {
    /// Queues an append and waits until it is committed.
    pub(crate) async fn append(&self, append: Append) -> Result<Appended, StoreError> {
        let (reply, done) = oneshot::channel();
        self.enqueue(Pending::Append { append, reply });
        done.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Runs `op` in the next group commit and waits until it is committed. `op` may run more
    /// than once (a batch that met a lock is retried from the start), so it takes what it
    /// needs by clone; a failing `op` undoes only its own statements.
    ///
    /// `op` runs while the batch holds the write lock: it must only use the connection it is
    /// given, never call the store (that would wait for the lock forever). Jobs run before the
    /// batch's appends whatever order they came in, which is safe because a write that depends
    /// on another is only queued once the other has returned.
    pub(crate) async fn grouped<T, F>(&self, op: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: for<'c> Fn(&'c mut SqliteConnection) -> JobFuture<'c, T> + Send + 'static,
    {
        let (reply, done) = oneshot::channel();
        self.enqueue(Pending::Job(Box::new(Typed { op, outcome: None, reply })));
        done.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Creates a session in the next group commit and waits until it is committed.
    pub(crate) async fn create(&self, new: NewSession) -> Result<Session, StoreError> {
        let (reply, done) = oneshot::channel();
        self.enqueue(Pending::Create { new: Box::new(new), reply });
        done.await.map_err(|_| StoreError::WriterGone)?
    }

    /// Takes a reply out of the outbox in the next group commit.
    pub(crate) async fn delivered_grouped(&self, message_id: i64) -> Result<(), StoreError> {
        let (reply, done) = oneshot::channel();
        self.enqueue(Pending::Delivered { message_id, reply });
        done.await.map_err(|_| StoreError::WriterGone)?
    }

    fn enqueue(&self, write: Pending) {
        let first = {
            let mut pending = self.inner.writes.pending.lock().unwrap_or_else(|p| p.into_inner());
            pending.push(write);
            pending.len() == 1
        };
        if first {
            let store = self.clone();
            tokio::spawn(async move { store.flush().await });
        }
    }

    async fn flush(&self) {
        let mut writer = self.inner.write_lock.lock().await;
        let Some(writer) = writer.as_mut() else {
            let queued = std::mem::take(
                &mut *self.inner.writes.pending.lock().unwrap_or_else(|p| p.into_inner()),
            );
            Batch::sort(queued).fail(&StoreError::Closed);
            return;
        };
        while self.flush_batch(writer).await {}
    }

    /// Builds the trusting attempt's statements for the batch's appends not yet built, after
    /// looking up the numbers of sessions this process has not seen (a session that is gone
    /// leaves them unbuilt, and the batch goes with care).
    async fn prepare(&self, batch: &mut Batch) {
        if let Err(e) = self.learn_numbers(&batch.unprepared_sessions()).await {
            debug!(error = %e, "could not look up session numbers; the batch goes with care");
        }
        batch.prepare(&self.inner.numbers);
    }

    /// Commits what is queued on the writer connection, holding the write lock; whether
    /// writes were put back in the queue for another go.
    async fn flush_batch(&self, writer: &mut SqliteConnection) -> bool {
        let queue = || self.inner.writes.pending.lock().unwrap_or_else(|p| p.into_inner());
        if queue().is_empty() {
            return false;
        }
        self.inner.writes.settle().await;
        let mut backoff = Backoff::start(self);
        // The batch is taken, and its statements built, before the lock: building them while
        // another process writes keeps that work out of the time every writer waits for. What
        // queues while this process waits for the lock still rides along in this batch,
        // prepared once the lock is held, instead of waiting a whole round for the next one.
        let mut batch = Batch::sort(std::mem::take(&mut *queue()));
        self.prepare(&mut batch).await;
        if let Err(e) = self.journals_in_memory(writer, true).await {
            debug!(error = %e, "could not keep the batch's journals in memory; they go to disk");
        }
        let held = self.inner.process_lock.acquire(&backoff).await;
        let later = std::mem::take(&mut *queue());
        let held = match held {
            Ok(held) => held,
            Err(e) => {
                self.inner.write_health.record(Some(&e));
                // Only the writes that waited all along have run out of patience; the later
                // ones go back to the front of the queue for the next flusher.
                let requeued = !later.is_empty();
                queue().splice(0..0, later);
                batch.fail(&e);
                return requeued;
            }
        };
        if !later.is_empty() {
            batch.add(later);
            self.prepare(&mut batch).await;
        }
        let mut attempt = Attempt::Trusting;
        let outcome = loop {
            batch.refresh(&self.inner.numbers);
            if !batch.prepared() {
                attempt = Attempt::Careful;
            }
            match batch.commit(writer, attempt).await {
                Ok(Some(outcome)) => break Ok(outcome),
                Ok(None) => attempt = Attempt::Careful,
                Err(e) if e.is_retryable() => {
                    if let Err(gave_up) = backoff.wait().await {
                        break Err(gave_up);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        drop(held);
        self.inner.write_health.record(outcome.as_ref().err());
        self.heal_writer(writer, outcome.is_err()).await;
        match outcome {
            Ok(outcome) => {
                self.committed();
                self.schedule_indexing(outcome.stored_messages());
                batch.succeed(outcome);
            }
            Err(e) => batch.fail(&e),
        }
        false
    }
}

/// Most yields [`WriteQueue::settle`] spends waiting for the queue to stop growing.
const SETTLE_YIELDS: usize = 8;

impl WriteQueue {
    fn len(&self) -> usize {
        self.pending.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Lets the callers the last commit woke queue their next writes before the flusher asks
    /// for the process lock: they are ready to run, and a few polls later they ride this
    /// batch instead of waiting a whole round of the other processes for the next. Returns
    /// once the queue did not grow over one yield, so a lone write pays a single yield.
    async fn settle(&self) {
        let mut seen = self.len();
        for _ in 0..SETTLE_YIELDS {
            tokio::task::yield_now().await;
            let now = self.len();
            if now == seen {
                return;
            }
            seen = now;
        }
    }
}

#[cfg(test)]
mod tests;

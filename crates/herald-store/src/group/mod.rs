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
use crate::open::Store;
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

impl Store {
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
mod tests {
    #![allow(clippy::unwrap_used)]
    use herald_core::Platform;

    use super::*;
    use crate::StoreOptions;

    #[tokio::test]
    async fn a_failing_job_undoes_only_itself_in_a_shared_batch() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let session =
            store.create_session(&crate::NewSession::new(Platform::Telegram, "p")).await.unwrap();
        // Holding the write lock makes all three writes wait for the same batch, which the
        // failing job sends round again with care.
        let lock = store.inner.write_lock.lock().await;
        let failing = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .grouped(|conn| {
                        Box::pin(async move {
                            sqlx::query(
                                "INSERT INTO platform_cursors (platform, name, value, updated_at)
                                 VALUES ('telegram', 'offset', 'lost', 0)",
                            )
                            .execute(&mut *conn)
                            .await?;
                            sqlx::query("INSERT INTO no_such_table VALUES (1)")
                                .execute(&mut *conn)
                                .await?;
                            Ok(())
                        })
                    })
                    .await
            }
        });
        let saving = tokio::spawn({
            let store = store.clone();
            async move { store.set_cursor(Platform::Slack, "offset", "kept").await }
        });
        let appending = tokio::spawn({
            let (store, session) = (store.clone(), session.id.clone());
            async move {
                let message = crate::NewMessage::user("kept too");
                store.append_inbound(&session, Platform::Telegram, "m1", message).await
            }
        });
        while store.inner.writes.pending.lock().unwrap().len() < 3 {
            tokio::task::yield_now().await;
        }
        drop(lock);
        assert!(failing.await.unwrap().is_err());
        saving.await.unwrap().unwrap();
        assert!(matches!(appending.await.unwrap(), Ok(Appended::Stored(_))));
        assert_eq!(store.session(&session.id).await.unwrap().unwrap().message_count, 1);
        assert_eq!(store.cursor(Platform::Telegram, "offset").await.unwrap(), None);
        assert_eq!(store.cursor(Platform::Slack, "offset").await.unwrap().as_deref(), Some("kept"));
    }

    #[tokio::test]
    async fn appends_applied_one_by_one_after_a_refused_batch_are_not_taken_for_duplicates() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let session =
            store.create_session(&crate::NewSession::new(Platform::Telegram, "p")).await.unwrap();
        let lock = store.inner.write_lock.lock().await;
        // A job of the same batch makes its connection refuse one message.
        let poison = tokio::spawn({
            let store = store.clone();
            async move {
                store
                    .grouped(|conn| {
                        Box::pin(async move {
                            sqlx::query(
                                "CREATE TEMP TRIGGER IF NOT EXISTS poison BEFORE INSERT ON main.messages
                                 WHEN new.content = 'poison' BEGIN SELECT RAISE(ABORT, 'poisoned'); END",
                            )
                            .execute(&mut *conn)
                            .await?;
                            Ok(())
                        })
                    })
                    .await
            }
        });
        let append = |id: &'static str, text: &'static str| {
            let (store, session) = (store.clone(), session.id.clone());
            tokio::spawn(async move {
                let message = crate::NewMessage::user(text);
                store.append_inbound(&session, Platform::Telegram, id, message).await
            })
        };
        let (fine, bad) = (append("m1", "fine"), append("m2", "poison"));
        while store.inner.writes.pending.lock().unwrap().len() < 3 {
            tokio::task::yield_now().await;
        }
        drop(lock);
        poison.await.unwrap().unwrap();
        assert!(matches!(fine.await.unwrap(), Ok(Appended::Stored(_))));
        assert!(bad.await.unwrap().is_err());
        let history = store.history(&session.id).await.unwrap();
        let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
        assert_eq!(texts, ["fine"]);
        let stored = store.session(&session.id).await.unwrap().unwrap();
        assert_eq!(stored.message_count, 1);
    }

    /// Creates sessions for `users` (a `None` parent, or one that does not exist) in one batch;
    /// returns what each creation gave.
    async fn create_in_one_batch(
        store: &Store,
        users: &[(&str, Option<&str>)],
    ) -> Vec<Result<crate::Session, StoreError>> {
        let lock = store.inner.write_lock.lock().await;
        let created: Vec<_> = users
            .iter()
            .map(|(user, parent)| {
                let store = store.clone();
                let new = crate::NewSession {
                    user_id: Some(user.to_string()),
                    parent_session_id: parent.map(str::to_owned),
                    ..crate::NewSession::new(Platform::Telegram, "prompt")
                };
                tokio::spawn(async move { store.create_session(&new).await })
            })
            .collect();
        while store.inner.writes.pending.lock().unwrap().len() < users.len() {
            tokio::task::yield_now().await;
        }
        drop(lock);
        let mut outcomes = Vec::new();
        for created in created {
            outcomes.push(created.await.unwrap());
        }
        outcomes
    }

    #[tokio::test]
    async fn sessions_created_in_one_batch_are_numbered_apart_and_a_bad_one_fails_alone() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let names: Vec<String> = (0..60).map(|i| format!("user-{i}")).collect();
        let users: Vec<(&str, Option<&str>)> = names.iter().map(|n| (n.as_str(), None)).collect();
        // All at once, then again with one whose parent does not exist among them.
        let mut sessions: Vec<crate::Session> = create_in_one_batch(&store, &users[..30])
            .await
            .into_iter()
            .map(Result::unwrap)
            .collect();
        let mut second = users[30..].to_vec();
        second.insert(10, ("orphan", Some("no-such-session")));
        let mut outcomes = create_in_one_batch(&store, &second).await;
        assert!(outcomes.remove(10).is_err());
        sessions.extend(outcomes.into_iter().map(Result::unwrap));

        for (i, session) in sessions.iter().enumerate() {
            let message = crate::NewMessage::user(format!("message {i}"));
            store.append_messages(&session.id, vec![message]).await.unwrap();
        }
        for (i, session) in sessions.iter().enumerate() {
            // What the batch handed out is the row it stored, but for the append since.
            let stored = store.session(&session.id).await.unwrap().unwrap();
            let expected = crate::Session {
                message_count: 1,
                updated_at: stored.updated_at,
                ..session.clone()
            };
            assert_eq!(stored, expected, "{i}");
            let history = store.history(&session.id).await.unwrap();
            let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
            assert_eq!(texts, [format!("message {i}")]);
        }
        assert_eq!(store.stats().await.unwrap().sessions, 60);
    }

    #[tokio::test]
    async fn group_commits_journal_in_memory_and_other_writes_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let temp_store = || async {
            let mut writer = store.inner.write_lock.lock().await;
            let writer = writer.as_mut().unwrap();
            let mode: i64 =
                sqlx::query_scalar("PRAGMA temp_store").fetch_one(writer).await.unwrap();
            mode
        };
        let session =
            store.create_session(&crate::NewSession::new(Platform::Cli, "p")).await.unwrap();
        assert_eq!(temp_store().await, 2, "a group commit journals in memory");
        store.rename_session(&session.id, "renamed").await.unwrap();
        assert_eq!(temp_store().await, 0, "any other write journals as SQLite does");
        store.append_messages(&session.id, vec![crate::NewMessage::user("hi")]).await.unwrap();
        assert_eq!(temp_store().await, 2);
    }

    #[tokio::test]
    async fn a_writer_left_in_a_transaction_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        // A job that ends the transaction behind sqlx's back: its RELEASE fails, and so does
        // the rollback of the dropped transaction, which leaves the connection believing it
        // is still inside one. Every later BEGIN would be refused as nested.
        let broken = store
            .grouped(|conn| {
                Box::pin(async move {
                    sqlx::query("ROLLBACK").execute(&mut *conn).await?;
                    Ok(())
                })
            })
            .await;
        assert!(broken.is_err(), "{broken:?}");
        let session = store.create_session(&crate::NewSession::new(Platform::Cli, "p")).await;
        let session = session.unwrap();
        let message = crate::NewMessage::user("after");
        assert_eq!(store.append_messages(&session.id, vec![message]).await.unwrap().len(), 1);
    }
}

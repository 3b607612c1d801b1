//! One batch of the group commit and its transaction: the deliveries, the jobs, the new
//! sessions, then the appends, applied trusting or with care (see [`Attempt`]).

use sqlx::SqliteConnection;
use tokio::sync::oneshot;
use tracing::debug;

use super::{Job, Pending};
use crate::appends::{self, Prepared};
use crate::error::StoreError;
use crate::messages::{Append, Appended};
use crate::numbers::SessionNumbers;
use crate::sessions::{self, NewSession, Session};

/// Where a caller waits for the outcome of its write.
type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

/// The writes of one batch by kind, each with the caller waiting for it.
pub(super) struct Batch {
    appends: Vec<(Append, Reply<Appended>)>,
    jobs: Vec<Box<dyn Job>>,
    created: Vec<(Box<NewSession>, Reply<Session>)>,
    delivered: Vec<(i64, Reply<()>)>,
    /// The trusting attempt's statements for the appends, in order: a part for those taken
    /// before the write lock, and one for those that came while the flusher waited for it.
    /// Appends they do not cover (their statements could not be built) make the batch go
    /// straight to the careful attempt.
    prepared: Vec<Prepared>,
}

/// What a committed batch did: each new session and each append, in the order they came.
pub(super) struct Outcome {
    created: Vec<Result<Session, StoreError>>,
    appends: Vec<Result<Appended, StoreError>>,
}

impl Outcome {
    /// How many messages it stored (what the search index has to catch up with).
    pub(super) fn stored_messages(&self) -> u64 {
        let count = |r: &Result<Appended, StoreError>| match r {
            Ok(Appended::Stored(ids)) => ids.len() as u64,
            _ => 0,
        };
        self.appends.iter().map(count).sum()
    }
}

/// How an attempt applies the batch's jobs and appends.
#[derive(Debug, Clone, Copy)]
pub(super) enum Attempt {
    /// The first attempt at every batch: everything at once, in no savepoint; new sessions
    /// with three statements for all of them; the appends by the statements built before the
    /// lock (see [`Prepared`]), which assume their sessions exist and their inbound ids are new.
    /// No savepoints: every statement is a round trip to the connection's thread, made while
    /// every other writer waits. A job that fails, or writes that break an assumption, roll the
    /// whole transaction back, and the batch is tried again with care.
    Trusting,
    /// Jobs, new sessions and appends each in a savepoint, sessions looked up, so that one
    /// write at fault fails alone.
    Careful,
}

/// Most outbox rows one DELETE names (SQLite takes up to 32766 parameters).
const DELIVERED_PER_DELETE: usize = 10_000;

impl Batch {
    /// The queued writes, sorted by kind.
    pub(super) fn sort(writes: Vec<Pending>) -> Batch {
        let mut batch = Batch {
            appends: Vec::new(),
            jobs: Vec::new(),
            created: Vec::new(),
            delivered: Vec::new(),
            prepared: Vec::new(),
        };
        batch.add(writes);
        batch
    }

    /// Adds `writes` (those that came while the flusher waited for the lock) to the batch;
    /// their appends are prepared with [`Batch::prepare`].
    pub(super) fn add(&mut self, writes: Vec<Pending>) {
        for write in writes {
            match write {
                Pending::Append { append, reply } => self.appends.push((append, reply)),
                Pending::Job(job) => self.jobs.push(job),
                Pending::Create { new, reply } => self.created.push((new, reply)),
                Pending::Delivered { message_id, reply } => {
                    self.delivered.push((message_id, reply))
                }
            }
        }
    }

    /// The sessions of the appends not yet prepared.
    pub(super) fn unprepared_sessions(&self) -> Vec<&str> {
        let done = self.prepared_appends();
        self.appends[done..].iter().map(|(a, _)| a.session_id.as_str()).collect()
    }

    /// Builds the trusting attempt's statements for the appends not yet prepared.
    pub(super) fn prepare(&mut self, numbers: &SessionNumbers) {
        let done = self.prepared_appends();
        if done == self.appends.len() {
            return;
        }
        let appends: Vec<&Append> = self.appends[done..].iter().map(|(a, _)| a).collect();
        match Prepared::build(&appends, numbers) {
            Ok(part) => self.prepared.push(part),
            Err(e) => debug!(error = %e, "could not build a batch's statements; it goes with care"),
        }
    }

    /// Builds the statements again when they waited too long to run (see
    /// [`Prepared::stale`]).
    pub(super) fn refresh(&mut self, numbers: &SessionNumbers) {
        if self.prepared.iter().any(Prepared::stale) {
            self.prepared.clear();
            self.prepare(numbers);
        }
    }

    fn prepared_appends(&self) -> usize {
        self.prepared.iter().map(Prepared::len).sum()
    }

    /// Whether every append has its trusting statements (a batch that has not goes with care).
    pub(super) fn prepared(&self) -> bool {
        self.prepared_appends() == self.appends.len()
    }

    /// One attempt at the whole batch in one transaction on `writer`; `None` when a trusting
    /// attempt met a failing job or a refused append and was rolled back.
    pub(super) async fn commit(
        &mut self,
        writer: &mut SqliteConnection,
        attempt: Attempt,
    ) -> Result<Option<Outcome>, StoreError> {
        let mut tx = sqlx::Connection::begin_with(writer, "BEGIN IMMEDIATE").await?;
        for chunk in self.delivered.chunks(DELIVERED_PER_DELETE) {
            let marks = vec!["?"; chunk.len()].join(", ");
            let sql = format!("DELETE FROM outbox WHERE message_id IN ({marks})");
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (id, _) in chunk {
                query = query.bind(*id);
            }
            query.execute(&mut *tx).await?;
        }
        for job in self.jobs.iter_mut() {
            if let Attempt::Trusting = attempt {
                job.run(&mut tx).await?;
                if job.failed() {
                    debug!(
                        jobs = self.jobs.len(),
                        "a job failed; trying the batch again with care"
                    );
                    tx.rollback().await?;
                    return Ok(None);
                }
                continue;
            }
            sqlx::query("SAVEPOINT job").execute(&mut *tx).await?;
            job.run(&mut tx).await?;
            if job.failed() {
                sqlx::query("ROLLBACK TO job").execute(&mut *tx).await?;
            }
            sqlx::query("RELEASE job").execute(&mut *tx).await?;
        }
        let news: Vec<&NewSession> = self.created.iter().map(|(new, _)| &**new).collect();
        let created = match attempt {
            _ if news.is_empty() => Vec::new(),
            Attempt::Careful => create_with_care(&mut tx, &news).await?,
            Attempt::Trusting => match sessions::insert_sessions(&mut tx, &news).await {
                Ok(created) => created.into_iter().map(Ok).collect(),
                Err(e) if e.is_retryable() => return Err(e),
                Err(e) => {
                    debug!(error = %e, sessions = news.len(), "new sessions refused; trying the batch again with care");
                    tx.rollback().await?;
                    return Ok(None);
                }
            },
        };
        let batch: Vec<&Append> = self.appends.iter().map(|(a, _)| a).collect();
        let appends = match attempt {
            _ if batch.is_empty() => Vec::new(),
            Attempt::Careful => apply_with_care(&mut tx, &batch).await?,
            Attempt::Trusting => {
                let mut stored = Vec::with_capacity(batch.len());
                let mut rest = batch.as_slice();
                for part in &self.prepared {
                    let (appends, later) = rest.split_at(part.len());
                    rest = later;
                    match part.apply(&mut tx, appends).await {
                        Ok(Some(ids)) => stored.extend(ids),
                        Err(e) if e.is_retryable() => return Err(e),
                        refused => {
                            let error = refused.err().map(|e| e.to_string());
                            debug!(
                                ?error,
                                appends = batch.len(),
                                "batch refused; trying it again with care"
                            );
                            tx.rollback().await?;
                            return Ok(None);
                        }
                    }
                }
                stored.into_iter().map(|ids| Ok(Appended::Stored(ids))).collect()
            }
        };
        tx.commit().await?;
        Ok(Some(Outcome { created, appends }))
    }

    /// Hands each caller the outcome of its write once the batch committed.
    pub(super) fn succeed(self, outcome: Outcome) {
        for ((_, reply), result) in self.created.into_iter().zip(outcome.created) {
            let _ = reply.send(result);
        }
        for ((_, reply), result) in self.appends.into_iter().zip(outcome.appends) {
            let _ = reply.send(result);
        }
        for job in self.jobs {
            job.finish(Ok(()));
        }
        for (_, reply) in self.delivered {
            let _ = reply.send(Ok(()));
        }
    }

    /// Hands every caller a copy of the error that failed the batch.
    pub(super) fn fail(self, e: &StoreError) {
        for (_, reply) in self.created {
            let _ = reply.send(Err(e.duplicate()));
        }
        for (_, reply) in self.delivered {
            let _ = reply.send(Err(e.duplicate()));
        }
        for (_, reply) in self.appends {
            let _ = reply.send(Err(e.duplicate()));
        }
        for job in self.jobs {
            job.finish(Err(e.duplicate()));
        }
    }
}

/// The batch's new sessions with care: each in a savepoint, so the one at fault fails alone.
async fn create_with_care(
    conn: &mut SqliteConnection,
    news: &[&NewSession],
) -> Result<Vec<Result<Session, StoreError>>, StoreError> {
    let mut created = Vec::with_capacity(news.len());
    for new in news {
        sqlx::query("SAVEPOINT create_session").execute(&mut *conn).await?;
        let outcome = match sessions::insert_session(conn, new).await {
            Err(e) if e.is_retryable() => return Err(e),
            Err(e) => {
                sqlx::query("ROLLBACK TO create_session").execute(&mut *conn).await?;
                Err(e)
            }
            created => created,
        };
        sqlx::query("RELEASE create_session").execute(&mut *conn).await?;
        created.push(outcome);
    }
    Ok(created)
}

/// The batch's appends with care: all at once, with their sessions looked up (so that appends
/// to a session deleted meanwhile fail alone); if that breaks a constraint, each append alone,
/// so only the one at fault fails.
async fn apply_with_care(
    conn: &mut SqliteConnection,
    batch: &[&Append],
) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    match in_savepoint(conn, batch).await? {
        Ok(results) => return Ok(results),
        Err(e) => {
            debug!(error = %e, appends = batch.len(), "batch refused; applying appends one by one")
        }
    }
    let mut results = Vec::with_capacity(batch.len());
    for append in batch {
        results.push(match in_savepoint(conn, &[append]).await? {
            Ok(mut one) => one.pop().unwrap_or(Err(StoreError::WriterGone)),
            Err(e) => Err(e),
        });
    }
    Ok(results)
}

/// Appends in a savepoint, their sessions looked up: an attempt that fails part way has
/// already recorded inbound ids and counters, and the next one must not find them. The outer
/// error is one that makes the whole batch retry; the inner, a refusal of these appends.
async fn in_savepoint(
    conn: &mut SqliteConnection,
    batch: &[&Append],
) -> Result<Result<Vec<Result<Appended, StoreError>>, StoreError>, StoreError> {
    sqlx::query("SAVEPOINT appends").execute(&mut *conn).await?;
    let outcome = match appends::apply_batch(conn, batch).await {
        Err(e) if e.is_retryable() => return Err(e),
        Err(e) => {
            sqlx::query("ROLLBACK TO appends").execute(&mut *conn).await?;
            Err(e)
        }
        ok => ok,
    };
    sqlx::query("RELEASE appends").execute(&mut *conn).await?;
    Ok(outcome)
}

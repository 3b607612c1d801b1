//! One batch of the group commit and its transaction: the deliveries, the jobs, then the
//! appends, applied trusting or with care (see [`Attempt`]).

use sqlx::SqliteConnection;
use tokio::sync::oneshot;
use tracing::debug;

use super::{Job, Pending};
use crate::error::StoreError;
use crate::messages::{self, Append, Appended, Sessions};

/// The writes of one batch by kind, each with the caller waiting for it.
pub(super) struct Batch {
    appends: Vec<(Append, oneshot::Sender<Result<Appended, StoreError>>)>,
    jobs: Vec<Box<dyn Job>>,
    delivered: Vec<(i64, oneshot::Sender<Result<(), StoreError>>)>,
}

/// How an attempt applies the batch's jobs and appends.
#[derive(Debug, Clone, Copy)]
pub(super) enum Attempt {
    /// The first attempt at every batch: jobs and appends at once, the appends' sessions
    /// assumed to exist, in no savepoint. That saves two statements of every job and three of
    /// the appends, each a round trip to the connection's thread (60 to 250 us under a storm):
    /// a batch of a hundred new sessions took 30 to 55 ms with a savepoint around each. A job
    /// that fails or an append refused rolls the whole transaction back, and the batch is
    /// tried again with care.
    Trusting,
    /// Jobs and appends each in a savepoint, sessions looked up, so that one write at fault
    /// fails alone.
    Careful,
}

/// Most outbox rows one DELETE names (SQLite takes up to 32766 parameters).
const DELIVERED_PER_DELETE: usize = 10_000;

impl Batch {
    /// The queued writes, sorted by kind.
    pub(super) fn sort(writes: Vec<Pending>) -> Batch {
        let mut batch = Batch { appends: Vec::new(), jobs: Vec::new(), delivered: Vec::new() };
        for write in writes {
            match write {
                Pending::Append { append, reply } => batch.appends.push((append, reply)),
                Pending::Job(job) => batch.jobs.push(job),
                Pending::Delivered { message_id, reply } => {
                    batch.delivered.push((message_id, reply))
                }
            }
        }
        batch
    }

    /// One attempt at the whole batch in one transaction on `writer`; `None` when a trusting
    /// attempt met a failing job or a refused append and was rolled back.
    pub(super) async fn commit(
        &mut self,
        writer: &mut SqliteConnection,
        attempt: Attempt,
    ) -> Result<Option<Vec<Result<Appended, StoreError>>>, StoreError> {
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
        let batch: Vec<&Append> = self.appends.iter().map(|(a, _)| a).collect();
        let results = match attempt {
            _ if batch.is_empty() => Vec::new(),
            Attempt::Careful => apply_with_care(&mut tx, &batch).await?,
            Attempt::Trusting => {
                match messages::apply_batch(&mut tx, &batch, Sessions::Assumed).await {
                    Err(e) if !e.is_retryable() => {
                        debug!(error = %e, appends = batch.len(), "batch refused; trying it again with care");
                        tx.rollback().await?;
                        return Ok(None);
                    }
                    results => results?,
                }
            }
        };
        tx.commit().await?;
        Ok(Some(results))
    }

    /// Hands each caller the outcome of its write once the batch committed.
    pub(super) fn succeed(self, results: Vec<Result<Appended, StoreError>>) {
        for ((_, reply), result) in self.appends.into_iter().zip(results) {
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
    let outcome = match messages::apply_batch(conn, batch, Sessions::Checked).await {
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

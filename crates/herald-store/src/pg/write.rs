//! One write: a transaction run again from the start when PostgreSQL says it may succeed if
//! retried, within the store's write patience. The outcome feeds the store's write health.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use sqlx::{Postgres, Transaction};

use super::Pg;
use crate::error::StoreError;

/// SQLSTATEs that mean "run the transaction again": serialization_failure, deadlock_detected,
/// and the lock_not_available of a `NOWAIT`.
const RETRY_STATES: [&str; 3] = ["40001", "40P01", "55P03"];

/// Whether the error may go away by running the whole transaction again.
pub(crate) fn is_retryable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Database(db) => db.code().is_some_and(|c| {
            // connection_exception, or the server shutting down or starting (57P01-57P03)
            RETRY_STATES.contains(&c.as_ref()) || c.starts_with("08") || c.starts_with("57P")
        }),
        // The server restarted or the network dropped: the pool opens a new connection.
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::Protocol(_) => true,
        _ => false,
    }
}

/// unique_violation (23505).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("23505"))
}

/// [`Pg::write`] for a body that borrows from its surroundings (a closure returning a boxed
/// future cannot): `$body` is an expression awaiting on `$tx: &mut PgConnection`, run in a
/// transaction and run again from the start on the same failures, within the same patience.
macro_rules! pg_write {
    ($pg:expr, |$tx:ident| $body:expr) => {
        async {
            let pg: &$crate::pg::Pg = $pg;
            let started = std::time::Instant::now();
            let outcome = loop {
                let attempt = async {
                    let mut transaction = pg.inner.pool.begin().await?;
                    let $tx: &mut sqlx::PgConnection = &mut transaction;
                    let value = $body.await?;
                    transaction.commit().await?;
                    Ok::<_, sqlx::Error>(value)
                }
                .await;
                match pg.retry_or_fail(attempt, started).await {
                    Some(done) => break done,
                    None => continue,
                }
            };
            pg.inner.write_health.record(outcome.as_ref().err());
            outcome
        }
        .await
    };
}
pub(crate) use pg_write;

impl Pg {
    /// What one attempt's outcome means: `Some` to return it, `None` after waiting to retry.
    pub(crate) async fn retry_or_fail<T>(
        &self,
        attempt: Result<T, sqlx::Error>,
        started: Instant,
    ) -> Option<Result<T, StoreError>> {
        match attempt {
            Ok(value) => Some(Ok(value)),
            Err(e) if is_retryable(&e) && started.elapsed() < self.inner.write_patience => {
                self.inner.busy_retries.fetch_add(1, Ordering::Relaxed);
                let pause = rand::random_range(20..=150u64);
                tokio::time::sleep(Duration::from_millis(pause)).await;
                None
            }
            Err(e) if is_retryable(&e) => Some(Err(StoreError::WriteFailed(format!(
                "{} (still failing after {} ms)",
                one_line(&e),
                started.elapsed().as_millis()
            )))),
            Err(e) => Some(Err(StoreError::Sqlx(e))),
        }
    }

    /// Runs `body` in a transaction and commits it, retrying the whole transaction with a random
    /// pause while the failure is one a retry can cure and patience lasts.
    pub(crate) async fn write<T, F>(&self, mut body: F) -> Result<T, StoreError>
    where
        F: for<'c> FnMut(
            &'c mut Transaction<'static, Postgres>,
        ) -> BoxFuture<'c, Result<T, sqlx::Error>>,
    {
        let started = Instant::now();
        let outcome = loop {
            let attempt = async {
                let mut tx = self.inner.pool.begin().await?;
                let value = body(&mut tx).await?;
                tx.commit().await?;
                Ok::<T, sqlx::Error>(value)
            };
            if let Some(done) = self.retry_or_fail(attempt.await, started).await {
                break done;
            }
        };
        self.inner.write_health.record(outcome.as_ref().err());
        outcome
    }

    /// [`Pg::write`] for a write that is one statement, so its own transaction: without the
    /// round trips of BEGIN and COMMIT. `statement` runs it on the pool it is given.
    pub(crate) async fn write_one<T, F>(&self, mut statement: F) -> Result<T, StoreError>
    where
        F: FnMut(sqlx::PgPool) -> BoxFuture<'static, Result<T, sqlx::Error>>,
    {
        let started = Instant::now();
        let outcome = loop {
            let attempt = statement(self.inner.pool.clone()).await;
            if let Some(done) = self.retry_or_fail(attempt, started).await {
                break done;
            }
        };
        self.inner.write_health.record(outcome.as_ref().err());
        outcome
    }
}

/// The error on one line, as a log or a health report shows it.
pub(crate) fn one_line(e: &sqlx::Error) -> String {
    e.to_string().lines().map(str::trim).collect::<Vec<_>>().join(" ")
}

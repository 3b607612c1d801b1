//! How the store's writes are going: a read can succeed while every write fails (another
//! process holding the lock, a full disk), so the daemon's health follows the writes.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::StoreError;
use crate::open::Lite;

/// Writes are failing: no write succeeded since `since`, and `error` is the last failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteFailing {
    /// The first failure after the last successful write.
    pub since: Instant,
    /// The last failure, in one line.
    pub error: String,
}

/// The outcome of the latest writes, shared by every clone of a store.
#[derive(Debug, Default)]
pub(crate) struct WriteHealth {
    failures: AtomicU64,
    failing: Mutex<Option<WriteFailing>>,
}

impl WriteHealth {
    /// How many writes failed for good.
    pub(crate) fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }

    /// `Some` while writes fail.
    pub(crate) fn failing(&self) -> Option<WriteFailing> {
        self.failing.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Records how a write ended. Errors that belong to one caller's request (a taken title, a
    /// missing session, a constraint) say nothing about the store and are not counted.
    pub(crate) fn record(&self, error: Option<&StoreError>) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        match error {
            None => *failing = None,
            Some(e) if is_store_failure(e) => {
                self.failures.fetch_add(1, Ordering::Relaxed);
                let since = failing.as_ref().map_or_else(Instant::now, |f| f.since);
                *failing = Some(WriteFailing { since, error: e.to_string() });
            }
            Some(_) => {}
        }
    }
}

fn is_store_failure(error: &StoreError) -> bool {
    match error {
        StoreError::Busy { .. }
        | StoreError::WriterGone
        | StoreError::WriteFailed(_)
        | StoreError::Open { .. } => true,
        StoreError::Sqlx(sqlx::Error::Database(db)) => {
            matches!(db.kind(), sqlx::error::ErrorKind::Other)
        }
        StoreError::Sqlx(sqlx::Error::RowNotFound | sqlx::Error::ColumnNotFound(_)) => false,
        StoreError::Sqlx(_) => true,
        _ => false,
    }
}

impl Lite {
    /// How many writes failed for good (out of patience, or the database refused them).
    pub fn write_failures(&self) -> u64 {
        self.inner.write_health.failures()
    }

    /// `Some` while writes fail: the last write failed and none succeeded since.
    pub fn write_failing(&self) -> Option<WriteFailing> {
        self.inner.write_health.failing()
    }

    /// Takes the write lock and lets it go, writing nothing: whether a write would get through
    /// now. Its outcome counts like any write's, so a store that recovered is healthy again
    /// without waiting for the next real write.
    pub async fn probe_write(&self) -> Result<(), StoreError> {
        crate::write::write_tx!(self, |conn| async {
            sqlx::query("SELECT 1").execute(&mut *conn).await.map(|_| ())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_success_clears_the_failure_and_caller_errors_are_not_counted() {
        let health = WriteHealth::default();
        health.record(Some(&StoreError::Busy { waited_ms: 5 }));
        let first = health.failing.lock().unwrap().clone().unwrap();
        health.record(Some(&StoreError::WriteFailed("disk I/O error".into())));
        let second = health.failing.lock().unwrap().clone().unwrap();
        assert_eq!(second.since, first.since, "still failing since the first");
        assert_eq!(second.error, "database write failed: disk I/O error");
        health.record(Some(&StoreError::SessionNotFound("x".into())));
        assert_eq!(health.failures.load(Ordering::Relaxed), 2);
        health.record(None);
        assert!(health.failing.lock().unwrap().is_none());
    }
}

//! The PostgreSQL backend: the same store on a database that any number of herald replicas
//! share. Every method mirrors the SQLite one of the same name; the database does the
//! coordinating (row locks, `SKIP LOCKED`, advisory locks), nothing in the process does.
//!
//! Concurrent writers are normal here, so a write is one transaction retried whole when
//! PostgreSQL reports a serialization failure or deadlock, or the connection was lost, until
//! `write_patience` is spent.

mod copy;
mod gateway;
mod group;
mod handover;
mod index;
mod lineage;
mod locks;
mod messages;
mod open;
mod outbox;
mod pairing;
mod replica;
mod round;
mod search;
mod sessions;
mod tokens;
mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::PgPool;

use crate::health::{WriteFailing, WriteHealth};

pub(crate) use locks::{Held, lock_key};
pub(crate) use open::redact;

/// The PostgreSQL backend. Cheap to clone; every clone shares one pool.
#[derive(Debug, Clone)]
pub(crate) struct Pg {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: PgPool,
    /// The URL without its password, for messages.
    pub(crate) location: String,
    pub(crate) write_patience: Duration,
    pub(crate) busy_retries: AtomicU64,
    pub(crate) write_health: WriteHealth,
    /// The session locks, on a connection of their own.
    pub(crate) locks: locks::Locks,
    /// When messages get their words for search.
    pub(crate) indexer: crate::index::Indexer,
    /// Appends and deliveries waiting to be written together.
    pub(crate) group: group::Group,
}

impl Pg {
    /// The database's URL, without a password.
    pub(crate) fn location(&self) -> &str {
        &self.inner.location
    }

    pub(crate) fn busy_retries(&self) -> u64 {
        self.inner.busy_retries.load(Ordering::Relaxed)
    }

    pub(crate) fn write_failures(&self) -> u64 {
        self.inner.write_health.failures()
    }

    pub(crate) fn write_failing(&self) -> Option<WriteFailing> {
        self.inner.write_health.failing()
    }

    /// Closes every connection; what was committed is the database's.
    pub(crate) async fn close(&self) {
        // The sessions go first: other replicas may take them over while this one indexes.
        self.inner.locks.close();
        if let Err(e) = self.index_pending().await {
            tracing::warn!(error = %e, "could not index the last messages for search; a later search or write will");
        }
        // A connection still checked out by a task that outlived its gateway is not waited
        // for: what was committed is the database's anyway.
        if tokio::time::timeout(Duration::from_secs(5), self.inner.pool.close()).await.is_err() {
            tracing::warn!(
                "some database connections were still in use at close; stopped waiting for them"
            );
        }
    }

    pub(crate) async fn ping(&self) -> Result<(), crate::StoreError> {
        sqlx::query("SELECT 1").execute(&self.inner.pool).await?;
        Ok(())
    }

    /// A write transaction that writes nothing: whether a write would get through now.
    pub(crate) async fn probe_write(&self) -> Result<(), crate::StoreError> {
        self.write(|tx| {
            Box::pin(async move { sqlx::query("SELECT 1").execute(&mut **tx).await.map(drop) })
        })
        .await
    }
}

//! The ceiling of the machine, for `herald-bench store-raw`: turns written by one connection
//! in a tight loop, one commit per turn, indexed for search inside that commit, with none of
//! the store's queueing, group commit, deferred indexing or retries.

use std::path::Path;
use std::time::{Duration, Instant};

use herald_core::Platform;
use sqlx::{Connection, SqliteConnection};

use crate::appends::apply_batch;
use crate::error::StoreError;
use crate::index::index_chunk;
use crate::messages::Append;
use crate::open::{Lite, StoreOptions};
use crate::sessions::{NewSession, insert_session};

/// Writes `turns` turns of `turn` into one session of a fresh store at `path` on a single
/// connection, each turn its own `BEGIN IMMEDIATE` ... `COMMIT` with its messages indexed for
/// search in the same transaction, and returns the time the writes took.
pub async fn write_turns_raw(
    path: &Path,
    turns: usize,
    turn: &[crate::NewMessage],
) -> Result<Duration, StoreError> {
    let options = StoreOptions::new(path);
    Lite::open(options.clone()).await?.close().await;
    let connect = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .foreign_keys(true)
        .synchronous(sqlx::sqlite::SqliteSynchronous::Normal)
        .busy_timeout(options.busy_timeout);
    let mut conn = SqliteConnection::connect_with(&connect).await?;
    let session = {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        let session = insert_session(&mut tx, &NewSession::new(Platform::Cli, "raw")).await?;
        tx.commit().await?;
        session
    };
    let append = Append {
        session_id: session.id,
        messages: turn.to_vec(),
        dedupe: None,
        usage: Default::default(),
        outbox: None,
    };
    let started = Instant::now();
    for _ in 0..turns {
        let mut tx = conn.begin_with("BEGIN IMMEDIATE").await?;
        apply_batch(&mut tx, &[&append]).await?;
        index_chunk(&mut tx, turn.len() as i64).await?;
        tx.commit().await?;
    }
    let elapsed = started.elapsed();
    conn.close().await?;
    Ok(elapsed)
}

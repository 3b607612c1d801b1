//! Session locks on PostgreSQL: session-level advisory locks, all taken on one connection of
//! their own (the lock connection), apart from the pool. A lock lives as long as that connection
//! does, so a replica that dies, or loses its network, gives its locks up with it.
//!
//! One task owns the connection and takes every lock operation of the store in turn (those
//! asked for at once in one statement), so the same name is never locked twice through it
//! (PostgreSQL would grant that: advisory locks stack within a connection). It also asks
//! `SELECT 1` every second: a connection lost while idle is noticed, every lock taken through
//! it learns it is lost, and the next lock opens a new connection.

use std::collections::HashSet;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, Connection, PgConnection};
use tokio::sync::{Mutex, mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::write::one_line;
use crate::error::StoreError;

/// How often an idle lock connection is checked.
const WATCH_EVERY: Duration = Duration::from_secs(1);
/// How long one statement on the lock connection may take before the connection is taken for
/// lost (a network that drops packets silently would otherwise hang it for minutes).
const PATIENCE: Duration = Duration::from_secs(5);

/// The store's lock connection, opened when first needed and again after it was lost.
#[derive(Debug)]
pub(crate) struct Locks {
    connect: PgConnectOptions,
    link: Mutex<Option<Link>>,
    closed: CancellationToken,
}

/// A way to the task owning a live lock connection.
#[derive(Debug, Clone)]
struct Link {
    ops: mpsc::UnboundedSender<Op>,
    lost: CancellationToken,
}

#[derive(Debug)]
enum Op {
    Try { key: i64, reply: oneshot::Sender<Result<bool, String>> },
    Unlock(i64),
}

/// An advisory lock held on the lock connection; unlocked when dropped.
#[derive(Debug)]
pub(crate) struct Held {
    key: i64,
    ops: mpsc::UnboundedSender<Op>,
    pub(crate) lost: CancellationToken,
}

impl Drop for Held {
    fn drop(&mut self) {
        // Unbounded: Drop never waits. Once the connection is gone there is nothing to unlock.
        let _ = self.ops.send(Op::Unlock(self.key));
    }
}

impl Locks {
    /// Locks opened with `connect` (which names the connection for `pg_stat_activity`).
    pub(crate) fn new(connect: PgConnectOptions) -> Locks {
        Locks { connect, link: Mutex::new(None), closed: CancellationToken::new() }
    }

    /// Takes the lock `key` if nobody holds it; never waits for a holder.
    pub(crate) async fn try_lock(&self, key: i64) -> Result<Option<Held>, StoreError> {
        // A connection found dead on the way is replaced once.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let link = self.link().await?;
            let (reply, answer) = oneshot::channel();
            let sent = link.ops.send(Op::Try { key, reply });
            let answer = match sent {
                Ok(()) => answer.await.unwrap_or_else(|_| Err("the lock connection closed".into())),
                Err(_) => Err("the lock connection closed".into()),
            };
            match answer {
                Ok(true) => return Ok(Some(Held { key, ops: link.ops, lost: link.lost })),
                Ok(false) => return Ok(None),
                Err(_) if attempts < 2 && !self.closed.is_cancelled() => {
                    link.lost.cancel();
                }
                Err(e) => return Err(StoreError::WriteFailed(format!("could not lock: {e}"))),
            }
        }
    }

    /// Lets every lock go and refuses new ones.
    pub(crate) fn close(&self) {
        self.closed.cancel();
    }

    async fn link(&self) -> Result<Link, StoreError> {
        let mut link = self.link.lock().await;
        if self.closed.is_cancelled() {
            return Err(StoreError::Closed);
        }
        if let Some(live) = link.as_ref().filter(|l| !l.lost.is_cancelled() && !l.ops.is_closed()) {
            return Ok(live.clone());
        }
        let conn = self.connect.connect().await.map_err(|e| {
            StoreError::WriteFailed(format!("could not open the lock connection: {}", one_line(&e)))
        })?;
        let (ops, queue) = mpsc::unbounded_channel();
        let fresh = Link { ops, lost: CancellationToken::new() };
        tokio::spawn(serve(conn, queue, fresh.lost.clone(), self.closed.clone()));
        *link = Some(fresh.clone());
        Ok(fresh)
    }
}

/// Owns the lock connection: takes and lets go of locks in the order asked, watches the
/// connection while idle, and on its loss (or the store's closing) tells every holder.
async fn serve(
    mut conn: PgConnection,
    mut ops: mpsc::UnboundedReceiver<Op>,
    lost: CancellationToken,
    closed: CancellationToken,
) {
    let mut held = HashSet::new();
    let mut watch = tokio::time::interval(WATCH_EVERY);
    watch.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let outcome: Result<(), String> = loop {
        tokio::select! {
            () = closed.cancelled() => break Ok(()),
            () = lost.cancelled() => break Err("a lock found it broken".into()),
            op = ops.recv() => {
                // Every sender is gone: the store and all its locks were dropped.
                let Some(op) = op else { break Ok(()) };
                // Everything asked meanwhile goes in one round trip: a burst of new sessions
                // would otherwise wait for each other's lock one at a time.
                let mut batch = vec![op];
                while batch.len() < BATCH
                    && let Ok(op) = ops.try_recv()
                {
                    batch.push(op);
                }
                if let Err(e) = apply(&mut conn, &mut held, batch).await {
                    break Err(e);
                }
            }
            _ = watch.tick() => {
                if let Err(e) = ping(&mut conn).await {
                    break Err(e);
                }
            }
        }
    };
    lost.cancel();
    match outcome {
        Ok(()) => {
            let _ = conn.close().await;
        }
        Err(e) => {
            warn!(error = %e, locks = held.len(), "lost the store's lock connection; its session locks are given up");
        }
    }
}

/// Lock operations taken in one round trip at most.
const BATCH: usize = 512;

/// Lets go of the keys unlocked in `batch`, then takes the free ones of those asked for, and
/// answers each asker. A key held here already, or asked for twice, is not taken again
/// (advisory locks would stack). An error means the connection is lost: every asker still
/// waiting hears it.
async fn apply(
    conn: &mut PgConnection,
    held: &mut HashSet<i64>,
    batch: Vec<Op>,
) -> Result<(), String> {
    let mut unlock = Vec::new();
    let mut asked = Vec::new();
    for op in batch {
        match op {
            Op::Unlock(key) => {
                if held.remove(&key) {
                    unlock.push(key);
                }
            }
            Op::Try { key, reply } => asked.push((key, reply)),
        }
    }
    let mut wanted = Vec::new();
    for (key, _) in &asked {
        if !held.contains(key) && !wanted.contains(key) {
            wanted.push(*key);
        }
    }
    let outcome = async {
        run(conn, UNLOCK, &unlock).await?;
        run(conn, TRY, &wanted).await
    };
    let taken: HashSet<i64> = match outcome.await {
        Ok(taken) => taken.into_iter().filter(|(_, got)| *got).map(|(key, _)| key).collect(),
        Err(e) => {
            for (_, reply) in asked {
                let _ = reply.send(Err(e.clone()));
            }
            return Err(e);
        }
    };
    // Each key taken goes to its first asker still waiting; one nobody waits for any more is
    // let go at once, so nobody may hold it.
    for (key, reply) in asked {
        let got = taken.contains(&key) && !held.contains(&key);
        if reply.send(Ok(got)).is_ok() && got {
            held.insert(key);
        }
    }
    let unwanted: Vec<i64> = taken.into_iter().filter(|key| !held.contains(key)).collect();
    run(conn, UNLOCK, &unwanted).await.map(drop)
}

const TRY: &str = "SELECT key, pg_try_advisory_lock(key) FROM unnest($1::bigint[]) AS t(key)";
const UNLOCK: &str = "SELECT key, pg_advisory_unlock(key) FROM unnest($1::bigint[]) AS t(key)";

/// Runs a lock statement on `keys` (none: nothing to do) within [`PATIENCE`]; each key with
/// the statement's answer.
async fn run(
    conn: &mut PgConnection,
    sql: &'static str,
    keys: &[i64],
) -> Result<Vec<(i64, bool)>, String> {
    if keys.is_empty() {
        return Ok(Vec::new());
    }
    let query = sqlx::query_as(sql).bind(keys).fetch_all(&mut *conn);
    match tokio::time::timeout(PATIENCE, query).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no answer within {} s", PATIENCE.as_secs())),
    }
}

async fn ping(conn: &mut PgConnection) -> Result<(), String> {
    match tokio::time::timeout(PATIENCE, conn.ping()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => Err(one_line(&e)),
        Err(_) => Err(format!("no answer within {} s", PATIENCE.as_secs())),
    }
}

/// The advisory lock key of `name` in the key space `space`: the first 8 bytes of a SHA-256,
/// the same in every replica and every version of herald.
pub(crate) fn lock_key(space: &str, name: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::new().chain_update(space).chain_update([0]).chain_update(name).finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    i64::from_be_bytes(first)
}

#[cfg(test)]
mod tests {
    use super::lock_key;

    #[test]
    fn lock_keys_are_the_same_everywhere_and_apart_by_space() {
        // Pinned: replicas of different versions must lock the same session with the same key.
        assert_eq!(lock_key("session", "telegram:dm:42"), PINNED);
        assert_ne!(lock_key("session", "telegram:poller"), lock_key("claim", "telegram:poller"));
        assert_ne!(lock_key("session", "a:b"), lock_key("session:a", "b"));
    }

    const PINNED: i64 = 7_429_668_784_283_215_881;
}

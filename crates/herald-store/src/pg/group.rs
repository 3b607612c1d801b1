//! Group commit on PostgreSQL: the appends, queued messages and deliveries of many chats
//! written by one statement (`round.rs`).
//!
//! A statement is a transaction of its own, with its commit and its round trip, and on a busy
//! gateway those cost more than the rows. So these writes queue here. Whoever finds no flusher
//! waiting spawns one; it waits for the flusher before it ([`FLUSHERS`]), then takes everything
//! queued by then. While one batch is written the next one gathers, and a quiet store adds no
//! wait. The flusher is a task of its own, so a caller that gives up waiting cannot abort the
//! others'.
//!
//! The statement tells a round's appends apart by session, so a round holds each session, and
//! each inbound id, once; a write that would repeat one waits for the next round, with every
//! later append of its session. A round the database refuses for what it holds (a value, a
//! constraint) is written again one write at a time, so that the write at fault fails alone;
//! any other failure is every caller's. A round tried again after its connection broke is never
//! written twice (`tokens.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use herald_core::{ChatRef, Platform, UserRef};
use tokio::sync::{Semaphore, oneshot};
use tracing::debug;

use super::Pg;
use super::round::{Batch, Outcomes, Queueing, write_once};
use super::tokens::{Pruning, Token, recorded, token_taken};
use crate::error::StoreError;
use crate::messages::{Append, Appended, TokenUsage};

/// Batches written at once by one store. One: a round costs the database far more than its
/// rows do, so fewer and fuller rounds cost less than overlapping ones.
const FLUSHERS: usize = 1;

/// Most appends and queued messages in one statement.
const ROUND: usize = 256;

/// Writes waiting for a flusher.
#[derive(Debug)]
pub(crate) struct Group {
    queue: Mutex<Queue>,
    permits: Arc<Semaphore>,
    pruning: Pruning,
}

impl Default for Group {
    fn default() -> Self {
        Group {
            queue: Mutex::default(),
            permits: Arc::new(Semaphore::new(FLUSHERS)),
            pruning: Pruning::default(),
        }
    }
}

#[derive(Debug, Default)]
struct Queue {
    pending: Vec<Pending>,
    /// A flusher is spawned and has not taken the queue yet.
    flusher_waiting: bool,
}

type Reply<T> = oneshot::Sender<Result<T, StoreError>>;

#[derive(Debug)]
enum Pending {
    Append {
        append: Append,
        /// Queue positions whose messages go into the session ahead of the append's own.
        taken: Vec<i64>,
        reply: Reply<Appended>,
    },
    /// A message queued for the replica running its session.
    Queue { message: Queueing, reply: Reply<Option<i64>> },
    /// A reply its platform took: its outbox row goes.
    Delivered { message_id: i64, reply: Reply<()> },
}

/// What one statement writes.
#[derive(Debug, Default)]
struct Round {
    appends: Vec<(Append, Vec<i64>, Reply<Appended>)>,
    queued: Vec<(Queueing, Reply<Option<i64>>)>,
    delivered: Vec<(i64, Reply<()>)>,
}

impl Round {
    fn batch(&self) -> Batch<'_> {
        Batch {
            appends: self.appends.iter().map(|(a, _, _)| a).collect(),
            taken: self.appends.iter().map(|(_, t, _)| t.as_slice()).collect(),
            queued: self.queued.iter().map(|(q, _)| q).collect(),
            delivered: self.delivered.iter().map(|(id, _)| *id).collect(),
        }
    }

    fn writes(&self) -> usize {
        self.appends.len() + self.queued.len() + self.delivered.len()
    }

    /// Each write as a round of its own.
    fn singles(self) -> impl Iterator<Item = Round> {
        let appends =
            self.appends.into_iter().map(|a| Round { appends: vec![a], ..Round::default() });
        let queued = self.queued.into_iter().map(|q| Round { queued: vec![q], ..Round::default() });
        let delivered =
            self.delivered.into_iter().map(|d| Round { delivered: vec![d], ..Round::default() });
        appends.chain(queued).chain(delivered)
    }

    fn answer(self, outcomes: Outcomes) {
        for ((_, _, reply), result) in self.appends.into_iter().zip(outcomes.appended) {
            let _ = reply.send(result);
        }
        for ((_, reply), seq) in self.queued.into_iter().zip(outcomes.queued) {
            let _ = reply.send(Ok(seq));
        }
        for (_, reply) in self.delivered {
            let _ = reply.send(Ok(()));
        }
    }

    /// The error itself to its one caller, a copy to each of several.
    fn fail(self, e: StoreError) {
        let copies: Vec<StoreError> = (1..self.writes()).map(|_| e.duplicate()).collect();
        let mut errors = copies.into_iter().chain(std::iter::once(e));
        let mut next = || errors.next().unwrap_or(StoreError::Closed);
        for (_, _, reply) in self.appends {
            let _ = reply.send(Err(next()));
        }
        for (_, reply) in self.queued {
            let _ = reply.send(Err(next()));
        }
        for (_, reply) in self.delivered {
            let _ = reply.send(Err(next()));
        }
    }
}

impl Pg {
    /// Appends messages to a session, with their counters, inbound id and outbox row, all of
    /// them or none; `Duplicate` when the inbound id was recorded before.
    pub(crate) async fn append(&self, append: Append) -> Result<Appended, StoreError> {
        self.append_taking(append, Vec::new()).await
    }

    /// Moves queued messages into a session's history, in the order of `seqs`: the new
    /// messages' ids, fewer when some were taken already.
    pub(crate) async fn take_queued(
        &self,
        session_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<i64>, StoreError> {
        let append = Append {
            session_id: session_id.to_owned(),
            messages: Vec::new(),
            dedupe: None,
            usage: TokenUsage::default(),
            outbox: None,
        };
        match self.append_taking(append, seqs.to_vec()).await? {
            Appended::Stored(ids) => Ok(ids),
            // An append without an inbound id is never a duplicate.
            Appended::Duplicate => Ok(Vec::new()),
        }
    }

    async fn append_taking(&self, append: Append, taken: Vec<i64>) -> Result<Appended, StoreError> {
        let (reply, result) = oneshot::channel();
        self.enqueue(Pending::Append { append, taken, reply });
        result.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Records the inbound id and queues the message for the replica running its session,
    /// every replica told once it commits; `None` when the id was recorded before.
    pub(crate) async fn queue_inbound(
        &self,
        session_key: &str,
        message_id: &str,
        chat: &ChatRef,
        user: &UserRef,
        content: &str,
    ) -> Result<Option<i64>, StoreError> {
        let message = Queueing {
            session_key: session_key.to_owned(),
            message_id: message_id.to_owned(),
            chat: chat.clone(),
            user: user.clone(),
            content: content.to_owned(),
        };
        let (reply, result) = oneshot::channel();
        self.enqueue(Pending::Queue { message, reply });
        result.await.unwrap_or(Err(StoreError::Closed))
    }

    /// Forgets a reply's outbox row once its platform took it.
    pub(crate) async fn delivered(&self, message_id: i64) -> Result<(), StoreError> {
        let (reply, result) = oneshot::channel();
        self.enqueue(Pending::Delivered { message_id, reply });
        result.await.unwrap_or(Err(StoreError::Closed))
    }

    fn enqueue(&self, pending: Pending) {
        let mut queue = self.inner.group.queue.lock().unwrap_or_else(PoisonError::into_inner);
        queue.pending.push(pending);
        if !queue.flusher_waiting {
            queue.flusher_waiting = true;
            tokio::spawn(self.clone().flush());
        }
    }

    async fn flush(self) {
        let permits = Arc::clone(&self.inner.group.permits);
        // The semaphore is never closed.
        let _permit = permits.acquire_owned().await;
        let mut rest = {
            let mut queue = self.inner.group.queue.lock().unwrap_or_else(PoisonError::into_inner);
            queue.flusher_waiting = false;
            std::mem::take(&mut queue.pending)
        };
        while !rest.is_empty() {
            let (round, later) = split(rest);
            self.write_round(round).await;
            rest = later;
        }
    }

    async fn write_round(&self, round: Round) {
        let written = self.try_round(&round.batch()).await;
        match written {
            Ok(outcomes) => {
                self.stored(&outcomes);
                round.answer(outcomes);
            }
            Err(e) if refused_data(&e) && round.writes() > 1 => {
                debug!(error = %e, writes = round.writes(), "a batch was refused; writing its writes one by one");
                for single in round.singles() {
                    let written = self.try_round(&single.batch()).await;
                    match written {
                        Ok(outcomes) => {
                            self.stored(&outcomes);
                            single.answer(outcomes);
                        }
                        Err(e) => single.fail(e),
                    }
                }
            }
            Err(e) => round.fail(e),
        }
    }

    /// Lets the indexer know of the messages a round stored.
    fn stored(&self, outcomes: &Outcomes) {
        let stored = outcomes.appended.iter().map(|r| match r {
            Ok(Appended::Stored(ids)) => ids.len() as u64,
            _ => 0,
        });
        crate::index::schedule_indexing(self, stored.sum());
    }

    /// Writes a round, retried whole while the failure is one a retry can cure and patience
    /// lasts.
    async fn try_round(&self, batch: &Batch<'_>) -> Result<Outcomes, StoreError> {
        self.inner.group.pruning.when_due(&self.inner.pool);
        self.round_tries(batch, &Token::new(), 0).await
    }

    /// [`Pg::try_round`] for the round `token`, of which `tries` were made already. One token
    /// for every try: a try after a broken connection may find an earlier one committed, and
    /// then takes its outcomes rather than writing the round twice.
    pub(super) async fn round_tries(
        &self,
        batch: &Batch<'_>,
        token: &Token,
        mut tries: u32,
    ) -> Result<Outcomes, StoreError> {
        let started = Instant::now();
        let outcome = loop {
            tries += 1;
            let pool = &self.inner.pool;
            let attempt = match write_once(pool, batch, token).await {
                Err(e) if tries > 1 && token_taken(&e) => recorded(pool, batch, token).await,
                attempt => attempt,
            };
            if let Some(done) = self.retry_or_fail(attempt, started).await {
                break done;
            }
        };
        self.inner.write_health.record(outcome.as_ref().err());
        outcome
    }
}

/// Whether the database refused what a round holds (a value it cannot take, a constraint),
/// as opposed to being out of reach: only then may one write be at fault, and the round is
/// written again one write at a time.
fn refused_data(e: &StoreError) -> bool {
    let StoreError::Sqlx(sqlx::Error::Database(db)) = e else { return false };
    // data_exception, integrity_constraint_violation, program_limit_exceeded
    db.code().is_some_and(|code| ["22", "23", "54"].iter().any(|class| code.starts_with(class)))
}

/// The round to write now, and what waits for the next. Messages queued for other replicas go
/// in rounds of their own: a transaction that notifies holds, until its commit is flushed, a
/// lock that every other notifying commit in the database waits for, and the appends and
/// deliveries of every replica would wait in that line too. They go first, then.
fn split(batch: Vec<Pending>) -> (Round, Vec<Pending>) {
    let queueing = batch.iter().all(|pending| matches!(pending, Pending::Queue { .. }));
    let mut round = Round::default();
    let mut later = Vec::new();
    let mut sessions: HashSet<String> = HashSet::new();
    let mut inbound: HashSet<(Platform, String)> = HashSet::new();
    let mut waiting: HashSet<String> = HashSet::new();
    for pending in batch {
        let full = round.appends.len() + round.queued.len() >= ROUND;
        match pending {
            Pending::Delivered { message_id, reply } if !queueing => {
                round.delivered.push((message_id, reply));
            }
            Pending::Queue { message, reply } if queueing => {
                let id = (message.chat.platform, message.message_id.clone());
                if !full && !inbound.contains(&id) {
                    inbound.insert(id);
                    round.queued.push((message, reply));
                } else {
                    later.push(Pending::Queue { message, reply });
                }
            }
            Pending::Append { append, taken, reply } if !queueing => {
                let fits = !full
                    && !sessions.contains(&append.session_id)
                    && !waiting.contains(&append.session_id)
                    && append.dedupe.as_ref().is_none_or(|key| !inbound.contains(key));
                if fits {
                    sessions.insert(append.session_id.clone());
                    inbound.extend(append.dedupe.clone());
                    round.appends.push((append, taken, reply));
                } else {
                    // Its session's later appends wait too, to stay behind it.
                    waiting.insert(append.session_id.clone());
                    later.push(Pending::Append { append, taken, reply });
                }
            }
            other => later.push(other),
        }
    }
    (round, later)
}

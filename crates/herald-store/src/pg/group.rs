//! Group commit on PostgreSQL: the appends and deliveries of many chats written by one
//! statement.
//!
//! A statement is a transaction of its own, with its commit and its round trip, and on a busy
//! gateway those cost more than the rows. So these writes queue here. Whoever finds no flusher
//! waiting spawns one; it waits for one of [`FLUSHERS`] permits, then takes everything queued
//! by then. While one batch commits the next one gathers, and a quiet store adds no wait. The
//! flusher is a task of its own, so a caller that gives up waiting cannot abort the others'.
//!
//! The statement tells a round's appends apart by session, so a round holds each session, and
//! each inbound id, once; an append that would repeat one waits for the next round, with every
//! later append of its session. A round the database refuses for what it holds (a value, a
//! constraint) is written again one append at a time, so that the append at fault fails alone;
//! any other failure is every caller's. A round tried again after its connection broke is never
//! written twice (`tokens.rs`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use herald_core::Platform;
use tokio::sync::{Semaphore, oneshot};
use tracing::debug;

use super::Pg;
use super::tokens::{Pruning, Token, recorded, token_taken};
use crate::error::StoreError;
use crate::messages::{Append, Appended, NewMessage};
use crate::time::now_ms;

/// Batches written at once by one store: one commits while the next is written.
const FLUSHERS: usize = 2;

/// Most appends in one statement.
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

#[derive(Debug)]
enum Pending {
    Append {
        append: Append,
        reply: oneshot::Sender<Result<Appended, StoreError>>,
    },
    /// A reply its platform took: its outbox row goes.
    Delivered {
        message_id: i64,
        reply: oneshot::Sender<Result<(), StoreError>>,
    },
}

/// What one statement writes.
#[derive(Debug, Default)]
struct Round {
    appends: Vec<(Append, oneshot::Sender<Result<Appended, StoreError>>)>,
    delivered: Vec<(i64, oneshot::Sender<Result<(), StoreError>>)>,
}

impl Pg {
    /// Appends messages to a session, with their counters, inbound id and outbox row, all of
    /// them or none; `Duplicate` when the inbound id was recorded before.
    pub(crate) async fn append(&self, append: Append) -> Result<Appended, StoreError> {
        let (reply, result) = oneshot::channel();
        self.enqueue(Pending::Append { append, reply });
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
        let appends: Vec<&Append> = round.appends.iter().map(|(a, _)| a).collect();
        let delivered: Vec<i64> = round.delivered.iter().map(|(id, _)| *id).collect();
        match self.try_round(&appends, &delivered).await {
            Ok(results) => {
                self.stored(&results);
                for ((_, reply), result) in round.appends.into_iter().zip(results) {
                    let _ = reply.send(result);
                }
                for (_, reply) in round.delivered {
                    let _ = reply.send(Ok(()));
                }
            }
            Err(e) if refused_data(&e) && appends.len() + delivered.len() > 1 => {
                debug!(error = %e, writes = appends.len() + delivered.len(), "a batch was refused; writing its writes one by one");
                for (append, reply) in round.appends {
                    let result = match self.try_round(&[&append], &[]).await {
                        Ok(mut results) => results.pop().unwrap_or(Err(StoreError::Closed)),
                        Err(e) => Err(e),
                    };
                    self.stored(std::slice::from_ref(&result));
                    let _ = reply.send(result);
                }
                for (id, reply) in round.delivered {
                    let _ = reply.send(self.try_round(&[], &[id]).await.map(drop));
                }
            }
            Err(e) => {
                // The error itself to its one caller, a copy to each of several.
                let copies: Vec<StoreError> =
                    (1..appends.len() + delivered.len()).map(|_| e.duplicate()).collect();
                let mut errors = copies.into_iter().chain(std::iter::once(e));
                for (_, reply) in round.appends {
                    let _ = reply.send(Err(errors.next().unwrap_or(StoreError::Closed)));
                }
                for (_, reply) in round.delivered {
                    let _ = reply.send(Err(errors.next().unwrap_or(StoreError::Closed)));
                }
            }
        }
    }

    /// Lets the indexer know of the messages these appends stored.
    fn stored(&self, results: &[Result<Appended, StoreError>]) {
        let stored = results.iter().map(|r| match r {
            Ok(Appended::Stored(ids)) => ids.len() as u64,
            _ => 0,
        });
        crate::index::schedule_indexing(self, stored.sum());
    }

    /// Writes a round, retried whole while the failure is one a retry can cure and patience
    /// lasts; each append's own outcome in order.
    async fn try_round(
        &self,
        appends: &[&Append],
        delivered: &[i64],
    ) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
        self.inner.group.pruning.when_due(&self.inner.pool);
        self.round_tries(appends, delivered, &Token::new(), 0).await
    }

    /// [`Pg::try_round`] for the round `token`, of which `tries` were made already. One token
    /// for every try: a try after a broken connection may find an earlier one committed, and
    /// then takes its outcomes rather than writing the round twice.
    pub(super) async fn round_tries(
        &self,
        appends: &[&Append],
        delivered: &[i64],
        token: &Token,
        mut tries: u32,
    ) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
        let started = Instant::now();
        let outcome = loop {
            tries += 1;
            let pool = &self.inner.pool;
            let attempt = match write_once(pool, appends, delivered, token).await {
                Err(e) if tries > 1 && token_taken(&e) => recorded(pool, appends, token).await,
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
/// as opposed to being out of reach: only then may one append be at fault, and the round is
/// written again one append at a time.
fn refused_data(e: &StoreError) -> bool {
    let StoreError::Sqlx(sqlx::Error::Database(db)) = e else { return false };
    // data_exception, integrity_constraint_violation, program_limit_exceeded
    db.code().is_some_and(|code| ["22", "23", "54"].iter().any(|class| code.starts_with(class)))
}

/// The round to write now, and what waits for the next.
fn split(batch: Vec<Pending>) -> (Round, Vec<Pending>) {
    let mut round = Round::default();
    let mut later = Vec::new();
    let mut sessions: HashSet<String> = HashSet::new();
    let mut inbound: HashSet<(Platform, String)> = HashSet::new();
    let mut waiting: HashSet<String> = HashSet::new();
    for pending in batch {
        match pending {
            Pending::Delivered { message_id, reply } => round.delivered.push((message_id, reply)),
            Pending::Append { append, reply } => {
                let fits = round.appends.len() < ROUND
                    && !sessions.contains(&append.session_id)
                    && !waiting.contains(&append.session_id)
                    && append.dedupe.as_ref().is_none_or(|key| !inbound.contains(key));
                if fits {
                    sessions.insert(append.session_id.clone());
                    inbound.extend(append.dedupe.clone());
                    round.appends.push((append, reply));
                } else {
                    // Its session's later appends wait too, to stay behind it.
                    waiting.insert(append.session_id.clone());
                    later.push(Pending::Append { append, reply });
                }
            }
        }
    }
    (round, later)
}

/// The statement of a round: every append's inbound id, counters, messages and outbox row,
/// and the deliveries. The sessions' rows are locked first, in id order (so two rounds cannot
/// deadlock on them), before any message id is drawn: a session's ids grow in the order its
/// messages were written. A statement is its own transaction: all of it or none.
const ROUND_SQL: &str = "
    WITH a AS (
        SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[],
                             $6::bigint[], $7::bigint[], $8::bigint[], $9::text[], $10::text[],
                             $11::text[], $12::text[], $13::text[], $14::text[])
            WITH ORDINALITY AS a (session_id, platform, inbound, added, calls, input, output,
                                  context, to_platform, to_chat, to_thread, to_kind, reply_to,
                                  text, i)
    ),
    found AS (
        SELECT array(SELECT id FROM sessions WHERE id = ANY($1::text[]) ORDER BY id FOR UPDATE)
            AS ids
    ),
    fresh AS (
        INSERT INTO processed_inbound (platform, message_id, received_at)
        SELECT a.platform, a.inbound, $15 FROM a
        WHERE a.platform IS NOT NULL AND a.session_id = ANY((SELECT ids FROM found)::text[])
        ON CONFLICT DO NOTHING
        RETURNING platform, message_id
    ),
    ok AS (
        SELECT a.* FROM a
        WHERE a.session_id = ANY((SELECT ids FROM found)::text[])
          AND (a.platform IS NULL
               OR EXISTS (SELECT 1 FROM fresh f
                          WHERE f.platform = a.platform AND f.message_id = a.inbound))
    ),
    counted AS (
        UPDATE sessions s SET message_count = s.message_count + ok.added,
               tool_call_count = s.tool_call_count + ok.calls,
               input_tokens = s.input_tokens + ok.input, output_tokens = s.output_tokens + ok.output,
               context_tokens = CASE WHEN ok.context > 0 THEN ok.context ELSE s.context_tokens END,
               updated_at = $15
        -- Through the array, so the sessions are found by their index whatever the planner
        -- guesses of the round's size (a join of its own may scan every session).
        FROM ok WHERE s.id = ANY((SELECT ids FROM found)::text[]) AND s.id = ok.session_id
    ),
    added AS (
        INSERT INTO messages (session_id, role, content, tool_calls, tool_call_id, tool_name,
                              platform_message_id, token_count, created_at)
        SELECT ok.session_id, m.role, m.content, m.tool_calls, m.tool_call_id, m.tool_name,
               m.platform_message_id, m.token_count, $15
        FROM unnest($16::bigint[], $17::text[], $18::text[], $19::text[], $20::text[],
                    $21::text[], $22::text[], $23::bigint[])
             WITH ORDINALITY AS m (owner, role, content, tool_calls, tool_call_id, tool_name,
                                   platform_message_id, token_count, n)
        JOIN ok ON ok.i = m.owner
        ORDER BY m.n
        RETURNING id, session_id
    ),
    queued AS (
        INSERT INTO outbox (message_id, session_id, platform, chat_id, thread_id, chat_kind,
                            reply_to, text, created_at)
        SELECT last.id, ok.session_id, ok.to_platform, ok.to_chat, ok.to_thread, ok.to_kind,
               ok.reply_to, ok.text, $15
        FROM ok JOIN (SELECT session_id, max(id) AS id FROM added GROUP BY session_id) last
             ON last.session_id = ok.session_id
        WHERE ok.to_platform IS NOT NULL
    ),
    gone AS (DELETE FROM outbox WHERE message_id = ANY($24::bigint[])),
    result AS (
        SELECT a.i, a.session_id = ANY((SELECT ids FROM found)::text[]) AS found,
               EXISTS (SELECT 1 FROM ok WHERE ok.i = a.i) AS fresh,
               array(SELECT id FROM added WHERE added.session_id = a.session_id ORDER BY id) AS ids
        FROM a
    ),
    kept AS (
        INSERT INTO round_tokens (token, written_at, result)
        SELECT $25, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
               coalesce(jsonb_agg(jsonb_build_array(found, fresh, ids) ORDER BY i), '[]')::text
        FROM result
    )
    SELECT found, fresh, ids FROM result ORDER BY i";

/// One try of a round, on the pool or inside a caller's transaction: each append's outcome,
/// in order, recorded with `token` (see [`Token`]).
pub(crate) async fn write_once(
    db: impl sqlx::PgExecutor<'_>,
    appends: &[&Append],
    delivered: &[i64],
    token: &Token,
) -> Result<Vec<Result<Appended, StoreError>>, sqlx::Error> {
    let each = |f: fn(&Append) -> Option<String>| appends.iter().map(|a| f(a)).collect::<Vec<_>>();
    let count = |f: fn(&Append) -> i64| appends.iter().map(|a| f(a)).collect::<Vec<_>>();
    let messages: Vec<(i64, &NewMessage)> =
        appends.iter().zip(1..).flat_map(|(a, i)| a.messages.iter().map(move |m| (i, m))).collect();
    let column = |f: fn(&NewMessage) -> Option<String>| {
        messages.iter().map(|(_, m)| f(m)).collect::<Vec<_>>()
    };
    let rows: Vec<(bool, bool, Vec<i64>)> = sqlx::query_as(ROUND_SQL)
        .bind(each(|a| Some(a.session_id.clone())))
        .bind(each(|a| a.dedupe.as_ref().map(|(p, _)| p.as_str().to_owned())))
        .bind(each(|a| a.dedupe.as_ref().map(|(_, id)| id.clone())))
        .bind(count(|a| a.messages.len() as i64))
        .bind(count(|a| a.messages.iter().map(NewMessage::tool_call_count).sum()))
        .bind(count(|a| a.usage.input))
        .bind(count(|a| a.usage.output))
        .bind(count(|a| a.usage.context))
        .bind(each(|a| a.outbox.as_ref().map(|d| d.chat.platform.as_str().to_owned())))
        .bind(each(|a| a.outbox.as_ref().map(|d| d.chat.id.clone())))
        .bind(each(|a| a.outbox.as_ref().and_then(|d| d.chat.thread.clone())))
        .bind(each(|a| a.outbox.as_ref().map(|d| d.chat.kind.as_str().to_owned())))
        .bind(each(|a| a.outbox.as_ref().and_then(|d| d.reply_to.clone())))
        .bind(each(|a| a.outbox.as_ref().map(|d| d.text.clone())))
        .bind(now_ms())
        .bind(messages.iter().map(|(i, _)| *i).collect::<Vec<_>>())
        .bind(column(|m| Some(m.role.as_str().to_owned())))
        .bind(column(|m| Some(m.content.clone())))
        .bind(column(|m| m.tool_calls.as_ref().map(serde_json::Value::to_string)))
        .bind(column(|m| m.tool_call_id.clone()))
        .bind(column(|m| m.tool_name.clone()))
        .bind(column(|m| m.platform_message_id.clone()))
        .bind(messages.iter().map(|(_, m)| m.token_count).collect::<Vec<_>>())
        .bind(delivered)
        .bind(&token.0)
        .fetch_all(db)
        .await?;
    Ok(outcomes(appends, rows))
}

/// Each append's outcome from its row of a round: whether its session was found, whether it
/// was written (not a duplicate inbound id), and its messages' ids.
pub(super) fn outcomes(
    appends: &[&Append],
    rows: Vec<(bool, bool, Vec<i64>)>,
) -> Vec<Result<Appended, StoreError>> {
    appends
        .iter()
        .zip(rows)
        .map(|(append, (found, fresh, ids))| match (found, fresh) {
            (false, _) => Err(StoreError::SessionNotFound(append.session_id.clone())),
            (true, false) => Ok(Appended::Duplicate),
            (true, true) => Ok(Appended::Stored(ids)),
        })
        .collect()
}

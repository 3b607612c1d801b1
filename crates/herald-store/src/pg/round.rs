//! The statement of one round of group commit (`group.rs`): appends, queued messages taken
//! into their sessions, messages queued for another replica, and deliveries, written by one
//! statement that is its own transaction.

use herald_core::{ChatRef, Role, UserRef};

use super::handover::QUEUED_CHANNEL;
use super::tokens::Token;
use crate::error::StoreError;
use crate::messages::{Append, Appended, NewMessage};
use crate::time::now_ms;

/// A message queued for the replica running its session.
#[derive(Debug)]
pub(crate) struct Queueing {
    pub(crate) session_key: String,
    pub(crate) message_id: String,
    pub(crate) chat: ChatRef,
    pub(crate) user: UserRef,
    pub(crate) content: String,
}

/// What one round writes. `taken[i]` are the queue positions moved into the session of
/// `appends[i]` ahead of its messages (none when `taken` is shorter).
#[derive(Debug, Default)]
pub(crate) struct Batch<'a> {
    pub(crate) appends: Vec<&'a Append>,
    pub(crate) taken: Vec<&'a [i64]>,
    pub(crate) queued: Vec<&'a Queueing>,
    pub(crate) delivered: Vec<i64>,
}

impl<'a> Batch<'a> {
    pub(crate) fn of_appends(appends: Vec<&'a Append>) -> Batch<'a> {
        Batch { appends, ..Batch::default() }
    }
}

/// What a round did: each append's outcome, and each queued message's position (`None` when
/// its inbound id was recorded before), in the batch's order.
#[derive(Debug)]
pub(crate) struct Outcomes {
    pub(crate) appended: Vec<Result<Appended, StoreError>>,
    pub(crate) queued: Vec<Option<i64>>,
}

/// The statement of a round: every append's inbound id, counters, queued messages taken in,
/// messages and outbox row; the messages queued for other replicas, each replica told; and
/// the deliveries. The sessions' rows are locked first, in id order (so two rounds cannot
/// deadlock on them), before any message id is drawn: a session's ids grow in the order its
/// messages were written. One row per append, then one per queued message, each recorded with
/// the round's token.
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
        -- One key at a time, in order: found by the index whatever the planner guesses of the
        -- table's size (a plan made while it was nearly empty would scan every session).
        SELECT array(SELECT s.id
                     FROM (SELECT DISTINCT k COLLATE \"C\" AS k FROM unnest($1::text[]) u (k)
                           ORDER BY 1) keys
                     CROSS JOIN LATERAL (SELECT id FROM sessions WHERE id = keys.k FOR UPDATE) s)
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
    took AS (
        DELETE FROM inbound_queue q
        USING unnest($26::bigint[], $27::bigint[]) WITH ORDINALITY AS t (owner, seq, n)
        WHERE q.seq = t.seq AND t.owner IN (SELECT i FROM ok)
        RETURNING t.owner, t.n, q.message_id, q.content
    ),
    counted AS (
        UPDATE sessions s
           SET message_count = s.message_count + ok.added
                               + (SELECT count(*) FROM took WHERE took.owner = ok.i),
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
        FROM (SELECT owner, 0 AS part, n, $28::text AS role, content, NULL::text AS tool_calls,
                     NULL::text AS tool_call_id, NULL::text AS tool_name,
                     message_id AS platform_message_id, NULL::bigint AS token_count
              FROM took
              UNION ALL
              SELECT owner, 1, n, role, content, tool_calls, tool_call_id, tool_name,
                     platform_message_id, token_count
              FROM unnest($16::bigint[], $17::text[], $18::text[], $19::text[], $20::text[],
                          $21::text[], $22::text[], $23::bigint[])
                   WITH ORDINALITY AS m (owner, role, content, tool_calls, tool_call_id,
                                         tool_name, platform_message_id, token_count, n)) m
        JOIN ok ON ok.i = m.owner
        -- A session's queued messages go ahead of its own, as they came first.
        ORDER BY m.part, m.n
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
    qa AS (
        SELECT * FROM unnest($29::text[], $30::text[], $31::text[], $32::text[], $33::text[],
                             $34::text[], $35::text[], $36::text[], $37::text[])
            WITH ORDINALITY AS qa (platform, message_id, session_key, chat_id, thread_id,
                                   chat_kind, user_id, user_name, content, i)
    ),
    qfresh AS (
        INSERT INTO processed_inbound (platform, message_id, received_at)
        SELECT platform, message_id, $15 FROM qa
        ON CONFLICT DO NOTHING
        RETURNING platform, message_id
    ),
    enqueued AS (
        INSERT INTO inbound_queue (platform, message_id, session_key, chat_id, thread_id,
                                   chat_kind, user_id, user_name, content, received_at)
        SELECT qa.platform, qa.message_id, qa.session_key, qa.chat_id, qa.thread_id,
               qa.chat_kind, qa.user_id, qa.user_name, qa.content, $15
        FROM qa JOIN qfresh f ON f.platform = qa.platform AND f.message_id = qa.message_id
        ORDER BY qa.i
        RETURNING seq, platform, message_id, session_key, chat_id, thread_id, chat_kind,
                  user_id, user_name, content
    ),
    -- Every replica is told, with the row itself when it fits in a notification (8,000
    -- bytes); the one running the session takes it in at once.
    told AS (
        SELECT qa.i, e.seq,
               CASE WHEN e.seq IS NOT NULL THEN
                   pg_notify($38, CASE WHEN octet_length(row_to_json(e)::text) < 7900
                                       THEN row_to_json(e)::text
                                       ELSE json_build_object('session_key', e.session_key)::text
                                  END)
               END AS notified
        FROM qa LEFT JOIN enqueued e ON e.platform = qa.platform AND e.message_id = qa.message_id
        ORDER BY qa.i
    ),
    rows AS (
        SELECT 0 AS part, i, found, fresh, ids FROM result
        UNION ALL
        SELECT 1, i, true, seq IS NOT NULL,
               CASE WHEN seq IS NULL THEN '{}'::bigint[] ELSE ARRAY[seq] END
        FROM told
    ),
    kept AS (
        INSERT INTO round_tokens (token, written_at, result)
        SELECT $25, (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
               coalesce(jsonb_agg(jsonb_build_array(found, fresh, ids) ORDER BY part, i),
                        '[]')::text
        FROM rows
    )
    SELECT found, fresh, ids FROM rows ORDER BY part, i";

/// One try of a round, on the pool or inside a caller's transaction, recorded with `token`
/// (see [`Token`]).
pub(crate) async fn write_once(
    db: impl sqlx::PgExecutor<'_>,
    batch: &Batch<'_>,
    token: &Token,
) -> Result<Outcomes, sqlx::Error> {
    // Both record inbound ids, in two inserts that cannot see each other's rows.
    debug_assert!(batch.appends.is_empty() || batch.queued.is_empty(), "a mixed round");
    let appends = &batch.appends;
    let each = |f: fn(&Append) -> Option<String>| appends.iter().map(|a| f(a)).collect::<Vec<_>>();
    let count = |f: fn(&Append) -> i64| appends.iter().map(|a| f(a)).collect::<Vec<_>>();
    let messages: Vec<(i64, &NewMessage)> =
        appends.iter().zip(1..).flat_map(|(a, i)| a.messages.iter().map(move |m| (i, m))).collect();
    let column = |f: fn(&NewMessage) -> Option<String>| {
        messages.iter().map(|(_, m)| f(m)).collect::<Vec<_>>()
    };
    let (owners, seqs): (Vec<i64>, Vec<i64>) = batch
        .taken
        .iter()
        .zip(1..)
        .flat_map(|(seqs, i)| seqs.iter().map(move |seq| (i, *seq)))
        .unzip();
    let queued = &batch.queued;
    let queue =
        |f: fn(&Queueing) -> Option<String>| queued.iter().map(|q| f(q)).collect::<Vec<_>>();
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
        .bind(&batch.delivered)
        .bind(&token.0)
        .bind(owners)
        .bind(seqs)
        .bind(Role::User.as_str())
        .bind(queue(|q| Some(q.chat.platform.as_str().to_owned())))
        .bind(queue(|q| Some(q.message_id.clone())))
        .bind(queue(|q| Some(q.session_key.clone())))
        .bind(queue(|q| Some(q.chat.id.clone())))
        .bind(queue(|q| q.chat.thread.clone()))
        .bind(queue(|q| Some(q.chat.kind.as_str().to_owned())))
        .bind(queue(|q| Some(q.user.id.clone())))
        .bind(queue(|q| q.user.name.clone()))
        .bind(queue(|q| Some(q.content.clone())))
        .bind(QUEUED_CHANNEL)
        .fetch_all(db)
        .await?;
    outcomes(batch, rows, token)
}

/// What a round's rows say (as written, or as recorded with its token): whether each
/// append's session was found, whether it was written (not a duplicate inbound id), and its
/// messages' ids; then each queued message's position, if it was queued.
pub(super) fn outcomes(
    batch: &Batch<'_>,
    rows: Vec<(bool, bool, Vec<i64>)>,
    token: &Token,
) -> Result<Outcomes, sqlx::Error> {
    let writes = batch.appends.len() + batch.queued.len();
    if rows.len() != writes {
        // Not a failure a retry could cure.
        let e = format!("round {} has {} outcomes for {writes} writes", token.0, rows.len());
        return Err(sqlx::Error::Decode(e.into()));
    }
    let mut rows = rows.into_iter();
    let appended = batch
        .appends
        .iter()
        .zip(rows.by_ref())
        .map(|(append, (found, fresh, ids))| match (found, fresh) {
            (false, _) => Err(StoreError::SessionNotFound(append.session_id.clone())),
            (true, false) => Ok(Appended::Duplicate),
            (true, true) => Ok(Appended::Stored(ids)),
        })
        .collect();
    let queued = rows.map(|(_, fresh, seq)| seq.first().copied().filter(|_| fresh)).collect();
    Ok(Outcomes { appended, queued })
}

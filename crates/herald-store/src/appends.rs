//! Writing a batch of appends inside a transaction: the statements, and the two ways of
//! applying them.
//!
//! [`Prepared`] is the way of the group commit's first, trusting attempt. Its statements and
//! their arguments are built before the write lock is taken, so holding the lock, which every
//! other writer waits for, costs SQLite's own work and little else. It assumes what holds in
//! the common case, that every session exists and no inbound id was seen before, and checks it
//! by the rows each statement changed; when a check fails the caller rolls the transaction back
//! and applies the batch with care.
//!
//! [`apply_batch`] is that careful way: sessions looked up first, inbound ids recorded with
//! `RETURNING`, and each append given its own result.

use std::collections::{BTreeMap, HashMap, HashSet};

use sqlx::sqlite::{SqliteArguments, SqliteQueryResult};
use sqlx::{Execute, Sqlite, SqliteConnection};

use crate::error::StoreError;
use crate::messages::{Append, Appended, NewMessage};
use crate::numbers::SessionNumbers;
use crate::time::now_ms;

/// Most message rows per INSERT: 10 parameters each stays under SQLite's 32766.
pub(crate) const ROWS_PER_INSERT: usize = 3000;

/// How old a batch's statements may be when they run: their rows are stamped with the time
/// they were built, and a batch that waited longer for the lock is built again. (Stamping
/// them in SQL instead would turn off SQLite's fast path for VALUES lists of bound values.)
const STALE: std::time::Duration = std::time::Duration::from_secs(1);

/// A statement and its arguments, built apart from the connection it runs on.
#[derive(Debug)]
pub(crate) struct Statement {
    sql: sqlx::SqlStr,
    args: SqliteArguments,
    /// The rows its VALUES hold.
    rows: usize,
}

type Query = sqlx::query::Query<'static, Sqlite, SqliteArguments>;

impl Statement {
    fn new(mut query: Query, rows: usize) -> Result<Statement, StoreError> {
        let args = query.take_arguments().map_err(sqlx::Error::Encode)?.unwrap_or_default();
        Ok(Statement { sql: query.sql(), args, rows })
    }

    /// Runs it; the arguments are kept for another attempt.
    async fn execute(&self, conn: &mut SqliteConnection) -> Result<SqliteQueryResult, StoreError> {
        Ok(sqlx::query_with(self.sql.clone(), self.args.clone()).execute(&mut *conn).await?)
    }

    /// Runs it and reads the `(platform, message id)` rows it returns.
    async fn fetch_keys(
        &self,
        conn: &mut SqliteConnection,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let query = sqlx::query_as_with(self.sql.clone(), self.args.clone());
        Ok(query.fetch_all(&mut *conn).await?)
    }
}

/// The statements of a trusting attempt at some appends, built before the write lock.
#[derive(Debug)]
pub(crate) struct Prepared {
    /// How many appends they cover.
    appends: usize,
    /// When it was built (see [`Prepared::stale`]).
    built: std::time::Instant,
    /// The time its rows are stamped with, in Unix milliseconds.
    now: i64,
    inbound: Vec<Statement>,
    counters: Vec<Statement>,
    messages: Vec<Statement>,
}

impl Prepared {
    /// Builds the statements for `appends`, all assumed to be new to the store, their sessions
    /// numbered as `numbers` says; fails for a session whose number is not known.
    pub(crate) fn build(
        appends: &[&Append],
        numbers: &SessionNumbers,
    ) -> Result<Prepared, StoreError> {
        let now = now_ms();
        let mut known = HashMap::new();
        for append in appends {
            let id = append.session_id.as_str();
            let no = numbers.get(id).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))?;
            known.insert(id, no);
        }
        let inbound: Vec<_> = appends.iter().filter_map(|a| inbound_key(a)).collect();
        Ok(Prepared {
            appends: appends.len(),
            built: std::time::Instant::now(),
            now,
            inbound: inbound_statements(&inbound, now, false)?,
            counters: counter_statements(appends, &known, now)?,
            messages: message_statements(appends, &known, now)?,
        })
    }

    /// How many appends the statements cover.
    pub(crate) fn len(&self) -> usize {
        self.appends
    }

    /// Whether its rows would be stamped more than [`STALE`] before they are written (the
    /// flusher waited long for the lock, or retried): it is then built again.
    pub(crate) fn stale(&self) -> bool {
        self.built.elapsed() > STALE
    }

    /// Applies `appends` (those it was built for) and returns each one's new ids, or `None`
    /// when an inbound id was seen before or a session is gone: the transaction is then half
    /// written, and the caller must roll it back.
    pub(crate) async fn apply(
        &self,
        conn: &mut SqliteConnection,
        appends: &[&Append],
    ) -> Result<Option<Vec<Vec<i64>>>, StoreError> {
        debug_assert_eq!(appends.len(), self.appends);
        // A redelivered message leaves its row out (ON CONFLICT DO NOTHING); a session that is
        // gone, or whose number was given to another since this process noted it, leaves its
        // counters unchanged (an append without messages would fail no foreign key, so the
        // counters are where every such session shows).
        for statement in self.inbound.iter().chain(&self.counters) {
            if statement.execute(conn).await?.rows_affected() < statement.rows as u64 {
                return Ok(None);
            }
        }
        let stored = insert_messages(conn, &self.messages, appends).await?;
        crate::outbox::insert(conn, appends, &stored, self.now).await?;
        Ok(Some(stored))
    }
}

/// Writes a batch of appends inside the caller's transaction with a handful of statements,
/// whatever the batch size: which sessions exist, which inbound ids are new, every session's
/// counters at once, every message at once. Each append gets its own result: a missing
/// session fails that append alone, a redelivered inbound message is a duplicate.
pub(crate) async fn apply_batch(
    conn: &mut SqliteConnection,
    batch: &[&Append],
) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
    let now = now_ms();
    let ids: Vec<&str> = batch.iter().map(|a| a.session_id.as_str()).collect();
    let existing = crate::numbers::read_numbers(conn, &ids).await?;
    let exists = |a: &Append| existing.contains_key(a.session_id.as_str());
    let known: HashMap<&str, i64> = existing.iter().map(|(id, no)| (id.as_str(), *no)).collect();
    let inbound: Vec<_> =
        batch.iter().filter(|a| exists(a)).filter_map(|a| inbound_key(a)).collect();
    let mut fresh = HashSet::new();
    for statement in inbound_statements(&inbound, now, true)? {
        fresh.extend(statement.fetch_keys(conn).await?);
    }
    let mut results: Vec<Option<Result<Appended, StoreError>>> = Vec::with_capacity(batch.len());
    let mut kept: Vec<&Append> = Vec::new();
    for append in batch {
        if !exists(append) {
            results.push(Some(Err(StoreError::SessionNotFound(append.session_id.clone()))));
        } else if append
            .dedupe
            .as_ref()
            // Taken out when used: the same id twice in one batch stores the first only.
            .is_some_and(|(p, id)| !fresh.remove(&(p.as_str().to_owned(), id.clone())))
        {
            results.push(Some(Ok(Appended::Duplicate)));
        } else {
            results.push(None);
            kept.push(append);
        }
    }
    for statement in counter_statements(&kept, &known, now)? {
        // Every session of `kept` was found above, inside this transaction.
        statement.execute(conn).await?;
    }
    let stored = insert_messages(conn, &message_statements(&kept, &known, now)?, &kept).await?;
    crate::outbox::insert(conn, &kept, &stored, now).await?;
    let mut ids = stored.into_iter();
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Ok(Appended::Stored(ids.next().unwrap_or_default()))))
        .collect())
}

/// The inbound id an append records.
fn inbound_key(append: &Append) -> Option<(&str, &str)> {
    let (platform, id) = append.dedupe.as_ref()?;
    Some((platform.as_str(), id.as_str()))
}

/// Records inbound ids, leaving out those seen before; `returning` makes each statement
/// return the ids it recorded.
fn inbound_statements(
    inbound: &[(&str, &str)],
    now: i64,
    returning: bool,
) -> Result<Vec<Statement>, StoreError> {
    let tail = if returning { " RETURNING platform, message_id" } else { "" };
    inbound
        .chunks(ROWS_PER_INSERT)
        .map(|chunk| {
            let sql = format!(
                "INSERT INTO processed_inbound (platform, message_id, received_at)
                 VALUES {} ON CONFLICT DO NOTHING{tail}",
                placeholders(chunk.len(), 3)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (platform, id) in chunk {
                query = query.bind(platform.to_string()).bind(id.to_string()).bind(now);
            }
            Statement::new(query, chunk.len())
        })
        .collect()
}

/// Adds each append to its session's counters, and sets its context size to the last one
/// reported: one row per session, named by id and number (a row whose number no longer goes
/// with its id changes nothing).
fn counter_statements(
    appends: &[&Append],
    numbers: &HashMap<&str, i64>,
    now: i64,
) -> Result<Vec<Statement>, StoreError> {
    let mut totals: BTreeMap<&str, [i64; 5]> = BTreeMap::new();
    for append in appends {
        let t = totals.entry(append.session_id.as_str()).or_default();
        t[0] += append.messages.len() as i64;
        t[1] += append.messages.iter().map(NewMessage::tool_call_count).sum::<i64>();
        t[2] += append.usage.input;
        t[3] += append.usage.output;
        // Appends of a batch are in the order they were made: the last report is the newest.
        if append.usage.context > 0 {
            t[4] = append.usage.context;
        }
    }
    let rows: Vec<_> = totals.into_iter().collect();
    rows.chunks(ROWS_PER_INSERT)
        .map(|chunk| {
            let sql = format!(
                "WITH d (id, no, messages, calls, input, output, context) AS (VALUES {})
                 UPDATE sessions SET message_count = message_count + d.messages,
                        tool_call_count = tool_call_count + d.calls,
                        input_tokens = input_tokens + d.input, output_tokens = output_tokens + d.output,
                        context_tokens = CASE WHEN d.context > 0 THEN d.context
                                              ELSE context_tokens END,
                        updated_at = ?
                 FROM d WHERE sessions.no = d.no AND sessions.id = d.id",
                placeholders(chunk.len(), 7)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (id, [messages, calls, input, output, context]) in chunk {
                let no = numbers.get(id).copied();
                query = query.bind(id.to_string()).bind(no).bind(*messages).bind(*calls);
                query = query.bind(*input).bind(*output).bind(*context);
            }
            Statement::new(query.bind(now), chunk.len())
        })
        .collect()
}

/// Inserts every message of `appends`, in order, under its session's number.
fn message_statements(
    appends: &[&Append],
    numbers: &HashMap<&str, i64>,
    now: i64,
) -> Result<Vec<Statement>, StoreError> {
    let mut messages: Vec<(i64, &NewMessage)> = Vec::new();
    for append in appends {
        let id = append.session_id.as_str();
        let no = *numbers.get(id).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))?;
        messages.extend(append.messages.iter().map(|m| (no, m)));
    }
    messages
        .chunks(ROWS_PER_INSERT)
        .map(|chunk| {
            let sql = format!(
                "INSERT INTO messages (session_no, role, content, tool_calls, tool_call_id,
                                       tool_name, platform_message_id, token_count, created_at, cjk)
                 VALUES {}",
                placeholders(chunk.len(), 10)
            );
            let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
            for (no, m) in chunk {
                query = query
                    .bind(*no)
                    .bind(m.role.as_str())
                    .bind(m.content.clone())
                    .bind(m.tool_calls.as_ref().map(serde_json::Value::to_string))
                    .bind(m.tool_call_id.clone())
                    .bind(m.tool_name.clone())
                    .bind(m.platform_message_id.clone())
                    .bind(m.token_count)
                    .bind(now)
                    .bind(m.content.chars().any(crate::search::is_cjk));
            }
            Statement::new(query, chunk.len())
        })
        .collect()
}

/// Runs the message statements of `appends` and returns each append's new ids.
async fn insert_messages(
    conn: &mut SqliteConnection,
    statements: &[Statement],
    appends: &[&Append],
) -> Result<Vec<Vec<i64>>, StoreError> {
    let mut ids = Vec::with_capacity(statements.iter().map(|s| s.rows).sum());
    for statement in statements {
        // One statement under the write lock on an AUTOINCREMENT table: its rows get
        // consecutive ids ending at the last insert rowid.
        let last = statement.execute(conn).await?.last_insert_rowid();
        ids.extend(last - statement.rows as i64 + 1..=last);
    }
    let mut ids = ids.into_iter();
    Ok(appends.iter().map(|a| ids.by_ref().take(a.messages.len()).collect()).collect())
}

/// `(?, ?), (?, ?)`: `rows` groups of `columns` placeholders.
pub(crate) fn placeholders(rows: usize, columns: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    if columns == 1 {
        return vec!["?"; rows].join(", ");
    }
    vec![row; rows].join(", ")
}

//! Sessions on PostgreSQL: creation with a deduplicated system prompt, lookup, listing,
//! renaming, ending, deleting and pruning; short ids, statistics and health.

use std::sync::Arc;
use std::time::Duration;

use herald_core::Platform;
use sqlx::{Connection, PgConnection};

use super::Pg;
use super::write::is_unique_violation;
use crate::error::StoreError;
use crate::sessions::{
    NewSession, Picked, SESSION_COLUMNS, Session, SessionFilter, pick, prompt_hash, trim_reference,
};
use crate::stats::{Health, SourceStats, Stats};
use crate::time::now_ms;

impl Pg {
    pub(crate) async fn create_session(&self, new: &NewSession) -> Result<Session, StoreError> {
        let new = Arc::new(new.clone());
        self.write(move |tx| {
            let new = Arc::clone(&new);
            Box::pin(async move { insert_session(tx, &new).await })
        })
        .await
    }

    pub(crate) async fn session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        Ok(read_session(&mut conn, id).await?)
    }

    /// As [`crate::open::Lite::resolve_session`]: exact id, exact title, or a unique id prefix.
    pub(crate) async fn resolve_session(&self, reference: &str) -> Result<Session, StoreError> {
        let reference = trim_reference(reference);
        if reference.is_empty() {
            return Err(StoreError::SessionNotFound(reference.to_owned()));
        }
        let found: Vec<Session> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 OR title = $1
             UNION SELECT {SESSION_COLUMNS} FROM sessions
                   WHERE starts_with(id, $1) AND length($1) >= 4
             LIMIT 3"
        )))
        .bind(reference)
        .fetch_all(&self.inner.pool)
        .await?;
        match pick(found, reference)? {
            Picked::This(session) => Ok(*session),
            Picked::NewestOf(id) => self.newest_in_chain(&id).await,
        }
    }

    pub(crate) async fn system_prompt(
        &self,
        session_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT p.prompt FROM sessions s JOIN system_prompts p ON p.hash = s.system_prompt_hash
             WHERE s.id = $1",
        )
        .bind(session_id)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn list_sessions(
        &self,
        filter: &SessionFilter,
    ) -> Result<Vec<Session>, StoreError> {
        // LIMIT NULL is no limit.
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE ($1::text IS NULL OR source = $1) AND ($2::text IS NULL OR user_id = $2)
             ORDER BY started_at DESC, id DESC LIMIT $3"
        )))
        .bind(filter.source.map(Platform::as_str))
        .bind(&filter.user_id)
        .bind(filter.limit.map(i64::from))
        .fetch_all(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn end_session(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        let (owned_id, reason) = (id.to_owned(), reason.to_owned());
        let found = self
            .write(move |tx| {
                let (id, reason) = (owned_id.clone(), reason.clone());
                Box::pin(async move { end_in(tx, &id, &reason).await })
            })
            .await?;
        if !found {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(())
    }

    pub(crate) async fn reopen_session(&self, id: &str) -> Result<(), StoreError> {
        let id = id.to_owned();
        self.write(move |tx| {
            let id = id.clone();
            Box::pin(async move {
                let id = id.as_str();
                let found = sqlx::query(
                    "UPDATE sessions SET ended_at = NULL, end_reason = NULL, updated_at = $1
                     WHERE id = $2
                       AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = $2)",
                )
                .bind(now_ms())
                .bind(id)
                .execute(&mut **tx)
                .await?
                .rows_affected();
                if found > 0 {
                    return Ok(Ok(()));
                }
                Ok(match super::lineage::newest_of(tx, id).await? {
                    None => Err(StoreError::SessionNotFound(id.to_owned())),
                    Some(newest) => Err(StoreError::AlreadyContinued {
                        id: id.to_owned(),
                        newest: Some(newest.id).filter(|n| n != id),
                    }),
                })
            })
        })
        .await?
    }

    pub(crate) async fn rename_session(&self, id: &str, title: &str) -> Result<(), StoreError> {
        let title = title.trim();
        let value = (!title.is_empty()).then(|| title.to_owned());
        let owned_id = id.to_owned();
        let result = self
            .write(move |tx| {
                let (id, value) = (owned_id.clone(), value.clone());
                Box::pin(async move {
                    let found = sqlx::query(
                        "UPDATE sessions SET title = $1, updated_at = $2 WHERE id = $3",
                    )
                    .bind(value)
                    .bind(now_ms())
                    .bind(&id)
                    .execute(&mut **tx)
                    .await?;
                    Ok(found.rows_affected())
                })
            })
            .await;
        match result {
            Ok(0) => Err(StoreError::SessionNotFound(id.to_owned())),
            Ok(_) => Ok(()),
            Err(StoreError::Sqlx(e)) if is_unique_violation(&e) => {
                let holder: String = sqlx::query_scalar("SELECT id FROM sessions WHERE title = $1")
                    .bind(title)
                    .fetch_one(&self.inner.pool)
                    .await?;
                Err(StoreError::TitleTaken { title: title.to_owned(), session_id: holder })
            }
            Err(e) => Err(e),
        }
    }

    pub(crate) async fn delete_session(&self, id: &str) -> Result<i64, StoreError> {
        let owned_id = id.to_owned();
        let deleted = self
            .write(move |tx| {
                let id = owned_id.clone();
                Box::pin(async move {
                    let id = id.as_str();
                    let found: Option<(i64, Option<String>)> = sqlx::query_as(
                        "SELECT message_count, parent_session_id FROM sessions WHERE id = $1
                         FOR UPDATE",
                    )
                    .bind(id)
                    .fetch_optional(&mut **tx)
                    .await?;
                    let Some((messages, parent)) = found else { return Ok(None) };
                    super::lineage::relink_children(tx, &[(id.to_owned(), parent)]).await?;
                    sqlx::query("DELETE FROM sessions WHERE id = $1")
                        .bind(id)
                        .execute(&mut **tx)
                        .await?;
                    forget_unused_prompts(tx).await?;
                    Ok(Some(messages))
                })
            })
            .await?;
        deleted.ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }

    pub(crate) async fn prune_sessions(
        &self,
        older_than: Duration,
        source: Option<Platform>,
    ) -> Result<u64, StoreError> {
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(age);
        let source = source.map(Platform::as_str);
        const PRUNED: &str =
            "ended_at IS NOT NULL AND ended_at < $1 AND ($2::text IS NULL OR source = $2)
             AND id NOT IN (SELECT session_id FROM routes)";
        self.write(move |tx| {
            Box::pin(async move {
                let doomed: Vec<(String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(
                    format!("SELECT id, parent_session_id FROM sessions WHERE {PRUNED} FOR UPDATE"),
                ))
                .bind(cutoff)
                .bind(source)
                .fetch_all(&mut **tx)
                .await?;
                super::lineage::relink_children(tx, &doomed).await?;
                let ids: Vec<&str> = doomed.iter().map(|(id, _)| id.as_str()).collect();
                let pruned = sqlx::query("DELETE FROM sessions WHERE id = ANY($1)")
                    .bind(&ids)
                    .execute(&mut **tx)
                    .await?
                    .rows_affected();
                forget_unused_prompts(tx).await?;
                Ok(pruned)
            })
        })
        .await
    }

    pub(crate) async fn short_ids(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let mut short = Vec::with_capacity(ids.len());
        for id in ids {
            // Ids compare byte by byte (the column's collation is "C"), as on SQLite.
            let (before, after): (Option<String>, Option<String>) = sqlx::query_as(
                "SELECT (SELECT max(id) FROM sessions WHERE id < $1),
                        (SELECT min(id) FROM sessions WHERE id > $1)",
            )
            .bind(id)
            .fetch_one(&mut *conn)
            .await?;
            short.push(crate::short_ids::short_id(id, before.as_deref(), after.as_deref()));
        }
        Ok(short)
    }

    pub(crate) async fn stats(&self) -> Result<Stats, StoreError> {
        let by_source: Vec<SourceStats> = sqlx::query_as(
            "SELECT source, count(*) AS sessions, count(*) - count(ended_at) AS open_sessions,
                    coalesce(sum(message_count), 0)::bigint AS messages
             FROM sessions GROUP BY source ORDER BY sessions DESC, messages DESC, source",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        let (oldest, newest, size): (Option<i64>, Option<i64>, i64) = sqlx::query_as(
            "SELECT min(started_at), max(started_at), pg_database_size(current_database())
             FROM sessions",
        )
        .fetch_one(&self.inner.pool)
        .await?;
        Ok(Stats {
            sessions: by_source.iter().map(|s| s.sessions).sum(),
            open_sessions: by_source.iter().map(|s| s.open_sessions).sum(),
            messages: by_source.iter().map(|s| s.messages).sum(),
            by_source,
            oldest_started_at: oldest,
            newest_started_at: newest,
            size_bytes: u64::try_from(size).unwrap_or(0),
        })
    }

    /// The schema version and whether the search index is there; PostgreSQL checks its own
    /// pages, so a database that answers is taken as whole.
    pub(crate) async fn health(&self) -> Result<Health, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let schema_version = super::open::applied_version(&mut conn).await?;
        let search_index: bool =
            sqlx::query_scalar("SELECT to_regclass('messages_search') IS NOT NULL")
                .fetch_one(&mut *conn)
                .await?;
        let version: String =
            sqlx::query_scalar("SHOW server_version").fetch_one(&mut *conn).await?;
        let extensions: Vec<String> =
            sqlx::query_scalar("SELECT extname::TEXT FROM pg_extension ORDER BY extname")
                .fetch_all(&mut *conn)
                .await?;
        Ok(Health {
            schema_version,
            known_schema_version: super::open::known_version(),
            journal_mode: "postgres".to_owned(),
            fts5: search_index,
            integrity: vec!["ok".to_owned()],
            search_index_ok: true,
            unindexed: self.unindexed().await?,
            server: Some(format!("PostgreSQL {version}")),
            extensions,
        })
    }
}

/// Inserts a session and its prompt inside the caller's transaction.
pub(crate) async fn insert_session(
    conn: &mut PgConnection,
    new: &NewSession,
) -> Result<Session, sqlx::Error> {
    let sql = new_session_sql(false);
    for _ in 0..10 {
        let query = bind_new(sqlx::query_as(sqlx::AssertSqlSafe(sql.clone())), new, now_ms());
        if let Some(session) = query.fetch_optional(&mut *conn).await? {
            return Ok(session);
        }
    }
    // Not an error that retrying the whole write is meant for (those are connection troubles).
    Err(sqlx::Error::RowNotFound)
}

/// The statement creating a session, with `RETURNING` its columns, `$1` to `$12` bound by
/// [`bind_new`]; with `routed`, only along with the route of the key `$13`.
///
/// The prompt's row is inserted, or held with a shared lock until commit: a replica deleting
/// the last other session with this prompt cannot take it away from under this one, while
/// sessions created at once with the same prompt do not wait for each other (an upsert's
/// exclusive lock made every new session of a busy gateway wait for the one before). A prompt
/// committed after the statement began, or deleted since, is neither: no row, and the caller
/// tries again. A route insert waits for another replica's of the same key to commit or roll
/// back, and the session goes in only with the route; foreign keys are checked at the end of
/// the statement, when every row is in.
pub(crate) fn new_session_sql(routed: bool) -> String {
    let (ctes, insert) = new_session_parts(routed, "true");
    format!("WITH {ctes} {insert}")
}

/// [`new_session_sql`] in parts, writing nothing unless the condition `when` holds: its
/// common table expressions (`prompt`, `kept`, and with `routed`, `routed`), and the session's
/// insert, which follows them.
pub(crate) fn new_session_parts(routed: bool, when: &str) -> (String, String) {
    let (route, only_if) = if routed {
        (
            ", routed AS (
                 INSERT INTO routes (session_key, session_id, updated_at)
                 SELECT $13, $1, $11 WHERE (SELECT ok FROM kept)
                 ON CONFLICT (session_key) DO NOTHING
                 RETURNING 1
             )",
            "EXISTS (SELECT 1 FROM routed)",
        )
    } else {
        ("", "(SELECT ok FROM kept)")
    };
    let ctes = format!(
        "prompt AS (
             INSERT INTO system_prompts (hash, prompt, created_at)
             SELECT $9, $12, $11 WHERE {when}
             ON CONFLICT (hash) DO NOTHING
             RETURNING 1
         ),
         kept AS (
             SELECT {when}
                 AND (EXISTS (SELECT 1 FROM prompt)
                      OR EXISTS (SELECT 1 FROM system_prompts WHERE hash = $9 FOR KEY SHARE))
                 AS ok
         ){route}"
    );
    let insert = format!(
        "INSERT INTO sessions (id, source, session_key, chat_id, thread_id, user_id, chat_type,
                               model, system_prompt_hash, parent_session_id, started_at, updated_at)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11 WHERE {only_if}
         RETURNING {SESSION_COLUMNS}"
    );
    (ctes, insert)
}

/// Binds a new session as `$1` to `$12` of [`new_session_sql`], with a fresh id.
pub(crate) fn bind_new<'q, O>(
    query: sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments>,
    new: &'q NewSession,
    now: i64,
) -> sqlx::query::QueryAs<'q, sqlx::Postgres, O, sqlx::postgres::PgArguments> {
    query
        .bind(uuid::Uuid::now_v7().to_string())
        .bind(new.source.as_str())
        .bind(&new.session_key)
        .bind(&new.chat_id)
        .bind(&new.thread_id)
        .bind(&new.user_id)
        .bind(&new.chat_type)
        .bind(&new.model)
        .bind(prompt_hash(&new.system_prompt))
        .bind(&new.parent_session_id)
        .bind(now)
        .bind(&new.system_prompt)
}

/// The session with exactly this id, read on `conn`.
pub(crate) async fn read_session(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Option<Session>, sqlx::Error> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1"
    )))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await
}

/// Ends a session inside the caller's transaction, keeping an earlier end if there is one;
/// false when there is no such session.
pub(crate) async fn end_in(
    conn: &mut PgConnection,
    id: &str,
    reason: &str,
) -> Result<bool, sqlx::Error> {
    let found = sqlx::query(
        "UPDATE sessions SET ended_at = coalesce(ended_at, $1),
                end_reason = coalesce(end_reason, $2), updated_at = $1 WHERE id = $3",
    )
    .bind(now_ms())
    .bind(reason)
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    Ok(found > 0)
}

/// System prompts no session refers to any more. A replica may be creating a session with one
/// of them right now; should the delete reach its prompt anyway, it fails on the foreign key and
/// the prompt stays, unused and harmless until the next cleanup.
async fn forget_unused_prompts(conn: &mut PgConnection) -> Result<(), sqlx::Error> {
    let mut savepoint = conn.begin().await?;
    let deleted = sqlx::query(
        "DELETE FROM system_prompts p
         WHERE NOT EXISTS (SELECT 1 FROM sessions s WHERE s.system_prompt_hash = p.hash)",
    )
    .execute(&mut *savepoint)
    .await;
    match deleted {
        Ok(_) => savepoint.commit().await,
        Err(sqlx::Error::Database(db)) if db.code().as_deref() == Some("23503") => {
            savepoint.rollback().await
        }
        Err(e) => Err(e),
    }
}

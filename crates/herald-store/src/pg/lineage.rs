//! Routes and lineage on PostgreSQL: which session a chat's key talks to, and the chains that
//! context compression makes (see `crate::lineage` for what a chain is).
//!
//! Replicas race for the same rows here: two may see a new chat's first message at once, or
//! compress one session at once. The database settles it: a route is inserted once (its key is
//! the primary key), and a compression locks its parent's row first.

use std::collections::HashMap;
use std::sync::Arc;

use sqlx::PgConnection;

use super::Pg;
use super::round::{Batch, write_once};
use super::sessions::{
    bind_new, end_in, insert_session, new_session_parts, new_session_sql, read_session,
};
use super::tokens::Token;
use crate::error::StoreError;
use crate::lineage::{COMPRESSED, MAX_DEPTH, nearest_kept, split_number};
use crate::messages::{Append, Appended, NewMessage, TokenUsage};
use crate::routes::{self, Opening, OpeningRead, opening_sql};
use crate::sessions::{NewSession, SESSION_COLUMNS, Session};
use crate::time::now_ms;

/// [`Pg::opening_or_create`]: [`opening_sql`]'s columns, from the routed session found or
/// from the one [`new_session_sql`] creates (`$1` to `$12`) when the key (`$13`) has none. A
/// route inserted meanwhile by another writer makes it create nothing and find nothing.
fn opening_or_create_sql() -> String {
    let found = routes::routed_sql("$13", "session_id", "id", "false");
    let (ctes, insert) = new_session_parts(true, "NOT EXISTS (SELECT 1 FROM found)");
    let either =
        "SELECT * FROM found UNION ALL SELECT created.*, $12::text, false, true FROM created";
    format!(
        "WITH found AS ({found}), {ctes}, created AS ({insert}) {}",
        routes::opening_of("$13", either)
    )
}

/// The session a key is routed to, in one statement.
fn routed_sql() -> String {
    format!(
        "SELECT {SESSION_COLUMNS} FROM sessions
         WHERE id = (SELECT session_id FROM routes WHERE session_key = $1)"
    )
}

impl Pg {
    pub(crate) async fn opening(&self, key: &str) -> Result<Opening, StoreError> {
        let sql = opening_sql("$1", "session_id", "id", "false");
        let read = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key).fetch_one(&self.inner.pool);
        let OpeningRead(opening) = read.await?;
        Ok(opening)
    }

    /// As on SQLite, in one statement: the key's opening, or `new` created and routed when
    /// the key has no route.
    pub(crate) async fn opening_or_create(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<Opening, StoreError> {
        let (shared_key, new) = (Arc::<str>::from(key), Arc::new(new.clone()));
        let opening = self
            .write_one(move |pool| {
                let (key, new) = (Arc::clone(&shared_key), Arc::clone(&new));
                Box::pin(async move {
                    let sql = sqlx::AssertSqlSafe(opening_or_create_sql());
                    let query = bind_new(sqlx::query_as(sql), &new, now_ms()).bind(&*key);
                    let read: OpeningRead = query.fetch_one(&pool).await?;
                    Ok(read.0)
                })
            })
            .await?;
        match opening.routed {
            Some(_) => Ok(opening),
            // Another writer routed the key since this statement's snapshot: read as it is.
            None => self.opening(key).await,
        }
    }

    pub(crate) async fn routed_session(&self, key: &str) -> Result<Option<Session>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(routed_sql()))
            .bind(key)
            .fetch_optional(&self.inner.pool)
            .await?)
    }

    /// As on SQLite; two replicas creating the route of one key at once end with one session:
    /// the one whose route insert loses writes nothing and returns the winner's.
    pub(crate) async fn route_or_create(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<(Session, bool), StoreError> {
        if let Some(session) = self.routed_session(key).await? {
            return Ok((session, false));
        }
        self.create_routed(key, new).await
    }

    /// As on SQLite: the insert itself finds a route made meanwhile.
    pub(crate) async fn create_routed(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<(Session, bool), StoreError> {
        let (key, new) = (Arc::<str>::from(key), Arc::new(new.clone()));
        self.write_one(move |pool| {
            let (key, new) = (Arc::clone(&key), Arc::clone(&new));
            Box::pin(async move {
                loop {
                    let sql = sqlx::AssertSqlSafe(new_session_sql(true));
                    let created: Option<Session> = bind_new(sqlx::query_as(sql), &new, now_ms())
                        .bind(&*key)
                        .fetch_optional(&pool)
                        .await?;
                    if let Some(session) = created {
                        return Ok((session, true));
                    }
                    let winner: Option<Session> = sqlx::query_as(sqlx::AssertSqlSafe(routed_sql()))
                        .bind(&*key)
                        .fetch_optional(&pool)
                        .await?;
                    // None only when the winner's session was deleted since, or the prompt
                    // vanished under this one: try again.
                    if let Some(winner) = winner {
                        return Ok((winner, false));
                    }
                }
            })
        })
        .await
    }

    pub(crate) async fn reroute(
        &self,
        key: &str,
        new: &NewSession,
        end_reason: &str,
    ) -> Result<Session, StoreError> {
        let (key, new) = (Arc::<str>::from(key), Arc::new(new.clone()));
        let end_reason = Arc::<str>::from(end_reason);
        self.write(move |tx| {
            let (key, new, end_reason) =
                (Arc::clone(&key), Arc::clone(&new), Arc::clone(&end_reason));
            Box::pin(async move {
                // Locked, so a replica rerouting the same key at once ends this one's session.
                let old: Option<String> = sqlx::query_scalar(
                    "SELECT session_id FROM routes WHERE session_key = $1 FOR UPDATE",
                )
                .bind(&*key)
                .fetch_optional(&mut **tx)
                .await?;
                if let Some(old) = old {
                    end_in(tx, &old, &end_reason).await?;
                }
                let session = insert_session(tx, &new).await?;
                upsert_route(tx, &key, &session.id).await?;
                Ok(session)
            })
        })
        .await
    }

    /// As [`crate::open::Lite::compress_session`], in one transaction.
    pub(crate) async fn compress_session(
        &self,
        parent_id: &str,
        messages: Vec<NewMessage>,
        context_tokens: i64,
    ) -> Result<Session, StoreError> {
        let count = messages.len() as u64;
        let (parent_id, messages) = (Arc::<str>::from(parent_id), Arc::new(messages));
        let child = self
            .write(move |tx| {
                let (parent_id, messages) = (Arc::clone(&parent_id), Arc::clone(&messages));
                Box::pin(async move { compress(tx, &parent_id, &messages, context_tokens).await })
            })
            .await??;
        crate::index::schedule_indexing(self, count);
        Ok(child)
    }

    pub(crate) async fn chain(&self, id: &str) -> Result<Vec<Session>, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let chain = chain_of(&mut conn, id).await?;
        if chain.is_empty() {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(chain)
    }

    pub(crate) async fn newest_in_chain(&self, id: &str) -> Result<Session, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        newest_of(&mut conn, id).await?.ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }
}

/// The body of [`Pg::compress_session`]: its outer error rolls the transaction back, its inner
/// one (a refused compression) has written nothing.
async fn compress(
    conn: &mut PgConnection,
    parent_id: &str,
    messages: &[NewMessage],
    context_tokens: i64,
) -> Result<Result<Session, StoreError>, sqlx::Error> {
    // The parent's row is locked until commit: a second compression of it waits here, then
    // finds it ended.
    let parent: Option<Session> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = $1 FOR UPDATE"
    )))
    .bind(parent_id)
    .fetch_optional(&mut *conn)
    .await?;
    let Some(parent) = parent else {
        return Ok(Err(StoreError::SessionNotFound(parent_id.to_owned())));
    };
    if parent.ended_at.is_some() {
        let newest = newest_of(conn, &parent.id).await?.map(|s| s.id).filter(|n| *n != parent.id);
        return Ok(Err(StoreError::AlreadyContinued { id: parent.id, newest }));
    }
    let title = match &parent.title {
        Some(title) => Some(next_title(conn, title).await?),
        None => None,
    };
    let now = now_ms();
    let child: Session = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sessions (id, source, session_key, chat_id, thread_id, user_id, chat_type,
                               title, model, system_prompt_hash, parent_session_id, started_at,
                               updated_at, context_tokens)
         SELECT $1, source, session_key, chat_id, thread_id, user_id, chat_type, $2, model,
                system_prompt_hash, id, $3, $3, $4
         FROM sessions WHERE id = $5
         RETURNING {SESSION_COLUMNS}"
    )))
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(&title)
    .bind(now)
    .bind(context_tokens.max(0))
    .bind(&parent.id)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE sessions SET ended_at = $1, end_reason = $2, updated_at = $1 WHERE id = $3",
    )
    .bind(now)
    .bind(COMPRESSED)
    .bind(&parent.id)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE routes SET session_id = $1, updated_at = $2 WHERE session_id = $3")
        .bind(&child.id)
        .bind(now)
        .bind(&parent.id)
        .execute(&mut *conn)
        .await?;
    if !messages.is_empty() {
        let append = Append {
            session_id: child.id.clone(),
            messages: messages.to_vec(),
            dedupe: None,
            usage: TokenUsage::default(),
            outbox: None,
        };
        // The child was inserted above in this transaction: it cannot be missing.
        let batch = Batch::of_appends(vec![&append]);
        let mut stored = write_once(&mut *conn, &batch, &Token::new()).await?.appended;
        if !matches!(stored.pop(), Some(Ok(Appended::Stored(_)))) {
            return Err(sqlx::Error::RowNotFound);
        }
    }
    Ok(read_session(conn, &child.id).await?.ok_or(StoreError::SessionNotFound(child.id)))
}

/// The title of a child of a session titled `title`: the chain's name numbered with the
/// smallest free number after the parent's.
async fn next_title(conn: &mut PgConnection, title: &str) -> Result<String, sqlx::Error> {
    let (name, number) = split_number(title);
    let mut k = number.saturating_add(1);
    loop {
        let candidate = format!("{name} #{k}");
        let taken: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sessions WHERE title = $1)")
                .bind(&candidate)
                .fetch_one(&mut *conn)
                .await?;
        if !taken {
            return Ok(candidate);
        }
        k = k.saturating_add(1);
    }
}

async fn upsert_route(
    conn: &mut PgConnection,
    key: &str,
    session_id: &str,
) -> Result<(), sqlx::Error> {
    sqlx::query(
        "INSERT INTO routes (session_key, session_id, updated_at) VALUES ($1, $2, $3)
         ON CONFLICT (session_key) DO UPDATE
         SET session_id = EXCLUDED.session_id, updated_at = EXCLUDED.updated_at",
    )
    .bind(key)
    .bind(session_id)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

/// The chain of `id` on `conn`, oldest first; empty when there is no such session.
pub(crate) async fn chain_of(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Vec<Session>, sqlx::Error> {
    // Ancestors get negative depths, descendants positive ones; `id` itself is 0 in both.
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH RECURSIVE
           up (id, parent, depth) AS (
             SELECT id, parent_session_id, 0::bigint FROM sessions WHERE id = $1
             UNION ALL
             SELECT s.id, s.parent_session_id, up.depth - 1 FROM sessions s
             JOIN up ON s.id = up.parent WHERE up.depth > -$2),
           down (id, depth) AS (
             SELECT id, 0::bigint FROM sessions WHERE id = $1
             UNION ALL
             SELECT (SELECT c.id FROM sessions c WHERE c.parent_session_id = down.id
                     ORDER BY c.started_at DESC, c.id DESC LIMIT 1), down.depth + 1
             FROM down WHERE down.id IS NOT NULL AND down.depth < $2),
           chain (id, depth) AS (
             SELECT id, depth FROM up UNION SELECT id, depth FROM down WHERE id IS NOT NULL)
         SELECT {SESSION_COLUMNS} FROM sessions JOIN chain USING (id) ORDER BY chain.depth"
    )))
    .bind(id)
    .bind(MAX_DEPTH)
    .fetch_all(&mut *conn)
    .await
}

/// The newest session of the chain of `id` on `conn`, if there is such a session.
pub(crate) async fn newest_of(
    conn: &mut PgConnection,
    id: &str,
) -> Result<Option<Session>, sqlx::Error> {
    Ok(chain_of(conn, id).await?.pop())
}

/// Takes sessions about to be deleted out of their chains inside the caller's transaction: a
/// child of one of `doomed` (`(id, parent)` pairs) that stays is linked to its nearest ancestor
/// that stays.
pub(crate) async fn relink_children(
    conn: &mut PgConnection,
    doomed: &[(String, Option<String>)],
) -> Result<(), sqlx::Error> {
    if doomed.is_empty() {
        return Ok(());
    }
    let parents: HashMap<&str, Option<&str>> =
        doomed.iter().map(|(id, parent)| (id.as_str(), parent.as_deref())).collect();
    let ids: Vec<&str> = parents.keys().copied().collect();
    let children: Vec<(String, String)> = sqlx::query_as(
        "SELECT id, parent_session_id FROM sessions WHERE parent_session_id = ANY($1)",
    )
    .bind(&ids)
    .fetch_all(&mut *conn)
    .await?;
    let (mut kept, mut ancestors): (Vec<&str>, Vec<Option<&str>>) = (Vec::new(), Vec::new());
    for (child, parent) in &children {
        if !parents.contains_key(child.as_str()) {
            kept.push(child);
            ancestors.push(nearest_kept(&parents, parent));
        }
    }
    sqlx::query(
        "UPDATE sessions s SET parent_session_id = d.parent
         FROM unnest($1::text[], $2::text[]) AS d (id, parent) WHERE s.id = d.id",
    )
    .bind(&kept)
    .bind(&ancestors)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

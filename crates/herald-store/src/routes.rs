//! Routes: which session a chat's key currently talks to.

use std::sync::Arc;

use sqlx::SqliteConnection;

use crate::error::StoreError;
use crate::open::Lite;
use crate::sessions::{
    NewSession, SESSION_COLUMNS, Session, end_session, insert_session, read_session,
};
use crate::time::now_ms;
use crate::write::write_tx;

/// What a session's worker needs as it starts, read at once: its key's routed session, and
/// whether messages wait in the key's queue.
#[derive(Debug, Clone, PartialEq)]
pub struct Opening {
    /// `None` while the key has no route.
    pub routed: Option<Routed>,
    pub queued: bool,
}

/// The session a key is routed to, its system prompt, and whether its last message waits for
/// an answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    pub session: Session,
    /// Empty when the prompt is missing (a store edited by hand).
    pub system_prompt: String,
    /// The session is open and ends with a person's message nobody answered.
    pub unanswered: bool,
    /// The session was created by this read ([`Store::opening_or_create`]).
    ///
    /// [`Store::opening_or_create`]: crate::Store::opening_or_create
    pub created: bool,
}

#[derive(sqlx::FromRow)]
pub(crate) struct OpeningRow {
    #[sqlx(flatten)]
    session: Session,
    prompt: Option<String>,
    unanswered: bool,
    created: bool,
}

impl From<OpeningRow> for Routed {
    fn from(row: OpeningRow) -> Routed {
        Routed {
            session: row.session,
            system_prompt: row.prompt.unwrap_or_default(),
            unanswered: row.unanswered,
            created: row.created,
        }
    }
}

/// An [`Opening`] read from a row with a `queued` column and, when the key is routed, the
/// columns of an [`OpeningRow`] (all NULL when not).
pub(crate) struct OpeningRead(pub(crate) Opening);

impl<'r, R> sqlx::FromRow<'r, R> for OpeningRead
where
    R: sqlx::Row,
    OpeningRow: sqlx::FromRow<'r, R>,
    bool: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    &'static str: sqlx::ColumnIndex<R>,
{
    fn from_row(row: &'r R) -> Result<Self, sqlx::Error> {
        let queued: bool = row.try_get("queued")?;
        let id: Option<String> = row.try_get("id")?;
        let routed = match id {
            Some(_) => Some(Routed::from(OpeningRow::from_row(row)?)),
            None => None,
        };
        Ok(OpeningRead(Opening { routed, queued }))
    }
}

/// The statement of `opening` on either backend: `key` is the key's placeholder, `session`
/// the messages' column naming their session, `sessions_key` the sessions' column it refers
/// to, and `no` the backend's false.
pub(crate) fn opening_sql(key: &str, session: &str, sessions_key: &str, no: &str) -> String {
    opening_of(key, &routed_sql(key, session, sessions_key, no))
}

/// The columns of an [`OpeningRow`] for the session `key` is routed to (see [`opening_sql`]);
/// no row when it has no route.
pub(crate) fn routed_sql(key: &str, session: &str, sessions_key: &str, no: &str) -> String {
    format!(
        "SELECT {SESSION_COLUMNS},
                (SELECT prompt FROM system_prompts WHERE hash = sessions.system_prompt_hash)
                    AS prompt,
                ended_at IS NULL
                    AND coalesce((SELECT role FROM messages WHERE {session} = sessions.{sessions_key}
                                  ORDER BY id DESC LIMIT 1) = 'user', {no}) AS unanswered,
                {no} AS created
         FROM sessions WHERE id = (SELECT session_id FROM routes WHERE session_key = {key})"
    )
}

/// An [`OpeningRead`]'s row: whether `key`'s queue holds messages, and the row of `routed`
/// (an [`OpeningRow`]'s columns) if it has one.
pub(crate) fn opening_of(key: &str, routed: &str) -> String {
    format!(
        "SELECT q.queued, s.* FROM
             (SELECT EXISTS (SELECT 1 FROM inbound_queue WHERE session_key = {key}) AS queued) q
         LEFT JOIN ({routed}) s ON true"
    )
}

impl Lite {
    /// The routed session of `key` with its prompt and whether it was left unanswered, and
    /// whether messages wait in the key's queue, in one read.
    pub async fn opening(&self, key: &str) -> Result<Opening, StoreError> {
        let sql = opening_sql("?1", "session_no", "no", "0");
        let read = sqlx::query_as(sqlx::AssertSqlSafe(sql)).bind(key).fetch_one(&self.inner.pool);
        let OpeningRead(mut opening) = read.await?;
        opening.routed = opening.routed.map(|r| Routed { session: self.noted(r.session), ..r });
        Ok(opening)
    }

    /// [`Lite::opening`], creating and routing `new` when the key has no route.
    pub async fn opening_or_create(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<Opening, StoreError> {
        let opening = self.opening(key).await?;
        if opening.routed.is_some() {
            return Ok(opening);
        }
        match self.create_routed(key, new).await? {
            (session, true) => {
                let system_prompt = new.system_prompt.clone();
                let routed = Routed { session, system_prompt, unanswered: false, created: true };
                Ok(Opening { routed: Some(routed), ..opening })
            }
            // Routed meanwhile: read as it is.
            (_, false) => self.opening(key).await,
        }
    }

    /// The session a key is routed to, if any.
    pub async fn routed_session(&self, key: &str) -> Result<Option<Session>, StoreError> {
        let id: Option<String> =
            sqlx::query_scalar("SELECT session_id FROM routes WHERE session_key = ?")
                .bind(key)
                .fetch_optional(&self.inner.pool)
                .await?;
        match id {
            Some(id) => self.session(&id).await,
            None => Ok(None),
        }
    }

    /// The session a key is routed to, creating and routing `new` when there is none.
    /// Returns the session and whether it was created.
    pub async fn route_or_create(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<(Session, bool), StoreError> {
        if let Some(session) = self.routed_session(key).await? {
            return Ok((session, false));
        }
        self.create_routed(key, new).await
    }

    /// [`Lite::route_or_create`] for a caller that has just found no route: the key is looked
    /// up only under the write lock.
    pub async fn create_routed(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<(Session, bool), StoreError> {
        let (key, new) = (Arc::<str>::from(key), Arc::new(new.clone()));
        self.grouped(move |conn| {
            let (key, new) = (Arc::clone(&key), Arc::clone(&new));
            Box::pin(async move {
                // Checked again under the write lock: another process may have routed it.
                let current: Option<String> =
                    sqlx::query_scalar("SELECT session_id FROM routes WHERE session_key = ?")
                        .bind(&*key)
                        .fetch_optional(&mut *conn)
                        .await?;
                if let Some(id) = current {
                    let session = read_session(conn, &id)
                        .await?
                        .ok_or_else(|| StoreError::SessionNotFound(id.clone()))?;
                    return Ok((session, false));
                }
                let session = insert_session(conn, &new).await?;
                upsert_route(conn, &key, &session.id).await?;
                Ok((session, true))
            })
        })
        .await
        .map(|(session, created)| (self.noted(session), created))
    }

    /// Starts a fresh session for a key: ends the one it was routed to with `end_reason`,
    /// creates `new` and moves the route, all in one transaction.
    pub async fn reroute(
        &self,
        key: &str,
        new: &NewSession,
        end_reason: &str,
    ) -> Result<Session, StoreError> {
        write_tx!(self, |conn| async {
            let old: Option<String> =
                sqlx::query_scalar("SELECT session_id FROM routes WHERE session_key = ?")
                    .bind(key)
                    .fetch_optional(&mut *conn)
                    .await?;
            if let Some(old) = old {
                end_session(conn, &old, end_reason).await?;
            }
            let session = insert_session(conn, new).await?;
            upsert_route(conn, key, &session.id).await?;
            Ok::<_, StoreError>(session)
        })
        .map(|session| self.noted(session))
    }
}

async fn upsert_route(
    conn: &mut SqliteConnection,
    key: &str,
    session_id: &str,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO routes (session_key, session_id, updated_at) VALUES (?1, ?2, ?3)
         ON CONFLICT (session_key) DO UPDATE SET session_id = ?2, updated_at = ?3",
    )
    .bind(key)
    .bind(session_id)
    .bind(now_ms())
    .execute(&mut *conn)
    .await?;
    Ok(())
}

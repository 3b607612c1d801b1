//! Sessions: creation with a deduplicated system prompt, lookup, listing, renaming,
//! ending, deleting and pruning (chains of sessions are in `lineage.rs`).

use std::time::Duration;

use herald_core::Platform;
use serde::Serialize;
use sha2::{Digest, Sha256};
use sqlx::SqliteConnection;

use crate::error::{StoreError, is_unique_violation};
use crate::open::Lite;
use crate::time::now_ms;
use crate::write::write_tx;

pub(crate) const SESSION_COLUMNS: &str = "id, source, session_key, chat_id, thread_id, user_id, chat_type, \
    title, model, system_prompt_hash, parent_session_id, started_at, updated_at, ended_at, \
    end_reason, message_count, tool_call_count, input_tokens, output_tokens, context_tokens, no";

/// A conversation: one chat window, or one run of `herald chat`.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct Session {
    /// UUID v7, so ids sort by creation time.
    pub id: String,
    /// Where the conversation happens.
    #[sqlx(try_from = "String")]
    pub source: Platform,
    /// The router's key for the chat (`telegram:dm:42`).
    pub session_key: Option<String>,
    /// The platform's chat id.
    pub chat_id: Option<String>,
    /// The platform's thread or topic id.
    pub thread_id: Option<String>,
    /// The platform's user id of the person chatting.
    pub user_id: Option<String>,
    /// dm, group, channel or thread.
    pub chat_type: Option<String>,
    /// A unique, human-chosen name.
    pub title: Option<String>,
    /// The model the session talks to.
    pub model: Option<String>,
    /// Key of the stored system prompt.
    pub system_prompt_hash: Option<String>,
    /// The session this one continues (context compression keeps the old one).
    pub parent_session_id: Option<String>,
    /// Unix milliseconds.
    pub started_at: i64,
    /// Unix milliseconds of the last write.
    pub updated_at: i64,
    /// Unix milliseconds, once ended.
    pub ended_at: Option<i64>,
    /// Why it ended (`new`, `cli exit`, ...).
    pub end_reason: Option<String>,
    /// Messages stored.
    pub message_count: i64,
    /// Tool calls made by the assistant.
    pub tool_call_count: i64,
    /// Prompt tokens reported by the model.
    pub input_tokens: i64,
    /// Completion tokens reported by the model.
    pub output_tokens: i64,
    /// Tokens of the last model call, prompt plus completion: how full the context is now.
    pub context_tokens: i64,
    /// Its number in this file, which its messages are stored under.
    #[serde(skip)]
    pub(crate) no: i64,
}

/// What a new session starts with.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Where the conversation happens.
    pub source: Platform,
    /// The router's key for the chat.
    pub session_key: Option<String>,
    /// The platform's chat id.
    pub chat_id: Option<String>,
    /// The platform's thread or topic id.
    pub thread_id: Option<String>,
    /// The platform's user id.
    pub user_id: Option<String>,
    /// dm, group, channel or thread.
    pub chat_type: Option<String>,
    /// The model.
    pub model: Option<String>,
    /// The assembled system prompt, stored once per distinct text.
    pub system_prompt: String,
    /// The session this one continues.
    pub parent_session_id: Option<String>,
}

impl NewSession {
    /// A session from `source` with this system prompt and nothing else set.
    pub fn new(source: Platform, system_prompt: impl Into<String>) -> Self {
        NewSession {
            source,
            session_key: None,
            chat_id: None,
            thread_id: None,
            user_id: None,
            chat_type: None,
            model: None,
            system_prompt: system_prompt.into(),
            parent_session_id: None,
        }
    }
}

/// Which sessions to list, newest first.
#[derive(Debug, Clone, Default)]
pub struct SessionFilter {
    /// Only this source.
    pub source: Option<Platform>,
    /// Only this platform user.
    pub user_id: Option<String>,
    /// At most this many (all when unset).
    pub limit: Option<u32>,
}

impl Lite {
    /// Creates a session and stores its system prompt (in the next group commit).
    pub async fn create_session(&self, new: &NewSession) -> Result<Session, StoreError> {
        self.create(new.clone()).await.map(|session| self.noted(session))
    }

    /// The session with exactly this id.
    pub async fn session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        let found: Option<Session> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
        )))
        .bind(id)
        .fetch_optional(&self.inner.pool)
        .await?;
        Ok(found.map(|session| self.noted(session)))
    }

    /// Finds a session by exact id, exact title, or a unique id prefix (which may end in the
    /// `…` of a short id).
    ///
    /// A plain title (one without a trailing ` #N`) names its whole chain: when its session has
    /// ended, it reaches the chain's newest session, where the conversation went on after
    /// compressions. A numbered title (`trip #2`, given to a child by compression) and an id
    /// reach exactly their session.
    pub async fn resolve_session(&self, reference: &str) -> Result<Session, StoreError> {
        let reference = trim_reference(reference);
        if reference.is_empty() {
            return Err(StoreError::SessionNotFound(reference.to_owned()));
        }
        let found: Vec<Session> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?1 OR title = ?1
             UNION SELECT {SESSION_COLUMNS} FROM sessions
                   WHERE substr(id, 1, length(?1)) = ?1 AND length(?1) >= 4
             LIMIT 3"
        )))
        .bind(reference)
        .fetch_all(&self.inner.pool)
        .await?;
        match pick(found, reference)? {
            Picked::This(session) => Ok(self.noted(*session)),
            Picked::NewestOf(id) => self.newest_in_chain(&id).await,
        }
    }

    /// The system prompt stored with a session, byte for byte.
    pub async fn system_prompt(&self, session_id: &str) -> Result<Option<String>, StoreError> {
        Ok(sqlx::query_scalar(
            "SELECT p.prompt FROM sessions s JOIN system_prompts p ON p.hash = s.system_prompt_hash
             WHERE s.id = ?",
        )
        .bind(session_id)
        .fetch_optional(&self.inner.pool)
        .await?)
    }

    /// Sessions, newest first.
    pub async fn list_sessions(&self, filter: &SessionFilter) -> Result<Vec<Session>, StoreError> {
        Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {SESSION_COLUMNS} FROM sessions
             WHERE (?1 IS NULL OR source = ?1) AND (?2 IS NULL OR user_id = ?2)
             ORDER BY started_at DESC, id DESC LIMIT ?3"
        )))
        .bind(filter.source.map(Platform::as_str))
        .bind(&filter.user_id)
        .bind(filter.limit.map_or(-1, i64::from))
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Ends a session (idempotent: an ended session keeps its first end).
    pub async fn end_session(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        write_tx!(self, |conn| end_session(conn, id, reason))
    }

    /// Opens an ended session again (resuming it), forgetting how it ended. A session another
    /// continues is refused with [`StoreError::AlreadyContinued`]: opening it again would give
    /// its chat two current sessions.
    pub async fn reopen_session(&self, id: &str) -> Result<(), StoreError> {
        write_tx!(self, |conn| async {
            let found = sqlx::query(
                "UPDATE sessions SET ended_at = NULL, end_reason = NULL, updated_at = ?1
                 WHERE id = ?2
                   AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = ?2)",
            )
            .bind(now_ms())
            .bind(id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
            if found > 0 {
                return Ok(());
            }
            match crate::lineage::newest_of(conn, id).await? {
                None => Err(StoreError::SessionNotFound(id.to_owned())),
                Some(newest) => Err(StoreError::AlreadyContinued {
                    id: id.to_owned(),
                    newest: Some(newest.id).filter(|n| n != id),
                }),
            }
        })
    }

    /// Sets a session's title, or clears it when `title` is empty. Titles are unique.
    pub async fn rename_session(&self, id: &str, title: &str) -> Result<(), StoreError> {
        let title = title.trim();
        let value = (!title.is_empty()).then_some(title);
        let result = write_tx!(self, |conn| async {
            let found = sqlx::query("UPDATE sessions SET title = ?, updated_at = ? WHERE id = ?")
                .bind(value)
                .bind(now_ms())
                .bind(id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok::<_, StoreError>(found)
        });
        match result {
            Ok(0) => Err(StoreError::SessionNotFound(id.to_owned())),
            Ok(_) => Ok(()),
            Err(StoreError::Sqlx(e)) if is_unique_violation(&e) => {
                let holder: String = sqlx::query_scalar("SELECT id FROM sessions WHERE title = ?")
                    .bind(title)
                    .fetch_one(&self.inner.pool)
                    .await?;
                Err(StoreError::TitleTaken { title: title.to_owned(), session_id: holder })
            }
            Err(e) => Err(e),
        }
    }

    /// Deletes a session and its messages; a session that continued it is linked to the one
    /// it continued instead, so the rest of its chain stays linked. Returns how many messages
    /// went with it.
    pub async fn delete_session(&self, id: &str) -> Result<i64, StoreError> {
        let deleted = write_tx!(self, |conn| async {
            let found: Option<(i64, Option<String>)> = sqlx::query_as(
                "SELECT message_count, parent_session_id FROM sessions WHERE id = ?",
            )
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?;
            let Some((messages, parent)) = found else { return Ok(None) };
            crate::lineage::relink_children(conn, &[(id.to_owned(), parent)]).await?;
            sqlx::query("DELETE FROM sessions WHERE id = ?").bind(id).execute(&mut *conn).await?;
            forget_unused_prompts(conn).await?;
            Ok::<_, StoreError>(Some(messages))
        })?;
        self.inner.numbers.forget(id);
        deleted.ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }

    /// Deletes ended sessions that ended more than `older_than` ago (optionally from one
    /// source) and returns how many. Sessions still open or routed to are kept, and a session
    /// that continued a pruned one is linked to the nearest one it continues that is kept.
    pub async fn prune_sessions(
        &self,
        older_than: Duration,
        source: Option<Platform>,
    ) -> Result<u64, StoreError> {
        let age = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let cutoff = now_ms().saturating_sub(age);
        const PRUNED: &str =
            "ended_at IS NOT NULL AND ended_at < ?1 AND (?2 IS NULL OR source = ?2)
             AND id NOT IN (SELECT session_id FROM routes)";
        write_tx!(self, |conn| async {
            let doomed: Vec<(String, Option<String>)> = sqlx::query_as(sqlx::AssertSqlSafe(
                format!("SELECT id, parent_session_id FROM sessions WHERE {PRUNED}"),
            ))
            .bind(cutoff)
            .bind(source.map(Platform::as_str))
            .fetch_all(&mut *conn)
            .await?;
            crate::lineage::relink_children(conn, &doomed).await?;
            let pruned =
                sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM sessions WHERE {PRUNED}")))
                    .bind(cutoff)
                    .bind(source.map(Platform::as_str))
                    .execute(&mut *conn)
                    .await?
                    .rows_affected();
            forget_unused_prompts(conn).await?;
            Ok::<_, StoreError>(pruned)
        })
    }
}

/// A session reference as typed, less surrounding space and the `…` a short id is shown with.
pub(crate) fn trim_reference(reference: &str) -> &str {
    let reference = reference.trim();
    match reference.strip_suffix('…') {
        Some(id) if !id.is_empty() && id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') => id,
        _ => reference,
    }
}

/// What a reference names, of the sessions (at most three) whose id or title is it or whose id
/// starts with it.
pub(crate) enum Picked {
    /// Exactly this session.
    This(Box<Session>),
    /// The newest session of this one's chain: a plain title of a session that has ended.
    NewestOf(String),
}

/// The choice of [`Lite::resolve_session`] among the sessions a reference matched.
pub(crate) fn pick(mut found: Vec<Session>, reference: &str) -> Result<Picked, StoreError> {
    if let Some(exact) = found.iter().position(|s| s.id == reference) {
        return Ok(Picked::This(Box::new(found.swap_remove(exact))));
    }
    if let Some(titled) = found.iter().position(|s| s.title.as_deref() == Some(reference)) {
        let titled = found.swap_remove(titled);
        let numbered = crate::lineage::split_number(reference).0 != reference;
        if numbered || titled.ended_at.is_none() {
            return Ok(Picked::This(Box::new(titled)));
        }
        return Ok(Picked::NewestOf(titled.id));
    }
    match found.len() {
        0 => Err(StoreError::SessionNotFound(reference.to_owned())),
        1 => Ok(Picked::This(Box::new(found.remove(0)))),
        count => Err(StoreError::AmbiguousSession { reference: reference.to_owned(), count }),
    }
}

pub(crate) fn prompt_hash(prompt: &str) -> String {
    Sha256::digest(prompt.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

/// Most sessions one INSERT names: 13 parameters each stays under SQLite's 32766.
const SESSIONS_PER_INSERT: usize = 2000;

/// Inserts new sessions and their prompts inside the caller's transaction with three statements
/// whatever their number (the group commit's way of creating the sessions of many new chats at
/// once): the prompts, the largest session number, the sessions. Fails as a whole (a parent
/// session that is gone), leaving the caller to create them one by one.
pub(crate) async fn insert_sessions(
    conn: &mut SqliteConnection,
    news: &[&NewSession],
) -> Result<Vec<Session>, StoreError> {
    let now = now_ms();
    let hashes: Vec<String> = news.iter().map(|new| prompt_hash(&new.system_prompt)).collect();
    let mut prompts: Vec<(&str, &str)> =
        hashes.iter().zip(news).map(|(h, new)| (h.as_str(), new.system_prompt.as_str())).collect();
    prompts.sort_unstable_by_key(|(hash, _)| *hash);
    prompts.dedup_by_key(|(hash, _)| *hash);
    for chunk in prompts.chunks(SESSIONS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO system_prompts (hash, prompt, created_at) VALUES {} ON CONFLICT DO NOTHING",
            crate::appends::placeholders(chunk.len(), 3)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (hash, prompt) in chunk {
            query = query.bind(*hash).bind(*prompt).bind(now);
        }
        query.execute(&mut *conn).await?;
    }
    let last: i64 = sqlx::query_scalar("SELECT coalesce(max(no), 0) FROM sessions")
        .fetch_one(&mut *conn)
        .await?;
    let sessions: Vec<Session> = news
        .iter()
        .zip(hashes)
        .zip(last + 1..)
        .map(|((new, hash), no)| Session {
            id: uuid::Uuid::now_v7().to_string(),
            source: new.source,
            session_key: new.session_key.clone(),
            chat_id: new.chat_id.clone(),
            thread_id: new.thread_id.clone(),
            user_id: new.user_id.clone(),
            chat_type: new.chat_type.clone(),
            title: None,
            model: new.model.clone(),
            system_prompt_hash: Some(hash),
            parent_session_id: new.parent_session_id.clone(),
            started_at: now,
            updated_at: now,
            ended_at: None,
            end_reason: None,
            message_count: 0,
            tool_call_count: 0,
            input_tokens: 0,
            output_tokens: 0,
            context_tokens: 0,
            no,
        })
        .collect();
    for chunk in sessions.chunks(SESSIONS_PER_INSERT) {
        let sql = format!(
            "INSERT INTO sessions (no, id, source, session_key, chat_id, thread_id, user_id,
                                   chat_type, model, system_prompt_hash, parent_session_id,
                                   started_at, updated_at)
             VALUES {}",
            crate::appends::placeholders(chunk.len(), 13)
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for s in chunk {
            query = query
                .bind(s.no)
                .bind(&s.id)
                .bind(s.source.as_str())
                .bind(&s.session_key)
                .bind(&s.chat_id)
                .bind(&s.thread_id)
                .bind(&s.user_id)
                .bind(&s.chat_type)
                .bind(&s.model)
                .bind(&s.system_prompt_hash)
                .bind(&s.parent_session_id)
                .bind(s.started_at)
                .bind(s.updated_at);
        }
        query.execute(&mut *conn).await?;
    }
    Ok(sessions)
}

/// Inserts a session and its prompt inside the caller's transaction.
pub(crate) async fn insert_session(
    conn: &mut SqliteConnection,
    new: &NewSession,
) -> Result<Session, StoreError> {
    let now = now_ms();
    let hash = prompt_hash(&new.system_prompt);
    sqlx::query(
        "INSERT INTO system_prompts (hash, prompt, created_at) VALUES (?, ?, ?)
         ON CONFLICT DO NOTHING",
    )
    .bind(&hash)
    .bind(&new.system_prompt)
    .bind(now)
    .execute(&mut *conn)
    .await?;
    // Numbers go up from the largest in use; one freed by a delete may be given again, which
    // no append can mistake for the old session (see `appends::counter_statements`).
    let session = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sessions (no, id, source, session_key, chat_id, thread_id, user_id, chat_type,
                               model, system_prompt_hash, parent_session_id, started_at, updated_at)
         VALUES ((SELECT coalesce(max(no), 0) + 1 FROM sessions), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?,
                 ?, ?)
         RETURNING {SESSION_COLUMNS}"
    )))
    .bind(uuid::Uuid::now_v7().to_string())
    .bind(new.source.as_str())
    .bind(&new.session_key)
    .bind(&new.chat_id)
    .bind(&new.thread_id)
    .bind(&new.user_id)
    .bind(&new.chat_type)
    .bind(&new.model)
    .bind(&hash)
    .bind(&new.parent_session_id)
    .bind(now)
    .bind(now)
    .fetch_one(&mut *conn)
    .await?;
    Ok(session)
}

/// The session with exactly this id, read on `conn`.
pub(crate) async fn read_session(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Option<Session>, StoreError> {
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT {SESSION_COLUMNS} FROM sessions WHERE id = ?"
    )))
    .bind(id)
    .fetch_optional(&mut *conn)
    .await?)
}

/// Ends a session inside the caller's transaction, keeping an earlier end if there is one.
pub(crate) async fn end_session(
    conn: &mut SqliteConnection,
    id: &str,
    reason: &str,
) -> Result<(), StoreError> {
    let now = now_ms();
    let found = sqlx::query(
        "UPDATE sessions SET ended_at = coalesce(ended_at, ?1),
                end_reason = coalesce(end_reason, ?2), updated_at = ?1 WHERE id = ?3",
    )
    .bind(now)
    .bind(reason)
    .bind(id)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if found == 0 {
        return Err(StoreError::SessionNotFound(id.to_owned()));
    }
    Ok(())
}

/// System prompts no session refers to any more.
async fn forget_unused_prompts(conn: &mut SqliteConnection) -> Result<(), StoreError> {
    sqlx::query(
        "DELETE FROM system_prompts
         WHERE hash NOT IN (SELECT system_prompt_hash FROM sessions
                            WHERE system_prompt_hash IS NOT NULL)",
    )
    .execute(&mut *conn)
    .await?;
    Ok(())
}

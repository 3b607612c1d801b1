//! Lineage: context compression continues a session in a child that points back with
//! `parent_session_id`, and the sessions so linked form a chain, oldest first.
//!
//! A compression is one transaction (child created, parent ended, routes moved, the summary
//! and tail stored), so a kill leaves the chat with either the parent or the child current,
//! never both and never neither; and a parent that has ended is refused, so two compressions
//! of one session cannot split its chain. A session has at most one child in practice; the
//! walks below take the newest should there be more.

use sqlx::SqliteConnection;

use crate::error::StoreError;
use crate::messages::{Append, Appended, NewMessage, TokenUsage};
use crate::open::Lite;
use crate::sessions::{SESSION_COLUMNS, Session, read_session};
use crate::time::now_ms;
use crate::write::write_tx;

/// Longest chain walked: far beyond any real one, it only stops a corrupt loop of parents.
pub(crate) const MAX_DEPTH: i64 = 100_000;

/// What a compression ends its parent with.
pub(crate) const COMPRESSED: &str = "compressed";

impl Lite {
    /// Continues the open session `parent_id` in a new one, in one transaction: the child
    /// takes the parent's source, key, chat, thread, user, chat type, model and stored system
    /// prompt, the next numbered form of its title (`NAME #2`, `NAME #3`, ...), and
    /// `context_tokens`; the parent ends with reason `compressed`; every route to the parent
    /// moves to the child; and `messages` (the summary, then the tail carried verbatim) are
    /// stored in the child like any others. Returns the child.
    ///
    /// A parent that has ended is refused with [`StoreError::AlreadyContinued`].
    pub async fn compress_session(
        &self,
        parent_id: &str,
        messages: Vec<NewMessage>,
        context_tokens: i64,
    ) -> Result<Session, StoreError> {
        let count = messages.len() as u64;
        let mut append = Append {
            session_id: String::new(),
            messages,
            dedupe: None,
            usage: TokenUsage::default(),
            outbox: None,
        };
        let child = write_tx!(self, |conn| compress(conn, parent_id, &mut append, context_tokens))?;
        // The child's messages are new ids of a new session: no cached history holds them, and
        // the parent's history is left as it was.
        self.schedule_indexing(count);
        Ok(self.noted(child))
    }

    /// Every session of the chain `id` belongs to, oldest first: its ancestors up to the
    /// root, itself, then its descendants (the newest child at each step).
    pub async fn chain(&self, id: &str) -> Result<Vec<Session>, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let chain = chain_of(&mut conn, id).await?;
        if chain.is_empty() {
            return Err(StoreError::SessionNotFound(id.to_owned()));
        }
        Ok(chain.into_iter().map(|s| self.noted(s)).collect())
    }

    /// The newest session of the chain `id` belongs to: the one its conversation goes on in.
    pub async fn newest_in_chain(&self, id: &str) -> Result<Session, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let newest = newest_of(&mut conn, id).await?;
        newest.map(|s| self.noted(s)).ok_or_else(|| StoreError::SessionNotFound(id.to_owned()))
    }
}

/// The body of [`Lite::compress_session`], inside its transaction (run again whole when the
/// transaction is retried).
async fn compress(
    conn: &mut SqliteConnection,
    parent_id: &str,
    append: &mut Append,
    context_tokens: i64,
) -> Result<Session, StoreError> {
    let parent = read_session(conn, parent_id)
        .await?
        .ok_or_else(|| StoreError::SessionNotFound(parent_id.to_owned()))?;
    if parent.ended_at.is_some() {
        let newest = newest_of(conn, &parent.id).await?.map(|s| s.id).filter(|n| *n != parent.id);
        return Err(StoreError::AlreadyContinued { id: parent.id, newest });
    }
    let title = match &parent.title {
        Some(title) => Some(next_title(conn, title).await?),
        None => None,
    };
    let now = now_ms();
    let child: Session = sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "INSERT INTO sessions (no, id, source, session_key, chat_id, thread_id, user_id,
                               chat_type, title, model, system_prompt_hash, parent_session_id,
                               started_at, updated_at, context_tokens)
         SELECT (SELECT coalesce(max(no), 0) + 1 FROM sessions), ?1, source, session_key,
                chat_id, thread_id, user_id, chat_type, ?2, model, system_prompt_hash, id,
                ?3, ?3, ?4
         FROM sessions WHERE id = ?5
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
        "UPDATE sessions SET ended_at = ?1, end_reason = ?2, updated_at = ?1 WHERE id = ?3",
    )
    .bind(now)
    .bind(COMPRESSED)
    .bind(&parent.id)
    .execute(&mut *conn)
    .await?;
    sqlx::query("UPDATE routes SET session_id = ?1, updated_at = ?2 WHERE session_id = ?3")
        .bind(&child.id)
        .bind(now)
        .bind(&parent.id)
        .execute(&mut *conn)
        .await?;
    if !append.messages.is_empty() {
        append.session_id.clone_from(&child.id);
        let stored = crate::appends::apply_batch(conn, &[&*append]).await?;
        match stored.into_iter().next() {
            Some(Ok(Appended::Stored(_))) => {}
            Some(Err(e)) => return Err(e),
            other => {
                let what = format!("storing the child's messages did not store them: {other:?}");
                return Err(StoreError::WriteFailed(what));
            }
        }
    }
    read_session(conn, &child.id).await?.ok_or(StoreError::SessionNotFound(child.id))
}

/// The title of a child of a session titled `title`: the chain's name (the title without a
/// trailing ` #N`) numbered with the smallest free number after the parent's.
async fn next_title(conn: &mut SqliteConnection, title: &str) -> Result<String, StoreError> {
    let (name, number) = split_number(title);
    let mut k = number.saturating_add(1);
    loop {
        let candidate = format!("{name} #{k}");
        let taken: bool =
            sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM sessions WHERE title = ?)")
                .bind(&candidate)
                .fetch_one(&mut *conn)
                .await?;
        if !taken {
            return Ok(candidate);
        }
        k = k.saturating_add(1);
    }
}

/// A title's chain name and its number: `trip #3` is (`trip`, 3), `trip` is (`trip`, 1).
pub(crate) fn split_number(title: &str) -> (&str, u64) {
    match title.rsplit_once(" #") {
        Some((name, digits))
            if !name.trim().is_empty()
                && !digits.is_empty()
                && digits.bytes().all(|b| b.is_ascii_digit()) =>
        {
            match digits.parse::<u64>() {
                Ok(n) if n >= 1 => (name, n),
                _ => (title, 1),
            }
        }
        _ => (title, 1),
    }
}

/// The chain of `id` on `conn`, oldest first; empty when there is no such session.
pub(crate) async fn chain_of(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Vec<Session>, StoreError> {
    // Ancestors get negative depths, descendants positive ones; `id` itself is 0 in both.
    Ok(sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "WITH RECURSIVE
           up (id, parent, depth) AS (
             SELECT id, parent_session_id, 0 FROM sessions WHERE id = ?1
             UNION ALL
             SELECT s.id, s.parent_session_id, up.depth - 1 FROM sessions s
             JOIN up ON s.id = up.parent WHERE up.depth > -?2),
           down (id, depth) AS (
             SELECT id, 0 FROM sessions WHERE id = ?1
             UNION ALL
             SELECT (SELECT c.id FROM sessions c WHERE c.parent_session_id = down.id
                     ORDER BY c.started_at DESC, c.id DESC LIMIT 1), down.depth + 1
             FROM down WHERE down.id IS NOT NULL AND down.depth < ?2),
           chain (id, depth) AS (
             SELECT id, depth FROM up UNION SELECT id, depth FROM down WHERE id IS NOT NULL)
         SELECT {SESSION_COLUMNS} FROM sessions JOIN chain USING (id) ORDER BY chain.depth"
    )))
    .bind(id)
    .bind(MAX_DEPTH)
    .fetch_all(&mut *conn)
    .await?)
}

/// The newest session of the chain of `id` on `conn`, if there is such a session.
pub(crate) async fn newest_of(
    conn: &mut SqliteConnection,
    id: &str,
) -> Result<Option<Session>, StoreError> {
    Ok(chain_of(conn, id).await?.pop())
}

/// Takes sessions about to be deleted out of their chains inside the caller's transaction:
/// a child of one of `doomed` (`(id, parent)` pairs) that stays is linked to its nearest
/// ancestor that stays, so the chain keeps its remaining sessions in order.
pub(crate) async fn relink_children(
    conn: &mut SqliteConnection,
    doomed: &[(String, Option<String>)],
) -> Result<(), StoreError> {
    if doomed.is_empty() {
        return Ok(());
    }
    let parents: std::collections::HashMap<&str, Option<&str>> =
        doomed.iter().map(|(id, parent)| (id.as_str(), parent.as_deref())).collect();
    let mut children: Vec<(String, String)> = Vec::new();
    for chunk in doomed.chunks(crate::appends::ROWS_PER_INSERT) {
        let sql = format!(
            "SELECT id, parent_session_id FROM sessions WHERE parent_session_id IN ({})",
            crate::appends::placeholders(chunk.len(), 1)
        );
        let mut query = sqlx::query_as::<_, (String, String)>(sqlx::AssertSqlSafe(sql));
        for (id, _) in chunk {
            query = query.bind(id);
        }
        children.extend(query.fetch_all(&mut *conn).await?);
    }
    for (child, parent) in children {
        if parents.contains_key(child.as_str()) {
            continue;
        }
        let ancestor = nearest_kept(&parents, &parent);
        sqlx::query("UPDATE sessions SET parent_session_id = ? WHERE id = ?")
            .bind(ancestor)
            .bind(&child)
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// The nearest of `parent` and its ancestors that is not among `doomed` (each doomed session's
/// parent), or `None` when the chain above is all doomed.
pub(crate) fn nearest_kept<'a>(
    doomed: &std::collections::HashMap<&'a str, Option<&'a str>>,
    parent: &'a str,
) -> Option<&'a str> {
    let mut ancestor = Some(parent);
    let mut steps = 0;
    while let Some(Some(up)) = ancestor.map(|a| doomed.get(a)) {
        ancestor = *up;
        steps += 1;
        if steps > doomed.len() {
            return None;
        }
    }
    ancestor
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use herald_core::Platform;

    use super::*;
    use crate::sessions::NewSession;

    #[tokio::test]
    async fn a_compression_that_fails_part_way_changes_nothing() {
        let (store, _dir) = crate::open::scratch_store().await;
        let new = NewSession {
            session_key: Some("k".into()),
            ..NewSession::new(Platform::Telegram, "p")
        };
        let (parent, _) = store.route_or_create("k", &new).await.unwrap();
        store.rename_session(&parent.id, "trip").await.unwrap();
        // The last statement of the transaction fails: the child, the parent's end and the
        // moved route must all be undone with it.
        sqlx::query(
            "CREATE TRIGGER boom BEFORE INSERT ON messages WHEN new.content = 'boom'
             BEGIN SELECT RAISE(ABORT, 'boom'); END",
        )
        .execute(&store.inner.pool)
        .await
        .unwrap();
        let messages = vec![NewMessage::user("summary"), NewMessage::user("boom")];
        assert!(store.compress_session(&parent.id, messages, 10).await.is_err());
        let sessions = store.list_sessions(&Default::default()).await.unwrap();
        assert_eq!(sessions.len(), 1);
        assert_eq!((sessions[0].ended_at, sessions[0].end_reason.as_deref()), (None, None));
        assert_eq!(store.routed_session("k").await.unwrap().unwrap().id, parent.id);

        sqlx::query("DROP TRIGGER boom").execute(&store.inner.pool).await.unwrap();
        let child = store.compress_session(&parent.id, vec![NewMessage::user("ok")], 10).await;
        assert_eq!(child.unwrap().title.as_deref(), Some("trip #2"));
    }

    #[tokio::test]
    async fn a_child_of_removed_sessions_links_to_the_nearest_kept_one() {
        let (store, _dir) = crate::open::scratch_store().await;
        let mut ids = Vec::new();
        for _ in 0..5 {
            let parent = ids.last().cloned();
            let new =
                NewSession { parent_session_id: parent, ..NewSession::new(Platform::Cli, "p") };
            ids.push(store.create_session(&new).await.unwrap().id);
        }
        // Removing the second and third of five: the fourth continues the first.
        let doomed: Vec<(String, Option<String>)> =
            vec![(ids[2].clone(), Some(ids[1].clone())), (ids[1].clone(), Some(ids[0].clone()))];
        write_tx!(&store, |conn| async {
            relink_children(conn, &doomed).await?;
            for (id, _) in &doomed {
                sqlx::query("DELETE FROM sessions WHERE id = ?")
                    .bind(id)
                    .execute(&mut *conn)
                    .await?;
            }
            Ok::<_, StoreError>(())
        })
        .unwrap();
        let chain: Vec<String> =
            store.chain(&ids[4]).await.unwrap().into_iter().map(|s| s.id).collect();
        assert_eq!(chain, [&ids[0], &ids[3], &ids[4]].map(String::clone));
    }

    #[test]
    fn titles_split_into_name_and_number() {
        let check = |title: &str, expected: (&str, u64)| assert_eq!(split_number(title), expected);
        check("trip", ("trip", 1));
        check("trip #2", ("trip", 2));
        check("trip #12", ("trip", 12));
        check("trip #0", ("trip #0", 1));
        check("trip #x", ("trip #x", 1));
        check("trip #", ("trip #", 1));
        check(" #3", (" #3", 1));
        check("a #1 #4", ("a #1", 4));
        check("日本 #3", ("日本", 3));
        check("trip #99999999999999999999999", ("trip #99999999999999999999999", 1));
    }
}

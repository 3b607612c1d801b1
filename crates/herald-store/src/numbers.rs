//! The numbers of the sessions this process writes to: what their messages are stored under
//! (see the `session_numbers` migration), known here so that a batch of appends binds them
//! without a lookup in its transaction.
//!
//! A number is noted whenever the store hands out a session, and looked up once, before a batch
//! is built, for a session the process never saw. It is only a hint: a batch trusting a number
//! also names each session by id, and one that no longer matches sends the batch to the careful
//! path, which reads every number again.

use std::collections::HashMap;
use std::sync::Mutex;

use sqlx::SqliteConnection;

use crate::error::StoreError;
use crate::open::Lite;
use crate::sessions::Session;

/// Most numbers kept; past it the map starts again (a miss costs one read).
const MOST: usize = 65_536;

/// Session ids and their numbers, as this process last saw them.
#[derive(Debug, Default)]
pub(crate) struct SessionNumbers {
    known: Mutex<HashMap<String, i64>>,
}

impl SessionNumbers {
    fn known(&self) -> std::sync::MutexGuard<'_, HashMap<String, i64>> {
        self.known.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes the number of a session the store read or created.
    pub(crate) fn note(&self, session: &Session) {
        self.note_id(&session.id, session.no);
    }

    fn note_id(&self, id: &str, no: i64) {
        let mut known = self.known();
        if known.len() >= MOST && !known.contains_key(id) {
            known.clear();
        }
        known.insert(id.to_owned(), no);
    }

    /// The number of a session, if this process knows it.
    pub(crate) fn get(&self, id: &str) -> Option<i64> {
        self.known().get(id).copied()
    }

    /// Forgets a deleted session.
    pub(crate) fn forget(&self, id: &str) {
        self.known().remove(id);
    }
}

/// The numbers of those of `ids` that are sessions, read on `conn` (the writer's transaction
/// when the answer must hold until it commits).
pub(crate) async fn read_numbers(
    conn: &mut SqliteConnection,
    ids: &[&str],
) -> Result<HashMap<String, i64>, StoreError> {
    let mut wanted = ids.to_vec();
    wanted.sort_unstable();
    wanted.dedup();
    let mut found = HashMap::new();
    for chunk in wanted.chunks(crate::appends::ROWS_PER_INSERT) {
        let sql = format!(
            "SELECT id, no FROM sessions WHERE id IN ({})",
            crate::appends::placeholders(chunk.len(), 1)
        );
        let mut query = sqlx::query_as::<_, (String, i64)>(sqlx::AssertSqlSafe(sql));
        for id in chunk {
            query = query.bind(*id);
        }
        found.extend(query.fetch_all(&mut *conn).await?);
    }
    Ok(found)
}

impl Lite {
    /// Looks up the numbers of those of `ids` this process does not know yet; sessions that do
    /// not exist stay unknown.
    pub(crate) async fn learn_numbers(&self, ids: &[&str]) -> Result<(), StoreError> {
        let numbers = &self.inner.numbers;
        let missing: Vec<&str> =
            ids.iter().copied().filter(|id| numbers.get(id).is_none()).collect();
        if missing.is_empty() {
            return Ok(());
        }
        let mut conn = self.inner.pool.acquire().await?;
        for (id, no) in read_numbers(&mut conn, &missing).await? {
            numbers.note_id(&id, no);
        }
        Ok(())
    }

    /// `session`, its number noted on the way out.
    pub(crate) fn noted(&self, session: Session) -> Session {
        self.inner.numbers.note(&session);
        session
    }
}

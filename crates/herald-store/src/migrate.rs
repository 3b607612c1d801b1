//! The schema: migrations from top-level `migrations/`, applied when a store opens, a file
//! written by a newer herald refused, and several processes opening one file at once.

use std::path::Path;
use std::time::Duration;

use sqlx::SqliteConnection;
use sqlx::migrate::Migrator;
use tracing::{debug, info};

use crate::error::{StoreError, is_lock_error};
use crate::open::Lite;

/// The migrations of top-level `migrations/`, embedded at build time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// The newest migration recorded in the file, if any.
pub(crate) async fn applied_version(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    let has_table: bool = sqlx::query_scalar(
        "SELECT count(*) > 0 FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !has_table {
        return Ok(0);
    }
    sqlx::query_scalar("SELECT coalesce(max(version), 0) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut *conn)
        .await
}

/// Refuses a newer database, then applies what is pending. Several processes may open a
/// file at once, and sqlx takes no lock around its migrations, so a run that fails while
/// another process is migrating (its lock held, or what it applied already there) looks at
/// the file again and goes on from there.
pub(crate) async fn migrate(conn: &mut SqliteConnection, path: &Path) -> Result<(), StoreError> {
    let known = Lite::known_schema_version();
    let fail = |reason: String| StoreError::Open { path: path.to_owned(), reason };
    // Another process migrating the same file holds its lock for as long as a migration takes
    // (rebuilding the messages of a large store takes minutes); waiting for it is bounded only
    // so that a process that hung with the lock held is not waited for forever.
    let deadline = std::time::Instant::now() + MIGRATION_PATIENCE;
    let mut announced = false;
    loop {
        let found = applied_version(conn).await.map_err(|e| fail(e.to_string()))?;
        if found > known {
            return Err(StoreError::NewerSchema { path: path.to_owned(), found, known });
        }
        if found == known {
            return Ok(());
        }
        let upgrading = found > 0;
        if upgrading && !announced {
            info!(path = %path.display(), from = found, to = known, "upgrading the store's schema");
            announced = true;
        }
        let started = std::time::Instant::now();
        let error = match MIGRATOR.run(&mut *conn).await {
            Ok(()) => {
                if upgrading {
                    let elapsed_ms = started.elapsed().as_millis() as u64;
                    info!(elapsed_ms, version = known, "upgraded the store's schema");
                }
                return Ok(());
            }
            Err(e) => e,
        };
        // sqlx reads which migrations were applied once, then applies each in a transaction of
        // its own: another process may have applied some of them meanwhile (this run then fails
        // on what they created), or still be applying one (the lock). Either way, look again.
        // Any other error is one of the migration itself, and would only fail again, slowly.
        let moved = applied_version(conn).await.is_ok_and(|now| now > found);
        let locked = match &error {
            sqlx::migrate::MigrateError::Execute(e)
            | sqlx::migrate::MigrateError::ExecuteMigration(e, _) => is_lock_error(e),
            _ => false,
        };
        if locked && !moved && std::time::Instant::now() >= deadline {
            let minutes = MIGRATION_PATIENCE.as_secs() / 60;
            return Err(fail(format!(
                "another process has held the file for {minutes} minutes while its schema is \
                 upgraded; stop the other herald processes using it and try again"
            )));
        }
        if !(moved || locked) {
            return Err(fail(format!("migration failed: {error}")));
        }
        debug!(error = %error, "another process is migrating the file; looking again");
        tokio::time::sleep(Duration::from_millis(rand::random_range(20..120))).await;
    }
}

/// How long opening a store waits for another process that is migrating it.
const MIGRATION_PATIENCE: Duration = Duration::from_secs(600);

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use herald_core::Platform;
    use sqlx::{Connection, SqliteConnection};

    use super::*;
    use crate::StoreOptions;
    use crate::open::create_private_file;
    use crate::{NewMessage, SearchQuery};

    /// The last migration before sessions were numbered.
    const BEFORE_NUMBERS: i64 = 20261203000003;

    /// Writes, on the schema of [`BEFORE_NUMBERS`], two sessions with their messages (one in
    /// Chinese, one with tool calls), indexes them for search, puts a reply in the outbox and
    /// records inbound ids, then deletes the newest message so the sequence runs past the
    /// largest id left.
    async fn old_store(path: &Path) {
        create_private_file(path).unwrap();
        let url = format!("sqlite://{}", path.display());
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        sqlx::query("PRAGMA foreign_keys = ON").execute(&mut conn).await.unwrap();
        MIGRATOR.run_to(BEFORE_NUMBERS, &mut conn).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO system_prompts VALUES ('h', 'You are Herald.', 1);
             INSERT INTO sessions (id, source, user_id, system_prompt_hash, started_at, updated_at,
                                   message_count, tool_call_count)
             VALUES ('0190-a', 'telegram', 'ann', 'h', 1, 1, 3, 1),
                    ('0190-b', 'cli', NULL, 'h', 2, 2, 2, 0);
             INSERT INTO messages (session_id, role, content, tool_calls, created_at, cjk)
             VALUES ('0190-a', 'user', 'deploy the server please', NULL, 10, 0),
                    ('0190-b', 'user', '聊天记录，记忆断裂问题复现了', NULL, 11, 1),
                    ('0190-a', 'assistant', '', '[{\"id\":\"c1\"}]', 12, 0),
                    ('0190-a', 'assistant', 'the server is deployed', NULL, 13, 0),
                    ('0190-b', 'assistant', 'noted', NULL, 14, 0),
                    ('0190-b', 'assistant', 'dropped by undo', NULL, 15, 0);
             INSERT INTO processed_inbound VALUES ('telegram', 'm1', '0190-a', 10);
             INSERT INTO outbox (message_id, session_id, platform, chat_id, chat_kind, text,
                                 created_at)
             VALUES (4, '0190-a', 'telegram', '42', 'dm', 'the server is deployed', 13);",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        let mut tx = conn.begin().await.unwrap();
        crate::index::index_chunk(&mut tx, 100).await.unwrap();
        tx.commit().await.unwrap();
        sqlx::query("DELETE FROM messages WHERE id = 6").execute(&mut conn).await.unwrap();
        conn.close().await.unwrap();
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn stores_opened_at_once_on_a_new_file_all_open() {
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("state.db");
            // Each open migrates on a connection of its own, as separate processes would.
            let opening = (0..8).map(|_| Lite::open(StoreOptions::new(path.clone())));
            for opened in futures::future::join_all(opening).await {
                let health = opened.unwrap().health().await.unwrap();
                assert_eq!(health.schema_version, Lite::known_schema_version());
            }
        }
    }

    #[tokio::test]
    async fn a_large_store_from_before_session_numbers_migrates() {
        // Rebuilding the history index reuses the pages the old messages table freed, so its
        // statement keeps their old content until it ends: here about 10 MB. A SQLite built to
        // keep statement journals in memory up to 8 MiB could not spill one that large to disk
        // and failed this migration with "database or disk is full".
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        create_private_file(&path).unwrap();
        let url = format!("sqlite://{}", path.display());
        let mut conn = SqliteConnection::connect(&url).await.unwrap();
        MIGRATOR.run_to(BEFORE_NUMBERS, &mut conn).await.unwrap();
        sqlx::raw_sql(
            "INSERT INTO sessions (id, source, started_at, updated_at)
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 1000)
             SELECT printf('s%04d', i), 'cli', i, i FROM n;
             INSERT INTO messages (session_id, role, content, created_at)
             WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 900000)
             SELECT printf('s%04d', 1 + i % 1000), 'user', 'm', i FROM n;",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();
        let store = Lite::open(StoreOptions::new(&path)).await.unwrap();
        assert_eq!(store.history("s0001").await.unwrap().len(), 900);
        assert_eq!(store.health().await.unwrap().integrity, ["ok"]);
    }

    #[tokio::test]
    async fn a_store_from_before_session_numbers_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        old_store(&path).await;
        let store = Lite::open(StoreOptions::new(&path)).await.unwrap();

        let texts = |history: Vec<crate::StoredMessage>| -> Vec<(String, String)> {
            history.into_iter().map(|m| (m.session_id, m.content)).collect()
        };
        let a = store.history("0190-a").await.unwrap();
        assert_eq!(a[1].tool_calls, Some(serde_json::json!([{"id": "c1"}])));
        assert_eq!(
            texts(a),
            [
                ("0190-a", "deploy the server please"),
                ("0190-a", ""),
                ("0190-a", "the server is deployed")
            ]
            .map(|(s, t)| (s.to_owned(), t.to_owned()))
        );
        assert_eq!(texts(store.history("0190-b").await.unwrap()).len(), 2);

        // The search index is still the one of the messages: found, with their sessions.
        let hit = |text: &str| {
            let store = store.clone();
            let query = SearchQuery::new(text);
            async move { store.search(&query).await.unwrap() }
        };
        let deployed = hit("deployed").await;
        assert_eq!((deployed.len(), deployed[0].session_id.as_str()), (1, "0190-a"));
        assert_eq!(hit("记忆断裂").await[0].session_id, "0190-b");
        let health = store.health().await.unwrap();
        assert!(health.search_index_ok && health.integrity == ["ok"], "{health:?}");

        // The outbox and the dedupe records came through; a new message takes a new id.
        assert_eq!(store.undelivered().await.unwrap()[0].message_id, 4);
        let again = store.append_inbound("0190-a", Platform::Telegram, "m1", NewMessage::user("x"));
        assert_eq!(again.await.unwrap(), crate::Appended::Duplicate);
        let ids = store.append_messages("0190-b", vec![NewMessage::user("after")]).await.unwrap();
        assert_eq!(ids, [7], "a deleted message's id was given again");
        let b = store.session("0190-b").await.unwrap().unwrap();
        assert_eq!(b.message_count, 3);

        // A session a herald from before the migration inserts, without a number, gets one.
        sqlx::query("INSERT INTO sessions (id, source, started_at, updated_at) VALUES ('0190-c', 'cli', 3, 3)")
            .execute(&store.inner.pool)
            .await
            .unwrap();
        store.append_messages("0190-c", vec![NewMessage::user("late")]).await.unwrap();
        assert_eq!(store.history("0190-c").await.unwrap()[0].content, "late");

        // Deleting a session takes its messages, and their search entries, with it.
        store.delete_session("0190-a").await.unwrap();
        assert!(hit("deployed").await.is_empty());
        assert!(store.undelivered().await.unwrap().is_empty());
        let health = store.health().await.unwrap();
        assert!(health.search_index_ok && health.integrity == ["ok"], "{health:?}");
        let broken: Vec<(String, i64)> =
            sqlx::query_as("PRAGMA foreign_key_check").fetch_all(&store.inner.pool).await.unwrap();
        assert!(broken.is_empty(), "{broken:?}");
    }
}

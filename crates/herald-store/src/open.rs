use std::fs::{self, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tracing::{debug, info, warn};

use crate::checkpoint::Checkpointer;
use crate::error::{StoreError, is_lock_error};
use crate::group::WriteQueue;
use crate::history::HistoryCache;
use crate::index::Indexer;
use crate::numbers::SessionNumbers;
use crate::write::ProcessLock;

/// The migrations of top-level `migrations/`, embedded at build time.
pub(crate) static MIGRATOR: Migrator = sqlx::migrate!("../../migrations");

/// How to open a store: the `[store]` section of the config, resolved.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The database file; its directory is created if missing.
    pub path: PathBuf,
    /// SQLite's own busy wait per attempt.
    pub busy_timeout: Duration,
    /// Total time one write keeps retrying before it fails.
    pub write_patience: Duration,
    /// Most pooled connections (readers; writes use one at a time).
    pub max_connections: u32,
}

impl StoreOptions {
    /// The defaults of SPEC section 5 for a database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions {
            path: path.into(),
            busy_timeout: Duration::from_millis(1000),
            write_patience: Duration::from_millis(20_000),
            max_connections: 8,
        }
    }
}

/// The session store. Cheap to clone; every clone shares one pool and one writer.
#[derive(Debug, Clone)]
pub struct Store {
    pub(crate) inner: Arc<Inner>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) pool: SqlitePool,
    pub(crate) path: PathBuf,
    pub(crate) wal: bool,
    pub(crate) write_patience: Duration,
    /// The connection every write goes through, one writer at a time inside this process, so
    /// tasks queue fairly here instead of sleeping in SQLite's busy handler against each other.
    /// A connection of its own, not one from the pool: its cache of prepared statements stays
    /// warm. A batch's statements differ in their row counts, and one of hundreds of rows costs
    /// up to 0.8 ms to prepare; taken from the pool, the writer went round its connections and
    /// prepared the same statements in each. `None` once the store is closed.
    pub(crate) write_lock: tokio::sync::Mutex<Option<SqliteConnection>>,
    /// Whether the writer keeps statement journals in memory (see [`Store::journals_in_memory`]);
    /// read and set only while `write_lock` is held.
    pub(crate) journals_in_memory: std::sync::atomic::AtomicBool,
    /// How to open the writer again when it is found broken (see `heal_writer`).
    pub(crate) writer_options: SqliteConnectOptions,
    pub(crate) writes: WriteQueue,
    pub(crate) busy_retries: AtomicU64,
    pub(crate) indexer: Indexer,
    pub(crate) checkpointer: Checkpointer,
    pub(crate) history: HistoryCache,
    pub(crate) numbers: SessionNumbers,
    /// Serializes writers across herald processes (see [`ProcessLock`]).
    pub(crate) process_lock: ProcessLock,
}

impl Store {
    /// Opens (creating if needed) the database, switches it to WAL and applies migrations.
    pub async fn open(options: StoreOptions) -> Result<Store, StoreError> {
        let path = options.path.clone();
        let fail = |reason: String| StoreError::Open { path: path.clone(), reason };
        create_private_file(&path).map_err(|e| fail(e.to_string()))?;
        let process_lock = ProcessLock::open(&path).map_err(|e| fail(e.to_string()))?;

        let connect = SqliteConnectOptions::new()
            .filename(&path)
            .create_if_missing(false)
            .foreign_keys(true)
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(options.busy_timeout)
            // Another process's commit empties this connection's page cache; with the file
            // mapped, the next transaction reads pages straight from the OS cache.
            .pragma("mmap_size", "268435456")
            // Checkpoints copy the WAL into the database and sync it: herald runs them in the
            // background (see checkpoint.rs); SQLite's, inside a commit that holds the write
            // lock, only past 200 MB of WAL, under a load that never lets one of those complete.
            // A WAL that grew that far is cut back to 64 MB when it starts over.
            .pragma("wal_autocheckpoint", "50000")
            .pragma("journal_size_limit", "67108864");

        // Journal mode and migrations first, on one connection: switching to WAL needs the
        // database to itself, and nothing else should see a half-migrated schema.
        // A migration may take seconds (rebuilding a table of a million messages takes about
        // six): sqlx would log its whole text as a slow statement; `migrate` says what it does.
        let migrating = connect.clone().disable_statement_logging();
        let mut conn =
            SqliteConnection::connect_with(&migrating).await.map_err(|e| fail(e.to_string()))?;
        let wal = ensure_wal(&mut conn, &path).await.map_err(|e| fail(e.to_string()))?;
        migrate(&mut conn, &path).await?;
        conn.close().await.map_err(|e| fail(e.to_string()))?;

        let writer_options = connect.clone();
        let writer = SqliteConnection::connect_with(&writer_options)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .min_connections(1)
            // A connection to a local file cannot go stale; the ping before every query cost
            // a round trip to the connection's thread (about 0.1 ms) each time.
            .test_before_acquire(false)
            .connect_with(connect)
            .await
            .map_err(|e| fail(e.to_string()))?;

        Ok(Store {
            inner: Arc::new(Inner {
                pool,
                path,
                wal,
                write_patience: options.write_patience,
                write_lock: tokio::sync::Mutex::new(Some(writer)),
                journals_in_memory: std::sync::atomic::AtomicBool::new(false),
                writer_options,
                writes: WriteQueue::default(),
                busy_retries: AtomicU64::new(0),
                indexer: Indexer::default(),
                checkpointer: Checkpointer::default(),
                history: HistoryCache::default(),
                numbers: SessionNumbers::default(),
                process_lock,
            }),
        })
    }

    /// The database file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Whether the database runs in WAL mode (false only on filesystems that refuse it).
    pub fn is_wal(&self) -> bool {
        self.inner.wal
    }

    /// How many times a write transaction was retried because another writer held the lock.
    pub fn busy_retries(&self) -> u64 {
        self.inner.busy_retries.load(Ordering::Relaxed)
    }

    /// A cheap check that the database still answers (`SELECT 1` on a pooled connection).
    pub async fn ping(&self) -> Result<(), StoreError> {
        sqlx::query("SELECT 1").execute(&self.inner.pool).await?;
        Ok(())
    }

    /// The newest migration this binary carries.
    pub fn known_schema_version() -> i64 {
        MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
    }

    /// Indexes what is pending, waits for writes in flight and closes every connection,
    /// checkpointing the WAL.
    pub async fn close(&self) {
        if let Err(e) = self.index_pending().await {
            warn!(error = %e, "could not finish search indexing before closing; the next open will");
        }
        let mut writer = self.inner.write_lock.lock().await;
        self.inner.pool.close().await;
        if let Some(writer) = writer.take()
            && let Err(e) = sqlx::Connection::close(writer).await
        {
            warn!(error = %e, "could not close the store's writer connection cleanly");
        }
    }
}

/// Creates the database file `0600` (and its directory `0700`) before SQLite does, so the
/// file and the `-wal`/`-shm` files SQLite derives from it are private from the first byte.
pub(crate) fn create_private_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    }
    OpenOptions::new().create(true).append(true).mode(0o600).open(path).map(drop)
}

/// Turns WAL on, or keeps the current mode with one warning when the filesystem refuses it.
/// Never switches a database away from WAL.
async fn ensure_wal(conn: &mut SqliteConnection, path: &Path) -> Result<bool, sqlx::Error> {
    let current: String = sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *conn).await?;
    if current.eq_ignore_ascii_case("wal") {
        return Ok(true);
    }
    let after: String =
        sqlx::query_scalar("PRAGMA journal_mode = WAL").fetch_one(&mut *conn).await?;
    if after.eq_ignore_ascii_case("wal") {
        debug!(path = %path.display(), "switched the database to WAL");
        return Ok(true);
    }
    warn!(
        path = %path.display(),
        mode = %after,
        "the filesystem refused WAL; using the {after} journal, concurrent writers will wait longer"
    );
    Ok(false)
}

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
async fn migrate(conn: &mut SqliteConnection, path: &Path) -> Result<(), StoreError> {
    let known = Store::known_schema_version();
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
        let waiting = locked && std::time::Instant::now() < deadline;
        if !(moved || waiting) {
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
            let opening = (0..8).map(|_| Store::open(StoreOptions::new(path.clone())));
            for opened in futures::future::join_all(opening).await {
                let health = opened.unwrap().health().await.unwrap();
                assert_eq!(health.schema_version, Store::known_schema_version());
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
        let store = Store::open(StoreOptions::new(&path)).await.unwrap();
        assert_eq!(store.history("s0001").await.unwrap().len(), 900);
        assert_eq!(store.health().await.unwrap().integrity, ["ok"]);
    }

    #[tokio::test]
    async fn a_store_from_before_session_numbers_keeps_everything() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        old_store(&path).await;
        let store = Store::open(StoreOptions::new(&path)).await.unwrap();

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

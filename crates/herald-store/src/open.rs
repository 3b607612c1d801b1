use std::fs::{self, OpenOptions};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteSynchronous};
use sqlx::{ConnectOptions, Connection, SqliteConnection};
use tracing::{debug, warn};

use crate::checkpoint::Checkpointer;
use crate::error::StoreError;
use crate::error::is_lock_error;
use crate::group::WriteQueue;
use crate::health::WriteHealth;
use crate::history::HistoryCache;
use crate::index::Indexer;
use crate::numbers::SessionNumbers;
use crate::write::ProcessLock;

/// How to open a store: the `[store]` section of the config, resolved.
#[derive(Debug, Clone)]
pub struct StoreOptions {
    /// The database file; its directory is created if missing.
    pub path: PathBuf,
    /// SQLite's own busy wait per attempt.
    pub busy_timeout: Duration,
    /// Total time one write keeps retrying before it fails.
    pub write_patience: Duration,
    /// Most pooled connections (SQLite: readers, writes use one at a time; PostgreSQL: every
    /// query, plus one connection kept for the replica's locks).
    pub max_connections: u32,
    /// When set, the store is this PostgreSQL database and `path` is not used.
    pub postgres: Option<PostgresOptions>,
}

/// A PostgreSQL store: the URL as configured (no password in it) and the password, which comes
/// from the environment, never from a file.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user@host:port/database?options`.
    pub url: String,
    /// The password, when the server asks for one.
    pub password: Option<String>,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "(hidden)"))
            .finish()
    }
}

impl StoreOptions {
    /// The defaults of SPEC section 5 for a database at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        StoreOptions {
            path: path.into(),
            busy_timeout: Duration::from_millis(1000),
            write_patience: Duration::from_millis(20_000),
            max_connections: 8,
            postgres: None,
        }
    }

    /// The defaults for the PostgreSQL database at `url` (no password in it). The pool is
    /// small: statements in flight beyond a few per core only queue inside the server, and
    /// each replica brings its own pool.
    pub fn postgres(url: impl Into<String>, password: Option<String>) -> Self {
        StoreOptions {
            max_connections: 4,
            postgres: Some(PostgresOptions { url: url.into(), password }),
            ..StoreOptions::new("")
        }
    }
}

/// The SQLite backend. Cheap to clone; every clone shares one pool and one writer.
#[derive(Debug, Clone)]
pub struct Lite {
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
    /// warm (a batch's large statements would otherwise be prepared again on each pooled
    /// connection, under the lock). `None` once the store is closed.
    pub(crate) write_lock: tokio::sync::Mutex<Option<SqliteConnection>>,
    /// Whether the writer keeps statement journals in memory (see [`Lite::journals_in_memory`]);
    /// read and set only while `write_lock` is held.
    pub(crate) journals_in_memory: std::sync::atomic::AtomicBool,
    /// How to open the writer again when it is found broken (see `heal_writer`).
    pub(crate) writer_options: SqliteConnectOptions,
    pub(crate) writes: WriteQueue,
    pub(crate) busy_retries: AtomicU64,
    pub(crate) write_health: WriteHealth,
    pub(crate) indexer: Indexer,
    pub(crate) checkpointer: Checkpointer,
    pub(crate) history: HistoryCache,
    pub(crate) numbers: SessionNumbers,
    /// Serializes writers across herald processes (see [`ProcessLock`]).
    pub(crate) process_lock: ProcessLock,
}

impl Lite {
    /// Opens (creating if needed) the database, switches it to WAL and applies migrations.
    pub async fn open(options: StoreOptions) -> Result<Lite, StoreError> {
        Lite::open_with(options, true).await
    }

    /// Opens a database that must already exist, creating neither it nor its directory: for
    /// commands that only look at what is stored.
    pub async fn open_existing(options: StoreOptions) -> Result<Lite, StoreError> {
        Lite::open_with(options, false).await
    }

    async fn open_with(options: StoreOptions, create: bool) -> Result<Lite, StoreError> {
        let path = options.path.clone();
        let fail = |reason: String| StoreError::Open { path: path.clone(), reason };
        if create {
            create_private_file(&path).map_err(|e| fail(e.to_string()))?;
        } else if !path.try_exists().map_err(|e| fail(e.to_string()))? {
            return Err(fail(
                "it does not exist, and nothing was created; check store.path, or run herald \
                 chat or herald gateway, which create it"
                    .to_owned(),
            ));
        }
        make_private(&path).map_err(fail)?;
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
            // Checkpoints run in the background (see checkpoint.rs); SQLite's own, inside a
            // commit that holds the write lock, only past 200 MB of WAL, as a backstop. Cutting
            // the WAL file back also happens inside a commit, with every writer waiting, so only
            // one grown past 256 MB (a long read holding checkpoints back) is cut to that.
            .pragma("wal_autocheckpoint", "50000")
            .pragma("journal_size_limit", "268435456");

        // Journal mode and migrations first, on one connection: switching to WAL needs the
        // database to itself, and nothing else should see a half-migrated schema.
        // A migration may take seconds on a large store: sqlx would log its whole text as a slow
        // statement; `migrate` says what it does.
        let migrating = connect.clone().disable_statement_logging();
        // Processes opening a new file at once race for the switch to WAL, which takes the
        // file to itself: the losers wait their turn within the write patience.
        let started = std::time::Instant::now();
        let (mut conn, wal) = loop {
            let attempt = async {
                let mut conn = SqliteConnection::connect_with(&migrating).await?;
                let wal = ensure_wal(&mut conn, &path).await?;
                Ok::<_, sqlx::Error>((conn, wal))
            };
            match attempt.await {
                Ok(opened) => break opened,
                Err(e) if is_lock_error(&e) && started.elapsed() < options.write_patience => {
                    tokio::time::sleep(Duration::from_millis(rand::random_range(20..=150))).await;
                }
                Err(e) => return Err(fail(e.to_string())),
            }
        };
        crate::migrate::migrate(&mut conn, &path).await?;
        conn.close().await.map_err(|e| fail(e.to_string()))?;

        let writer_options = connect.clone();
        let writer = SqliteConnection::connect_with(&writer_options)
            .await
            .map_err(|e| fail(e.to_string()))?;
        let pool = SqlitePoolOptions::new()
            .max_connections(options.max_connections.max(2))
            .min_connections(1)
            // A connection to a local file cannot go stale; a ping before every query is a
            // needless round trip to the connection's thread.
            .test_before_acquire(false)
            // Readers keep 8 MiB of pages each (SQLite's default is 2): a search walks the
            // index's lists of common words, several MiB in a big store.
            .connect_with(connect.pragma("cache_size", "-8192"))
            .await
            .map_err(|e| fail(e.to_string()))?;

        Ok(Lite {
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
                write_health: WriteHealth::default(),
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
        crate::migrate::MIGRATOR.iter().map(|m| m.version).max().unwrap_or(0)
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

/// Makes the database and the files beside it (`-wal`, `-shm`, `-lock`) private to their
/// owner when a copy, an old umask or a `chmod` opened them to others: SQLite gives a new `-wal`
/// and `-shm` the database's own mode, so one loose file would leak every later write.
fn make_private(db: &Path) -> Result<(), String> {
    let mut tightened = Vec::new();
    for file in store_files(db) {
        let mode = match fs::metadata(&file) {
            Ok(meta) => meta.permissions().mode() & 0o777,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("cannot inspect {}: {e}", file.display())),
        };
        if mode & 0o077 == 0 {
            continue;
        }
        if let Err(e) = fs::set_permissions(&file, fs::Permissions::from_mode(mode & 0o700)) {
            return Err(format!(
                "{} has mode {mode:04o}, open to other users, and cannot be made private ({e}); \
                 run chmod 600 {} as its owner",
                file.display(),
                file.display()
            ));
        }
        tightened.push(format!("{} (was {mode:04o})", file.display()));
    }
    if !tightened.is_empty() {
        warn!(files = %tightened.join(", "), "made the store's files private to their owner; other users could open them");
    }
    Ok(())
}

/// The database and the files SQLite and herald keep beside it.
fn store_files(db: &Path) -> impl Iterator<Item = PathBuf> {
    let db = db.to_owned();
    let sidecars = ["-wal", "-shm", "-lock"].map(|suffix| {
        let mut name = db.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    });
    std::iter::once(db).chain(sidecars)
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

/// A store in a new temporary directory, for the crate's own tests; the directory lasts as long
/// as the returned guard.
#[cfg(test)]
pub(crate) async fn scratch_store() -> (Lite, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let store =
        Lite::open(StoreOptions::new(dir.path().join("state.db"))).await.expect("open store");
    (store, dir)
}

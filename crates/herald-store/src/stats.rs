//! Lite statistics and health checks for `herald sessions stats` and `herald doctor`.

use herald_core::Platform;
use serde::Serialize;

use crate::error::StoreError;
use crate::migrate::applied_version;
use crate::open::Lite;

/// Counts for one source.
#[derive(Debug, Clone, PartialEq, Serialize, sqlx::FromRow)]
pub struct SourceStats {
    /// The source.
    #[sqlx(try_from = "String")]
    pub source: Platform,
    /// Its sessions.
    pub sessions: i64,
    /// Of those, not ended.
    pub open_sessions: i64,
    /// Their messages.
    pub messages: i64,
}

/// What is in the store.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stats {
    /// All sessions.
    pub sessions: i64,
    /// Sessions not ended.
    pub open_sessions: i64,
    /// All messages.
    pub messages: i64,
    /// Per source, most sessions first.
    pub by_source: Vec<SourceStats>,
    /// Unix milliseconds of the oldest session, if any.
    pub oldest_started_at: Option<i64>,
    /// Unix milliseconds of the newest session, if any.
    pub newest_started_at: Option<i64>,
    /// Bytes of the database file and its WAL.
    pub size_bytes: u64,
}

/// The results of `herald doctor`'s store checks.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Health {
    /// The newest migration applied to the file.
    pub schema_version: i64,
    /// The newest migration this binary carries.
    pub known_schema_version: i64,
    /// `PRAGMA journal_mode`.
    pub journal_mode: String,
    /// Whether SQLite was built with FTS5 and the index table exists.
    pub fts5: bool,
    /// `PRAGMA integrity_check`: `["ok"]` when healthy.
    pub integrity: Vec<String>,
    /// Whether both search indexes agree with the messages they index (FTS5 integrity-check).
    pub search_index_ok: bool,
    /// The database server and its version, for a PostgreSQL store.
    pub server: Option<String>,
    /// The extensions installed in a PostgreSQL store's database.
    pub extensions: Vec<String>,
    /// Messages committed but not yet indexed (indexing trails writes by milliseconds).
    pub unindexed: i64,
}

impl Lite {
    /// Counts sessions and messages.
    pub async fn stats(&self) -> Result<Stats, StoreError> {
        let by_source: Vec<SourceStats> = sqlx::query_as(
            "SELECT source, count(*) AS sessions, count(*) - count(ended_at) AS open_sessions,
                    coalesce(sum(message_count), 0) AS messages
             FROM sessions GROUP BY source ORDER BY sessions DESC, messages DESC, source",
        )
        .fetch_all(&self.inner.pool)
        .await?;
        let (oldest, newest): (Option<i64>, Option<i64>) =
            sqlx::query_as("SELECT min(started_at), max(started_at) FROM sessions")
                .fetch_one(&self.inner.pool)
                .await?;
        let size_bytes = ["", "-wal"]
            .iter()
            .filter_map(|suffix| {
                let mut name = self.path().as_os_str().to_owned();
                name.push(suffix);
                std::fs::metadata(name).ok().map(|m| m.len())
            })
            .sum();
        Ok(Stats {
            sessions: by_source.iter().map(|s| s.sessions).sum(),
            open_sessions: by_source.iter().map(|s| s.open_sessions).sum(),
            messages: by_source.iter().map(|s| s.messages).sum(),
            by_source,
            oldest_started_at: oldest,
            newest_started_at: newest,
            size_bytes,
        })
    }

    /// Schema version, journal mode, FTS5 and an integrity check.
    pub async fn health(&self) -> Result<Health, StoreError> {
        let mut conn = self.inner.pool.acquire().await?;
        let schema_version = applied_version(&mut conn).await?;
        let journal_mode: String =
            sqlx::query_scalar("PRAGMA journal_mode").fetch_one(&mut *conn).await?;
        let fts5: bool = sqlx::query_scalar(
            "SELECT sqlite_compileoption_used('ENABLE_FTS5')
                AND EXISTS (SELECT 1 FROM sqlite_master WHERE name = 'messages_fts')",
        )
        .fetch_one(&mut *conn)
        .await?;
        let integrity: Vec<String> =
            sqlx::query_scalar("PRAGMA integrity_check").fetch_all(&mut *conn).await?;
        drop(conn);
        let unindexed = self.unindexed().await?;
        // With rank 1 FTS5 also compares the index with the messages table; that holds for the
        // word index once caught up, never for the trigram index, which holds some rows only.
        let word_check = if unindexed == 0 {
            "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 1)"
        } else {
            "INSERT INTO messages_fts (messages_fts, rank) VALUES ('integrity-check', 0)"
        };
        let mut search_index_ok = true;
        for check in [
            word_check,
            "INSERT INTO messages_cjk (messages_cjk, rank) VALUES ('integrity-check', 0)",
        ] {
            search_index_ok &= sqlx::query(check).execute(&self.inner.pool).await.is_ok();
        }
        Ok(Health {
            schema_version,
            known_schema_version: Lite::known_schema_version(),
            journal_mode,
            fts5,
            integrity,
            search_index_ok,
            unindexed,
            server: None,
            extensions: Vec::new(),
        })
    }
}

//! `herald store copy`: every row of one store into another, empty one, on either backend, and
//! a check that both now hold the same thing (rows per table and a checksum of each table's
//! rows, read back from both sides in key order).
//!
//! Rows travel in a form both backends share ([`Value`]s in the columns of [`TABLES`]); each
//! backend reads and writes its own schema (`copy/lite.rs`, `pg/copy.rs`). What only says how
//! far a process got (search indexing, outbox claims) is not copied: the target rebuilds it.

mod lite;

use sha2::{Digest, Sha256};

use crate::error::StoreError;
use crate::open::Lite;
use crate::pg::Pg;

/// A column's type, the same on both backends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ty {
    Int,
    Text,
}

/// One value of a copied row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Value {
    Null,
    Int(i64),
    Text(String),
}

/// A table as both backends hold it: its columns, and the columns of the key rows are read in.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) name: &'static str,
    pub(crate) columns: &'static [(&'static str, Ty)],
    /// The leading columns that order and page the table.
    pub(crate) key: usize,
}

use Ty::{Int, Text};

/// Every table, parents before children (sessions by number, so a parent session comes before
/// the sessions that continue it).
pub(crate) const TABLES: &[Table] = &[
    Table {
        name: "system_prompts",
        columns: &[("hash", Text), ("prompt", Text), ("created_at", Int)],
        key: 1,
    },
    Table {
        name: "sessions",
        columns: &[
            ("no", Int),
            ("id", Text),
            ("source", Text),
            ("session_key", Text),
            ("chat_id", Text),
            ("thread_id", Text),
            ("user_id", Text),
            ("chat_type", Text),
            ("title", Text),
            ("model", Text),
            ("system_prompt_hash", Text),
            ("parent_session_id", Text),
            ("started_at", Int),
            ("updated_at", Int),
            ("ended_at", Int),
            ("end_reason", Text),
            ("message_count", Int),
            ("tool_call_count", Int),
            ("input_tokens", Int),
            ("output_tokens", Int),
            ("context_tokens", Int),
        ],
        key: 1,
    },
    Table {
        name: "messages",
        columns: &[
            ("id", Int),
            ("session_id", Text),
            ("role", Text),
            ("content", Text),
            ("tool_calls", Text),
            ("tool_call_id", Text),
            ("tool_name", Text),
            ("platform_message_id", Text),
            ("token_count", Int),
            ("created_at", Int),
        ],
        key: 1,
    },
    Table {
        name: "routes",
        columns: &[("session_key", Text), ("session_id", Text), ("updated_at", Int)],
        key: 1,
    },
    Table {
        name: "processed_inbound",
        columns: &[("platform", Text), ("message_id", Text), ("received_at", Int)],
        key: 2,
    },
    Table {
        name: "platform_cursors",
        columns: &[("platform", Text), ("name", Text), ("value", Text), ("updated_at", Int)],
        key: 2,
    },
    Table {
        name: "pairing_requests",
        columns: &[
            ("platform", Text),
            ("code", Text),
            ("user_id", Text),
            ("display_name", Text),
            ("chat_id", Text),
            ("created_at", Int),
            ("expires_at", Int),
        ],
        key: 2,
    },
    Table {
        name: "approved_users",
        columns: &[
            ("platform", Text),
            ("user_id", Text),
            ("display_name", Text),
            ("approved_at", Int),
        ],
        key: 2,
    },
    Table {
        name: "inbound_queue",
        columns: &[
            ("seq", Int),
            ("platform", Text),
            ("message_id", Text),
            ("session_key", Text),
            ("chat_id", Text),
            ("thread_id", Text),
            ("chat_kind", Text),
            ("user_id", Text),
            ("user_name", Text),
            ("content", Text),
            ("received_at", Int),
        ],
        key: 1,
    },
    Table {
        name: "outbox",
        columns: &[
            ("message_id", Int),
            ("session_id", Text),
            ("platform", Text),
            ("chat_id", Text),
            ("thread_id", Text),
            ("chat_kind", Text),
            ("reply_to", Text),
            ("text", Text),
            ("created_at", Int),
        ],
        key: 1,
    },
];

/// Rows read or written per statement batch.
pub(crate) const BATCH: i64 = 500;

/// What one store holds, table by table: what `store copy` compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fingerprint {
    /// Per table, in copy order: its name, its rows, and the SHA-256 (hex) of its rows in key
    /// order.
    pub tables: Vec<TableFingerprint>,
}

/// One table's rows and checksum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableFingerprint {
    /// The table.
    pub table: &'static str,
    /// How many rows it holds.
    pub rows: u64,
    /// SHA-256 of its rows in key order, hex.
    pub sha256: String,
}

impl Fingerprint {
    /// The entry of `table`.
    pub fn of(&self, table: &str) -> Option<&TableFingerprint> {
        self.tables.iter().find(|t| t.table == table)
    }
}

/// Either backend, for reading and writing rows.
#[derive(Clone, Copy)]
pub(crate) enum Side<'a> {
    Lite(&'a Lite),
    Pg(&'a Pg),
}

impl Side<'_> {
    /// Up to `limit` rows of `table` after `after` (the key columns' values), in key order.
    async fn read(
        self,
        table: &Table,
        after: Option<&[Value]>,
        limit: i64,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        match self {
            Side::Lite(lite) => lite.copy_read(table, after, limit).await,
            Side::Pg(pg) => pg.copy_read(table, after, limit).await,
        }
    }

    /// Writes rows of `table` in one transaction.
    async fn write(self, table: &Table, rows: &[Vec<Value>]) -> Result<(), StoreError> {
        match self {
            Side::Lite(lite) => lite.copy_write(table, rows).await,
            Side::Pg(pg) => pg.copy_write(table, rows).await,
        }
    }

    /// Whatever the backend must do once every row is in (identity sequences, search).
    async fn finish(self) -> Result<(), StoreError> {
        match self {
            Side::Lite(lite) => lite.index_pending().await.map(drop),
            Side::Pg(pg) => pg.copy_finish().await,
        }
    }

    /// Rows in `table`.
    async fn count(self, table: &Table) -> Result<u64, StoreError> {
        match self {
            Side::Lite(lite) => lite.copy_count(table).await,
            Side::Pg(pg) => pg.copy_count(table).await,
        }
    }
}

/// Every table of `from` into `to`, which must hold no rows; `progress` hears each table's
/// name and rows copied so far. Then both are read back and compared.
pub(crate) async fn copy(
    from: Side<'_>,
    to: Side<'_>,
    progress: &mut (dyn FnMut(&str, u64) + Send),
) -> Result<Fingerprint, StoreError> {
    for table in TABLES {
        let rows = to.count(table).await?;
        if rows > 0 {
            return Err(StoreError::CopyTarget(format!(
                "it already holds {rows} rows in {}; copy only into an empty store",
                table.name
            )));
        }
    }
    for table in TABLES {
        let mut after: Option<Vec<Value>> = None;
        let mut copied = 0u64;
        loop {
            let rows = from.read(table, after.as_deref(), BATCH).await?;
            let Some(last) = rows.last() else { break };
            after = Some(last[..table.key].to_vec());
            to.write(table, &rows).await?;
            copied += rows.len() as u64;
            progress(table.name, copied);
            if (rows.len() as i64) < BATCH {
                break;
            }
        }
    }
    to.finish().await?;
    let source = fingerprint(from).await?;
    let target = fingerprint(to).await?;
    if let Some((a, b)) = source.tables.iter().zip(&target.tables).find(|(a, b)| a != b) {
        return Err(StoreError::CopyTarget(format!(
            "the copy differs from the source in {}: {} rows (sha256 {}) against {} (sha256 {}); \
             do not use the target: empty it and copy again, with nothing writing to the source",
            a.table,
            b.rows,
            short(&b.sha256),
            a.rows,
            short(&a.sha256)
        )));
    }
    Ok(source)
}

/// Rows and a checksum of every table, read in key order.
pub(crate) async fn fingerprint(side: Side<'_>) -> Result<Fingerprint, StoreError> {
    let mut tables = Vec::with_capacity(TABLES.len());
    for table in TABLES {
        let mut hash = Sha256::new();
        let mut rows = 0u64;
        let mut after: Option<Vec<Value>> = None;
        loop {
            let batch = side.read(table, after.as_deref(), BATCH).await?;
            let Some(last) = batch.last() else { break };
            after = Some(last[..table.key].to_vec());
            for row in &batch {
                feed(&mut hash, row);
            }
            rows += batch.len() as u64;
            if (batch.len() as i64) < BATCH {
                break;
            }
        }
        let sha256 = hash.finalize().iter().map(|b| format!("{b:02x}")).collect();
        tables.push(TableFingerprint { table: table.name, rows, sha256 });
    }
    Ok(Fingerprint { tables })
}

/// A row's values, each tagged and length-prefixed, so no two different rows feed the same
/// bytes.
fn feed(hash: &mut Sha256, row: &[Value]) {
    for value in row {
        match value {
            Value::Null => hash.update(b"N"),
            Value::Int(n) => {
                hash.update(b"I");
                hash.update(n.to_be_bytes());
            }
            Value::Text(text) => {
                hash.update(b"T");
                hash.update((text.len() as u64).to_be_bytes());
                hash.update(text.as_bytes());
            }
        }
    }
    hash.update(b"\n");
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

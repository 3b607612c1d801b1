//! Copying rows out of and into the SQLite schema. Messages point at their session by number
//! here (`session_no`) and carry the CJK flag the trigram index follows; the shared row form
//! names the session by id and leaves the flag to be worked out again.

use sqlx::sqlite::SqliteRow;
use sqlx::{Row, Sqlite};

use super::{Table, Ty, Value};
use crate::error::StoreError;
use crate::open::Lite;

/// How SQLite reads a shared column of `table`.
fn select_expr(table: &Table, column: &str) -> String {
    match (table.name, column) {
        ("messages", "session_id") => {
            "(SELECT s.id FROM sessions s WHERE s.no = t.session_no)".to_owned()
        }
        _ => format!("t.{column}"),
    }
}

fn key_list(table: &Table) -> String {
    table.columns[..table.key].iter().map(|(c, _)| format!("t.{c}")).collect::<Vec<_>>().join(", ")
}

pub(super) fn decode(row: &SqliteRow, table: &Table) -> Result<Vec<Value>, sqlx::Error> {
    table
        .columns
        .iter()
        .enumerate()
        .map(|(i, (_, ty))| {
            Ok(match ty {
                Ty::Int => row.try_get::<Option<i64>, _>(i)?.map_or(Value::Null, Value::Int),
                Ty::Text => row.try_get::<Option<String>, _>(i)?.map_or(Value::Null, Value::Text),
            })
        })
        .collect()
}

fn bind<'q>(
    query: sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>,
    value: &Value,
) -> sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments> {
    match value {
        Value::Null => query.bind(None::<String>),
        Value::Int(n) => query.bind(*n),
        Value::Text(text) => query.bind(text.clone()),
    }
}

impl Lite {
    pub(crate) async fn copy_read(
        &self,
        table: &Table,
        after: Option<&[Value]>,
        limit: i64,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        let columns: Vec<String> =
            table.columns.iter().map(|(c, _)| select_expr(table, c)).collect();
        let keys = key_list(table);
        let marks = vec!["?"; table.key].join(", ");
        let filter = match after {
            Some(_) => format!("WHERE ({keys}) > ({marks})"),
            None => String::new(),
        };
        // Names and expressions come from the TABLES constant, never from input.
        let sql = format!(
            "SELECT {} FROM {} t {filter} ORDER BY {keys} LIMIT ?",
            columns.join(", "),
            table.name
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for value in after.unwrap_or_default() {
            query = bind(query, value);
        }
        let rows = query.bind(limit).fetch_all(&self.inner.pool).await?;
        Ok(rows.iter().map(|row| decode(row, table)).collect::<Result<_, _>>()?)
    }

    pub(crate) async fn copy_write(
        &self,
        table: &Table,
        rows: &[Vec<Value>],
    ) -> Result<(), StoreError> {
        let (columns, values) = insert_parts(table);
        let sql = format!("INSERT INTO {} ({columns}) VALUES ({values})", table.name);
        crate::write::write_tx!(self, |conn| async {
            for row in rows {
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                for value in row {
                    query = bind(query, value);
                }
                if table.name == "messages" {
                    let content = match &row[3] {
                        Value::Text(text) => text.as_str(),
                        _ => "",
                    };
                    query = query.bind(content.chars().any(crate::search::is_cjk));
                }
                query.execute(&mut *conn).await?;
            }
            Ok::<(), sqlx::Error>(())
        })
    }

    pub(crate) async fn copy_count(&self, table: &Table) -> Result<u64, StoreError> {
        let sql = format!("SELECT count(*) FROM {}", table.name);
        let count: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&self.inner.pool).await?;
        Ok(count as u64)
    }
}

/// The column list and value placeholders of an INSERT of one shared row.
fn insert_parts(table: &Table) -> (String, String) {
    let mut columns = Vec::new();
    let mut values = Vec::new();
    for (column, _) in table.columns {
        match (table.name, *column) {
            ("messages", "session_id") => {
                columns.push("session_no".to_owned());
                values.push("(SELECT no FROM sessions WHERE id = ?)".to_owned());
            }
            _ => {
                columns.push((*column).to_owned());
                values.push("?".to_owned());
            }
        }
    }
    if table.name == "messages" {
        columns.push("cjk".to_owned());
        values.push("?".to_owned());
    }
    (columns.join(", "), values.join(", "))
}

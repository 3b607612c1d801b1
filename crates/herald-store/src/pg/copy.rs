//! Copying rows out of and into the PostgreSQL schema (see `crate::copy`). Text keys are
//! ordered byte-wise (`COLLATE "C"`), as SQLite orders them, so both sides read a table in the
//! same order and their checksums can be compared.

use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{Postgres, Row};

use super::Pg;
use crate::copy::{Table, Ty, Value};
use crate::error::StoreError;

/// Identity columns whose next value must follow the copied rows.
const IDENTITIES: [(&str, &str); 3] =
    [("sessions", "no"), ("messages", "id"), ("inbound_queue", "seq")];

fn key_expr(table: &Table, i: usize) -> String {
    let (column, ty) = table.columns[i];
    match ty {
        Ty::Text => format!("{column} COLLATE \"C\""),
        Ty::Int => column.to_owned(),
    }
}

fn decode(row: &PgRow, table: &Table) -> Result<Vec<Value>, sqlx::Error> {
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
    query: sqlx::query::Query<'q, Postgres, PgArguments>,
    value: &Value,
    ty: Ty,
) -> sqlx::query::Query<'q, Postgres, PgArguments> {
    match (value, ty) {
        (Value::Null, Ty::Int) => query.bind(None::<i64>),
        (Value::Null, Ty::Text) => query.bind(None::<String>),
        (Value::Int(n), _) => query.bind(*n),
        (Value::Text(text), _) => query.bind(text.clone()),
    }
}

impl Pg {
    pub(crate) async fn copy_read(
        &self,
        table: &Table,
        after: Option<&[Value]>,
        limit: i64,
    ) -> Result<Vec<Vec<Value>>, StoreError> {
        let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
        let keys: Vec<String> = (0..table.key).map(|i| key_expr(table, i)).collect();
        let keys = keys.join(", ");
        let filter = match after {
            Some(_) => {
                let marks: Vec<String> = (1..=table.key).map(|i| format!("${i}")).collect();
                format!("WHERE ({keys}) > ({})", marks.join(", "))
            }
            None => String::new(),
        };
        let limit_mark = format!("${}", after.map_or(1, |a| a.len() + 1));
        // Names come from the TABLES constant, never from input.
        let sql = format!(
            "SELECT {} FROM {} {filter} ORDER BY {keys} LIMIT {limit_mark}",
            columns.join(", "),
            table.name
        );
        let mut query = sqlx::query(sqlx::AssertSqlSafe(sql));
        for (i, value) in after.unwrap_or_default().iter().enumerate() {
            query = bind(query, value, table.columns[i].1);
        }
        let rows = query.bind(limit).fetch_all(&self.inner.pool).await?;
        Ok(rows.iter().map(|row| decode(row, table)).collect::<Result<_, _>>()?)
    }

    pub(crate) async fn copy_write(
        &self,
        table: &Table,
        rows: &[Vec<Value>],
    ) -> Result<(), StoreError> {
        let columns: Vec<&str> = table.columns.iter().map(|(c, _)| *c).collect();
        let marks: Vec<String> = (1..=columns.len()).map(|i| format!("${i}")).collect();
        let sql = format!(
            "INSERT INTO {} ({}) VALUES ({})",
            table.name,
            columns.join(", "),
            marks.join(", ")
        );
        super::write::pg_write!(self, |tx| async {
            for row in rows {
                let mut query = sqlx::query(sqlx::AssertSqlSafe(sql.clone()));
                for (value, (_, ty)) in row.iter().zip(table.columns) {
                    query = bind(query, value, *ty);
                }
                query.execute(&mut *tx).await?;
            }
            Ok::<(), sqlx::Error>(())
        })
    }

    /// Moves each identity past the copied rows, so new rows do not collide with them.
    pub(crate) async fn copy_finish(&self) -> Result<(), StoreError> {
        for (table, column) in IDENTITIES {
            let sql = format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                 coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)"
            );
            sqlx::query(sqlx::AssertSqlSafe(sql)).execute(&self.inner.pool).await?;
        }
        Ok(())
    }

    pub(crate) async fn copy_count(&self, table: &Table) -> Result<u64, StoreError> {
        let sql = format!("SELECT count(*) FROM {}", table.name);
        let count: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(sql)).fetch_one(&self.inner.pool).await?;
        Ok(count as u64)
    }
}

//! The outbox on PostgreSQL: replies stored with their turn and not yet taken by their platform
//! (claiming them, one replica each, is in `replica.rs`).

use super::Pg;
use crate::error::StoreError;
use crate::outbox::{OUTBOX_COLUMNS, OutboxRow, Undelivered};

impl Pg {
    pub(crate) async fn delivered(&self, message_id: i64) -> Result<(), StoreError> {
        self.write(move |tx| {
            Box::pin(async move {
                sqlx::query("DELETE FROM outbox WHERE message_id = $1")
                    .bind(message_id)
                    .execute(&mut **tx)
                    .await
                    .map(drop)
            })
        })
        .await
    }

    pub(crate) async fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox ORDER BY message_id"
        )))
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(Undelivered::try_from).collect()
    }
}

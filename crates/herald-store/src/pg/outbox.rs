//! The outbox on PostgreSQL: replies stored with their turn and not yet taken by their platform
//! (claiming them, one replica each, is in `replica.rs`; forgetting them once taken, in
//! `group.rs`).

use super::Pg;
use crate::error::StoreError;
use crate::outbox::{OUTBOX_COLUMNS, OutboxRow, Undelivered};

impl Pg {
    pub(crate) async fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError> {
        let rows: Vec<OutboxRow> = sqlx::query_as(sqlx::AssertSqlSafe(format!(
            "SELECT {OUTBOX_COLUMNS} FROM outbox ORDER BY message_id"
        )))
        .fetch_all(&self.inner.pool)
        .await?;
        rows.into_iter().map(Undelivered::try_from).collect()
    }

    pub(crate) async fn pieces_taken(
        &self,
        message_id: i64,
        pieces: i64,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE outbox SET pieces = greatest(pieces, $1) WHERE message_id = $2")
            .bind(pieces)
            .bind(message_id)
            .execute(&self.inner.pool)
            .await?;
        Ok(())
    }
}

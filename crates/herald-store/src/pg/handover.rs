//! What replicas hand each other through PostgreSQL: a notification on the channel
//! `herald_queued` when a message is queued for a session (its payload the queued row as JSON,
//! or only its session key when the row is too long for a notification), so the replica running
//! the session takes it in at once; and the claims on replies being sent.

use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::Pg;
use super::write::pg_write;
use crate::error::StoreError;
use crate::gateway::{QueueRow, QueuedInbound};
use crate::handover::Heard;

/// The channel queue_inbound notifies on.
pub(crate) const QUEUED_CHANNEL: &str = "herald_queued";
/// Notifications that may wait for the gateway.
const HEARD_WAITING: usize = 1024;

/// What a notification on [`QUEUED_CHANNEL`] says: `{"key": ...}` alone, or the whole queued
/// row. A payload that is not JSON is a session key (as replicas before the row sent it).
fn heard_of(payload: &str) -> Heard {
    #[derive(serde::Deserialize)]
    struct KeyOnly {
        session_key: String,
    }
    let row = serde_json::from_str::<QueueRow>(payload).map_err(StoreError::from);
    if let Ok(message) = row.and_then(QueuedInbound::try_from) {
        let key = message.session_key.clone();
        return Heard::Queued { key, message: Some(Box::new(message)) };
    }
    // A row this replica cannot read is read from the queue by the one running the session.
    let key = match serde_json::from_str::<KeyOnly>(payload) {
        Ok(only) => only.session_key,
        Err(_) => payload.to_owned(),
    };
    Heard::Queued { key, message: None }
}

impl Pg {
    /// Session keys as any replica queues messages for them. The listening connection is
    /// opened again after a failure, and each time it listens (again) [`Heard::Missed`] says
    /// that what was queued meanwhile was not heard.
    pub(crate) fn queued_notifications(&self) -> mpsc::Receiver<Heard> {
        let (tx, rx) = mpsc::channel(HEARD_WAITING);
        let pool = self.inner.pool.clone();
        tokio::spawn(async move {
            // The listening connection is the pool's: it goes back when the store closes,
            // which would otherwise wait for it until the next notification.
            let mut closing = pool.close_event();
            loop {
                let listening = async {
                    let mut listener = PgListener::connect_with(&pool).await?;
                    listener.listen(QUEUED_CHANNEL).await?;
                    if tx.send(Heard::Missed).await.is_err() {
                        return Ok::<(), sqlx::Error>(());
                    }
                    loop {
                        let heard = listener.recv().await?;
                        if tx.send(heard_of(heard.payload())).await.is_err() {
                            return Ok(());
                        }
                    }
                };
                let Ok(listened) = closing.do_until(listening).await else { return };
                match listened {
                    Ok(()) => return,
                    Err(e) => {
                        debug!(error = %e, "stopped listening for queued messages; listening again")
                    }
                }
                if tx.is_closed() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
        rx
    }

    pub(crate) async fn unqueue(&self, seq: i64) -> Result<bool, StoreError> {
        pg_write!(self, |tx| async {
            sqlx::query("DELETE FROM inbound_queue WHERE seq = $1")
                .bind(seq)
                .execute(&mut *tx)
                .await
                .map(|done| done.rows_affected() > 0)
        })
    }

    pub(crate) async fn renew_claims(
        &self,
        ids: &[i64],
        claim_for: Duration,
    ) -> Result<(), StoreError> {
        // The database's clock, as for every claim: replicas' clocks may disagree.
        let result = sqlx::query(
            "UPDATE outbox SET claimed_until = (extract(epoch FROM clock_timestamp()) * 1000)::BIGINT + $1
             WHERE message_id = ANY($2)",
        )
        .bind(claim_for.as_millis() as i64)
            .bind(ids)
            .execute(&self.inner.pool)
            .await;
        if let Err(e) = &result {
            warn!(error = %e, "could not renew the claims on replies being sent");
        }
        result.map(drop).map_err(StoreError::from)
    }
}

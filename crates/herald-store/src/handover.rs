//! What replicas hand each other through the store, on SQLite: one process per file, so there
//! is nobody to notify, and a queued command leaves the queue like any other.

use tokio::sync::mpsc;

use crate::error::StoreError;
use crate::gateway::QueuedInbound;
use crate::open::Lite;
use crate::write::write_tx;

/// What a replica hears of the inbound queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heard {
    /// A message was queued for this session key: the message itself when the notification
    /// could carry it, so that the replica running the session need not read it back.
    Queued {
        /// The session key.
        key: String,
        /// The message, unless it was too long for a notification.
        message: Option<Box<QueuedInbound>>,
    },
    /// Listening (again): whatever was queued before was not heard, for any key.
    Missed,
}

impl Lite {
    /// Session keys as other processes queue messages for them: none on SQLite.
    pub(crate) fn queued_notifications(&self) -> mpsc::Receiver<Heard> {
        mpsc::channel(1).1
    }

    /// Takes one message out of the inbound queue without adding it to a history (a command
    /// that was queued as text); whether it was still there.
    pub async fn unqueue(&self, seq: i64) -> Result<bool, StoreError> {
        write_tx!(self, |conn| async {
            sqlx::query("DELETE FROM inbound_queue WHERE seq = ?")
                .bind(seq)
                .execute(&mut *conn)
                .await
                .map(|done| done.rows_affected() > 0)
        })
    }

    /// Keeps this process's claims on replies it is still sending: nothing else sends them on
    /// SQLite.
    pub async fn renew_claims(
        &self,
        _ids: &[i64],
        _claim_for: std::time::Duration,
    ) -> Result<(), StoreError> {
        Ok(())
    }
}

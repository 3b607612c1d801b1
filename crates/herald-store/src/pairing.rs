//! Pairing: one-time codes unknown users ask for, and the users the operator approved.

use herald_core::Platform;
use serde::Serialize;

use crate::error::StoreError;
use crate::open::Lite;
use crate::time::now_ms;
use crate::write::write_tx;

/// A pending pairing code.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct PairingRequest {
    /// The platform the user wrote on.
    #[sqlx(try_from = "String")]
    pub platform: Platform,
    /// The one-time code.
    pub code: String,
    /// The platform user id that asked.
    pub user_id: String,
    /// Their name, if the platform gave one.
    pub display_name: Option<String>,
    /// The chat they asked from.
    pub chat_id: Option<String>,
    /// When the code was issued (ms since the epoch).
    pub created_at: i64,
    /// When it stops being valid (ms since the epoch).
    pub expires_at: i64,
}

/// A user the operator approved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, sqlx::FromRow)]
pub struct ApprovedUser {
    /// The platform.
    #[sqlx(try_from = "String")]
    pub platform: Platform,
    /// The platform user id.
    pub user_id: String,
    /// Their name when they were approved.
    pub display_name: Option<String>,
    /// When (ms since the epoch).
    pub approved_at: i64,
}

/// What asking for a pairing code gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PairingIssue {
    /// A new code was issued.
    Issued(PairingRequest),
    /// The user already has a valid code; it is returned again.
    Pending(PairingRequest),
    /// The platform already has as many pending codes as allowed.
    Full,
}

/// Why a code could not be approved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApproveError {
    /// No pending code is spelled like this.
    #[error("no pending pairing code `{0}`; `herald pairing list` shows the pending ones")]
    Unknown(String),
    /// The code existed but its hour is over.
    #[error("pairing code `{0}` has expired; ask the user to write to the bot again for a new one")]
    Expired(String),
}

/// A pending request as the gateway asks for it.
#[derive(Debug, Clone)]
pub struct NewPairing<'a> {
    /// The platform.
    pub platform: Platform,
    /// A freshly generated code (used only when a new one is issued).
    pub code: &'a str,
    /// Who asks.
    pub user_id: &'a str,
    /// Their name.
    pub display_name: Option<&'a str>,
    /// Where they asked.
    pub chat_id: &'a str,
    /// How long the code is valid, in ms.
    pub ttl_ms: i64,
    /// At most this many pending codes per platform.
    pub max_pending: i64,
}

impl Lite {
    /// Issues a pairing code for a user, or returns the valid one they already have, so a user
    /// holds at most one pending code and writing again takes no second place. Expired codes
    /// are dropped first; the look and the insert share one write transaction.
    pub async fn request_pairing(&self, new: &NewPairing<'_>) -> Result<PairingIssue, StoreError> {
        write_tx!(self, |conn| async {
            let now = now_ms();
            sqlx::query("DELETE FROM pairing_requests WHERE expires_at <= ?")
                .bind(now)
                .execute(&mut *conn)
                .await?;
            let existing: Option<PairingRequest> = sqlx::query_as(
                "SELECT * FROM pairing_requests WHERE platform = ? AND user_id = ?
                 ORDER BY created_at DESC LIMIT 1",
            )
            .bind(new.platform.as_str())
            .bind(new.user_id)
            .fetch_optional(&mut *conn)
            .await?;
            if let Some(request) = existing {
                return Ok::<_, StoreError>(PairingIssue::Pending(request));
            }
            let pending: i64 =
                sqlx::query_scalar("SELECT count(*) FROM pairing_requests WHERE platform = ?")
                    .bind(new.platform.as_str())
                    .fetch_one(&mut *conn)
                    .await?;
            if pending >= new.max_pending {
                return Ok(PairingIssue::Full);
            }
            let request = sqlx::query_as(
                "INSERT INTO pairing_requests
                     (platform, code, user_id, display_name, chat_id, created_at, expires_at)
                 VALUES (?, ?, ?, ?, ?, ?, ?) RETURNING *",
            )
            .bind(new.platform.as_str())
            .bind(new.code)
            .bind(new.user_id)
            .bind(new.display_name)
            .bind(new.chat_id)
            .bind(now)
            .bind(now.saturating_add(new.ttl_ms))
            .fetch_one(&mut *conn)
            .await?;
            Ok(PairingIssue::Issued(request))
        })
    }

    /// Approves a pending code: its user is allowed from now on and the code is used up.
    pub async fn approve_pairing(
        &self,
        platform: Platform,
        code: &str,
    ) -> Result<Result<ApprovedUser, ApproveError>, StoreError> {
        let code = code.trim().to_ascii_uppercase();
        write_tx!(self, |conn| async {
            let request: Option<PairingRequest> = sqlx::query_as(
                "DELETE FROM pairing_requests WHERE platform = ? AND code = ? RETURNING *",
            )
            .bind(platform.as_str())
            .bind(&code)
            .fetch_optional(&mut *conn)
            .await?;
            let Some(request) = request else {
                return Ok::<_, StoreError>(Err(ApproveError::Unknown(code.clone())));
            };
            let now = now_ms();
            if request.expires_at <= now {
                return Ok(Err(ApproveError::Expired(code.clone())));
            }
            let user = sqlx::query_as(
                "INSERT INTO approved_users (platform, user_id, display_name, approved_at)
                 VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (platform, user_id) DO UPDATE SET display_name = ?3, approved_at = ?4
                 RETURNING *",
            )
            .bind(platform.as_str())
            .bind(&request.user_id)
            .bind(&request.display_name)
            .bind(now)
            .fetch_one(&mut *conn)
            .await?;
            Ok(Ok(user))
        })
    }

    /// Takes a user's approval away; returns whether they were approved.
    pub async fn revoke_user(&self, platform: Platform, user_id: &str) -> Result<bool, StoreError> {
        write_tx!(self, |conn| async {
            let gone = sqlx::query("DELETE FROM approved_users WHERE platform = ? AND user_id = ?")
                .bind(platform.as_str())
                .bind(user_id)
                .execute(&mut *conn)
                .await?
                .rows_affected();
            Ok::<_, StoreError>(gone > 0)
        })
    }

    /// Whether the operator approved this user.
    pub async fn is_approved(&self, platform: Platform, user_id: &str) -> Result<bool, StoreError> {
        let found: Option<i64> =
            sqlx::query_scalar("SELECT 1 FROM approved_users WHERE platform = ? AND user_id = ?")
                .bind(platform.as_str())
                .bind(user_id)
                .fetch_optional(&self.inner.pool)
                .await?;
        Ok(found.is_some())
    }

    /// Pending codes that are still valid, oldest first.
    pub async fn pairing_requests(&self) -> Result<Vec<PairingRequest>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT * FROM pairing_requests WHERE expires_at > ?
             ORDER BY platform, created_at, user_id",
        )
        .bind(now_ms())
        .fetch_all(&self.inner.pool)
        .await?)
    }

    /// Approved users, by platform.
    pub async fn approved_users(&self) -> Result<Vec<ApprovedUser>, StoreError> {
        Ok(sqlx::query_as("SELECT * FROM approved_users ORDER BY platform, approved_at")
            .fetch_all(&self.inner.pool)
            .await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::open::scratch_store;

    fn ask<'a>(user: &'a str, code: &'a str, max_pending: i64) -> NewPairing<'a> {
        let platform = Platform::Telegram;
        let ttl_ms = 3_600_000;
        NewPairing {
            platform,
            code,
            user_id: user,
            display_name: None,
            chat_id: user,
            ttl_ms,
            max_pending,
        }
    }

    #[tokio::test]
    async fn pairing_gives_one_code_per_user_up_to_the_platform_limit() {
        let (store, _dir) = scratch_store().await;
        let first = store.request_pairing(&ask("1", "AAAAAAAA", 2)).await.unwrap();
        assert!(matches!(&first, PairingIssue::Issued(r) if r.code == "AAAAAAAA"), "{first:?}");
        let again = store.request_pairing(&ask("1", "BBBBBBBB", 2)).await.unwrap();
        assert!(matches!(&again, PairingIssue::Pending(r) if r.code == "AAAAAAAA"), "{again:?}");
        let second = store.request_pairing(&ask("2", "CCCCCCCC", 2)).await.unwrap();
        assert!(matches!(second, PairingIssue::Issued(_)), "{second:?}");
        let third = store.request_pairing(&ask("3", "DDDDDDDD", 2)).await.unwrap();
        assert_eq!(third, PairingIssue::Full);
        let pending = store.pairing_requests().await.unwrap();
        let users: Vec<&str> = pending.iter().map(|p| p.user_id.as_str()).collect();
        assert_eq!(users, ["1", "2"]);

        store.approve_pairing(Platform::Telegram, "aaaaaaaa").await.unwrap().unwrap();
        let freed = store.request_pairing(&ask("3", "DDDDDDDD", 2)).await.unwrap();
        assert!(matches!(freed, PairingIssue::Issued(_)), "an approval frees its place: {freed:?}");
    }
}

//! Pairing on PostgreSQL: one-time codes unknown users ask for, and the users the operator
//! approved.

use std::sync::Arc;

use herald_core::Platform;

use super::Pg;
use crate::error::StoreError;
use crate::pairing::{ApproveError, ApprovedUser, NewPairing, PairingIssue, PairingRequest};
use crate::time::now_ms;

/// A request as [`Pg::request_pairing`] keeps it across retries.
#[derive(Debug)]
struct Asked {
    platform: Platform,
    code: String,
    user_id: String,
    display_name: Option<String>,
    chat_id: String,
    ttl_ms: i64,
    max_pending: i64,
}

impl Pg {
    /// Serializable: two replicas asking for the same user, or for the platform's last free
    /// place, at once would both see room; one of them is retried and sees the other's code.
    pub(crate) async fn request_pairing(
        &self,
        new: &NewPairing<'_>,
    ) -> Result<PairingIssue, StoreError> {
        let asked = Arc::new(Asked {
            platform: new.platform,
            code: new.code.to_owned(),
            user_id: new.user_id.to_owned(),
            display_name: new.display_name.map(str::to_owned),
            chat_id: new.chat_id.to_owned(),
            ttl_ms: new.ttl_ms,
            max_pending: new.max_pending,
        });
        self.write(move |tx| {
            let new = Arc::clone(&asked);
            Box::pin(async move {
                sqlx::query("SET TRANSACTION ISOLATION LEVEL SERIALIZABLE")
                    .execute(&mut **tx)
                    .await?;
                let now = now_ms();
                sqlx::query("DELETE FROM pairing_requests WHERE expires_at <= $1")
                    .bind(now)
                    .execute(&mut **tx)
                    .await?;
                let existing: Option<PairingRequest> = sqlx::query_as(
                    "SELECT * FROM pairing_requests WHERE platform = $1 AND user_id = $2
                     ORDER BY created_at DESC LIMIT 1",
                )
                .bind(new.platform.as_str())
                .bind(&new.user_id)
                .fetch_optional(&mut **tx)
                .await?;
                if let Some(request) = existing {
                    return Ok(PairingIssue::Pending(request));
                }
                let pending: i64 =
                    sqlx::query_scalar("SELECT count(*) FROM pairing_requests WHERE platform = $1")
                        .bind(new.platform.as_str())
                        .fetch_one(&mut **tx)
                        .await?;
                if pending >= new.max_pending {
                    return Ok(PairingIssue::Full);
                }
                let request = sqlx::query_as(
                    "INSERT INTO pairing_requests
                         (platform, code, user_id, display_name, chat_id, created_at, expires_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING *",
                )
                .bind(new.platform.as_str())
                .bind(&new.code)
                .bind(&new.user_id)
                .bind(&new.display_name)
                .bind(&new.chat_id)
                .bind(now)
                .bind(now.saturating_add(new.ttl_ms))
                .fetch_one(&mut **tx)
                .await?;
                Ok(PairingIssue::Issued(request))
            })
        })
        .await
    }

    pub(crate) async fn approve_pairing(
        &self,
        platform: Platform,
        code: &str,
    ) -> Result<Result<ApprovedUser, ApproveError>, StoreError> {
        let code = Arc::<str>::from(code.trim().to_ascii_uppercase());
        self.write(move |tx| {
            let code = Arc::clone(&code);
            Box::pin(async move {
                let request: Option<PairingRequest> = sqlx::query_as(
                    "DELETE FROM pairing_requests WHERE platform = $1 AND code = $2 RETURNING *",
                )
                .bind(platform.as_str())
                .bind(&*code)
                .fetch_optional(&mut **tx)
                .await?;
                let Some(request) = request else {
                    return Ok(Err(ApproveError::Unknown(code.to_string())));
                };
                let now = now_ms();
                if request.expires_at <= now {
                    return Ok(Err(ApproveError::Expired(code.to_string())));
                }
                let user = sqlx::query_as(
                    "INSERT INTO approved_users (platform, user_id, display_name, approved_at)
                     VALUES ($1, $2, $3, $4)
                     ON CONFLICT (platform, user_id) DO UPDATE
                     SET display_name = EXCLUDED.display_name, approved_at = EXCLUDED.approved_at
                     RETURNING *",
                )
                .bind(platform.as_str())
                .bind(&request.user_id)
                .bind(&request.display_name)
                .bind(now)
                .fetch_one(&mut **tx)
                .await?;
                Ok(Ok(user))
            })
        })
        .await
    }

    pub(crate) async fn revoke_user(
        &self,
        platform: Platform,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        let user_id = Arc::<str>::from(user_id);
        self.write(move |tx| {
            let user_id = Arc::clone(&user_id);
            Box::pin(async move {
                let gone =
                    sqlx::query("DELETE FROM approved_users WHERE platform = $1 AND user_id = $2")
                        .bind(platform.as_str())
                        .bind(&*user_id)
                        .execute(&mut **tx)
                        .await?
                        .rows_affected();
                Ok(gone > 0)
            })
        })
        .await
    }

    pub(crate) async fn is_approved(
        &self,
        platform: Platform,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        let found: Option<i32> =
            sqlx::query_scalar("SELECT 1 FROM approved_users WHERE platform = $1 AND user_id = $2")
                .bind(platform.as_str())
                .bind(user_id)
                .fetch_optional(&self.inner.pool)
                .await?;
        Ok(found.is_some())
    }

    pub(crate) async fn pairing_requests(&self) -> Result<Vec<PairingRequest>, StoreError> {
        Ok(sqlx::query_as(
            "SELECT * FROM pairing_requests WHERE expires_at > $1
             ORDER BY platform, created_at, user_id",
        )
        .bind(now_ms())
        .fetch_all(&self.inner.pool)
        .await?)
    }

    pub(crate) async fn approved_users(&self) -> Result<Vec<ApprovedUser>, StoreError> {
        Ok(sqlx::query_as("SELECT * FROM approved_users ORDER BY platform, approved_at")
            .fetch_all(&self.inner.pool)
            .await?)
    }
}

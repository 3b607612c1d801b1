//! The gateway's state on PostgreSQL: cursors, the inbound queue, the outbox, pairing.

#![allow(unused_variables)]

use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};

use super::Pg;
use crate::*;

impl Pg {
    pub(crate) async fn cursor(
        &self,
        platform: Platform,
        name: &str,
    ) -> Result<Option<String>, StoreError> {
        Err(StoreError::WriteFailed("cursor is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn cursors(
        &self,
        platform: Platform,
    ) -> Result<Vec<(String, String)>, StoreError> {
        Err(StoreError::WriteFailed("cursors is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn set_cursor(
        &self,
        platform: Platform,
        name: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        Err(StoreError::WriteFailed("set_cursor is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn queue_inbound(
        &self,
        session_key: &str,
        message_id: &str,
        chat: &ChatRef,
        user: &UserRef,
        content: &str,
    ) -> Result<Option<i64>, StoreError> {
        Err(StoreError::WriteFailed("queue_inbound is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn take_queued(
        &self,
        session_id: &str,
        seqs: &[i64],
    ) -> Result<Vec<i64>, StoreError> {
        Err(StoreError::WriteFailed("take_queued is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn queued_inbound(&self) -> Result<Vec<QueuedInbound>, StoreError> {
        Err(StoreError::WriteFailed("queued_inbound is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn unanswered_sessions(&self) -> Result<Vec<Session>, StoreError> {
        Err(StoreError::WriteFailed("unanswered_sessions is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn undo_last_exchange(&self, session_id: &str) -> Result<u64, StoreError> {
        Err(StoreError::WriteFailed("undo_last_exchange is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn reset_last_answer(
        &self,
        session_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Err(StoreError::WriteFailed("reset_last_answer is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn delivered(&self, message_id: i64) -> Result<(), StoreError> {
        Err(StoreError::WriteFailed("delivered is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn undelivered(&self) -> Result<Vec<Undelivered>, StoreError> {
        Err(StoreError::WriteFailed("undelivered is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn request_pairing(
        &self,
        new: &NewPairing<'_>,
    ) -> Result<PairingIssue, StoreError> {
        Err(StoreError::WriteFailed("request_pairing is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn approve_pairing(
        &self,
        platform: Platform,
        code: &str,
    ) -> Result<Result<ApprovedUser, ApproveError>, StoreError> {
        Err(StoreError::WriteFailed("approve_pairing is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn revoke_user(
        &self,
        platform: Platform,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        Err(StoreError::WriteFailed("revoke_user is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn is_approved(
        &self,
        platform: Platform,
        user_id: &str,
    ) -> Result<bool, StoreError> {
        Err(StoreError::WriteFailed("is_approved is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn pairing_requests(&self) -> Result<Vec<PairingRequest>, StoreError> {
        Err(StoreError::WriteFailed("pairing_requests is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn approved_users(&self) -> Result<Vec<ApprovedUser>, StoreError> {
        Err(StoreError::WriteFailed("approved_users is not built on PostgreSQL yet".into()))
    }
}

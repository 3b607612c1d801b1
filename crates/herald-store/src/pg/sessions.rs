//! Sessions, routes, lineage and history on PostgreSQL.

#![allow(unused_variables)]

use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};

use super::Pg;
use crate::*;

impl Pg {
    pub(crate) async fn history(&self, session_id: &str) -> Result<Vec<StoredMessage>, StoreError> {
        Err(StoreError::WriteFailed("history is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn compress_session(
        &self,
        parent_id: &str,
        messages: Vec<NewMessage>,
        context_tokens: i64,
    ) -> Result<Session, StoreError> {
        Err(StoreError::WriteFailed("compress_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn chain(&self, id: &str) -> Result<Vec<Session>, StoreError> {
        Err(StoreError::WriteFailed("chain is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn newest_in_chain(&self, id: &str) -> Result<Session, StoreError> {
        Err(StoreError::WriteFailed("newest_in_chain is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn routed_session(&self, key: &str) -> Result<Option<Session>, StoreError> {
        Err(StoreError::WriteFailed("routed_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn route_or_create(
        &self,
        key: &str,
        new: &NewSession,
    ) -> Result<(Session, bool), StoreError> {
        Err(StoreError::WriteFailed("route_or_create is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn reroute(
        &self,
        key: &str,
        new: &NewSession,
        end_reason: &str,
    ) -> Result<Session, StoreError> {
        Err(StoreError::WriteFailed("reroute is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn create_session(&self, new: &NewSession) -> Result<Session, StoreError> {
        Err(StoreError::WriteFailed("create_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn session(&self, id: &str) -> Result<Option<Session>, StoreError> {
        Err(StoreError::WriteFailed("session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn resolve_session(&self, reference: &str) -> Result<Session, StoreError> {
        Err(StoreError::WriteFailed("resolve_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn system_prompt(
        &self,
        session_id: &str,
    ) -> Result<Option<String>, StoreError> {
        Err(StoreError::WriteFailed("system_prompt is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn list_sessions(
        &self,
        filter: &SessionFilter,
    ) -> Result<Vec<Session>, StoreError> {
        Err(StoreError::WriteFailed("list_sessions is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn end_session(&self, id: &str, reason: &str) -> Result<(), StoreError> {
        Err(StoreError::WriteFailed("end_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn reopen_session(&self, id: &str) -> Result<(), StoreError> {
        Err(StoreError::WriteFailed("reopen_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn rename_session(&self, id: &str, title: &str) -> Result<(), StoreError> {
        Err(StoreError::WriteFailed("rename_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn delete_session(&self, id: &str) -> Result<i64, StoreError> {
        Err(StoreError::WriteFailed("delete_session is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn prune_sessions(
        &self,
        older_than: Duration,
        source: Option<Platform>,
    ) -> Result<u64, StoreError> {
        Err(StoreError::WriteFailed("prune_sessions is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn short_ids(&self, ids: &[&str]) -> Result<Vec<String>, StoreError> {
        Err(StoreError::WriteFailed("short_ids is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn stats(&self) -> Result<Stats, StoreError> {
        Err(StoreError::WriteFailed("stats is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn health(&self) -> Result<Health, StoreError> {
        Err(StoreError::WriteFailed("health is not built on PostgreSQL yet".into()))
    }
}

//! Appending messages on PostgreSQL.

#![allow(unused_variables)]

use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};

use super::Pg;
use crate::*;

impl Pg {
    pub(crate) async fn append_messages(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
    ) -> Result<Vec<i64>, StoreError> {
        Err(StoreError::WriteFailed("append_messages is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn append_turn(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
    ) -> Result<Vec<i64>, StoreError> {
        Err(StoreError::WriteFailed("append_turn is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn append_reply(
        &self,
        session_id: &str,
        messages: Vec<NewMessage>,
        usage: TokenUsage,
        delivery: Delivery,
    ) -> Result<Vec<i64>, StoreError> {
        Err(StoreError::WriteFailed("append_reply is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn append_inbound(
        &self,
        session_id: &str,
        platform: Platform,
        platform_message_id: &str,
        message: NewMessage,
    ) -> Result<Appended, StoreError> {
        Err(StoreError::WriteFailed("append_inbound is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn record_inbound(
        &self,
        platform: Platform,
        platform_message_id: &str,
    ) -> Result<bool, StoreError> {
        Err(StoreError::WriteFailed("record_inbound is not built on PostgreSQL yet".into()))
    }
}

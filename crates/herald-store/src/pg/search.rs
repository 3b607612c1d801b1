//! Search on PostgreSQL.

#![allow(unused_variables)]

use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};

use super::Pg;
use crate::*;

impl Pg {
    pub(crate) async fn index_pending(&self) -> Result<u64, StoreError> {
        Err(StoreError::WriteFailed("index_pending is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn unindexed(&self) -> Result<i64, StoreError> {
        Err(StoreError::WriteFailed("unindexed is not built on PostgreSQL yet".into()))
    }

    pub(crate) async fn search(&self, query: &SearchQuery) -> Result<Vec<SearchHit>, StoreError> {
        Err(StoreError::WriteFailed("search is not built on PostgreSQL yet".into()))
    }
}

//! Store behaviour against real SQLite files: one test binary, one module per concern.
#![allow(clippy::unwrap_used)]

mod busy;
mod concurrency;
mod files;
mod gateway;
mod history;
mod lineage;
mod schema;
mod search;
mod sessions;

use std::path::Path;

use herald_core::Platform;
use herald_store::{NewMessage, NewSession, Store, StoreOptions};
use tempfile::TempDir;

/// A fresh store in its own temporary directory (kept alive by the returned guard).
pub async fn fresh() -> (Store, TempDir) {
    let dir = tempfile::tempdir().expect("temp dir");
    let store = open(&dir.path().join("state.db")).await;
    (store, dir)
}

/// Opens the store at `path` with default options.
pub async fn open(path: &Path) -> Store {
    Store::open(StoreOptions::new(path)).await.expect("open store")
}

/// A session from `source` for `user`.
pub fn session_for(source: Platform, user: &str) -> NewSession {
    NewSession {
        user_id: Some(user.to_owned()),
        chat_id: Some(format!("chat-{user}")),
        ..NewSession::new(source, "You are Herald.")
    }
}

/// One turn as the gateway writes it: a user message, an assistant tool call, its result, the
/// answer.
pub fn turn(n: usize) -> Vec<NewMessage> {
    let call = serde_json::json!([{
        "id": format!("call_{n}"),
        "type": "function",
        "function": {"name": "session_search", "arguments": format!("{{\"query\":\"turn {n}\"}}")}
    }]);
    vec![
        NewMessage::user(format!("question number {n}")),
        NewMessage::assistant("").with_tool_calls(call),
        NewMessage::tool(format!("call_{n}"), "session_search", format!("result for {n}")),
        NewMessage::assistant(format!("answer number {n}")),
    ]
}

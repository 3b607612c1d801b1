//! Store behaviour against real SQLite files and a real PostgreSQL server: one test binary,
//! one module per concern. A test written with [`both!`] runs on each backend.
#![allow(clippy::unwrap_used)]

/// One test, run on both backends: `both! { async fn name(store, scratch) { ... } }` defines
/// `name::sqlite` and `name::postgres`, each given a fresh store and where it lives (to open it
/// again, as a restart would).
macro_rules! both {
    ($(
        $(#[$meta:meta])*
        async fn $name:ident($store:ident, $scratch:ident) $body:block
    )*) => {$(
        $(#[$meta])*
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[allow(unused_variables, unused_mut)]
            async fn run(mut $store: herald_store::Store, $scratch: herald_store::scratch::Scratch) $body

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn sqlite() {
                let (store, scratch) = crate::fresh_on(herald_store::scratch::Kind::Sqlite).await;
                run(store, scratch).await
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn postgres() {
                let (store, scratch) = crate::fresh_on(herald_store::scratch::Kind::Postgres).await;
                run(store, scratch).await
            }
        }
    )*};
}

mod busy;
mod concurrency;
mod copy;
mod files;
mod gateway;
mod history;
mod lineage;
mod replicas;
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

/// A fresh store on `kind`, and where it lives.
pub async fn fresh_on(
    kind: herald_store::scratch::Kind,
) -> (Store, herald_store::scratch::Scratch) {
    let scratch = herald_store::scratch::Scratch::new(kind).await;
    let store = Store::open(scratch.options.clone()).await.expect("open store");
    (store, scratch)
}

/// Opens the store at `scratch` again, as a restart would.
pub async fn reopen(scratch: &herald_store::scratch::Scratch) -> Store {
    Store::open(scratch.options.clone()).await.expect("reopen store")
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

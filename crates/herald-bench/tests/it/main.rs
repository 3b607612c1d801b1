//! herald-bench end to end: the real binary in real OS processes against real SQLite files.
//! One test binary, one module per concern.

mod crash;
mod restart;
mod storm;

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Lines, Write};
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use herald_store::{Store, StoreOptions, StoredMessage};
use serde_json::Value;

/// The benchmark binary built for these tests.
pub fn bench() -> Command {
    Command::new(env!("CARGO_BIN_EXE_herald-bench"))
}

/// Opens the store at `path` with default options.
pub async fn open(path: &Path) -> Store {
    Store::open(StoreOptions::new(path)).await.expect("open store")
}

/// A `worker` process started with `--print-acks`, past its ready line and `go`.
#[derive(Debug)]
pub struct Worker {
    pub child: Child,
    stdin: Option<ChildStdin>,
    lines: Lines<BufReader<ChildStdout>>,
}

impl Worker {
    /// Spawns a worker for `chats` chats of `turns` turns on the store at `url` and starts it.
    pub fn start(url: &str, chats: u32, turns: u32) -> Worker {
        let mut child = bench()
            .arg("worker")
            .args(["--url", url])
            .args(["--chats", &chats.to_string(), "--turns", &turns.to_string(), "--print-acks"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn worker");
        let mut stdin = child.stdin.take().expect("worker stdin");
        let mut lines = BufReader::new(child.stdout.take().expect("worker stdout")).lines();
        let ready = lines.next().expect("a ready line").expect("read worker stdout");
        assert_eq!(ready, r#"{"event":"ready"}"#);
        writeln!(stdin, "go").expect("send go");
        Worker { child, stdin: Some(stdin), lines }
    }

    /// The next event line, or `None` at the end of the output or at a torn last line. After
    /// the `done` event, stdin is closed: the worker closes its store and exits.
    pub fn next_event(&mut self) -> Option<Value> {
        let line = self.lines.next()?.expect("read worker stdout");
        let event: Value = serde_json::from_str(&line).ok()?;
        if event["event"] == "done" {
            self.stdin = None;
        }
        Some(event)
    }
}

/// The fields of a stored message a worker echoes when it acknowledges a turn.
fn echoed(stored: &StoredMessage) -> Value {
    serde_json::json!({
        "role": stored.role.as_str(),
        "content": stored.content,
        "tool_calls": stored.tool_calls,
        "tool_call_id": stored.tool_call_id,
        "tool_name": stored.tool_name,
        "platform_message_id": stored.platform_message_id,
    })
}

/// Asserts that every acknowledged turn in `acks` is in the store with the ids the worker was
/// given and exactly the text and tool calls it wrote. Returns the stored histories by session.
pub async fn assert_acks_stored(
    store: &Store,
    acks: &[Value],
) -> HashMap<String, Vec<StoredMessage>> {
    let mut histories = HashMap::new();
    for ack in acks {
        let session = ack["session"].as_str().expect("ack session").to_owned();
        if !histories.contains_key(&session) {
            histories.insert(session.clone(), store.history(&session).await.expect("history"));
        }
        let by_id: HashMap<i64, &StoredMessage> =
            histories[&session].iter().map(|m| (m.id, m)).collect();
        let ids = ack["ids"].as_array().expect("ack ids");
        let messages = ack["messages"].as_array().expect("ack messages");
        assert_eq!(ids.len(), 4, "{ack}");
        assert_eq!(messages.len(), 4, "{ack}");
        for (id, message) in ids.iter().zip(messages) {
            let id = id.as_i64().expect("message id");
            let stored =
                by_id.get(&id).unwrap_or_else(|| panic!("acknowledged message {id} is lost"));
            assert_eq!(&echoed(stored), message, "message {id} differs from what was written");
        }
    }
    histories
}

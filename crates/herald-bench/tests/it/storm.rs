//! `store-storm` across OS processes: every turn lands, and the retry path copes with a writer
//! that holds the lock longer than the busy timeout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::Duration;

use herald_core::Platform;
use herald_store::SessionFilter;
use serde_json::Value;

use crate::{bench, open};

/// An outside `sqlite3` process holding the write lock until its stdin gets `COMMIT`.
fn hold_lock(db: &std::path::Path) -> (Child, ChildStdin) {
    let mut sqlite = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sqlite3 command line shell is installed");
    let mut input = sqlite.stdin.take().expect("sqlite3 stdin");
    writeln!(input, "BEGIN IMMEDIATE;\n.print locked").expect("write to sqlite3");
    let mut output = BufReader::new(sqlite.stdout.take().expect("sqlite3 stdout")).lines();
    assert_eq!(output.next().expect("sqlite3 output").expect("read sqlite3"), "locked");
    (sqlite, input)
}

#[tokio::test(flavor = "multi_thread")]
async fn four_processes_lose_nothing_and_retry_through_a_held_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("storm.db");
    // Created first, so the lock holder has a WAL database to lock.
    open(&db).await.close().await;
    // The lock is taken before the storm starts and held past its `go` for six busy timeouts:
    // every chat's first write waits it out through the store's retries. (A lock taken while the
    // storm runs is not enough: the storm's writers can starve the shell's busy handler.)
    let (mut sqlite, mut input) = hold_lock(&db);
    let mut storm = bench()
        .args(["store-storm", "--processes", "4", "--chats", "16", "--turns", "10"])
        .arg("--db")
        .arg(&db)
        .args(["--busy-timeout-ms", "50"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run store-storm");
    let progress = BufReader::new(storm.stderr.take().expect("storm stderr"));
    let stderr = thread::spawn(move || {
        let mut seen = String::new();
        for line in progress.lines() {
            let line = line.expect("read storm stderr");
            if line.contains("workers ready, go") {
                thread::sleep(Duration::from_millis(300));
                writeln!(input, "COMMIT;").expect("write to sqlite3");
            }
            seen.push_str(&line);
            seen.push('\n');
        }
        // Dropping stdin ends the shell, and with it the lock if the storm died before `go`.
        seen
    });
    let output = storm.wait_with_output().expect("run store-storm");
    let stderr = stderr.join().expect("stderr reader");
    sqlite.wait().expect("sqlite3 exits");
    assert!(output.status.success(), "store-storm failed: {stderr}");

    let stdout = String::from_utf8(output.stdout).expect("utf-8 stdout");
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 1, "stdout must be one JSON line: {stdout}");
    let report: Value = serde_json::from_str(lines[0]).expect("a JSON line");
    assert_eq!(report["scenario"], "store-storm");
    assert_eq!(report["errors"], 0, "{report}\n{stderr}");
    assert_eq!(report["lost_turns"], 0, "{report}");
    assert_eq!(report["turns_total"], 4 * 16 * 10, "{report}");
    assert!(report["busy_retries"].as_u64().expect("busy_retries") > 0, "no retries: {report}");
    assert!(
        report["turn_p99_ms"].as_f64().expect("p99")
            >= report["turn_p50_ms"].as_f64().expect("p50")
    );

    // Read back independently of the benchmark's own verification.
    let store = open(&db).await;
    let sessions = store.list_sessions(&SessionFilter::default()).await.expect("list");
    assert_eq!(sessions.len(), 64);
    for session in &sessions {
        assert_eq!(session.source, Platform::Telegram);
        let history = store.history(&session.id).await.expect("history");
        assert_eq!(history.len(), 40, "session {} has {} messages", session.id, history.len());
        assert_eq!(session.message_count, 40);
    }
    assert_eq!(store.stats().await.expect("stats").messages, 4 * 16 * 10 * 4);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_lock_held_past_patience_fails_the_storm() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("storm.db");
    open(&db).await.close().await;
    let (mut sqlite, mut input) = hold_lock(&db);

    let storm = bench()
        .args(["store-storm", "--processes", "1", "--chats", "2", "--turns", "2"])
        .arg("--db")
        .arg(&db)
        .args(["--busy-timeout-ms", "50", "--write-patience-ms", "300"])
        .output()
        .expect("run store-storm");
    writeln!(input, "ROLLBACK;").expect("write to sqlite3");
    drop(input);
    sqlite.wait().expect("sqlite3 exits");

    assert_eq!(storm.status.code(), Some(1), "a storm with failed writes must exit 1");
    let report: Value = serde_json::from_slice(&storm.stdout).expect("still one JSON line");
    // Both chats fail to start; indexing at the end may fail too while the lock is held.
    let errors = report["errors"].as_u64().expect("errors");
    assert!((2..=3).contains(&errors), "{report}");
    assert_eq!(report["turns_total"], 0, "{report}");
    let stderr = String::from_utf8_lossy(&storm.stderr);
    assert!(stderr.contains("write_patience_ms"), "the cause is not reported: {stderr}");
}

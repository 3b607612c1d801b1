//! `store-storm` across OS processes: every turn lands, and the retry path copes with a writer
//! that holds the lock longer than the busy timeout.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use herald_core::Platform;
use herald_store::SessionFilter;
use serde_json::Value;

use crate::{bench, open};

/// Holds the write lock from an outside `sqlite3` process, 150 ms at a time with 50 ms gaps,
/// until `stop` is set; returns how many times it held it.
fn hold_lock_repeatedly(db: &std::path::Path, stop: Arc<AtomicBool>) -> thread::JoinHandle<u32> {
    let mut sqlite = Command::new("sqlite3")
        .arg(db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sqlite3 command line shell is installed");
    thread::spawn(move || {
        let mut input = sqlite.stdin.take().expect("sqlite3 stdin");
        let mut output = BufReader::new(sqlite.stdout.take().expect("sqlite3 stdout")).lines();
        writeln!(input, ".timeout 30000").expect("write to sqlite3");
        let mut held = 0;
        while !stop.load(Ordering::Relaxed) {
            writeln!(input, "BEGIN IMMEDIATE;\n.print locked").expect("write to sqlite3");
            let line = output.next().expect("sqlite3 output").expect("read sqlite3");
            assert_eq!(line, "locked");
            held += 1;
            thread::sleep(Duration::from_millis(150));
            writeln!(input, "COMMIT;").expect("write to sqlite3");
            thread::sleep(Duration::from_millis(50));
        }
        drop(input);
        sqlite.wait().expect("sqlite3 exits");
        held
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn four_processes_lose_nothing_and_retry_through_a_held_lock() {
    let dir = tempfile::tempdir().expect("temp dir");
    let db = dir.path().join("storm.db");
    // Created first, so the lock holder has a WAL database to lock.
    open(&db).await.close().await;
    let stop = Arc::new(AtomicBool::new(false));
    let holder = hold_lock_repeatedly(&db, stop.clone());

    let output = bench()
        .args(["store-storm", "--processes", "4", "--chats", "16", "--turns", "10"])
        .arg("--db")
        .arg(&db)
        .args(["--busy-timeout-ms", "50"])
        .output()
        .expect("run store-storm");
    stop.store(true, Ordering::Relaxed);
    let held = holder.join().expect("lock holder thread");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "store-storm failed: {stderr}");
    assert!(held > 0);

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
    let mut sqlite = Command::new("sqlite3")
        .arg(&db)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("the sqlite3 command line shell is installed");
    let mut input = sqlite.stdin.take().expect("sqlite3 stdin");
    writeln!(input, "BEGIN IMMEDIATE;\n.print locked").expect("write to sqlite3");
    let mut output = BufReader::new(sqlite.stdout.take().expect("sqlite3 stdout")).lines();
    assert_eq!(output.next().expect("sqlite3 output").expect("read sqlite3"), "locked");

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

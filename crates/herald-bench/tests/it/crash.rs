//! A worker killed with SIGKILL mid-storm, on either backend: the store stays intact and every
//! turn it acknowledged before dying is stored.

use std::os::unix::process::ExitStatusExt;

use herald_core::Role;

use herald_store::Store;
use herald_store::scratch::{Kind, Scratch};

use crate::{Worker, assert_acks_stored};

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_turns_survive_sigkill() {
    survive_sigkill(Scratch::new(Kind::Sqlite).await).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn acknowledged_turns_survive_sigkill_on_postgres() {
    survive_sigkill(Scratch::new(Kind::Postgres).await).await;
}

async fn survive_sigkill(scratch: Scratch) {
    let mut worker = Worker::start(&scratch.url, 8, 500);
    let mut acks = Vec::new();
    while acks.len() < 40 {
        let event = worker.next_event().expect("the worker is still running");
        if event["event"] == "ack" {
            acks.push(event);
        }
    }
    worker.child.kill().expect("SIGKILL the worker");
    // Lines already in the pipe were acknowledged before the kill too; a torn last line ends it.
    while let Some(event) = worker.next_event() {
        if event["event"] == "ack" {
            acks.push(event);
        }
    }
    let status = worker.child.wait().expect("reap the worker");
    assert_eq!(status.signal(), Some(9), "the worker was not killed mid-storm: {status}");

    let store = Store::open(scratch.options.clone()).await.expect("open store");
    let health = store.health().await.expect("health");
    assert_eq!(health.integrity, vec!["ok".to_owned()]);
    let histories = assert_acks_stored(&store, &acks).await;
    assert!(histories.len() > 1, "the acknowledged turns came from one chat only");
    // Each write is all or nothing: a session ends in whole turns, or in one inbound message
    // whose reply was not written yet when the process died.
    for (session, history) in &histories {
        match history.len() % 4 {
            0 => {}
            1 => assert_eq!(history.last().map(|m| m.role), Some(Role::User), "session {session}"),
            _ => panic!("session {session} holds part of a reply: {} messages", history.len()),
        }
    }
}

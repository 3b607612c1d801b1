//! Several replicas on one store, played by several `Store` handles on one database: what one
//! queues, claims or locks, the others see.

use std::str::FromStr;
use std::time::Duration;

use herald_core::{ChatRef, Platform, UserRef};
use herald_store::scratch::{Kind, Scratch};
use herald_store::{Delivery, Heard, NewMessage, SessionLock, Store};
use sqlx::postgres::PgConnectOptions;
use sqlx::{ConnectOptions, PgConnection};

use crate::{fresh_on, reopen, session_for};

/// A plain connection to the PostgreSQL database of `scratch`, as an operator's would be.
pub async fn connect(scratch: &Scratch) -> PgConnection {
    let mut options = PgConnectOptions::from_str(&scratch.url).unwrap();
    if let Some(password) = herald_store::scratch::password() {
        options = options.password(&password);
    }
    options.connect().await.unwrap()
}

/// Queues Slack message `id` saying `text` for `key`, as a replica receiving it would.
async fn queue(store: &Store, key: &str, id: &str, text: &str) -> Option<i64> {
    let chat = ChatRef::direct(Platform::Slack, "D1");
    let user = UserRef { id: "U1".into(), name: None };
    store.queue_inbound(key, id, &chat, &user, text).await.unwrap()
}

/// Locks `key` once whoever held it let go (an unlock is sent when a lock is dropped, and runs
/// a moment later).
async fn lock_when_free(store: &Store, key: &str) -> SessionLock {
    for _ in 0..500 {
        if let Some(lock) = store.lock_session(key).await.unwrap() {
            return lock;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("{key} was never let go");
}

/// Stores `n` replies in one session; returns their message ids.
async fn replies(store: &Store, n: usize) -> Vec<i64> {
    let session = store.create_session(&session_for(Platform::Telegram, "42")).await.unwrap();
    let mut ids = Vec::new();
    for i in 0..n {
        let delivery = Delivery {
            chat: ChatRef::direct(Platform::Telegram, "42"),
            reply_to: None,
            text: format!("reply {i}"),
        };
        let turn = vec![NewMessage::user(format!("q {i}")), NewMessage::assistant("a")];
        let stored = store.append_reply(&session.id, turn, Default::default(), delivery);
        ids.push(*stored.await.unwrap().last().unwrap());
    }
    // A stored reply is its writer's to send (on PostgreSQL its claim is born with it): the
    // writer is gone here, its claims lapse at once.
    store.renew_claims(&ids, Duration::ZERO).await.unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    ids
}

both! {
async fn a_stored_reply_is_its_writers_until_its_claim_lapses(store, scratch) {
    let session = store.create_session(&session_for(Platform::Telegram, "7")).await.unwrap();
    let delivery =
        Delivery { chat: ChatRef::direct(Platform::Telegram, "7"), reply_to: None, text: "r".into() };
    let turn = vec![NewMessage::user("q"), NewMessage::assistant("r")];
    let id = *store.append_reply(&session.id, turn, Default::default(), delivery).await.unwrap().last().unwrap();
    let other = reopen(&scratch).await;
    if store.is_shared() {
        assert!(other.claim_undelivered(10, Duration::from_secs(60)).await.unwrap().is_empty());
        store.renew_claims(&[id], Duration::ZERO).await.unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let taken = other.claim_undelivered(10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(taken.iter().map(|u| u.message_id).collect::<Vec<_>>(), [id]);
}

async fn the_same_message_queued_by_two_replicas_at_once_is_queued_once(store, scratch) {
    let other = reopen(&scratch).await;
    let mut races = Vec::new();
    for n in 0..20 {
        let (a, b) = (store.clone(), other.clone());
        races.push(tokio::spawn(async move {
            let id = format!("m{n}");
            tokio::join!(queue(&a, "slack:dm:D1", &id, "hi"), queue(&b, "slack:dm:D1", &id, "hi"))
        }));
    }
    for race in races {
        let (a, b) = race.await.unwrap();
        assert!(a.is_some() != b.is_some(), "queued by both or by neither: {a:?} {b:?}");
    }
    let queued = store.queued_inbound().await.unwrap();
    assert_eq!(queued.len(), 20);
    assert_eq!(other.queued_for("slack:dm:D1").await.unwrap(), queued);
}

async fn each_key_has_its_queue_and_the_sweep_gets_the_unheld_keys_longest_waiting_first(store, scratch) {
    let held = "slack:dm:Дмитрий 🙂";
    for (key, id, text) in [
        ("b", "1", "one"),
        ("a", "2", "two"),
        ("b", "3", "three"),
        (held, "5", "five"),
        ("c", "4", "four"),
    ] {
        queue(&store, key, id, text).await.unwrap();
    }
    let other = reopen(&scratch).await;
    assert_eq!(other.orphaned_keys().await.unwrap(), ["b", "a", held, "c"]);
    // A key whose session a replica holds is that replica's: the sweep leaves it alone.
    let (a, held_lock) = (store.lock_session("a").await, store.lock_session(held).await);
    let (a, held_lock) = (a.unwrap().unwrap(), held_lock.unwrap().unwrap());
    assert_eq!(other.orphaned_keys().await.unwrap(), ["b", "c"]);
    // PostgreSQL lets go of a dropped lock a moment later.
    drop(a);
    let mut orphans = Vec::new();
    for _ in 0..250 {
        orphans = other.orphaned_keys().await.unwrap();
        if orphans.len() == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(orphans, ["b", "a", "c"]);
    drop(held_lock);
    let b = other.queued_for("b").await.unwrap();
    let texts: Vec<&str> = b.iter().map(|q| q.content.as_str()).collect();
    assert_eq!(texts, ["one", "three"]);
    assert!(b.iter().all(|q| q.session_key == "b" && q.user.id == "U1"));
    assert!(other.queued_for("nobody").await.unwrap().is_empty());
}

async fn each_undelivered_reply_is_claimed_by_one_replica(store, scratch) {
    let mut stored = replies(&store, 12).await;
    let other = reopen(&scratch).await;
    let minute = Duration::from_secs(60);
    let mut claimed = Vec::new();
    loop {
        let (a, b) =
            tokio::join!(store.claim_undelivered(5, minute), other.claim_undelivered(5, minute));
        let (a, b) = (a.unwrap(), b.unwrap());
        if a.is_empty() && b.is_empty() {
            break;
        }
        for batch in [&a, &b] {
            assert!(batch.len() <= 5 && batch.is_sorted_by_key(|u| u.message_id), "{batch:?}");
        }
        claimed.extend(a.into_iter().chain(b).map(|u| u.message_id));
    }
    claimed.sort_unstable();
    stored.sort_unstable();
    assert_eq!(claimed, stored, "every reply claimed, each once");
    // claimed is not delivered: a restart still sees them all
    assert_eq!(store.undelivered().await.unwrap().len(), 12);
}

async fn a_claim_nobody_delivered_expires_and_is_claimed_again(store, scratch) {
    let stored = replies(&store, 2).await;
    // This replica claims both and dies before sending them.
    let dying = store.claim_undelivered(10, Duration::ZERO).await.unwrap();
    assert_eq!(dying.len(), 2);
    tokio::time::sleep(Duration::from_millis(5)).await;
    let other = reopen(&scratch).await;
    let taken = other.claim_undelivered(10, Duration::from_secs(60)).await.unwrap();
    assert_eq!(taken.iter().map(|u| u.message_id).collect::<Vec<_>>(), stored);
    assert_eq!(taken[0].delivery.text, "reply 0");
    assert!(store.claim_undelivered(10, Duration::from_secs(60)).await.unwrap().is_empty());
    other.delivered(stored[0]).await.unwrap();
    let left = store.undelivered().await.unwrap();
    assert_eq!(left.iter().map(|u| u.message_id).collect::<Vec<_>>(), [stored[1]]);
}

async fn a_session_runs_on_one_replica_at_a_time(store, scratch) {
    let other = reopen(&scratch).await;
    let key = "telegram:dm:42";
    let held = store.lock_session(key).await.unwrap().expect("a free session locks");
    assert!(other.lock_session(key).await.unwrap().is_none(), "locked by two replicas");
    assert!(store.lock_session(key).await.unwrap().is_none(), "locked twice by one replica");
    let _elsewhere = other.lock_session("telegram:dm:43").await.unwrap().expect("another key");
    // claims are names apart from session keys
    let claim = other.try_claim(key).await.unwrap().expect("a free claim");
    assert!(store.try_claim(key).await.unwrap().is_none());
    assert!(!held.is_lost() && !claim.is_lost());

    drop(held);
    let moved = lock_when_free(&other, key).await;
    assert!(store.lock_session(key).await.unwrap().is_none());
    drop(moved);
    drop(claim);
    let _back = lock_when_free(&store, key).await;
    assert!(store.try_claim(key).await.unwrap().is_some());
}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_loses_its_connection_loses_its_locks() {
    let (store, scratch) = fresh_on(Kind::Postgres).await;
    let other = reopen(&scratch).await;
    let held = store.lock_session("telegram:dm:42").await.unwrap().unwrap();
    let claim = store.try_claim("telegram:poller").await.unwrap().unwrap();
    assert!(other.lock_session("telegram:dm:42").await.unwrap().is_none());

    // The network drops, or the server restarts: every lock connection of this database goes.
    let mut admin = connect(&scratch).await;
    let killed: Vec<bool> = sqlx::query_scalar(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
         WHERE application_name = 'herald-locks' AND datname = current_database()",
    )
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert_eq!(killed, [true, true]);

    tokio::time::timeout(Duration::from_secs(30), held.lost())
        .await
        .expect("the holder learns its lock is gone");
    assert!(held.is_lost() && claim.is_lost());
    // Another replica takes the session over, on a connection of its own again.
    let taken = other.lock_session("telegram:dm:42").await.unwrap();
    assert!(taken.is_some(), "the lost lock was still held");
    assert!(other.try_claim("telegram:poller").await.unwrap().is_some());
    // and the replica that lost it locks again once it is free
    drop((held, taken));
    let again = lock_when_free(&store, "telegram:dm:42").await;
    assert!(!again.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_hears_at_once_what_another_queued_with_the_message_when_it_fits() {
    let (store, scratch) = crate::fresh_on(herald_store::scratch::Kind::Postgres).await;
    let mut heard = store.queued_notifications();
    let other = reopen(&scratch).await;
    // The listener connects in the background; queue until it hears.
    let mut n = 0;
    loop {
        n += 1;
        queue(&other, "telegram:dm:9", &format!("n{n}"), "hello").await.unwrap();
        if let Ok(Some(Heard::Queued { .. })) =
            tokio::time::timeout(Duration::from_secs(2), heard.recv()).await
        {
            break;
        }
        assert!(n < 10, "nothing heard");
    }
    // What it hears next, skipping what was queued while it started listening.
    let mut next = async |id: &str| loop {
        let news = tokio::time::timeout(Duration::from_secs(10), heard.recv()).await;
        match news.expect("heard in time").expect("still listening") {
            Heard::Queued { key, message } => {
                if message.as_ref().is_none_or(|m| m.message_id == id) {
                    return (key, message);
                }
            }
            Heard::Missed => panic!("the listener broke"),
        }
    };

    let text = "Hola \"amigo\" 👋\n你好，世界 — مرحبا";
    let seq = queue(&other, "telegram:dm:9", "words", text).await.unwrap();
    let (key, message) = next("words").await;
    assert_eq!(key, "telegram:dm:9");
    let message = message.expect("a short message comes with its notification");
    assert_eq!((message.seq, message.content.as_str()), (seq, text));
    assert_eq!(message.chat, ChatRef::direct(Platform::Slack, "D1"));
    assert_eq!(message.user, UserRef { id: "U1".into(), name: None });

    // Too long for a notification: the key alone, and the row waits in the queue.
    let long = "я".repeat(5_000);
    let seq = queue(&other, "slack:dm:D1", "long", &long).await.unwrap();
    let (key, message) = next("long").await;
    assert_eq!((key.as_str(), message), ("slack:dm:D1", None));
    let queued = store.queued_for("slack:dm:D1").await.unwrap();
    assert_eq!((queued[0].seq, queued[0].content.as_str()), (seq, long.as_str()));
}

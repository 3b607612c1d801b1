//! Shutdown: polling stops at once, replies already queued are still delivered.

use std::time::Duration;

use crate::common::{Running, WAIT, dm};
use herald_fakes::telegram::FakeTelegram;

#[tokio::test]
async fn shutdown_stops_polling_but_delivers_queued_replies() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    let mut pending = Vec::new();
    for user in 1..=5 {
        pending.push(adapter.queue(dm(user), "goodbye", None).await);
    }
    adapter.shutdown.cancel();
    // The gateway's drain: one more reply after shutdown, then it lets go of the channel.
    pending.push(adapter.queue(dm(6), "last words", None).await);
    adapter.outbound = None;
    let result = tokio::time::timeout(WAIT, &mut adapter.task).await.unwrap().unwrap();
    result.unwrap();
    for done in pending {
        done.await.unwrap().unwrap();
    }
    assert_eq!(fake.sent().len(), 6);

    let polls = fake.get_updates_offsets().len();
    fake.dm(42, "nobody listens");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(fake.get_updates_offsets().len(), polls, "no polling after shutdown");
}

#[tokio::test]
async fn shutdown_interrupts_a_long_poll() {
    let fake = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&fake);
    settings.poll_timeout = Duration::from_secs(60);
    let mut adapter = Running::start(settings, None);
    adapter.wait_connected().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    adapter.stop().await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_reply_does_not_wait_behind_a_long_poll() {
    let fake = FakeTelegram::start().await;
    let mut settings = crate::common::settings(&fake);
    settings.poll_timeout = Duration::from_secs(60);
    let mut adapter = Running::start(settings, None);
    adapter.wait_connected().await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = std::time::Instant::now();
    adapter.send(dm(42), "right away").await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(1), "took {:?}", started.elapsed());
    adapter.stop().await.unwrap();
}

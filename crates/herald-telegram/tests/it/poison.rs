//! Updates teloxide cannot read (what Telegram sends for a cut emoji, or a broken message): the
//! person is still answered when the update can be repaired, the rest of its batch is handled,
//! and the offset moves past it.

use herald_core::{AdapterEvent, ChatRef};
use herald_fakes::telegram::FakeTelegram;

use crate::common::{Running, dm};

/// A DM from `user` as Telegram's JSON, with `text` the JSON string literal, escapes and all.
fn raw_dm(user: i64, message_id: i64, text: &str) -> String {
    let person = format!(r#"{{"id":{user},"is_bot":false,"first_name":"User {user}"}}"#);
    let chat = format!(r#"{{"id":{user},"type":"private","first_name":"User {user}"}}"#);
    format!(
        r#"{{"message_id":{message_id},"date":1700000000,"chat":{chat},"from":{person},"text":{text}}}"#
    )
}

/// The chat and text of the next inbound message, settled; a failed poll fails the test instead
/// of being retried.
async fn next(adapter: &mut Running) -> (ChatRef, String) {
    let msg = adapter
        .until(|e| match e {
            AdapterEvent::Inbound(msg) => Some(msg),
            AdapterEvent::Retrying { error, .. } => panic!("polling failed: {error}"),
            _ => None,
        })
        .await;
    msg.ack.settle();
    (msg.chat, msg.text)
}

#[tokio::test]
async fn a_lone_surrogate_becomes_a_replacement_character_and_polling_goes_on() {
    let fake = FakeTelegram::start().await;
    // Queued before the first poll, so the three arrive in one batch.
    fake.dm(41, "before");
    fake.inject_raw(&raw_dm(42, 1, r#""hi \ud83d""#));
    let last = fake.dm(43, "after");
    let mut adapter = Running::connected(&fake, None).await;

    let mut got = Vec::new();
    for _ in 0..3 {
        got.push(next(&mut adapter).await);
    }
    assert_eq!(
        got,
        [(dm(41), "before".into()), (dm(42), "hi \u{FFFD}".into()), (dm(43), "after".into())]
    );
    assert_eq!(adapter.cursor().await, (last + 1).to_string());

    fake.dm(42, "still heard");
    assert_eq!(next(&mut adapter).await, (dm(42), "still heard".into()));
    assert!(fake.get_updates_offsets().contains(&Some(last + 1)), "the offset moved past");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn an_unreadable_update_is_skipped_and_the_rest_of_its_batch_handled() {
    let fake = FakeTelegram::start().await;
    fake.dm(41, "before");
    // A message id that is not a number, with a lone surrogate too: no repair makes it readable.
    let broken =
        raw_dm(42, 1, r#""lost \udc00""#).replace(r#""message_id":1"#, r#""message_id":"x""#);
    fake.inject_raw(&broken);
    fake.dm(43, "after");
    // Last in its batch: the offset must still move past it.
    let last = fake.inject_raw(r#"{"message_id":2,"date":1700000000,"text":"no chat"}"#);
    let mut adapter = Running::connected(&fake, None).await;

    assert_eq!(next(&mut adapter).await.1, "before");
    assert_eq!(next(&mut adapter).await.1, "after");
    assert_eq!(adapter.cursor().await, (last + 1).to_string());

    fake.dm(44, "next batch");
    assert_eq!(next(&mut adapter).await.1, "next batch");
    adapter.stop().await.unwrap();
}

//! Updates in, cursors out: what the gateway is told about messages and how the offset moves.

use herald_core::{ChatRef, Platform};
use herald_fakes::telegram::{FakeTelegram, UserMessage};

use crate::common::{Running, WAIT, dm};

#[tokio::test]
async fn a_dm_arrives_with_its_chat_user_and_text() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::start(crate::common::settings(&fake), None);
    assert_eq!(adapter.wait_connected().await, FakeTelegram::BOT_USERNAME);

    fake.dm(42, "hello there");
    let msg = adapter.inbound().await;
    assert_eq!(msg.chat, dm(42));
    assert_eq!(msg.user.id, "42");
    assert_eq!(msg.text, "hello there");
    assert!(!msg.mentioned && !msg.reply_to_bot);
    assert!(msg.id.starts_with("42:"), "{}", msg.id);
    msg.ack.settle();
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn group_messages_say_whether_they_address_the_bot() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    let group = ChatRef::group(Platform::Telegram, "-100");

    fake.inject(UserMessage::group(-100, 42, "what is up").mention());
    let msg = adapter.inbound().await;
    assert_eq!(
        (msg.chat.clone(), msg.text.as_str(), msg.mentioned),
        (group.clone(), "what is up", true)
    );
    msg.ack.settle();

    fake.inject(UserMessage::group(-100, 42, "yes please").reply_to_bot());
    let msg = adapter.inbound().await;
    assert_eq!((msg.text.as_str(), msg.mentioned, msg.reply_to_bot), ("yes please", false, true));
    msg.ack.settle();

    fake.inject(UserMessage::group(-100, 42, "just chatting"));
    let msg = adapter.inbound().await;
    assert!(!msg.addressed());
    msg.ack.settle();

    fake.inject(UserMessage::topic(-100, 7, 42, "in a topic"));
    let msg = adapter.inbound().await;
    assert_eq!(msg.chat, group.in_thread("7"));
    msg.ack.settle();

    fake.inject(UserMessage::group(-100, 42, "/new@herald_test_bot"));
    let msg = adapter.inbound().await;
    assert_eq!((msg.text.as_str(), msg.mentioned), ("/new", true));
    msg.ack.settle();
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn commands_for_other_bots_are_skipped_but_confirmed() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    let skipped = fake.inject(UserMessage::group(-100, 42, "/new@some_other_bot"));
    assert_eq!(adapter.cursor().await, (skipped + 1).to_string());
    fake.dm(42, "next");
    let msg = adapter.inbound().await;
    assert_eq!(msg.text, "next");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn settled_acks_move_the_cursor_and_a_restart_does_not_replay() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    let first = fake.dm(42, "one");
    adapter.inbound().await.ack.settle();
    let cursor = adapter.cursor().await;
    assert_eq!(cursor, (first + 1).to_string());
    wait_for_offset(&fake, first + 1).await;
    adapter.stop().await.unwrap();

    let mut adapter = Running::connected(&fake, Some(cursor)).await;
    fake.dm(42, "two");
    let msg = adapter.inbound().await;
    assert_eq!(msg.text, "two", "the confirmed message was not replayed");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn an_unsettled_ack_holds_the_cursor_and_the_message_comes_again() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    fake.dm(42, "keep me");
    let msg = adapter.inbound().await;
    let id = msg.id.clone();
    drop(msg.ack);
    let again = adapter
        .until(|e| match e {
            herald_core::AdapterEvent::Cursor(c) => panic!("cursor {c} moved past a dropped ack"),
            herald_core::AdapterEvent::Inbound(msg) => Some(msg),
            _ => None,
        })
        .await;
    assert_eq!((again.id.as_str(), again.text.as_str()), (id.as_str(), "keep me"));
    again.ack.settle();
    adapter.cursor().await;
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn a_garbage_cursor_is_ignored() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, Some("not a number".into())).await;
    fake.dm(42, "still heard");
    assert_eq!(adapter.inbound().await.text, "still heard");
    adapter.stop().await.unwrap();
}

/// Waits until the fake has seen a `getUpdates` with `offset`.
async fn wait_for_offset(fake: &FakeTelegram, offset: i64) {
    tokio::time::timeout(WAIT, async {
        while !fake.get_updates_offsets().contains(&Some(offset)) {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the fake saw the new offset");
}

#[tokio::test]
async fn a_redelivered_message_keeps_its_id() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    let update = fake.dm(42, "twice");
    let first = adapter.inbound().await;
    first.ack.settle();
    fake.redeliver(update);
    let second = adapter.inbound().await;
    assert_eq!(second.id, first.id);
    adapter.stop().await.unwrap();
}

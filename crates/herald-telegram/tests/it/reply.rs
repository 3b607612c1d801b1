//! Replies out: splitting, markup, threads, edits and typing.

use std::time::{Duration, Instant};

use herald_core::{ChatRef, LengthUnit, Outbound, Platform, SendError};
use herald_fakes::telegram::{FakeTelegram, TelegramFault};

use crate::common::{Running, WAIT, dm};

#[tokio::test]
async fn a_long_reply_with_code_is_split_into_valid_messages() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    let code: String =
        (0..120).map(|i| format!("let value_{i} = compute({i}); // step\n")).collect();
    let mut text = String::from("Here is the **plan**:\n\n");
    text.push_str(&"Some prose that explains the code below in detail. ".repeat(20));
    text.push_str("\n\n```rust\n");
    text.push_str(&code);
    text.push_str("```\n\nThat is all.");
    assert!(text.chars().count() >= 5000);

    let ids = adapter.send(dm(42), &text).await.unwrap();
    let sent = fake.sent_to(42);
    assert!(sent.len() >= 2, "{} messages", sent.len());
    assert_eq!(ids, sent.iter().map(|m| m.message_id.to_string()).collect::<Vec<_>>());
    for message in &sent {
        assert!(LengthUnit::Utf16.len(&message.text) <= 4096);
        assert_eq!(message.parse_mode.as_deref(), Some("HTML"));
        assert_eq!(
            message.text.matches("<pre").count(),
            message.text.matches("</pre>").count(),
            "balanced code blocks in {:?}",
            message.text
        );
    }
    let all: String = sent.iter().map(|m| m.text.as_str()).collect();
    assert!(all.contains("let value_0 = compute(0);") && all.contains("let value_119"));
    assert!(all.contains("<b>plan</b>") && all.contains("That is all."));
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn replies_go_to_the_thread_and_quote_only_once() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    let topic = ChatRef::group(Platform::Telegram, "-100").in_thread("7");
    let long = "word ".repeat(1200);
    let done = adapter.queue(topic, &long, Some("-100:55")).await;
    tokio::time::timeout(WAIT, done).await.unwrap().unwrap().unwrap();
    let sent = fake.sent_to(-100);
    assert!(sent.len() >= 2);
    assert!(sent.iter().all(|m| m.thread_id == Some(7)));
    assert_eq!(sent[0].reply_to, Some(55));
    assert!(sent[1..].iter().all(|m| m.reply_to.is_none()));
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn rejected_markup_falls_back_to_plain_text() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    fake.reject_markup(true);
    adapter.send(dm(42), "**bold** and `code`").await.unwrap();
    let sent = fake.sent_to(42);
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].parse_mode, None);
    assert_eq!(sent[0].text, "**bold** and `code`");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn flood_control_is_waited_out() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    fake.push_fault("sendmessage", TelegramFault::TooManyRequests { retry_after: 1 });
    let started = Instant::now();
    adapter.send(dm(42), "patience").await.unwrap();
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900), "waited only {waited:?}");
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    assert_eq!(fake.sent_to(42).len(), 1);
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn a_refused_message_is_reported_not_retried() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    fake.push_fault("sendmessage", TelegramFault::Status(403));
    let result = adapter.send(dm(42), "hello").await;
    assert!(matches!(result, Err(SendError::Rejected(_))), "{result:?}");
    assert!(fake.sent_to(42).is_empty());
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn edits_and_typing_reach_telegram() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    let ids = adapter.send(dm(42), "draft").await.unwrap();
    let message = ids[0].clone();
    adapter.request(Outbound::Edit { chat: dm(42), message, text: "**final**".into() }).await;
    adapter.request(Outbound::Typing { chat: dm(42) }).await;
    tokio::time::timeout(WAIT, async {
        while fake.edits().is_empty() || fake.chat_actions().is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert!(fake.edits()[0].text.contains("<b>final</b>"));
    assert_eq!(fake.chat_actions(), vec![(42, "typing".to_owned())]);
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn many_chats_are_served_concurrently() {
    let fake = FakeTelegram::start().await;
    let adapter = Running::connected(&fake, None).await;
    let mut pending = Vec::new();
    for user in 0..200 {
        pending.push(adapter.queue(dm(10_000 + user), "hi", None).await);
    }
    for done in pending {
        tokio::time::timeout(WAIT, done).await.unwrap().unwrap().unwrap();
    }
    assert_eq!(fake.sent().len(), 200);
    adapter.stop().await.unwrap();
}

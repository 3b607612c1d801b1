//! Conversations: sessions per chat, order, the queue, commands, long replies, faults.

use std::time::Duration;

use herald_core::Platform;
use herald_fakes::telegram::{TelegramFault, UserMessage};
use herald_fakes::{Fault, Reply};

use super::{Daemon, settle};

#[tokio::test(flavor = "multi_thread")]
async fn a_dm_is_answered_and_the_next_message_continues_the_session() {
    let mut d = Daemon::start("").await;
    d.telegram.dm(1001, "hello there");
    let sent = d.replies(1001, 1).await;
    assert_eq!(sent[0].text, "echo: hello there");
    d.telegram.dm(1001, "and again");
    let sent = d.replies(1001, 2).await;
    assert_eq!(sent[1].text, "echo: and again");

    let store = d.store().await;
    let session = store.routed_session("telegram:dm:1001").await.unwrap().unwrap();
    assert_eq!(session.source, Platform::Telegram);
    assert_eq!(session.chat_id.as_deref(), Some("1001"));
    assert_eq!(session.user_id.as_deref(), Some("1001"));
    assert_eq!(session.message_count, 4, "two user messages and two answers in one session");
    let prompt = store.system_prompt(&session.id).await.unwrap().unwrap();
    assert!(prompt.contains("Telegram"), "{prompt}");
    let second = d.model.requests().pop().unwrap();
    assert_eq!(
        second["messages"].as_array().unwrap().len(),
        4,
        "system + 3 history messages: {second}"
    );
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_chats_are_answered_in_order_each_in_its_own_session() {
    let d = Daemon::start("group_sessions_per_user = true").await;
    // Everyone writes to the bot; the allowlist is three users, so chats are groups with
    // mentions from allowed users and DMs from the allowed ones.
    for round in 0..4 {
        for chat in 0..50_i64 {
            let user = super::ALLOWED[(chat % 3) as usize];
            let msg =
                UserMessage::group(-5000 - chat, user, &format!("c{chat} m{round}")).mention();
            d.telegram.inject(msg);
        }
    }
    for chat in 0..50_i64 {
        let sent = d.replies(-5000 - chat, 4).await;
        let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
        let expected: Vec<String> = (0..4).map(|r| format!("echo: c{chat} m{r}")).collect();
        assert_eq!(texts, expected, "chat {chat}");
    }
    let store = d.store().await;
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 50);
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn messages_sent_while_busy_are_all_answered_in_order() {
    let d = Daemon::start("busy_input = \"queue\"").await;
    d.model.set_latency(Duration::from_millis(600));
    d.telegram.dm(1001, "first");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for text in ["second", "third", "fourth"] {
        d.telegram.dm(1001, text);
    }
    let sent = d.replies(1001, 4).await;
    let texts: Vec<&str> = sent.iter().map(|m| m.text.as_str()).collect();
    assert_eq!(texts, ["echo: first", "echo: second", "echo: third", "echo: fourth"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn interrupt_mode_answers_the_newest_message() {
    let d = Daemon::start("busy_input = \"interrupt\"").await;
    d.model.set_latency(Duration::from_millis(800));
    d.telegram.dm(1001, "first");
    while d.model.request_count() == 0 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    d.telegram.dm(1001, "never mind, this instead");
    let sent = d.replies(1001, 1).await;
    settle().await;
    let sent_now = d.telegram.sent_to(1001);
    assert_eq!(sent_now.len(), 1, "{sent_now:?}");
    assert_eq!(sent[0].text, "echo: never mind, this instead");
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_commands_do_what_they_say() {
    let d = Daemon::start("").await;
    d.telegram.dm(1001, "remember the tea");
    d.replies(1001, 1).await;
    let store = d.store().await;
    let old = store.routed_session("telegram:dm:1001").await.unwrap().unwrap();

    d.telegram.dm(1001, "/status");
    let status = &d.replies(1001, 2).await[1].text;
    assert!(status.contains(&old.id) && status.contains("Messages: 2"), "{status}");

    d.telegram.dm(1001, "/whoami");
    assert!(d.replies(1001, 3).await[2].text.contains("1001"));

    d.telegram.dm(1001, "/title Tea plans");
    d.replies(1001, 4).await;
    assert_eq!(store.session(&old.id).await.unwrap().unwrap().title.as_deref(), Some("Tea plans"));

    d.telegram.dm(1001, "/undo");
    d.replies(1001, 5).await;
    assert_eq!(store.session(&old.id).await.unwrap().unwrap().message_count, 0);

    d.telegram.dm(1001, "say something");
    d.replies(1001, 6).await;
    d.model.push_reply(Reply::text("a better answer"));
    d.telegram.dm(1001, "/retry");
    let retried = d.replies(1001, 7).await;
    assert_eq!(retried[6].text, "a better answer");
    let history = store.history(&old.id).await.unwrap();
    assert_eq!(history.len(), 2, "the old answer was replaced: {history:?}");

    d.telegram.dm(1001, "/new");
    d.replies(1001, 8).await;
    let new = store.routed_session("telegram:dm:1001").await.unwrap().unwrap();
    assert_ne!(new.id, old.id);
    let old = store.session(&old.id).await.unwrap().unwrap();
    assert_eq!(old.end_reason.as_deref(), Some("new"));
    assert!(old.ended_at.is_some());
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_reply_is_split_without_breaking_code_fences() {
    let d = Daemon::start("").await;
    let code: String =
        (0..120).map(|i| format!("let line_{i} = {i}; // some code here\n")).collect();
    let prose = "Some words of explanation. ".repeat(60);
    let reply = format!("{prose}\n\n```rust\n{code}```\n\n{prose}");
    assert!(reply.chars().count() > 5000);
    d.model.push_reply(Reply::text(reply));
    d.telegram.dm(1001, "show me code");
    d.replies(1001, 2).await;
    settle().await;
    let sent = d.telegram.sent_to(1001);
    assert!(sent.len() >= 2, "{sent:?}");
    for message in &sent {
        assert!(message.text.encode_utf16().count() <= 4096);
        assert_eq!(
            message.text.matches("<pre>").count(),
            message.text.matches("</pre>").count(),
            "{}",
            message.text
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn faults_are_survived() {
    let d = Daemon::start("").await;
    // markup the platform rejects falls back to plain text
    d.telegram.reject_markup(true);
    d.model.push_reply(Reply::text("**bold** answer"));
    d.telegram.dm(1001, "one");
    let sent = d.replies(1001, 1).await;
    assert!(sent[0].parse_mode.is_none() && sent[0].text.contains("bold"), "{sent:?}");
    d.telegram.reject_markup(false);

    // 429 on send, then success
    d.telegram.push_fault("sendMessage", TelegramFault::TooManyRequests { retry_after: 1 });
    d.telegram.dm(1001, "two");
    assert_eq!(d.replies(1001, 2).await[1].text, "echo: two");

    // the platform drops connections for a while
    d.telegram.set_offline(true);
    d.telegram.dm(1001, "three");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    d.telegram.set_offline(false);
    assert_eq!(d.replies(1001, 3).await[2].text, "echo: three");

    // the model fails: one short line, the session stays consistent
    d.model.push_fault(Fault::status(500));
    d.model.push_fault(Fault::status(500));
    d.model.push_fault(Fault::status(500));
    d.model.push_fault(Fault::status(500));
    d.telegram.dm(1001, "four");
    let failed = &d.replies(1001, 4).await[3].text;
    assert!(failed.starts_with("Sorry") && failed.contains("/retry"), "{failed}");
    assert_eq!(failed.lines().count(), 1);
    d.telegram.dm(1001, "five");
    assert_eq!(d.replies(1001, 5).await[4].text, "echo: five");
}

//! Webhook mode: the adapter sets the webhook with its secret, refuses requests without it, and
//! answers an update 200 only once the gateway settled it.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use herald_fakes::telegram::FakeTelegram;
use herald_telegram::{TelegramSettings, WebhookSettings, derived_secret};

use crate::common::{Running, WAIT, dm, settings};

/// A loopback address nothing listens on yet.
async fn free_address() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap()
}

/// Settings for webhook mode on a free loopback port, the webhook at `/telegram`.
async fn webhook_settings(fake: &FakeTelegram) -> (TelegramSettings, String) {
    let listen = free_address().await;
    let url = format!("http://{listen}/telegram");
    let mut settings = settings(fake);
    settings.webhook = Some(WebhookSettings::new(&url, listen, FakeTelegram::TOKEN));
    (settings, url)
}

/// Starts in webhook mode and waits until the webhook is set.
async fn start(fake: &FakeTelegram) -> (Running, String) {
    let (settings, url) = webhook_settings(fake).await;
    let mut adapter = Running::start(settings, None);
    adapter.wait_connected().await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.webhook_url().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "the adapter sets its webhook");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (adapter, url)
}

fn client() -> reqwest::Client {
    reqwest::Client::builder().no_proxy().build().unwrap()
}

#[tokio::test]
async fn the_webhook_is_set_with_the_derived_secret_and_refuses_requests_without_it() {
    let fake = FakeTelegram::start().await;
    let (mut adapter, url) = start(&fake).await;
    assert_eq!(fake.webhook_url().as_deref(), Some(url.as_str()));
    assert_eq!(fake.webhook_secret(), Some(derived_secret(FakeTelegram::TOKEN)));
    let set = fake.requests().into_iter().find(|r| r.method == "setwebhook").unwrap();
    assert!(set.body["allowed_updates"].to_string().contains("message"), "{}", set.body);
    // Polling and a webhook exclude each other: nothing polled.
    assert!(fake.get_updates_offsets().is_empty());

    let update = r#"{"update_id":1,"message":{"message_id":1,"date":0,"chat":{"id":5,"type":"private","first_name":"u"},"from":{"id":5,"is_bot":false,"first_name":"u"},"text":"sneaky"}}"#;
    let client = client();
    let post = |secret: Option<&str>, path: &str| {
        let mut request = client.post(url.replace("/telegram", path)).body(update);
        if let Some(secret) = secret {
            request = request.header("X-Telegram-Bot-Api-Secret-Token", secret);
        }
        request.send()
    };
    assert_eq!(post(None, "/telegram").await.unwrap().status(), 401);
    assert_eq!(post(Some("wrong"), "/telegram").await.unwrap().status(), 401);
    let secret = derived_secret(FakeTelegram::TOKEN);
    assert_eq!(post(Some(&secret), "/other").await.unwrap().status(), 404);
    assert_eq!(client.get(&url).send().await.unwrap().status(), 405);
    let garbage = client
        .post(&url)
        .header("X-Telegram-Bot-Api-Secret-Token", &secret)
        .body("not an update")
        .send()
        .await
        .unwrap();
    assert_eq!(garbage.status(), 400);

    // Nothing reached the gateway; a real update from Telegram does.
    fake.dm(7, "hello");
    let inbound = adapter.inbound().await;
    assert_eq!(inbound.text, "hello");
    inbound.ack.settle();
    while let Ok(event) = adapter.events.try_recv() {
        assert!(!matches!(event, herald_core::AdapterEvent::Inbound(_)), "{event:?}");
    }
    adapter.stop().await.unwrap();
    // A stopping replica leaves the webhook to the others.
    assert!(fake.webhook_url().is_some());
    assert!(fake.requests().iter().all(|r| r.method != "deletewebhook"));
}

#[tokio::test]
async fn fifty_chats_of_three_messages_are_answered_once_in_order() {
    let fake = FakeTelegram::start().await;
    let (mut adapter, _) = start(&fake).await;
    for round in 0..3 {
        for user in 1..=50 {
            fake.dm(user, &format!("m{round}"));
        }
    }
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for _ in 0..150 {
        let inbound = adapter.inbound().await;
        let (chat, text) = (inbound.chat.clone(), inbound.text.clone());
        inbound.ack.settle();
        adapter.send(chat.clone(), &format!("re {text}")).await.unwrap();
        seen.entry(chat.id.clone()).or_default().push(text);
    }
    assert_eq!(seen.len(), 50);
    assert!(seen.values().all(|texts| texts == &["m0", "m1", "m2"]), "{seen:?}");
    for user in 1..=50 {
        let sent: Vec<String> = fake.sent_to(user).into_iter().map(|m| m.text).collect();
        assert_eq!(sent, ["re m0", "re m1", "re m2"], "chat {user}");
    }
    assert_eq!(fake.wait_delivered(150, WAIT).await.len(), 150);
    assert_eq!(fake.pending_updates(), 0);
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn an_update_is_answered_only_once_settled_and_a_second_copy_is_not_handed_on() {
    let fake = FakeTelegram::start().await;
    let (mut adapter, _) = start(&fake).await;

    // Unsettled: Telegram has no answer yet.
    let first = fake.dm(1, "wait for me");
    let inbound = adapter.inbound().await;
    assert!(fake.webhook_delivered().is_empty());
    assert_eq!(fake.pending_updates(), 1);
    // Dropped unsettled (the replica could not store it): Telegram gets an error and posts it
    // again, and it comes back.
    drop(inbound);
    let again = adapter.inbound().await;
    assert_eq!(again.text, "wait for me");
    assert!(fake.webhook_posts().iter().any(|(id, status)| *id == first && *status == Some(503)));
    again.ack.settle();
    assert_eq!(fake.wait_delivered(1, WAIT).await, [first]);

    // The same update id once more: answered 200 without a second message.
    fake.repeat(first);
    assert_eq!(fake.wait_delivered(2, WAIT).await, [first, first]);
    fake.dm(1, "next");
    assert_eq!(adapter.inbound().await.text, "next", "the repeat was not handed on");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn polling_mode_deletes_a_webhook_and_keeps_its_updates() {
    let fake = FakeTelegram::start().await;
    fake.set_webhook(Some("https://bot.example.com/telegram".into()));
    fake.dm(3, "sent while the webhook was set");
    let mut adapter = Running::connected(&fake, None).await;
    let inbound = adapter.inbound().await;
    assert_eq!(inbound.text, "sent while the webhook was set");
    inbound.ack.settle();
    assert_eq!(fake.webhook_url(), None);
    let delete = fake.requests().into_iter().find(|r| r.method == "deletewebhook").unwrap();
    assert_ne!(delete.body["drop_pending_updates"], serde_json::json!(true));
    adapter.send(dm(3), "polling").await.unwrap();
    adapter.stop().await.unwrap();
}

//! A lost or contested connection: the adapter says so, retries, and hears every message after.

use std::time::Duration;

use herald_core::{AdapterError, AdapterEvent, Platform};
use herald_fakes::telegram::{FakeTelegram, TelegramFault};
use herald_telegram::TelegramSettings;

use crate::common::{Running, WAIT, settings};

#[tokio::test]
async fn a_polling_conflict_is_retried_until_it_clears() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    fake.push_fault("getupdates", TelegramFault::Conflict);
    let error = adapter
        .until(|e| match e {
            AdapterEvent::Retrying { error, .. } => Some(error),
            _ => None,
        })
        .await;
    assert!(error.contains("conflict"), "{error}");
    adapter.wait_connected().await;
    fake.dm(42, "after the conflict");
    assert_eq!(adapter.inbound().await.text, "after the conflict");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn messages_sent_while_offline_arrive_once_back() {
    let fake = FakeTelegram::start().await;
    let mut adapter = Running::connected(&fake, None).await;
    fake.set_offline(true);
    let error = adapter
        .until(|e| match e {
            AdapterEvent::Retrying { error, .. } => Some(error),
            _ => None,
        })
        .await;
    assert!(!error.contains(FakeTelegram::TOKEN), "the token leaked: {error}");
    fake.dm(42, "while you were away");
    tokio::time::sleep(Duration::from_millis(300)).await;
    fake.set_offline(false);
    adapter.wait_connected().await;
    assert_eq!(adapter.inbound().await.text, "while you were away");
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn a_server_error_at_start_is_retried() {
    let fake = FakeTelegram::start().await;
    fake.push_fault("getme", TelegramFault::Drop);
    let mut adapter = Running::start(settings(&fake), None);
    let first = adapter.event().await;
    assert!(matches!(first, AdapterEvent::Retrying { .. }), "{first:?}");
    adapter.wait_connected().await;
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn a_webhook_is_removed_so_polling_works() {
    let fake = FakeTelegram::start().await;
    fake.set_webhook(Some("https://example.invalid/hook".into()));
    let mut adapter = Running::connected(&fake, None).await;
    fake.dm(42, "polled");
    assert_eq!(adapter.inbound().await.text, "polled");
    assert!(fake.requests().iter().any(|r| r.method == "deletewebhook"));
    adapter.stop().await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_stops_the_adapter_with_a_hint() {
    let fake = FakeTelegram::start().await;
    let wrong = TelegramSettings { token: "999:wrong-token".into(), ..settings(&fake) };
    let adapter = Running::start(wrong, None);
    let result = tokio::time::timeout(WAIT, adapter.task).await.unwrap().unwrap();
    let Err(err @ AdapterError::Unauthorized { platform: Platform::Telegram, .. }) = result else {
        panic!("expected Unauthorized, got {result:?}");
    };
    let message = err.to_string();
    assert!(message.contains("TELEGRAM_BOT_TOKEN"), "{message}");
    assert!(!message.contains("wrong-token"), "the token leaked: {message}");
}

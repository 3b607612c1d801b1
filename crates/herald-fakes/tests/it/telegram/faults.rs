use std::time::{Duration, Instant};

use herald_fakes::telegram::{FakeTelegram, TelegramFault};
use serde_json::json;
use teloxide::prelude::*;
use teloxide::types::Seconds;
use teloxide::{ApiError, RequestError};

use super::{WAIT, bot, bot_with_token, raw};

#[tokio::test]
async fn flood_control_surfaces_as_retry_after_once() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.push_fault("sendMessage", TelegramFault::TooManyRequests { retry_after: 2 });
    let limited = bot.send_message(ChatId(42), "hi").await;
    assert!(
        matches!(limited, Err(RequestError::RetryAfter(s)) if s == Seconds::from_seconds(2)),
        "{limited:?}"
    );
    bot.send_message(ChatId(42), "hi").await.unwrap();
    assert_eq!(fake.sent().len(), 1);

    fake.push_fault("sendmessage", TelegramFault::TooManyRequests { retry_after: 3 });
    let (status, body) =
        raw(&fake, FakeTelegram::TOKEN, "SendMessage", json!({"chat_id": 1, "text": "x"})).await;
    let expected = json!({"ok": false, "error_code": 429, "description": "Too Many Requests: retry after 3", "parameters": {"retry_after": 3}});
    assert_eq!((status, body), (429, expected));
}

#[tokio::test]
async fn a_conflict_is_teloxides_terminated_by_other_get_updates() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.push_fault("getUpdates", TelegramFault::Conflict);
    let conflict = bot.get_updates().await;
    assert!(
        matches!(conflict, Err(RequestError::Api(ApiError::TerminatedByOtherGetUpdates))),
        "{conflict:?}"
    );
    assert!(bot.get_updates().await.unwrap().is_empty());
}

#[tokio::test]
async fn faults_queue_per_method_in_order() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.push_fault("SENDMESSAGE", TelegramFault::Status(403));
    fake.push_fault("sendMessage", TelegramFault::Status(400));
    bot.get_me().await.unwrap();
    let blocked = bot.send_message(ChatId(42), "a").await;
    assert!(matches!(blocked, Err(RequestError::Api(ApiError::BotBlocked))), "{blocked:?}");
    let missing = bot.send_message(ChatId(42), "b").await;
    assert!(matches!(missing, Err(RequestError::Api(ApiError::ChatNotFound))), "{missing:?}");
    bot.send_message(ChatId(42), "c").await.unwrap();
}

#[tokio::test]
async fn a_server_error_has_its_status_and_reason() {
    // Over reqwest: teloxide sleeps 10 s before reading any 5xx answer.
    let fake = FakeTelegram::start().await;
    fake.push_fault("getme", TelegramFault::Status(502));
    let (status, body) = raw(&fake, FakeTelegram::TOKEN, "getMe", json!({})).await;
    assert_eq!(
        (status, body),
        (502, json!({"ok": false, "error_code": 502, "description": "Bad Gateway"}))
    );
    let (status, body) = raw(&fake, FakeTelegram::TOKEN, "getMe", json!({})).await;
    assert_eq!((status, body["result"]["id"].as_i64()), (200, Some(1000)));
}

#[tokio::test]
async fn a_dropped_connection_is_a_network_error_once() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.push_fault("getMe", TelegramFault::Drop);
    let dropped = bot.get_me().await;
    assert!(matches!(dropped, Err(RequestError::Network(_))), "{dropped:?}");
    bot.get_me().await.unwrap();
}

#[tokio::test]
async fn a_wrong_token_is_unauthorized_and_an_unknown_method_not_found() {
    let fake = FakeTelegram::start().await;
    let wrong = bot_with_token(&fake, "999:wrong").get_me().await;
    assert!(matches!(wrong, Err(RequestError::Api(ApiError::InvalidToken))), "{wrong:?}");
    let (status, body) = raw(&fake, "999:wrong", "getMe", json!({})).await;
    assert_eq!(
        (status, body),
        (401, json!({"ok": false, "error_code": 401, "description": "Unauthorized"}))
    );
    let (status, body) = raw(&fake, FakeTelegram::TOKEN, "sendPigeon", json!({})).await;
    assert_eq!(
        (status, body["ok"].as_bool(), body["error_code"].as_u64()),
        (404, Some(false), Some(404))
    );
    fake.push_fault("getme", TelegramFault::Status(500));
    assert_eq!(
        raw(&fake, "999:wrong", "getMe", json!({})).await.0,
        401,
        "faults wait for the right token"
    );
    assert_eq!(raw(&fake, FakeTelegram::TOKEN, "getMe", json!({})).await.0, 500);
}

#[tokio::test]
async fn offline_drops_every_request_and_a_held_poll_until_back() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    bot.get_me().await.unwrap();
    let poller = bot.clone();
    let held = tokio::spawn(async move { poller.get_updates().timeout(10).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    fake.set_offline(true);
    let cut = tokio::time::timeout(WAIT, held).await.unwrap().unwrap();
    assert!(matches!(cut, Err(RequestError::Network(_))), "{cut:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    for _ in 0..2 {
        let failed = bot.get_me().await;
        assert!(matches!(failed, Err(RequestError::Network(_))), "{failed:?}");
    }
    fake.dm(42, "while away");
    fake.set_offline(false);
    assert_eq!(bot.get_updates().await.unwrap().len(), 1);
    bot.get_me().await.unwrap();
}

#[tokio::test]
async fn a_webhook_blocks_polling_until_deleted() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    assert!(bot.get_webhook_info().await.unwrap().url.is_none());
    fake.set_webhook(Some("https://example.invalid/hook".into()));
    let info = bot.get_webhook_info().await.unwrap();
    assert_eq!(info.url.unwrap().as_str(), "https://example.invalid/hook");
    let refused = bot.get_updates().await;
    let Err(RequestError::Api(error)) = refused else { panic!("{refused:?}") };
    assert!(error.to_string().contains("webhook is active"), "{error}");
    bot.delete_webhook().await.unwrap();
    assert!(bot.get_webhook_info().await.unwrap().url.is_none());
    assert!(bot.get_updates().await.unwrap().is_empty());
}

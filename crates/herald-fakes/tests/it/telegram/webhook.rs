//! Webhooks: `setWebhook` checked as Telegram checks it, and updates posted to the webhook one
//! at a time per chat, with the secret, again after a failure.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use herald_fakes::telegram::FakeTelegram;
use serde_json::{Value, json};
use teloxide::payloads::SetWebhookSetters;
use teloxide::prelude::*;

use super::{WAIT, bot, raw};

/// What the receiver saw: each post's update id and secret header.
type Seen = Arc<Mutex<Vec<(i64, Option<String>)>>>;

/// A webhook on loopback that refuses the first post of update `refuse` with 500.
async fn receiver(refuse: Option<i64>) -> (String, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let refused = Arc::new(Mutex::new(false));
    let router = Router::new().fallback(move |headers: HeaderMap, body: String| {
        let (log, refused) = (log.clone(), refused.clone());
        async move {
            let update: Value = serde_json::from_str(&body).unwrap();
            let id = update["update_id"].as_i64().unwrap();
            let secret = headers
                .get("x-telegram-bot-api-secret-token")
                .map(|v| v.to_str().unwrap().to_owned());
            log.lock().unwrap().push((id, secret));
            let mut refused = refused.lock().unwrap();
            if Some(id) == refuse && !*refused {
                *refused = true;
                return StatusCode::INTERNAL_SERVER_ERROR;
            }
            StatusCode::OK
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router).await });
    (url, seen)
}

#[tokio::test]
async fn set_webhook_is_checked_like_telegram() {
    let fake = FakeTelegram::start().await;
    let call = |params: Value| raw(&fake, FakeTelegram::TOKEN, "setWebhook", params);
    for (params, words) in [
        (json!({"url": "http://bot.example.com/t"}), "HTTPS URL must be provided"),
        (json!({"url": "https://bot.example.com:9000/t"}), "ports 80, 88, 443 or 8443"),
        (json!({"url": "https://bot.example.com/t", "secret_token": "a b"}), "unallowed"),
        (json!({"url": "https://bot.example.com/t", "secret_token": "a".repeat(257)}), "too long"),
        (json!({"url": "https://bot.example.com/t", "max_connections": 0}), "max_connections"),
        (json!({"url": "https://bot.example.com/t", "max_connections": 101}), "max_connections"),
    ] {
        let (status, body) = call(params.clone()).await;
        assert_eq!(status, 400, "{params}");
        assert!(body["description"].as_str().unwrap().contains(words), "{params}: {body}");
    }
    assert_eq!(fake.webhook_url(), None);

    let (status, _) =
        call(json!({"url": "https://bot.example.com/t", "secret_token": "s-1_A"})).await;
    assert_eq!(status, 200);
    assert_eq!(fake.webhook_secret().as_deref(), Some("s-1_A"));
    let bot = bot(&fake);
    let info = bot.get_webhook_info().await.unwrap();
    assert_eq!(info.url.unwrap().as_str(), "https://bot.example.com/t");
    let polled = bot.get_updates().timeout(0).await.unwrap_err().to_string();
    assert!(polled.contains("can't use getUpdates method while webhook is active"), "{polled}");
    // An empty url removes the webhook, as deleteWebhook does.
    assert_eq!(call(json!({"url": ""})).await.0, 200);
    assert_eq!(fake.webhook_url(), None);
}

#[tokio::test]
async fn updates_are_posted_in_order_per_chat_with_the_secret_and_again_after_a_failure() {
    let fake = FakeTelegram::start().await;
    let first = fake.dm(1, "one");
    let (url, seen) = receiver(Some(first)).await;
    let bot = bot(&fake);
    bot.set_webhook(reqwest::Url::parse(&url).unwrap())
        .secret_token("sekrit")
        .max_connections(4)
        .await
        .unwrap();
    let mut ids = vec![first, fake.dm(2, "two")];
    ids.push(fake.dm(1, "three"));
    ids.push(fake.dm(2, "four"));
    let delivered = fake.wait_delivered(4, WAIT).await;
    assert_eq!(delivered.len(), 4, "{delivered:?}");
    let in_chat =
        |chat: &[i64]| delivered.iter().filter(|id| chat.contains(id)).copied().collect::<Vec<_>>();
    assert_eq!(in_chat(&[ids[0], ids[2]]), [ids[0], ids[2]], "chat 1 in order, after the retry");
    assert_eq!(in_chat(&[ids[1], ids[3]]), [ids[1], ids[3]]);
    let seen = seen.lock().unwrap().clone();
    assert!(seen.iter().all(|(_, secret)| secret.as_deref() == Some("sekrit")));
    assert_eq!(seen.iter().filter(|(id, _)| *id == first).count(), 2, "posted again after the 500");
    let posts = fake.webhook_posts();
    assert!(posts.contains(&(first, Some(500))) && posts.contains(&(first, Some(200))));
    assert_eq!(fake.pending_updates(), 0);

    // The same update again, same id.
    fake.repeat(ids[1]);
    let delivered = fake.wait_delivered(5, WAIT).await;
    assert_eq!(delivered.last(), Some(&ids[1]));

    // Deleted: nothing more is posted, and polling works again with what is queued.
    bot.delete_webhook().await.unwrap();
    let late = fake.dm(3, "late");
    let updates = bot.get_updates().timeout(0).await.unwrap();
    assert_eq!(updates.iter().map(|u| i64::from(u.id.0)).collect::<Vec<_>>(), [late]);
    assert_eq!(fake.webhook_delivered().len(), 5);
}

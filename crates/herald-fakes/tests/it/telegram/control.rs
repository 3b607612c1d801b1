use std::process::Stdio;
use std::time::Duration;

use herald_fakes::telegram::FakeTelegram;
use serde_json::{Value, json};
use teloxide::prelude::*;
use teloxide::types::MessageEntityKind;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

use super::{bot, only_message, poll};

/// Posts `body` to a control endpoint: status and body (JSON, else its text; null when empty).
async fn control(url: &str, path: &str, body: Value) -> (u16, Value) {
    let response = reqwest::Client::new()
        .post(format!("{url}/_fake/{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let body = match text.as_str() {
        "" => Value::Null,
        _ => serde_json::from_str(&text).unwrap_or(Value::String(text)),
    };
    (status, body)
}

async fn read(url: &str, path: &str) -> Value {
    reqwest::get(format!("{url}/_fake/{path}")).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn the_fake_is_driven_and_read_over_http() {
    let fake = FakeTelegram::start().await;
    let url = fake.api_url();
    let bot = bot(&fake);
    let (status, body) = control(&url, "messages", json!({"user_id": 1, "text": "hi"})).await;
    let update = body["update_id"].as_i64().unwrap();
    assert_eq!(status, 200);
    let message = only_message(&bot).await;
    assert!(message.chat.is_private());
    assert_eq!((message.chat.id, message.text()), (ChatId(1), Some("hi")));

    let group =
        json!({"user_id": 1, "chat_id": -5, "text": "yo", "mention": true, "username": "ann"});
    control(&url, "messages", group).await;
    let updates = bot.get_updates().offset(i32::try_from(update + 1).unwrap()).await.unwrap();
    let teloxide::types::UpdateKind::Message(message) = &updates[0].kind else { panic!() };
    assert_eq!(message.text(), Some("@herald_test_bot yo"));
    assert_eq!(message.entities().unwrap()[0].kind, MessageEntityKind::Mention);
    assert_eq!(read(&url, "pending").await, json!({"pending_updates": 1}));
    let (status, _) = control(&url, "messages", json!({"user_id": 1, "txt": "typo"})).await;
    assert_eq!(status, 422);

    let fault =
        json!({"method": "sendMessage", "fault": {"kind": "too_many_requests", "retry_after": 2}});
    assert_eq!(control(&url, "fault", fault).await, (200, json!({"queued_faults": 1})));
    assert!(bot.send_message(ChatId(1), "limited").await.is_err());
    bot.send_message(ChatId(1), "through").await.unwrap();
    let sent = read(&url, "sent?chat_id=1").await;
    assert_eq!(sent.as_array().unwrap().len(), 1);
    assert_eq!(sent[0]["text"], "through");
    let requests = read(&url, "requests").await;
    assert_eq!(requests.as_array().unwrap().last().unwrap()["method"], "sendmessage");

    assert_eq!(control(&url, "offline", json!({"offline": true})).await.0, 204);
    assert!(bot.get_me().await.is_err());
    assert_eq!(read(&url, "pending").await["pending_updates"], 1, "control stays up offline");
    assert_eq!(control(&url, "offline", json!({"offline": false})).await.0, 204);
    bot.get_me().await.unwrap();

    assert_eq!(control(&url, "redeliver", json!({"update_id": update})).await.0, 200);
    assert_eq!(control(&url, "redeliver", json!({"update_id": 1})).await.0, 404);
    assert_eq!(control(&url, "reset", json!({})).await.0, 204);
    assert_eq!(read(&url, "sent").await, json!([]));
}

#[tokio::test]
async fn a_raw_message_goes_out_byte_for_byte_even_when_teloxide_cannot_read_it() {
    let fake = FakeTelegram::start().await;
    let url = fake.api_url();
    let client = reqwest::Client::new();
    let message = r#"{"message_id":5,"date":1,"chat":{"id":9,"type":"private","first_name":"Bo"},"from":{"id":9,"is_bot":false,"first_name":"Bo"},"text":"hi \ud83d"}"#;
    let post = |body: &'static str| client.post(format!("{url}/_fake/raw_messages")).body(body);
    let response = post(message).send().await.unwrap();
    assert_eq!(response.status(), 200);
    let update = response.json::<Value>().await.unwrap()["update_id"].as_i64().unwrap();

    let get_updates = format!("{url}/bot{}/getUpdates", FakeTelegram::TOKEN);
    let body = client.post(&get_updates).send().await.unwrap().text().await.unwrap();
    let batch = format!(r#"{{"ok":true,"result":[{{"update_id":{update},"message":{message}}}]}}"#);
    assert_eq!(body, batch);
    let refused = bot(&fake).get_updates().timeout(0).await;
    assert!(matches!(refused, Err(teloxide::RequestError::InvalidJson { .. })), "{refused:?}");

    fake.dm(9, "after");
    let updates = poll(&bot(&fake), Some(update + 1)).await;
    assert_eq!(updates[0].1.id.0, 6, "later messages of the chat get later ids");
    for bad in ["[1]", "{\"text\":", "hi", ""] {
        let response = post(bad).send().await.unwrap();
        assert_eq!(response.status(), 400, "{bad:?}");
        let error = response.json::<Value>().await.unwrap();
        assert!(error["error"].as_str().unwrap().contains("not one JSON object"), "{error}");
    }
    assert_eq!(fake.pending_updates(), 1, "nothing queued for the refused bodies");
}

#[tokio::test]
async fn form_and_query_parameters_work_like_json() {
    let fake = FakeTelegram::start().await;
    let base = format!("{}/bot{}", fake.api_url(), FakeTelegram::TOKEN);
    let client = reqwest::Client::new();
    let form: Value = client
        .post(format!("{base}/sendMessage"))
        .form(&[
            ("chat_id", "-7"),
            ("text", "by form"),
            ("reply_parameters", r#"{"message_id":3}"#),
        ])
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(form["result"]["text"], "by form");
    let query: Value = client
        .get(format!("{base}/getUpdates?timeout=0&limit=5"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(query, json!({"ok": true, "result": []}));
    let sent = fake.sent();
    assert_eq!((sent[0].chat_id, sent[0].reply_to), (-7, Some(3)));
    assert_eq!(fake.requests()[1].body, json!({"timeout": "0", "limit": "5"}));
}

#[tokio::test]
async fn the_binary_prints_its_url_serves_and_stops_on_sigterm() {
    let mut child = Command::new(env!("CARGO_BIN_EXE_herald-fake-telegram"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let url = line.strip_prefix("fake telegram listening on ").unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{line}");
    let bot = Bot::new(FakeTelegram::TOKEN).set_api_url(reqwest::Url::parse(url).unwrap());
    assert_eq!(bot.get_me().await.unwrap().username(), FakeTelegram::BOT_USERNAME);
    control(url, "messages", json!({"user_id": 3, "text": "from curl"})).await;
    assert_eq!(only_message(&bot).await.text(), Some("from curl"));

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_binary_explains_a_bad_argument() {
    let output = Command::new(env!("CARGO_BIN_EXE_herald-fake-telegram"))
        .arg("--port")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(
        stderr.contains("unexpected argument \"--port\"") && stderr.contains("usage:"),
        "{stderr}"
    );
}

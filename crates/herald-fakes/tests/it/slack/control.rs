//! The control API over HTTP and the `herald-fake-slack` binary.

use std::process::Stdio;
use std::time::Duration;

use herald_fakes::FakeSlack;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::{WAIT, acked_event, connect};

async fn control(base: &str, path: &str, body: Option<Value>) -> Value {
    let client = reqwest::Client::new();
    let request = match body {
        Some(body) => client.post(format!("{base}/_fake/{path}")).json(&body),
        None => client.get(format!("{base}/_fake/{path}")),
    };
    let response = request.send().await.unwrap();
    assert!(response.status().is_success(), "{path}: {}", response.status());
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_control_api_injects_reads_and_breaks() {
    let fake = FakeSlack::start().await;
    let base = fake.base_url();
    let (mut ws, _) = connect(&fake).await;
    let body = json!({"user": "U5", "text": "hey", "channel": "C9", "mention": true, "mention_first": true});
    let injected = control(&base, "posts", Some(body)).await;
    assert_eq!(injected["event_ids"].as_array().unwrap().len(), 2);
    assert_eq!(acked_event(&mut ws).await["type"], "app_mention");
    assert_eq!(acked_event(&mut ws).await["type"], "message");

    control(
        &base,
        "fault",
        Some(json!({"method": "chat.postMessage", "fault": {"kind": "status", "status": 500}})),
    )
    .await;
    let post = json!({"channel": "C9", "text": "answer", "thread_ts": injected["ts"]});
    let client = reqwest::Client::new();
    let url = format!("{}/chat.postMessage", fake.api_url());
    let send = || client.post(&url).bearer_auth(FakeSlack::BOT_TOKEN).json(&post).send();
    assert_eq!(send().await.unwrap().status(), 500);
    assert_eq!(send().await.unwrap().status(), 200);
    // The bot's own post comes back as an event too.
    assert_eq!(acked_event(&mut ws).await["bot_id"], FakeSlack::BOT_ID);
    let posted = control(&base, "posted?channel=C9", None).await;
    assert_eq!(
        (posted[0]["text"].as_str(), posted[0]["thread_ts"].clone()),
        (Some("answer"), injected["ts"].clone())
    );
    let calls = control(&base, "calls?method=chat.postMessage", None).await;
    assert_eq!(calls.as_array().unwrap().len(), 2);

    let all_acked = |f: &FakeSlack| f.deliveries().iter().all(|d| d.acked_ms.is_some());
    assert!(fake.wait_for(WAIT, all_acked).await);
    let deliveries = control(&base, "deliveries", None).await;
    assert!(deliveries.as_array().unwrap().iter().all(|d| d["acked_ms"].is_u64()), "{deliveries}");
    assert_eq!(control(&base, "connections", None).await["open"], 1);
    control(&base, "disconnect", Some(json!({"reason": "warning"}))).await;
    assert_eq!(super::next(&mut ws).await["reason"], "warning");
}

#[tokio::test]
async fn the_binary_prints_its_url_serves_and_stops_on_sigterm() {
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald-fake-slack"))
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
    let api_url = line.strip_prefix("fake slack listening on ").unwrap();
    assert!(api_url.starts_with("http://127.0.0.1:") && api_url.ends_with("/api"), "{line}");
    let me: Value = reqwest::Client::new()
        .post(format!("{api_url}/auth.test"))
        .bearer_auth(FakeSlack::BOT_TOKEN)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["user_id"], FakeSlack::BOT_USER);
    let base = api_url.strip_suffix("/api").unwrap();
    let injected = control(base, "posts", Some(json!({"user": "U1", "text": "hi"}))).await;
    assert_eq!(injected["channel"], "D1");

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_binary_refuses_a_token_of_the_wrong_kind() {
    let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald-fake-slack"))
        .env("HERALD_FAKE_SLACK_APP_TOKEN", "xoxb-not-an-app-token")
        .output()
        .await
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8(output.stderr).unwrap();
    assert!(stderr.contains("HERALD_FAKE_SLACK_APP_TOKEN should start with xapp-"), "{stderr}");
}

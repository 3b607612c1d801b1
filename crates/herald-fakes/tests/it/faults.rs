use std::time::{Duration, Instant};

use herald_fakes::{FakeModel, Fault};
use serde_json::{Value, json};

use crate::{KEY, chat, message, post, user};

fn body(text: &str) -> Value {
    json!({"model": "gpt-x", "messages": user(text)})
}

/// One request under `fault`: its status, `Retry-After` header and JSON body.
async fn faulted(fault: Fault) -> (u16, Option<String>, Value) {
    let fake = FakeModel::start().await;
    fake.push_fault(fault);
    let response = post(&fake, &body("hi")).await;
    let status = response.status().as_u16();
    let retry_after = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
    let json = response.json().await.unwrap();
    // The fault is used up: the next request is answered normally.
    assert_eq!(message(&chat(&fake, user("again"), &[]).await)["content"], "echo: again");
    (status, retry_after, json)
}

#[tokio::test]
async fn a_429_carries_retry_after() {
    let (status, retry_after, body) =
        faulted(Fault::Status { code: 429, retry_after: Some(2), body: None }).await;
    assert_eq!((status, retry_after.as_deref()), (429, Some("2")));
    assert_eq!(body["error"]["code"], "rate_limit_exceeded");
}

#[tokio::test]
async fn a_401_looks_like_openai() {
    let (status, retry_after, body) = faulted(Fault::status(401)).await;
    assert_eq!((status, retry_after), (401, None));
    let expected = json!({"error": {
        "message": "Incorrect API key provided", "type": "invalid_request_error", "param": null, "code": "invalid_api_key",
    }});
    assert_eq!(body, expected);
}

#[tokio::test]
async fn a_404_names_the_model() {
    let (status, _, body) = faulted(Fault::status(404)).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "model_not_found");
    assert!(body["error"]["message"].as_str().unwrap().contains("`gpt-x`"), "{body}");
}

#[tokio::test]
async fn a_500_is_a_server_error() {
    let (status, _, body) = faulted(Fault::status(500)).await;
    assert_eq!(status, 500);
    assert_eq!(body["error"]["type"], "server_error");
}

#[tokio::test]
async fn a_given_body_is_sent_as_it_is() {
    let custom = json!({"error": {"message": "quota", "code": "insufficient_quota"}});
    let fault = Fault::Status { code: 429, retry_after: None, body: Some(custom.to_string()) };
    let (status, retry_after, body) = faulted(fault).await;
    assert_eq!((status, retry_after, body), (429, None, custom));
}

#[tokio::test]
async fn a_delay_trips_a_client_timeout_then_answers_normally() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Delay(Duration::from_millis(400)));
    fake.push_fault(Fault::Delay(Duration::from_millis(200)));
    let client = reqwest::Client::builder().timeout(Duration::from_millis(100)).build().unwrap();
    let url = format!("{}/chat/completions", fake.base_url());
    let err = client.post(&url).json(&body("slow")).send().await.unwrap_err();
    assert!(err.is_timeout(), "{err:?}");

    let started = Instant::now();
    let completion = chat(&fake, user("patient"), &[]).await;
    assert!(started.elapsed() >= Duration::from_millis(200));
    assert_eq!(message(&completion)["content"], "echo: patient");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn a_malformed_body_is_not_a_completion() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Malformed);
    let response = post(&fake, &body("hi")).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "application/json");
    let text = response.text().await.unwrap();
    assert!(serde_json::from_str::<Value>(&text).is_err(), "{text}");
}

#[tokio::test]
async fn a_dropped_connection_has_no_response() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Drop);
    let url = format!("{}/chat/completions", fake.base_url());
    let err = reqwest::Client::new().post(&url).json(&body("hi")).send().await.unwrap_err();
    assert!(err.status().is_none() && !err.is_timeout(), "{err:?}");
    assert_eq!(message(&chat(&fake, user("back"), &[]).await)["content"], "echo: back");
}

#[tokio::test]
async fn always_fail_and_latency_last_until_reset() {
    let fake = FakeModel::start().await;
    fake.always_fail(Fault::status(503));
    fake.push_fault(Fault::status(429));
    let statuses = [
        post(&fake, &body("a")).await.status(),
        post(&fake, &body("b")).await.status(),
        post(&fake, &body("c")).await.status(),
    ];
    assert_eq!(statuses.map(|s| s.as_u16()), [429, 503, 503]);
    fake.set_latency(Duration::from_millis(150));
    let started = Instant::now();
    assert_eq!(post(&fake, &body("d")).await.status(), 503);
    assert!(started.elapsed() >= Duration::from_millis(150));
    fake.reset();
    let started = Instant::now();
    assert_eq!(message(&chat(&fake, user("ok"), &[]).await)["content"], "echo: ok");
    assert!(started.elapsed() < Duration::from_millis(150));
}

#[tokio::test]
async fn every_request_is_recorded_with_its_key() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::status(500));
    post(&fake, &body("one")).await;
    chat(&fake, user("two"), &["current_time"]).await;
    let url = format!("{}/chat/completions", fake.base_url());
    let garbage = reqwest::Client::new().post(&url).body("not json").send().await.unwrap();
    assert_eq!(garbage.status(), 400);

    let requests = fake.requests();
    assert_eq!(fake.request_count(), 3);
    assert_eq!(requests[0]["messages"][1]["content"], "one");
    assert_eq!(requests[1]["messages"][1]["content"], "two");
    assert_eq!(requests[1]["tools"][0]["function"]["name"], "current_time");
    assert_eq!(requests[1]["temperature"], 0.2, "unknown fields are kept in the record");
    assert_eq!(requests[2], "not json");
    assert_eq!(fake.authorizations(), [Some(KEY.to_owned()), Some(KEY.to_owned()), None]);
}

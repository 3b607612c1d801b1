use herald_fakes::FakeModel;
use serde_json::{Value, json};

use crate::{KEY, chat, message, post, user};

/// Posts `body` to a control endpoint; its status.
async fn control(fake: &FakeModel, path: &str, body: Value) -> u16 {
    let url = format!("{}/_fake/{path}", fake.base_url().trim_end_matches("/v1"));
    reqwest::Client::new().post(url).json(&body).send().await.unwrap().status().as_u16()
}

async fn read(fake: &FakeModel, path: &str) -> Value {
    let url = format!("{}/_fake/{path}", fake.base_url().trim_end_matches("/v1"));
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

#[tokio::test]
async fn the_server_is_scripted_and_read_over_http() {
    let fake = FakeModel::start().await;
    assert_eq!(
        control(&fake, "fault", json!({"status": {"code": 429, "retry_after": 3}})).await,
        200
    );
    assert_eq!(control(&fake, "reply", json!({"text": "scripted"})).await, 200);
    let calls = json!({"tool_calls": [{"name": "current_time", "arguments": {}}, {"name": "session_search", "arguments": {"query": "q"}}]});
    assert_eq!(control(&fake, "reply", calls).await, 200);

    let limited = post(&fake, &json!({"model": "m", "messages": user("hi")})).await;
    assert_eq!(
        (limited.status().as_u16(), limited.headers()["retry-after"].to_str().unwrap()),
        (429, "3")
    );
    assert_eq!(message(&chat(&fake, user("hi"), &[]).await)["content"], "scripted");
    let completion = chat(&fake, user("hi"), &[]).await;
    let arguments: Vec<&str> = message(&completion)["tool_calls"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    assert_eq!(arguments, ["{}", r#"{"query":"q"}"#]);

    let requests = read(&fake, "requests").await;
    assert_eq!(requests.as_array().unwrap().len(), 3);
    assert_eq!(requests[0]["messages"][1]["content"], "hi");
    assert_eq!(read(&fake, "authorizations").await, json!([KEY, KEY, KEY]));

    assert_eq!(control(&fake, "reset", json!({})).await, 204);
    assert_eq!(read(&fake, "requests").await, json!([]));
    assert_eq!(fake.request_count(), 0);
}

#[tokio::test]
async fn every_fault_kind_is_accepted_over_http() {
    let fake = FakeModel::start().await;
    for fault in [
        json!({"delay_ms": 10}),
        json!("malformed"),
        json!("drop"),
        json!({"status": {"code": 500, "body": "oops"}}),
    ] {
        assert_eq!(control(&fake, "fault", fault.clone()).await, 200, "{fault}");
    }
    assert_eq!(message(&chat(&fake, user("slow"), &[]).await)["content"], "echo: slow");
    let malformed = post(&fake, &json!({"model": "m", "messages": user("x")})).await;
    assert!(malformed.json::<Value>().await.is_err());
}

#[tokio::test]
async fn a_bad_script_is_refused_and_changes_nothing() {
    let fake = FakeModel::start().await;
    assert_eq!(control(&fake, "reply", json!({"shout": "hi"})).await, 422);
    assert_eq!(control(&fake, "fault", json!({"status": {"retry_after": 1}})).await, 422);
    assert_eq!(
        control(&fake, "reply", json!({"tool_calls": [{"id": "a", "name": "t"}, {"name": "u"}]}))
            .await,
        422
    );
    assert_eq!(message(&chat(&fake, user("plain"), &[]).await)["content"], "echo: plain");
}

#[tokio::test]
async fn usage_is_scripted_over_http() {
    let fake = FakeModel::start().await;
    assert_eq!(
        control(&fake, "usage", json!({"prompt_tokens": 7000, "completion_tokens": 50})).await,
        200
    );
    assert_eq!(control(&fake, "usage", json!({"prompt_tokens": 7100})).await, 200);
    assert_eq!(control(&fake, "usage", json!({"completion_tokens": 1})).await, 422);
    let reported =
        |c: Value| (c["usage"]["prompt_tokens"].clone(), c["usage"]["completion_tokens"].clone());
    assert_eq!(reported(chat(&fake, user("a"), &[]).await), (json!(7000), json!(50)));
    assert_eq!(reported(chat(&fake, user("b"), &[]).await), (json!(7100), json!(0)));
}

#[tokio::test]
async fn the_context_window_is_set_and_lifted_over_http() {
    let fake = FakeModel::start().await;
    let request = json!({"messages": user("hi")});
    assert_eq!(control(&fake, "context_window", json!({"tokens": 1})).await, 200);
    assert_eq!(post(&fake, &request).await.status(), 400);
    assert_eq!(control(&fake, "context_window", json!({"tokens": null})).await, 200);
    assert_eq!(post(&fake, &request).await.status(), 200);
    assert_eq!(control(&fake, "context_window", json!({"tokens": 1})).await, 200);
    assert_eq!(control(&fake, "context_window", Value::Null).await, 200);
    assert_eq!(post(&fake, &request).await.status(), 200);
    assert_eq!(control(&fake, "context_window", json!({"tokens": "many"})).await, 422);
}

use herald_fakes::FakeModel;
use serde_json::{Value, json};

use crate::{chat, message, post, tools, user};

#[tokio::test]
async fn a_plain_message_is_echoed_in_a_standard_completion() {
    let fake = FakeModel::start().await;
    let completion = chat(&fake, user("hello there"), &["current_time"]).await;
    assert_eq!(completion["object"], "chat.completion");
    assert!(completion["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(completion["created"].as_u64().unwrap() > 1_600_000_000);
    assert_eq!(completion["model"], "fake-model");
    assert_eq!(completion["choices"][0]["index"], 0);
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    assert_eq!(message(&completion)["role"], "assistant");
    assert_eq!(message(&completion)["content"], "echo: hello there");
    assert!(message(&completion).get("tool_calls").is_none());
    let usage = &completion["usage"];
    let (prompt, answer) =
        (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap());
    assert!(prompt > 0 && answer > 0);
    assert_eq!(usage["total_tokens"].as_u64().unwrap(), prompt + answer);
}

#[tokio::test]
async fn search_for_calls_session_search_and_the_result_is_quoted_back() {
    let fake = FakeModel::start().await;
    let asked = user("Search for WiFi password?");
    let completion = chat(&fake, asked.clone(), &["current_time", "session_search"]).await;
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    let call = &message(&completion)["tool_calls"][0];
    assert_eq!(message(&completion)["content"], Value::Null);
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "session_search");
    let arguments: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"query": "WiFi password"}));
    let id = call["id"].as_str().unwrap();
    assert!(id.starts_with("call_"), "{id}");

    let mut history = asked.as_array().unwrap().clone();
    history.push(message(&completion).clone());
    history.push(
        json!({"role": "tool", "tool_call_id": id, "content": "the wifi password is hunter2"}),
    );
    let answer = chat(&fake, Value::Array(history), &["session_search"]).await;
    assert_eq!(message(&answer)["content"], "tool said: the wifi password is hunter2");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
}

#[tokio::test]
async fn what_time_calls_current_time_only_when_offered() {
    let fake = FakeModel::start().await;
    let completion = chat(&fake, user("what time is it?"), &["current_time"]).await;
    let call = &message(&completion)["tool_calls"][0]["function"];
    assert_eq!(
        (call["name"].as_str(), call["arguments"].as_str()),
        (Some("current_time"), Some("{}"))
    );
    let completion = chat(&fake, user("what time is it?"), &[]).await;
    assert_eq!(message(&completion)["content"], "echo: what time is it?");
}

#[tokio::test]
async fn a_request_the_real_api_would_reject_gets_a_400() {
    let fake = FakeModel::start().await;
    let orphan = json!([{"role": "user", "content": "hi"}, {"role": "tool", "tool_call_id": "call_9", "content": "x"}]);
    let response =
        post(&fake, &json!({"model": "m", "messages": orphan, "tools": tools(&[])})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["type"], "invalid_request_error");
    assert!(body["error"]["message"].as_str().unwrap().contains("role 'tool'"), "{body}");
    let response = post(&fake, &json!({"model": "m"})).await;
    assert_eq!(response.status(), 400);
    assert_eq!(fake.request_count(), 2, "rejected requests are recorded too");
}

#[tokio::test]
async fn both_paths_answer_and_models_are_listed() {
    let fake = FakeModel::start().await;
    let root = fake.base_url().trim_end_matches("/v1").to_owned();
    assert_eq!(fake.base_url(), format!("http://{}/v1", fake.addr()));
    let client = reqwest::Client::new();
    let body = json!({"model": "m", "messages": user("short path")});
    let completion: Value = client
        .post(format!("{root}/chat/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(message(&completion)["content"], "echo: short path");
    let models: Value = client
        .get(format!("{}/models", fake.base_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["object"], "list");
    assert_eq!(models["data"][0]["id"], FakeModel::MODEL);
    let typo = client
        .post(format!("{}/v1/chat/completions", fake.base_url()))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(typo.status(), 404, "a doubled /v1 is not the endpoint");
    let error: Value = typo.json().await.unwrap();
    assert_eq!(error["error"]["code"], "unknown_url");
}

#[tokio::test]
async fn a_stopped_server_refuses_connections() {
    let fake = FakeModel::start().await;
    let url = format!("{}/models", fake.base_url());
    assert!(reqwest::get(&url).await.unwrap().status().is_success());
    fake.shutdown().await;
    assert!(reqwest::get(&url).await.unwrap_err().is_connect());

    let dropped = FakeModel::start().await;
    let url = format!("{}/models", dropped.base_url());
    drop(dropped);
    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    assert!(reqwest::get(&url).await.unwrap_err().is_connect());
}

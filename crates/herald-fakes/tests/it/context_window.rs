use herald_fakes::{FakeModel, Fault, Reply};
use serde_json::{Value, json};

use crate::{chat, message, post, tools, user};

fn body(text: &str) -> Value {
    json!({"model": "fake-model", "messages": user(text)})
}

/// The prompt tokens the fake reports for `user(text)` with no window set.
async fn estimate(text: &str) -> u64 {
    let fake = FakeModel::start().await;
    chat(&fake, user(text), &[]).await["usage"]["prompt_tokens"].as_u64().unwrap()
}

#[tokio::test]
async fn a_prompt_over_the_window_is_refused_like_openai() {
    let text = "a fairly long message that takes a few tokens";
    let tokens = estimate(text).await;
    let fake = FakeModel::start().await;
    fake.set_context_window(Some(tokens - 1));
    let refused = post(&fake, &body(text)).await;
    assert_eq!(refused.status(), 400);
    let expected = json!({"error": {
        "message": format!("This model's maximum context length is {} tokens. However, your messages resulted in {tokens} tokens. Please reduce the length of the messages.", tokens - 1),
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }});
    assert_eq!(refused.json::<Value>().await.unwrap(), expected);

    fake.set_context_window(Some(tokens));
    assert_eq!(message(&chat(&fake, user(text), &[]).await)["content"], format!("echo: {text}"));
    fake.set_context_window(None);
    let longer = text.repeat(100);
    assert_eq!(post(&fake, &body(&longer)).await.status(), 200);
}

#[tokio::test]
async fn a_refused_request_is_recorded_but_takes_no_reply_or_usage() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::text("scripted"));
    fake.push_usage(8000, 10);
    fake.set_context_window(Some(5));
    assert_eq!(post(&fake, &body("too long for five tokens")).await.status(), 400);
    fake.set_context_window(None);
    let completion = chat(&fake, user("now it fits"), &[]).await;
    assert_eq!(message(&completion)["content"], "scripted");
    assert_eq!(completion["usage"]["prompt_tokens"], 8000);
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn tool_definitions_are_not_counted() {
    let tokens = estimate("hi").await;
    let fake = FakeModel::start().await;
    fake.set_context_window(Some(tokens));
    let names: Vec<String> = (0..50).map(|i| format!("a_tool_with_a_long_name_{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let request = json!({"messages": user("hi"), "tools": tools(&names)});
    assert_eq!(post(&fake, &request).await.status(), 200);
}

#[tokio::test]
async fn faults_come_before_the_window_and_reset_lifts_it() {
    let fake = FakeModel::start().await;
    fake.set_context_window(Some(1));
    fake.push_fault(Fault::status(429));
    assert_eq!(post(&fake, &body("hi")).await.status(), 429);
    assert_eq!(post(&fake, &body("hi")).await.status(), 400);
    fake.reset();
    assert_eq!(post(&fake, &body("hi")).await.status(), 200);
}

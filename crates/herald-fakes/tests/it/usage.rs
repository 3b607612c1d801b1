use herald_fakes::{FakeModel, Fault, Reply};
use serde_json::{Value, json};

use crate::{chat, user};

/// The (prompt, completion) tokens a completion reports.
fn usage(completion: &Value) -> (u64, u64) {
    let usage = &completion["usage"];
    (usage["prompt_tokens"].as_u64().unwrap(), usage["completion_tokens"].as_u64().unwrap())
}

#[tokio::test]
async fn scripted_usage_is_reported_once_each_in_order_then_the_estimate() {
    let fake = FakeModel::start().await;
    let estimate = usage(&chat(&fake, user("hi"), &[]).await);
    fake.push_usage(7000, 50);
    fake.push_usage(7900, 0);

    let first = chat(&fake, user("hi"), &[]).await;
    assert_eq!(usage(&first), (7000, 50));
    assert_eq!(first["usage"]["total_tokens"], 7050);
    assert_eq!(usage(&chat(&fake, user("hi"), &["current_time"]).await), (7900, 0));
    assert_eq!(usage(&chat(&fake, user("hi"), &[]).await), estimate);
}

#[tokio::test]
async fn scripted_usage_waits_for_an_answer_that_can_carry_it() {
    let fake = FakeModel::start().await;
    fake.push_usage(1234, 5);
    fake.push_fault(Fault::status(500));
    let raw = json!({"choices": [{"message": {"role": "assistant", "content": "raw"}}]});
    fake.push_reply(Reply::Raw(raw.clone()));
    fake.push_reply(Reply::tool_call("current_time", "{}"));

    assert_eq!(crate::post(&fake, &json!({"messages": user("x")})).await.status(), 500);
    assert_eq!(chat(&fake, user("x"), &[]).await, raw, "a raw body is sent as it is");
    assert_eq!(usage(&chat(&fake, user("x"), &[]).await), (1234, 5));
}

#[tokio::test]
async fn reset_forgets_scripted_usage() {
    let fake = FakeModel::start().await;
    fake.push_usage(9999, 9);
    fake.reset();
    assert_ne!(usage(&chat(&fake, user("x"), &[]).await), (9999, 9));
}

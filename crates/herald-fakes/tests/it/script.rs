use herald_fakes::{FakeModel, Reply};
use serde_json::{Value, json};

use crate::{chat, message, user};

#[tokio::test]
async fn two_scripted_tool_calls_come_in_one_message_with_distinct_ids() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::ToolCalls(vec![
        ("current_time".into(), "{}".into()),
        ("session_search".into(), r#"{"query":"cats"}"#.into()),
    ]));
    let completion = chat(&fake, user("anything"), &[]).await;
    assert_eq!(completion["choices"][0]["finish_reason"], "tool_calls");
    let calls = message(&completion)["tool_calls"].as_array().unwrap();
    let names: Vec<&str> = calls.iter().map(|c| c["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["current_time", "session_search"]);
    assert_eq!(calls[1]["function"]["arguments"], r#"{"query":"cats"}"#);
    assert_ne!(calls[0]["id"], calls[1]["id"]);
}

#[tokio::test]
async fn scripted_replies_are_used_once_each_in_order_then_the_default() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::text("first"));
    fake.push_reply(Reply::ToolCallsWithIds(vec![(
        "call_mine".into(),
        "current_time".into(),
        "{}".into(),
    )]));
    let raw = json!({"choices": [], "whatever": true});
    fake.push_reply(Reply::Raw(raw.clone()));

    assert_eq!(message(&chat(&fake, user("a"), &[]).await)["content"], "first");
    let completion = chat(&fake, user("b"), &[]).await;
    assert_eq!(message(&completion)["tool_calls"][0]["id"], "call_mine");
    assert_eq!(chat(&fake, user("c"), &[]).await, raw);
    assert_eq!(message(&chat(&fake, user("d"), &[]).await)["content"], "echo: d");
}

#[tokio::test]
async fn generated_ids_never_repeat() {
    let fake = FakeModel::start().await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        fake.push_reply(Reply::tool_call("current_time", "{}"));
        let completion = chat(&fake, user("x"), &[]).await;
        ids.push(message(&completion)["tool_calls"][0]["id"].clone());
        fake.reset();
    }
    let unique: std::collections::HashSet<String> = ids.iter().map(Value::to_string).collect();
    assert_eq!(unique.len(), 3, "{ids:?}");
    assert!(ids.iter().all(|id| matches!(id, Value::String(s) if s.starts_with("call_"))));
}

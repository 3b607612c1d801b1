use std::time::Duration;

use herald_agent::{Agent, Message, ToolRegistry};
use herald_core::Role;
use herald_fakes::{FakeModel, Reply};
use tokio_util::sync::CancellationToken;

use crate::{context, provider, time_tools};

async fn run(
    fake: &FakeModel,
    tools: &ToolRegistry,
    text: &str,
    max_iterations: u32,
) -> herald_agent::TurnOutput {
    let provider = provider(fake, Duration::from_secs(10));
    let agent = Agent {
        provider: &provider,
        tools,
        model: "fake-model",
        system_prompt: "You are Herald.",
        max_iterations,
    };
    agent.run(&[Message::user(text)], &context("42"), &CancellationToken::new()).await.unwrap()
}

#[tokio::test]
async fn a_plain_answer() {
    let fake = FakeModel::start().await;
    let out = run(&fake, &time_tools(), "hello there", 5).await;
    assert_eq!(out.messages.len(), 1);
    assert_eq!(out.reply(), "echo: hello there");
    assert!(!out.hit_iteration_cap);
    let request = &fake.requests()[0];
    assert_eq!(request["messages"][0]["role"], "system");
    assert_eq!(request["messages"][0]["content"], "You are Herald.");
    assert_eq!(request["messages"][1]["content"], "hello there");
    assert_eq!(request["tools"][0]["function"]["name"], "current_time");
    assert_eq!(request["model"], "fake-model");
}

#[tokio::test]
async fn a_tool_round_trip_answers_with_the_call_id() {
    let fake = FakeModel::start().await;
    let out = run(&fake, &time_tools(), "what time is it?", 5).await;
    let roles: Vec<Role> = out.messages.iter().map(|m| m.role).collect();
    assert_eq!(roles, [Role::Assistant, Role::Tool, Role::Assistant]);
    let call = &out.messages[0].tool_calls[0];
    assert_eq!(call.name, "current_time");
    assert_eq!(out.messages[1].tool_call_id.as_deref(), Some(call.id.as_str()));
    assert!(out.messages[1].content.contains("UTC"));
    assert!(out.reply().starts_with("tool said:"));
    // The second request carried the call and its result, linked by id.
    let second = &fake.requests()[1]["messages"];
    assert_eq!(second[2]["tool_calls"][0]["id"], call.id.as_str());
    assert_eq!(second[3]["role"], "tool");
    assert_eq!(second[3]["tool_call_id"], call.id.as_str());
}

#[tokio::test]
async fn two_tool_calls_in_one_message_run_in_order() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::ToolCalls(vec![
        ("current_time".into(), "{}".into()),
        ("current_time".into(), "{\"zone\":\"utc\"}".into()),
    ]));
    let out = run(&fake, &time_tools(), "twice", 5).await;
    let calls = &out.messages[0].tool_calls;
    assert_eq!(calls.len(), 2);
    assert_ne!(calls[0].id, calls[1].id);
    assert_eq!(out.messages[1].tool_call_id.as_deref(), Some(calls[0].id.as_str()));
    assert_eq!(out.messages[2].tool_call_id.as_deref(), Some(calls[1].id.as_str()));
    assert_eq!(out.messages.len(), 4);
}

#[tokio::test]
async fn an_unknown_tool_is_reported_to_the_model() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::ToolCalls(vec![("rm_rf".into(), "{}".into())]));
    let out = run(&fake, &time_tools(), "do it", 5).await;
    assert_eq!(out.messages[1].role, Role::Tool);
    assert!(out.messages[1].content.contains("no tool `rm_rf`"), "{}", out.messages[1].content);
    assert!(out.messages[1].content.contains("current_time"));
    assert_eq!(out.messages.len(), 3, "the loop went on to an answer");
}

#[tokio::test]
async fn invalid_arguments_are_reported_to_the_model() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::ToolCalls(vec![("current_time".into(), "{not json".into())]));
    let out = run(&fake, &time_tools(), "go", 5).await;
    assert!(out.messages[1].content.contains("not valid JSON"), "{}", out.messages[1].content);
    assert_eq!(out.messages.len(), 3);
}

#[tokio::test]
async fn the_iteration_cap_ends_the_turn_with_a_note() {
    let fake = FakeModel::start().await;
    for _ in 0..5 {
        fake.push_reply(Reply::ToolCalls(vec![("current_time".into(), "{}".into())]));
    }
    let out = run(&fake, &time_tools(), "loop forever", 3).await;
    assert!(out.hit_iteration_cap);
    assert_eq!(fake.request_count(), 3, "exactly max_iterations model calls");
    assert!(out.reply().contains("stopped after 3 steps"), "{}", out.reply());
    // 3 x (call + result) + the note
    assert_eq!(out.messages.len(), 7);
}

#[tokio::test]
async fn cancelling_stops_the_turn() {
    let fake = FakeModel::start().await;
    fake.push_fault(herald_fakes::Fault::Delay(Duration::from_secs(5)));
    let provider = provider(&fake, Duration::from_secs(10));
    let tools = time_tools();
    let agent = Agent {
        provider: &provider,
        tools: &tools,
        model: "m",
        system_prompt: "p",
        max_iterations: 5,
    };
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        canceller.cancel();
    });
    let started = std::time::Instant::now();
    let result = agent.run(&[Message::user("slow")], &context("42"), &cancel).await;
    assert!(matches!(result, Err(herald_agent::TurnError::Cancelled)), "{result:?}");
    assert!(started.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn context_tokens_are_the_last_calls_and_usage_the_sum_of_all() {
    let fake = FakeModel::start().await;
    fake.push_usage(100, 10);
    fake.push_usage(300, 20);
    let out = run(&fake, &time_tools(), "what time is it?", 5).await;
    assert_eq!(fake.request_count(), 2, "a tool round trip");
    assert_eq!(out.usage, herald_agent::Usage { prompt_tokens: 400, completion_tokens: 30 });
    assert_eq!(out.context_tokens, 320);
}

#[tokio::test]
async fn context_tokens_are_zero_when_the_last_call_reports_no_usage() {
    let fake = FakeModel::start().await;
    fake.push_reply(Reply::tool_call("current_time", "{}"));
    fake.push_usage(500, 5);
    let no_usage =
        serde_json::json!({"choices": [{"message": {"role": "assistant", "content": "done"}}]});
    fake.push_reply(Reply::Raw(no_usage));
    let out = run(&fake, &time_tools(), "go", 5).await;
    assert_eq!(out.reply(), "done");
    assert_eq!(out.usage, herald_agent::Usage { prompt_tokens: 500, completion_tokens: 5 });
    assert_eq!(out.context_tokens, 0);
}

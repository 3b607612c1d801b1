//! The fakes over real HTTP: the model server driven with reqwest like a provider client would,
//! the Telegram Bot API with the real teloxide client, the first slice of the fake Discord and the
//! fake Slack with a plain WebSocket client and reqwest.
#![allow(clippy::unwrap_used)]

mod binary;
mod context_window;
mod control;
mod defaults;
mod discord;
mod discord_shards;
mod faults;
mod script;
mod slack;
mod telegram;
mod usage;

use herald_fakes::FakeModel;
use serde_json::{Value, json};

/// The key every helper sends.
pub const KEY: &str = "Bearer sk-test";

/// A system prompt and one user message.
pub fn user(text: &str) -> Value {
    json!([{"role": "system", "content": "You are Herald."}, {"role": "user", "content": text}])
}

/// Function tools with these names.
pub fn tools(names: &[&str]) -> Value {
    names
        .iter()
        .map(|name| json!({"type": "function", "function": {"name": name, "description": "d", "parameters": {"type": "object"}}}))
        .collect()
}

/// Posts `body` to the fake's chat endpoint with the test key.
pub async fn post(fake: &FakeModel, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}/chat/completions", fake.base_url()))
        .header("authorization", KEY)
        .json(body)
        .send()
        .await
        .unwrap()
}

/// A chat request that must succeed; its response body.
pub async fn chat(fake: &FakeModel, messages: Value, tool_names: &[&str]) -> Value {
    let body = json!({"model": "fake-model", "messages": messages, "tools": tools(tool_names), "temperature": 0.2});
    let response = post(fake, &body).await;
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

/// The assistant message of a completion.
pub fn message(completion: &Value) -> &Value {
    &completion["choices"][0]["message"]
}

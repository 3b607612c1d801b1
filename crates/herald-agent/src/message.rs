//! The conversation as the agent sees it: plain messages with OpenAI's roles.

use herald_core::Role;
use serde::{Deserialize, Serialize};

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Who wrote it.
    pub role: Role,
    /// Its text; empty for an assistant message that only calls tools.
    pub content: String,
    /// The tool calls of an assistant message, in order.
    pub tool_calls: Vec<ToolCall>,
    /// For a tool result: the call it answers.
    pub tool_call_id: Option<String>,
    /// For a tool result: the tool's name.
    pub tool_name: Option<String>,
}

impl Message {
    /// A message with a role and text.
    pub fn new(role: Role, content: impl Into<String>) -> Self {
        Message {
            role,
            content: content.into(),
            tool_calls: Vec::new(),
            tool_call_id: None,
            tool_name: None,
        }
    }

    /// A message from the person chatting.
    pub fn user(content: impl Into<String>) -> Self {
        Message::new(Role::User, content)
    }

    /// A reply of the model.
    pub fn assistant(content: impl Into<String>) -> Self {
        Message::new(Role::Assistant, content)
    }

    /// The result of tool call `call_id` to `tool`.
    pub fn tool_result(call_id: &str, tool: &str, content: impl Into<String>) -> Self {
        Message {
            tool_call_id: Some(call_id.to_owned()),
            tool_name: Some(tool.to_owned()),
            ..Message::new(Role::Tool, content)
        }
    }
}

/// A tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolCall {
    /// The model's id for the call, echoed back in the result.
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments as the JSON text the model wrote (not necessarily valid).
    pub arguments: String,
}

impl ToolCall {
    /// Calls in OpenAI's JSON shape, the form the store keeps them in.
    pub fn to_json(calls: &[ToolCall]) -> serde_json::Value {
        let wire: Vec<WireToolCall> = calls.iter().map(WireToolCall::from).collect();
        serde_json::to_value(wire).unwrap_or(serde_json::Value::Null)
    }

    /// Calls from OpenAI's JSON shape; anything unreadable is skipped.
    pub fn from_json(value: &serde_json::Value) -> Vec<ToolCall> {
        let Some(items) = value.as_array() else { return Vec::new() };
        items
            .iter()
            .filter_map(|v| serde_json::from_value::<WireToolCall>(v.clone()).ok())
            .map(|w| ToolCall { id: w.id, name: w.function.name, arguments: w.function.arguments })
            .collect()
    }
}

/// Token counts the endpoint reported for one or more model calls.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// Tokens of the prompt.
    pub prompt_tokens: u64,
    /// Tokens of the completion.
    pub completion_tokens: u64,
}

impl std::ops::AddAssign for Usage {
    fn add_assign(&mut self, other: Usage) {
        self.prompt_tokens += other.prompt_tokens;
        self.completion_tokens += other.completion_tokens;
    }
}

/// OpenAI's shape of a tool call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WireToolCall {
    pub(crate) id: String,
    #[serde(rename = "type", default = "function_kind")]
    pub(crate) kind: String,
    pub(crate) function: WireFunction,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct WireFunction {
    pub(crate) name: String,
    #[serde(default)]
    pub(crate) arguments: String,
}

fn function_kind() -> String {
    "function".to_owned()
}

impl From<&ToolCall> for WireToolCall {
    fn from(c: &ToolCall) -> Self {
        WireToolCall {
            id: c.id.clone(),
            kind: function_kind(),
            function: WireFunction { name: c.name.clone(), arguments: c.arguments.clone() },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_calls_round_trip_through_json() {
        let calls = vec![
            ToolCall {
                id: "call_1".into(),
                name: "session_search".into(),
                arguments: "{\"query\":\"x\"}".into(),
            },
            ToolCall { id: "call_2".into(), name: "current_time".into(), arguments: "{}".into() },
        ];
        let json = ToolCall::to_json(&calls);
        assert_eq!(json[0]["type"], "function");
        assert_eq!(json[1]["function"]["name"], "current_time");
        assert_eq!(ToolCall::from_json(&json), calls);
    }
}

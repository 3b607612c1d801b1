//! The OpenAI chat-completions wire format, as far as the fake reads and writes it.
//!
//! Requests are read loosely (unknown fields are ignored) but checked the way the real API checks
//! them, so a client bug that a provider would reject with a 400 fails against the fake too.

use std::time::{SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};

use super::script::Answer;

/// The parts of a chat-completions request the fake reads.
#[derive(Debug, Deserialize)]
pub(crate) struct ChatRequest {
    #[serde(default)]
    pub model: Option<String>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub tools: Option<Vec<Tool>>,
}

/// Who wrote a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Role {
    System,
    Developer,
    User,
    Assistant,
    Tool,
}

/// One message of the conversation.
#[derive(Debug, Deserialize)]
pub(crate) struct Message {
    pub role: Role,
    #[serde(default)]
    content: Option<Content>,
    #[serde(default)]
    tool_calls: Option<Vec<ToolCall>>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

/// Message content: a string, or a list of parts of which the text ones count.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Content {
    Text(String),
    Parts(Vec<Part>),
}

#[derive(Debug, Deserialize)]
struct Part {
    #[serde(default)]
    text: Option<String>,
}

/// A tool call made by an earlier assistant message.
#[derive(Debug, Deserialize)]
struct ToolCall {
    id: String,
    #[serde(rename = "type")]
    _kind: Function,
    #[serde(rename = "function")]
    _function: CalledFunction,
}

#[derive(Debug, Deserialize)]
struct CalledFunction {
    #[serde(rename = "name")]
    _name: String,
    // The real API wants the arguments as a JSON string, not an object.
    #[serde(rename = "arguments")]
    _arguments: String,
}

/// The only kind of tool there is.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Function {
    Function,
}

/// A tool offered by the request.
#[derive(Debug, Deserialize)]
pub(crate) struct Tool {
    #[serde(rename = "type")]
    _kind: Function,
    function: ToolFunction,
}

#[derive(Debug, Deserialize)]
struct ToolFunction {
    name: String,
}

impl ChatRequest {
    /// The rough size of the messages in tokens; tool definitions are not counted.
    pub(crate) fn prompt_tokens(&self) -> u64 {
        // A few tokens a message for its role and framing, as real chat templates add.
        self.messages.iter().map(|m| rough_tokens(&m.text()) + 4).sum()
    }

    /// Whether the request offers a tool named `name`.
    pub(crate) fn offers(&self, name: &str) -> bool {
        self.tools.iter().flatten().any(|tool| tool.function.name == name)
    }

    /// Checks what the real API checks: messages are present, and tool results answer exactly
    /// the calls of the assistant message before them.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.messages.is_empty() {
            return Err("[] is too short - 'messages'".to_owned());
        }
        let mut pending: Vec<&str> = Vec::new();
        for (i, message) in self.messages.iter().enumerate() {
            if message.role == Role::Tool {
                let Some(id) = message.tool_call_id.as_deref() else {
                    return Err(format!(
                        "missing required parameter: 'messages[{i}].tool_call_id'"
                    ));
                };
                let Some(at) = pending.iter().position(|p| *p == id) else {
                    return Err(format!(
                        "invalid parameter: messages[{i}] with role 'tool' must be a response to a \
                         preceding message with 'tool_calls' (no pending call has id {id:?})"
                    ));
                };
                pending.remove(at);
                continue;
            }
            unanswered(&pending)?;
            pending = message.tool_calls.iter().flatten().map(|call| call.id.as_str()).collect();
        }
        unanswered(&pending)
    }
}

fn unanswered(pending: &[&str]) -> Result<(), String> {
    if pending.is_empty() {
        return Ok(());
    }
    Err(format!(
        "an assistant message with 'tool_calls' must be followed by tool messages responding to \
         each 'tool_call_id'; these tool_call_ids did not have response messages: {}",
        pending.join(", ")
    ))
}

impl Message {
    /// The message's text; empty when it has none.
    pub(crate) fn text(&self) -> String {
        match &self.content {
            None => String::new(),
            Some(Content::Text(text)) => text.clone(),
            Some(Content::Parts(parts)) => {
                parts.iter().filter_map(|p| p.text.as_deref()).collect::<Vec<_>>().join("\n")
            }
        }
    }
}

/// Token counts to report instead of the estimate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
pub(crate) struct Usage {
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
}

/// The response body for an answer (a raw answer is its own body), reporting `usage` if given
/// and else the rough estimate.
pub(crate) fn completion(
    id: String,
    request: &ChatRequest,
    answer: Answer,
    usage: Option<Usage>,
) -> Value {
    let (message, finish_reason, completion_tokens) = match answer {
        Answer::Raw(body) => return body,
        Answer::Text(text) => {
            let tokens = rough_tokens(&text);
            (json!({ "role": "assistant", "content": text }), "stop", tokens)
        }
        Answer::Calls(calls) => {
            let tokens =
                calls.iter().map(|c| rough_tokens(&c.name) + rough_tokens(&c.arguments)).sum();
            let calls: Vec<Value> = calls
                .into_iter()
                .map(|c| {
                    json!({
                        "id": c.id,
                        "type": "function",
                        "function": { "name": c.name, "arguments": c.arguments },
                    })
                })
                .collect();
            (
                json!({ "role": "assistant", "content": null, "tool_calls": calls }),
                "tool_calls",
                tokens,
            )
        }
    };
    let Usage { prompt_tokens, completion_tokens } =
        usage.unwrap_or(Usage { prompt_tokens: request.prompt_tokens(), completion_tokens });
    json!({
        "id": id,
        "object": "chat.completion",
        "created": now(),
        "model": request.model.as_deref().unwrap_or(super::FakeModel::MODEL),
        "choices": [{ "index": 0, "message": message, "finish_reason": finish_reason }],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}

/// The body of `GET /v1/models`.
pub(crate) fn models() -> Value {
    json!({
        "object": "list",
        "data": [{ "id": super::FakeModel::MODEL, "object": "model", "created": 0, "owned_by": "herald-fakes" }],
    })
}

/// An OpenAI-style error body.
pub(crate) fn error(message: &str, kind: &str, code: Option<&str>) -> Value {
    json!({ "error": { "message": message, "type": kind, "param": null, "code": code } })
}

/// OpenAI's refusal of a prompt of `tokens` tokens by a model with a window of `limit`.
pub(crate) fn context_length_exceeded(limit: u64, tokens: u64) -> Value {
    let message = format!(
        "This model's maximum context length is {limit} tokens. However, your messages resulted \
         in {tokens} tokens. Please reduce the length of the messages."
    );
    json!({ "error": {
        "message": message,
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    } })
}

/// About four characters a token, like English text with real tokenizers.
fn rough_tokens(text: &str) -> u64 {
    u64::try_from(text.chars().count().div_ceil(4)).unwrap_or(u64::MAX)
}

fn now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(messages: Value, expected: Result<(), &str>) {
        let request: ChatRequest = serde_json::from_value(json!({"messages": messages})).unwrap();
        match (request.validate(), expected) {
            (Ok(()), Ok(())) => {}
            (Err(got), Err(want)) => {
                assert!(got.contains(want), "{got:?} does not contain {want:?}")
            }
            (got, want) => panic!("{messages}: got {got:?}, want {want:?}"),
        }
    }

    fn call(id: &str) -> Value {
        json!({"id": id, "type": "function", "function": {"name": "t", "arguments": "{}"}})
    }

    #[test]
    fn tool_results_must_answer_the_calls_before_them() {
        let asked = |ids: &[&str]| json!({"role": "assistant", "tool_calls": ids.iter().map(|i| call(i)).collect::<Vec<_>>()});
        let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "r"});
        let user = json!({"role": "user", "content": "u"});
        check(json!([user]), Ok(()));
        check(json!([]), Err("too short"));
        check(json!([user, asked(&["a", "b"]), result("b"), result("a"), user]), Ok(()));
        check(json!([user, result("a")]), Err("must be a response"));
        check(json!([user, asked(&["a"]), result("z")]), Err("\"z\""));
        check(
            json!([user, asked(&["a", "b"]), result("a"), user]),
            Err("did not have response messages: b"),
        );
        check(json!([user, asked(&["a"])]), Err("did not have response messages: a"));
        check(json!([user, asked(&["a"]), {"role": "tool", "content": "r"}]), Err("tool_call_id"));
    }

    #[test]
    fn requests_are_read_like_the_real_api() {
        let read = |v: Value| serde_json::from_value::<ChatRequest>(v);
        assert!(read(json!({"messages": [{"role": "robot", "content": "x"}]})).is_err());
        let object_arguments =
            json!({"id": "a", "type": "function", "function": {"name": "t", "arguments": {}}});
        assert!(
            read(json!({"messages": [{"role": "assistant", "tool_calls": [object_arguments]}]}))
                .is_err()
        );
        let fine = read(
            json!({"model": "m", "stream": false, "tools": null, "messages": [{"role": "user", "content": null}]}),
        );
        assert!(!fine.unwrap().offers("anything"));
    }
}

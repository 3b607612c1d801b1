//! OpenAI chat-completions JSON, private to the provider.

use herald_core::Role;
use serde::{Deserialize, Serialize};

use crate::message::{Message, ToolCall, Usage, WireFunction, WireToolCall};
use crate::provider::ChatRequest;

#[derive(Debug, Serialize)]
pub(crate) struct Request<'a> {
    model: &'a str,
    messages: Vec<WireMessage<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<WireTool<'a>>,
}

#[derive(Debug, Serialize)]
struct WireMessage<'a> {
    role: &'static str,
    /// Null for an assistant message that only calls tools, as OpenAI expects.
    content: Option<&'a str>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tool_call_id: Option<&'a str>,
}

#[derive(Debug, Serialize)]
struct WireTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: WireToolFunction<'a>,
}

#[derive(Debug, Serialize)]
struct WireToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a serde_json::Value,
}

impl<'a> Request<'a> {
    pub(crate) fn new(request: &ChatRequest<'a>) -> Self {
        let system = WireMessage {
            role: Role::System.as_str(),
            content: Some(request.system_prompt),
            tool_calls: Vec::new(),
            tool_call_id: None,
        };
        let messages = std::iter::once(system)
            .chain(
                request.messages.iter().map(|m| WireMessage {
                    role: m.role.as_str(),
                    content: (!m.content.is_empty() || m.tool_calls.is_empty())
                        .then_some(m.content.as_str()),
                    tool_calls: m.tool_calls.iter().map(WireToolCall::from).collect(),
                    tool_call_id: m.tool_call_id.as_deref(),
                }),
            )
            .collect();
        let tools = request
            .tools
            .iter()
            .map(|t| WireTool {
                kind: "function",
                function: WireToolFunction {
                    name: &t.name,
                    description: &t.description,
                    parameters: &t.parameters,
                },
            })
            .collect();
        Request { model: request.model, messages, tools }
    }
}

#[derive(Debug, Deserialize)]
pub(crate) struct Response {
    choices: Vec<Choice>,
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
struct Choice {
    message: ResponseMessage,
}

#[derive(Debug, Deserialize)]
struct ResponseMessage {
    content: Option<String>,
    #[serde(default)]
    tool_calls: Option<Vec<ResponseToolCall>>,
}

#[derive(Debug, Deserialize)]
struct ResponseToolCall {
    id: String,
    function: WireFunction,
}

#[derive(Debug, Deserialize)]
struct WireUsage {
    #[serde(default)]
    prompt_tokens: u64,
    #[serde(default)]
    completion_tokens: u64,
}

impl Response {
    /// The first choice as an assistant message, or why there is none.
    pub(crate) fn into_parts(self) -> Result<(Message, Option<Usage>), String> {
        let choice = self.choices.into_iter().next().ok_or("the response has no choices")?;
        let tool_calls = choice
            .message
            .tool_calls
            .unwrap_or_default()
            .into_iter()
            .map(|c| ToolCall { id: c.id, name: c.function.name, arguments: c.function.arguments })
            .collect();
        let message = Message {
            tool_calls,
            ..Message::assistant(choice.message.content.unwrap_or_default())
        };
        let usage = self.usage.map(|u| Usage {
            prompt_tokens: u.prompt_tokens,
            completion_tokens: u.completion_tokens,
        });
        Ok((message, usage))
    }
}

/// What an error response says, from OpenAI's `{"error": {"message", "code"}}` or the shapes
/// other servers use (`{"error": "..."}`, `{"message": "..."}`, `{"detail": "..."}`, plain text).
pub(crate) struct ErrorReport {
    /// The message, as sent.
    pub message: String,
    /// OpenAI's string `code`, such as `context_length_exceeded`; numeric codes are left out.
    pub code: Option<String>,
}

impl ErrorReport {
    /// The message on one line, shortened.
    pub(crate) fn short_message(&self) -> String {
        let line = self.message.split_whitespace().collect::<Vec<_>>().join(" ");
        match line.char_indices().nth(200) {
            Some((i, _)) => format!("{}…", &line[..i]),
            None if line.is_empty() => "no details".to_owned(),
            None => line,
        }
    }
}

/// Reads an error response body of any of the usual shapes.
pub(crate) fn read_error(body: &str) -> ErrorReport {
    let Ok(json) = serde_json::from_str::<serde_json::Value>(body) else {
        return ErrorReport { message: body.to_owned(), code: None };
    };
    let error = json.get("error");
    let message =
        [error.and_then(|e| e.get("message")), error, json.get("message"), json.get("detail")]
            .into_iter()
            .flatten()
            .find_map(serde_json::Value::as_str)
            .map_or_else(|| body.to_owned(), str::to_owned);
    let code =
        error.and_then(|e| e.get("code")).and_then(serde_json::Value::as_str).map(str::to_owned);
    ErrorReport { message, code }
}

/// The endpoint's own words for a failed request, shortened to one line.
pub(crate) fn error_message(body: &str) -> String {
    read_error(body).short_message()
}

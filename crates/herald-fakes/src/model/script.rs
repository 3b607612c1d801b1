//! What the fake says: scripted [`Reply`] values, and the default behaviour when none is queued.
//!
//! The default is decided from the request alone: a tool result is acknowledged (`tool said:
//! ...`), `search for <words>` calls `session_search`, `what time` calls `current_time` (each only
//! when the request offers that tool), and anything else is echoed (`echo: ...`).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Value, json};

use super::wire::{ChatRequest, Role};

/// The longest tool result quoted back by the default answer, in characters.
const QUOTE_LIMIT: usize = 1000;

/// A scripted answer to one chat request.
///
/// As JSON (for `POST /_fake/reply`): `{"text": "hi"}`, `{"tool_calls": [{"name":
/// "current_time", "arguments": {}}]}` (`arguments` a JSON string or any JSON value, `id`
/// optional but then on every call), or `{"raw": {...}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "ReplyJson", into = "ReplyJson")]
pub enum Reply {
    /// An assistant message with this text.
    Text(String),
    /// One assistant message calling these tools in order, as (name, arguments JSON string),
    /// with generated ids `call_<n>`.
    ToolCalls(Vec<(String, String)>),
    /// Like [`Reply::ToolCalls`] with the ids given, as (id, name, arguments JSON string).
    ToolCallsWithIds(Vec<(String, String, String)>),
    /// This exact response body, with status 200.
    Raw(Value),
}

impl Reply {
    /// A text reply.
    pub fn text(text: impl Into<String>) -> Reply {
        Reply::Text(text.into())
    }

    /// A reply calling one tool.
    pub fn tool_call(name: impl Into<String>, arguments: impl Into<String>) -> Reply {
        Reply::ToolCalls(vec![(name.into(), arguments.into())])
    }
}

/// The JSON spelling of [`Reply`]: calls are objects rather than tuples.
#[derive(Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
enum ReplyJson {
    Text(String),
    ToolCalls(Vec<CallJson>),
    Raw(Value),
}

#[derive(Clone, Serialize, Deserialize)]
struct CallJson {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    name: String,
    #[serde(default = "no_arguments", deserialize_with = "string_or_json")]
    arguments: String,
}

fn no_arguments() -> String {
    "{}".to_owned()
}

/// Takes a string as it is and any other JSON value as its text, so people can write objects.
fn string_or_json<'de, D: Deserializer<'de>>(deserializer: D) -> Result<String, D::Error> {
    Ok(match Value::deserialize(deserializer)? {
        Value::String(text) => text,
        other => other.to_string(),
    })
}

impl TryFrom<ReplyJson> for Reply {
    type Error = String;

    fn try_from(json: ReplyJson) -> Result<Reply, String> {
        Ok(match json {
            ReplyJson::Text(text) => Reply::Text(text),
            ReplyJson::Raw(body) => Reply::Raw(body),
            ReplyJson::ToolCalls(calls) if calls.iter().all(|c| c.id.is_none()) => {
                Reply::ToolCalls(calls.into_iter().map(|c| (c.name, c.arguments)).collect())
            }
            ReplyJson::ToolCalls(calls) => Reply::ToolCallsWithIds(
                calls
                    .into_iter()
                    .map(|c| {
                        Ok((
                            c.id.ok_or("give every tool call an id, or none")?,
                            c.name,
                            c.arguments,
                        ))
                    })
                    .collect::<Result<_, String>>()?,
            ),
        })
    }
}

impl From<Reply> for ReplyJson {
    fn from(reply: Reply) -> ReplyJson {
        let call = |id, name, arguments| CallJson { id, name, arguments };
        match reply {
            Reply::Text(text) => ReplyJson::Text(text),
            Reply::Raw(body) => ReplyJson::Raw(body),
            Reply::ToolCalls(calls) => {
                ReplyJson::ToolCalls(calls.into_iter().map(|(n, a)| call(None, n, a)).collect())
            }
            Reply::ToolCallsWithIds(calls) => ReplyJson::ToolCalls(
                calls.into_iter().map(|(i, n, a)| call(Some(i), n, a)).collect(),
            ),
        }
    }
}

/// A decided answer, ids assigned.
#[derive(Debug, PartialEq)]
pub(crate) enum Answer {
    Text(String),
    Calls(Vec<Call>),
    Raw(Value),
}

/// One tool call of an answer.
#[derive(Debug, PartialEq)]
pub(crate) struct Call {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// The answer a scripted reply stands for.
pub(crate) fn scripted(reply: Reply, next_id: &mut impl FnMut() -> String) -> Answer {
    match reply {
        Reply::Text(text) => Answer::Text(text),
        Reply::Raw(body) => Answer::Raw(body),
        Reply::ToolCalls(calls) => Answer::Calls(
            calls
                .into_iter()
                .map(|(name, arguments)| Call { id: next_id(), name, arguments })
                .collect(),
        ),
        Reply::ToolCallsWithIds(calls) => Answer::Calls(
            calls.into_iter().map(|(id, name, arguments)| Call { id, name, arguments }).collect(),
        ),
    }
}

/// The answer when nothing is scripted.
pub(crate) fn default_answer(
    request: &ChatRequest,
    next_id: &mut impl FnMut() -> String,
) -> Answer {
    let messages = &request.messages;
    if messages.last().is_some_and(|m| m.role == Role::Tool) {
        let results: Vec<String> =
            messages.iter().rev().take_while(|m| m.role == Role::Tool).map(|m| m.text()).collect();
        let joined: Vec<String> = results.into_iter().rev().collect();
        return Answer::Text(format!("tool said: {}", truncate(&joined.join(" | "))));
    }
    let said =
        messages.iter().rev().find(|m| m.role == Role::User).map(|m| m.text()).unwrap_or_default();
    let mut call = |name: &str, arguments: String| {
        Answer::Calls(vec![Call { id: next_id(), name: name.to_owned(), arguments }])
    };
    if let Some(words) = after_phrase(&said, "search for").filter(|words| !words.is_empty())
        && request.offers("session_search")
    {
        return call("session_search", json!({ "query": words }).to_string());
    }
    if after_phrase(&said, "what time").is_some() && request.offers("current_time") {
        return call("current_time", "{}".to_owned());
    }
    Answer::Text(format!("echo: {said}"))
}

/// What follows `phrase` (ASCII, matched case-insensitively) in `text`, trimmed of spaces,
/// quotes and end punctuation; `None` when the phrase is absent.
fn after_phrase<'t>(text: &'t str, phrase: &str) -> Option<&'t str> {
    // ASCII lowercasing keeps byte offsets, so the index found applies to the original text.
    let at = text.to_ascii_lowercase().find(phrase)?;
    Some(
        text[at + phrase.len()..].trim_matches(|c: char| c.is_whitespace() || "\"'?!.".contains(c)),
    )
}

fn truncate(text: &str) -> String {
    match text.char_indices().nth(QUOTE_LIMIT) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The default answer to `messages`, with the tools named in `tools` offered.
    fn check(messages: Value, tools: &[&str], expected: Answer) {
        let tools: Vec<Value> = tools
            .iter()
            .map(|name| json!({"type": "function", "function": {"name": name}}))
            .collect();
        let request: ChatRequest =
            serde_json::from_value(json!({"model": "m", "messages": messages, "tools": tools}))
                .unwrap();
        let mut n = 0;
        let answer = default_answer(&request, &mut || {
            n += 1;
            format!("id{n}")
        });
        assert_eq!(answer, expected);
    }

    fn text(text: &str) -> Answer {
        Answer::Text(text.to_owned())
    }

    fn call(name: &str, arguments: &str) -> Answer {
        Answer::Calls(vec![Call {
            id: "id1".into(),
            name: name.into(),
            arguments: arguments.into(),
        }])
    }

    #[test]
    fn default_answers() {
        let user =
            |t: &str| json!([{"role": "system", "content": "p"}, {"role": "user", "content": t}]);
        check(user("hello"), &[], text("echo: hello"));
        check(
            user("Search for wifi password?"),
            &["session_search"],
            call("session_search", r#"{"query":"wifi password"}"#),
        );
        check(user("search for wifi"), &["current_time"], text("echo: search for wifi"));
        check(user("please search for"), &["session_search"], text("echo: please search for"));
        check(
            user("What time is it?"),
            &["current_time", "session_search"],
            call("current_time", "{}"),
        );
        check(user("what time is it?"), &[], text("echo: what time is it?"));
        check(
            json!([{"role": "user", "content": [{"type": "text", "text": "parts"}]}]),
            &[],
            text("echo: parts"),
        );
        check(json!([{"role": "system", "content": "p"}]), &[], text("echo: "));
    }

    #[test]
    fn tool_results_are_quoted_since_the_last_assistant_message() {
        let calls = json!([
            {"id": "a", "type": "function", "function": {"name": "t", "arguments": "{}"}},
            {"id": "b", "type": "function", "function": {"name": "t", "arguments": "{}"}},
        ]);
        let messages = json!([
            {"role": "user", "content": "go"},
            {"role": "assistant", "content": null, "tool_calls": calls},
            {"role": "tool", "tool_call_id": "a", "content": "one"},
            {"role": "tool", "tool_call_id": "b", "content": "two"},
        ]);
        check(messages, &["session_search"], text("tool said: one | two"));
        let long = "x".repeat(5000);
        let messages = json!([
            {"role": "assistant", "content": null, "tool_calls": [calls[0].clone()]},
            {"role": "tool", "tool_call_id": "a", "content": long},
        ]);
        check(messages, &[], text(&format!("tool said: {}…", "x".repeat(QUOTE_LIMIT))));
    }

    #[test]
    fn replies_read_as_json() {
        let read = |v: Value| serde_json::from_value::<Reply>(v);
        assert_eq!(read(json!({"text": "hi"})).unwrap(), Reply::text("hi"));
        assert_eq!(
            read(json!({"tool_calls": [{"name": "t", "arguments": {"a": 1}}, {"name": "u"}]}))
                .unwrap(),
            Reply::ToolCalls(vec![("t".into(), r#"{"a":1}"#.into()), ("u".into(), "{}".into())])
        );
        assert_eq!(
            read(json!({"tool_calls": [{"id": "x", "name": "t", "arguments": "{}"}]})).unwrap(),
            Reply::ToolCallsWithIds(vec![("x".into(), "t".into(), "{}".into())])
        );
        let mixed = read(json!({"tool_calls": [{"id": "x", "name": "t"}, {"name": "u"}]}));
        assert!(mixed.unwrap_err().to_string().contains("every tool call an id"));
        for reply in [Reply::text("a"), Reply::tool_call("t", "{}"), Reply::Raw(json!({"x": 1}))] {
            assert_eq!(read(serde_json::to_value(&reply).unwrap()).unwrap(), reply);
        }
    }
}

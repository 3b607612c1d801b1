//! `herald sessions show`: a session's details and its messages, tool calls folded onto
//! one line each and tool results cut to a few lines.

use std::io::Write;

use herald_core::Role;
use herald_store::{Session, Store, StoredMessage};
use serde_json::Value;

use super::export;
use crate::output::{self, clean, local_clock, local_date, local_time, one_line, truncate};

/// How many lines of a tool result are shown.
const TOOL_LINES: usize = 3;
/// The widest a shown line of a tool result or a folded tool call gets.
const WIDTH: usize = 100;

/// Prints one session, found by id, id prefix or title.
pub(super) async fn run(
    store: &Store,
    reference: &str,
    json: bool,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let session = store.resolve_session(reference).await?;
    if json {
        output::write_json(out, &export::record(store, &session).await?)?;
        return Ok(());
    }
    header(&session, out)?;
    let mut day = None;
    for message in store.history(&session.id).await? {
        let date = local_date(message.created_at);
        if day.as_ref() != Some(&date) {
            writeln!(out, "\n── {date}")?;
            day = Some(date);
        }
        let label = format!("{} {:<9}", local_clock(message.created_at), message.role.as_str());
        for (i, line) in message_lines(&message).iter().enumerate() {
            let lead = if i == 0 { label.as_str() } else { "" };
            writeln!(out, "{lead:<w$}  {line}", w = label.chars().count())?;
        }
    }
    Ok(())
}

fn header(s: &Session, out: &mut dyn Write) -> std::io::Result<()> {
    let mut field = |name: &str, value: Option<String>| match value {
        Some(value) => writeln!(out, "{name:<9} {}", one_line(&value)),
        None => Ok(()),
    };
    let place = [s.chat_type.clone(), s.chat_id.as_ref().map(|c| format!("chat {c}"))]
        .into_iter()
        .chain([s.thread_id.as_ref().map(|t| format!("thread {t}"))])
        .chain([s.user_id.as_ref().map(|u| format!("user {u}"))])
        .flatten()
        .fold(s.source.to_string(), |acc, part| format!("{acc} · {part}"));
    let ended = match (s.ended_at, &s.end_reason) {
        (Some(at), Some(reason)) => format!("{} ({reason})", local_time(at)),
        (Some(at), None) => local_time(at),
        (None, _) => "open".to_owned(),
    };
    field("session", Some(s.id.clone()))?;
    field("title", s.title.clone())?;
    field("source", Some(place))?;
    field("key", s.session_key.clone())?;
    field("model", s.model.clone())?;
    field("parent", s.parent_session_id.clone())?;
    field("started", Some(local_time(s.started_at)))?;
    field("ended", Some(ended))?;
    let tokens = match (s.input_tokens, s.output_tokens) {
        (0, 0) => String::new(),
        (input, output) => format!(", tokens {input} in / {output} out"),
    };
    let calls = match s.tool_call_count {
        1 => "1 tool call".to_owned(),
        n => format!("{n} tool calls"),
    };
    let messages = format!("{} ({calls}{tokens})", s.message_count);
    field("messages", Some(messages))
}

/// The lines shown for one message.
fn message_lines(m: &StoredMessage) -> Vec<String> {
    let mut lines = Vec::new();
    if m.role == Role::Tool {
        let text = clean(&m.content);
        let all: Vec<&str> = text.lines().collect();
        let name = m.tool_name.as_deref().map(one_line).unwrap_or_else(|| "tool".into());
        for (i, line) in all.iter().take(TOOL_LINES).enumerate() {
            let line = if i == 0 { format!("{name}: {line}") } else { (*line).to_owned() };
            lines.push(truncate(&line, WIDTH));
        }
        if all.is_empty() {
            lines.push(format!("{name}: (empty)"));
        }
        if all.len() > TOOL_LINES {
            lines.push(format!("… {} more lines", all.len() - TOOL_LINES));
        }
        return lines;
    }
    lines.extend(clean(&m.content).lines().map(str::to_owned));
    if let Some(calls) = &m.tool_calls {
        lines.extend(tool_calls(calls).iter().map(|c| format!("→ {}", truncate(c, WIDTH))));
    }
    if lines.is_empty() {
        lines.push(String::new());
    }
    lines
}

/// Each tool call as `name {compact json arguments}`, in full, on one line.
pub(super) fn tool_calls(calls: &Value) -> Vec<String> {
    match calls {
        Value::Array(calls) => calls.iter().map(tool_call).collect(),
        Value::Null => Vec::new(),
        other => vec![tool_call(other)],
    }
}

/// One call in the OpenAI shape (`{"function": {"name", "arguments": "<json text>"}}`),
/// or any other JSON as it is.
fn tool_call(call: &Value) -> String {
    let function = call.get("function").unwrap_or(call);
    let Some(name) = function.get("name").and_then(Value::as_str) else {
        return one_line(&call.to_string());
    };
    let arguments = match function.get("arguments") {
        // Arguments arrive as JSON text; reparsing makes them compact and one line.
        Some(Value::String(text)) => {
            serde_json::from_str::<Value>(text).map_or_else(|_| text.clone(), |v| v.to_string())
        }
        Some(Value::Null) | None => String::new(),
        Some(other) => other.to_string(),
    };
    one_line(&format!("{name} {arguments}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_calls_fold_to_one_line() {
        let calls = json!([
            {"id": "c1", "type": "function",
             "function": {"name": "session_search", "arguments": "{\n \"query\": \"deploy\"\n}"}},
            {"function": {"name": "current_time", "arguments": ""}},
            {"weird": true}
        ]);
        assert_eq!(
            tool_calls(&calls),
            [r#"session_search {"query":"deploy"}"#, "current_time", r#"{"weird":true}"#]
        );
    }
}

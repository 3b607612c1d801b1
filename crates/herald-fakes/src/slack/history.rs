//! `conversations.history` and `conversations.replies`, as Slack documents them: the bot
//! token with the conversation type's history scope (`channels:history`, `groups:history`,
//! `im:history`; `missing_scope` names the one needed), `channel` (and for replies `ts`)
//! required, `limit`, `oldest`, `latest`, `inclusive` and `cursor`, and message metadata only
//! with `include_all_metadata`. History is newest first and leaves thread replies out; replies
//! are oldest first, the parent message leading.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::events::stored_message;
use super::server::Ctx;
use super::state::{Channel, Stored};
use super::web::{Args, failure, failure_with};

/// Messages on one page of history when `limit` is not given, and the most it takes.
const HISTORY_LIMIT: (usize, usize) = (100, 999);
/// The same for replies.
const REPLIES_LIMIT: (usize, usize) = (1000, 1000);

/// The scope reading `channel`'s messages needs.
fn scope(channel: &str) -> &'static str {
    match Channel::kind(channel) {
        "im" => "im:history",
        "group" => "groups:history",
        _ => "channels:history",
    }
}

/// A `ts` as microseconds, for comparing; `None` when it is not one.
fn micros(ts: &str) -> Option<u128> {
    let (secs, frac) = ts.split_once('.').unwrap_or((ts, "0"));
    let secs: u128 = secs.parse().ok()?;
    let frac = format!("{frac:0<6}");
    Some(secs * 1_000_000 + frac.get(..6)?.parse::<u128>().ok()?)
}

/// The window `oldest`, `latest` and `inclusive` describe; `Err` with Slack's error.
struct Window {
    oldest: Option<u128>,
    latest: Option<u128>,
    inclusive: bool,
}

impl Window {
    fn read(args: &Args) -> Result<Window, &'static str> {
        let bound = |key: &str, error| match args.required(key) {
            None => Ok(None),
            Some(ts) => micros(&ts).map(Some).ok_or(error),
        };
        Ok(Window {
            oldest: bound("oldest", "invalid_ts_oldest")?,
            latest: bound("latest", "invalid_ts_latest")?,
            inclusive: args.flag("inclusive").unwrap_or(false),
        })
    }

    fn holds(&self, ts: &str) -> bool {
        let Some(ts) = micros(ts) else { return false };
        let above = self.oldest.is_none_or(|o| if self.inclusive { ts >= o } else { ts > o });
        let below = self.latest.is_none_or(|l| if self.inclusive { ts <= l } else { ts < l });
        above && below
    }
}

/// Answers `conversations.history` or `conversations.replies`.
pub(crate) fn answer(ctx: &Ctx, method: &str, args: &Args) -> Response {
    let Some(channel) = args.required("channel") else { return failure("channel_not_found") };
    let limits = if method == "conversations.replies" { REPLIES_LIMIT } else { HISTORY_LIMIT };
    let limit = match args.text("limit").map(|l| l.parse::<usize>()) {
        None => limits.0,
        Some(Ok(0)) => limits.0,
        Some(Ok(limit)) => limit.min(limits.1),
        Some(Err(_)) => return failure("invalid_limit"),
    };
    let window = match Window::read(args) {
        Ok(window) => window,
        Err(error) => return failure(error),
    };
    let metadata = args.flag("include_all_metadata").unwrap_or(false);
    let state = ctx.shared.lock();
    let needed = scope(&channel);
    if !state.scopes.iter().any(|s| s == needed) {
        let body = json!({
            "ok": false, "error": "missing_scope", "needed": needed,
            "provided": state.scopes.join(","),
        });
        return failure_with(StatusCode::OK, body);
    }
    if !state.channels.contains_key(&channel) {
        return failure("channel_not_found");
    }
    let live = |m: &&Stored| m.channel == channel && !m.deleted;
    let mut messages: Vec<&Stored> = match method {
        "conversations.replies" => {
            let Some(ts) = args.required("ts") else { return failure("thread_not_found") };
            let Some(parent) = state.messages.iter().filter(live).find(|m| m.ts == ts) else {
                return failure("thread_not_found");
            };
            let replies = state.messages.iter().filter(live).filter(|m| {
                m.ts != ts && m.thread_ts.as_deref() == Some(ts.as_str()) && window.holds(&m.ts)
            });
            std::iter::once(parent).chain(replies).collect()
        }
        _ => {
            let top = |m: &&Stored| m.thread_ts.as_ref().is_none_or(|t| *t == m.ts);
            let mut top: Vec<&Stored> = state
                .messages
                .iter()
                .filter(live)
                .filter(top)
                .filter(|m| window.holds(&m.ts))
                .collect();
            top.reverse();
            top
        }
    };
    // The cursor is the position of the page's first message in the whole list.
    let start = match args.required("cursor") {
        None => 0,
        Some(cursor) => match cursor.strip_prefix("fake:").and_then(|n| n.parse().ok()) {
            Some(start) => start,
            None => return failure("invalid_cursor"),
        },
    };
    let rest = messages.split_off(start.min(messages.len()));
    let has_more = rest.len() > limit;
    let page: Vec<Value> = rest.iter().take(limit).map(|m| shown(m, metadata)).collect();
    let next = if has_more { format!("fake:{}", start + limit) } else { String::new() };
    let mut body = json!({
        "ok": true, "messages": page, "has_more": has_more,
        "response_metadata": {"next_cursor": next},
    });
    if method == "conversations.history" {
        body["pin_count"] = json!(0);
    }
    Json(body).into_response()
}

/// A stored message as history shows it, its metadata only when asked for.
fn shown(stored: &Stored, metadata: bool) -> Value {
    let mut message = stored_message(stored);
    if let (true, Some(data)) = (metadata, &stored.metadata) {
        message["metadata"] = data.clone();
    }
    message
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ts_compare_as_numbers() {
        assert_eq!(micros("1700000000.000100"), Some(1_700_000_000_000_100));
        assert_eq!(micros("1700000000.1"), Some(1_700_000_000_100_000));
        assert_eq!(micros("soon"), None);
        let window = Window { oldest: micros("1.5"), latest: None, inclusive: false };
        assert!(!window.holds("1.500000") && window.holds("1.500001"));
    }
}

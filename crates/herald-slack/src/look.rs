//! Finding a reply's piece that Slack may have taken unseen. Slack has no idempotency key, so
//! each piece of a stored reply goes out with message metadata naming the reply and the piece
//! (`herald_reply`: `key`, `piece`); before a piece is sent again after a failure that may
//! hide a success, the chat's recent messages are read for that mark: the channel's history,
//! or in a thread the thread's replies, both with `include_all_metadata`.

use std::collections::HashMap;

use serde::Deserialize;
use slack_morphism::hyper_tokio::SlackHyperClient;
use slack_morphism::{SlackApiToken, SlackMessageMetadata};
use tracing::warn;

use crate::error::{Secrets, classify};

/// The metadata `event_type` that marks a piece of a reply.
const MARK: &str = "herald_reply";
/// How many of a channel's newest messages are read.
const HISTORY_LIMIT: &str = "100";
/// How many of a thread's replies are read (oldest first: Slack's most).
const REPLIES_LIMIT: &str = "1000";

/// One page of `conversations.history` or `conversations.replies`, read leniently: another
/// app's metadata may hold any JSON.
#[derive(Debug, Deserialize)]
struct Page {
    messages: Vec<Seen>,
}

#[derive(Debug, Deserialize)]
struct Seen {
    ts: String,
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    event_type: String,
    #[serde(default)]
    event_payload: serde_json::Value,
}

/// The mark of piece `piece` of reply `key`.
pub(crate) fn mark(key: &str, piece: usize) -> SlackMessageMetadata {
    let payload = HashMap::from([
        ("key".to_owned(), key.to_owned()),
        ("piece".to_owned(), piece.to_string()),
    ]);
    SlackMessageMetadata::new(MARK.into()).with_event_payload(payload)
}

fn marked(seen: &Seen, key: &str, piece: usize) -> bool {
    let Some(metadata) = &seen.metadata else { return false };
    let payload = &metadata.event_payload;
    let piece_is = |value: &serde_json::Value| match value {
        serde_json::Value::String(text) => text.parse() == Ok(piece),
        other => other.as_u64() == Some(piece as u64),
    };
    metadata.event_type == MARK && payload["key"] == key && piece_is(&payload["piece"])
}

/// The `ts` of piece `piece` of reply `key` in `channel` (in `thread`, when given), if Slack
/// has it among the recent messages; `None` when it does not, or when the look failed: the
/// piece is then sent again, at least once rather than never.
pub(crate) async fn find(
    client: &SlackHyperClient,
    token: &SlackApiToken,
    secrets: &Secrets,
    channel: &str,
    thread: Option<&str>,
    key: &str,
    piece: usize,
) -> Option<String> {
    // slack-morphism's replies request has no `include_all_metadata`: both are asked for by
    // hand through its client, which still reads Slack's errors and rate limits.
    let (method, params) = match thread {
        None => (
            "conversations.history",
            vec![
                ("channel", Some(channel)),
                ("limit", Some(HISTORY_LIMIT)),
                ("include_all_metadata", Some("true")),
            ],
        ),
        Some(thread) => (
            "conversations.replies",
            vec![
                ("channel", Some(channel)),
                ("ts", Some(thread)),
                ("limit", Some(REPLIES_LIMIT)),
                ("include_all_metadata", Some("true")),
            ],
        ),
    };
    let session = client.open_session(token);
    match session.http_session_api.http_get::<Page, _, _>(method, &params, None).await {
        Ok(page) => page.messages.iter().find(|m| marked(m, key, piece)).map(|m| m.ts.clone()),
        Err(e) => {
            let failure = classify(&e, method, secrets);
            warn!(
                error = failure.text(),
                "could not look for a piece posted already; sending it again"
            );
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(metadata: serde_json::Value) -> Seen {
        serde_json::from_value(serde_json::json!({"ts": "1.2", "metadata": metadata})).unwrap()
    }

    #[test]
    fn only_the_pieces_own_mark_matches() {
        let mine = serde_json::to_value(mark("42", 1)).unwrap();
        assert!(marked(&seen(mine.clone()), "42", 1));
        assert!(!marked(&seen(mine), "42", 0));
        let numbered =
            serde_json::json!({"event_type": MARK, "event_payload": {"key": "42", "piece": 1}});
        assert!(marked(&seen(numbered), "42", 1));
        let other_app =
            serde_json::json!({"event_type": "task", "event_payload": {"key": {"x": [1]}}});
        assert!(!marked(&seen(other_app), "42", 1));
        assert!(!marked(&seen(serde_json::Value::Null), "42", 1));
    }
}

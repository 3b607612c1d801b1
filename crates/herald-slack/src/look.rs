//! Finding a reply's piece that Slack may have taken unseen. Slack has no idempotency key, so
//! each piece of a stored reply goes out with message metadata naming the reply and the piece
//! (`herald_reply`: `key`, `piece`); before a piece is sent again after a failure that may
//! hide a success, the chat's messages are read for that mark: the channel's history, or in a
//! thread the thread's replies, both with `include_all_metadata`. Only the bot's own messages
//! since the reply was stored count: an outbox id is unique in one store only, and another
//! herald (its own store, a restored one, a staging copy) may mark its pieces alike.

use std::collections::HashMap;
use std::time::Duration;

use serde::Deserialize;
use slack_morphism::hyper_tokio::SlackHyperClient;
use slack_morphism::{SlackApiToken, SlackMessageMetadata};
use tracing::debug;

use crate::error::{Failed, Secrets, timed};
use crate::intake::Bot;

/// The metadata `event_type` that marks a piece of a reply.
const MARK: &str = "herald_reply";
/// Messages asked for per page, history or replies (Slack advises no more than 200).
const PAGE_LIMIT: &str = "200";
/// Pages read per look at most: the newest 2,000 messages since the reply was stored, which
/// bounds the calls one look spends of Slack's Tier 3 limit (about 50 a minute).
const MAX_PAGES: usize = 10;
/// How far before the reply was stored the look reaches: the margin for the clocks of this
/// host and Slack's disagreeing.
const CLOCK_SKEW: Duration = Duration::from_secs(5 * 60);

/// One page of `conversations.history` or `conversations.replies`, read leniently: another
/// app's metadata may hold any JSON.
#[derive(Debug, Deserialize)]
struct Page {
    messages: Vec<Seen>,
    #[serde(default)]
    response_metadata: Option<Next>,
}

#[derive(Debug, Deserialize)]
struct Next {
    #[serde(default)]
    next_cursor: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Seen {
    ts: String,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    bot_id: Option<String>,
    metadata: Option<Metadata>,
}

#[derive(Debug, Deserialize)]
struct Metadata {
    event_type: String,
    #[serde(default)]
    event_payload: serde_json::Value,
}

/// The pieces of one reply found in a chat: piece index to the message's `ts`.
pub(crate) type Found = HashMap<usize, String>;

/// What a look needs: the Web API and the bot whose messages count.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Look<'a> {
    pub(crate) client: &'a SlackHyperClient,
    pub(crate) token: &'a SlackApiToken,
    pub(crate) secrets: &'a Secrets,
    pub(crate) bot: &'a Bot,
    /// How long one page's call may take.
    pub(crate) within: Duration,
}

/// The mark of piece `piece` of reply `key`.
pub(crate) fn mark(key: &str, piece: usize) -> SlackMessageMetadata {
    let payload = HashMap::from([
        ("key".to_owned(), key.to_owned()),
        ("piece".to_owned(), piece.to_string()),
    ]);
    SlackMessageMetadata::new(MARK.into()).with_event_payload(payload)
}

/// The piece of reply `key` that `seen` is, if it carries its mark.
fn marked(seen: &Seen, key: &str) -> Option<usize> {
    let metadata = seen.metadata.as_ref()?;
    let payload = &metadata.event_payload;
    if metadata.event_type != MARK || payload["key"] != key {
        return None;
    }
    match &payload["piece"] {
        serde_json::Value::String(text) => text.parse().ok(),
        other => other.as_u64().and_then(|n| usize::try_from(n).ok()),
    }
}

/// Whether `bot` posted `seen`: another app's bot, or a person, may carry a mark alike.
fn ours(seen: &Seen, bot: &Bot) -> bool {
    seen.user.as_deref() == Some(bot.user.as_str())
        || (bot.id.is_some() && seen.bot_id.is_some() && seen.bot_id == bot.id)
}

/// `oldest` for a reply stored at `stored_at` (ms since the epoch; 0 when unknown): a little
/// before, for the clocks' skew.
fn oldest(stored_at: i64) -> Option<String> {
    let from = u64::try_from(stored_at).ok().filter(|ms| *ms > 0)?;
    let from = from.saturating_sub(CLOCK_SKEW.as_millis() as u64);
    Some(format!("{}.{:03}000", from / 1000, from % 1000))
}

impl Look<'_> {
    /// The pieces of reply `key`, stored at `stored_at`, that the bot posted in `channel` (in
    /// `thread`, when given) since then: the channel's history or the thread's replies, read
    /// once for every piece. `Err` when a page could not be read: nothing is known then.
    pub(crate) async fn find(
        &self,
        channel: &str,
        thread: Option<&str>,
        key: &str,
        stored_at: i64,
    ) -> Result<Found, Failed> {
        // slack-morphism's replies request has no `include_all_metadata`: both are asked for
        // by hand through its client, which still reads Slack's errors and rate limits.
        let method =
            if thread.is_some() { "conversations.replies" } else { "conversations.history" };
        let oldest = oldest(stored_at);
        let session = self.client.open_session(self.token);
        let mut found = Found::new();
        let mut cursor: Option<String> = None;
        for page in 1..=MAX_PAGES {
            let mut params = vec![
                ("channel", Some(channel)),
                ("limit", Some(PAGE_LIMIT)),
                ("include_all_metadata", Some("true")),
                ("oldest", oldest.as_deref()),
                ("cursor", cursor.as_deref()),
            ];
            if let Some(thread) = thread {
                params.push(("ts", Some(thread)));
            }
            let call = session.http_session_api.http_get::<Page, _, _>(method, &params, None);
            let read = timed(self.within, method, self.secrets, call).await?;
            for seen in read.messages.iter().filter(|seen| ours(seen, self.bot)) {
                if let Some(piece) = marked(seen, key) {
                    found.entry(piece).or_insert_with(|| seen.ts.clone());
                }
            }
            cursor = read.response_metadata.and_then(|m| m.next_cursor).filter(|c| !c.is_empty());
            if cursor.is_none() {
                break;
            }
            if page == MAX_PAGES {
                debug!(chat = %channel, "looked through the newest {MAX_PAGES} pages only");
            }
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(metadata: serde_json::Value, user: &str) -> Seen {
        serde_json::from_value(serde_json::json!({"ts": "1.2", "user": user, "metadata": metadata}))
            .unwrap()
    }

    #[test]
    fn only_the_reply_s_own_mark_matches() {
        let mine = serde_json::to_value(mark("42", 1)).unwrap();
        assert_eq!(marked(&seen(mine.clone(), "U1"), "42"), Some(1));
        assert_eq!(marked(&seen(mine, "U1"), "43"), None);
        let numbered =
            serde_json::json!({"event_type": MARK, "event_payload": {"key": "42", "piece": 1}});
        assert_eq!(marked(&seen(numbered, "U1"), "42"), Some(1));
        let other_app =
            serde_json::json!({"event_type": "task", "event_payload": {"key": {"x": [1]}}});
        assert_eq!(marked(&seen(other_app, "U1"), "42"), None);
        assert_eq!(marked(&seen(serde_json::Value::Null, "U1"), "42"), None);
    }

    #[test]
    fn only_the_bot_s_own_messages_count() {
        let bot = Bot { user: "U1".into(), name: "herald".into(), id: Some("B1".into()) };
        assert!(ours(&seen(serde_json::Value::Null, "U1"), &bot));
        assert!(!ours(&seen(serde_json::Value::Null, "U2"), &bot));
        let other: Seen =
            serde_json::from_value(serde_json::json!({"ts": "1.2", "bot_id": "B2"})).unwrap();
        assert!(!ours(&other, &bot));
    }

    #[test]
    fn the_look_reaches_a_little_before_the_reply_was_stored() {
        assert_eq!(oldest(0), None);
        assert_eq!(oldest(1_700_000_300_250).as_deref(), Some("1700000000.250000"));
    }
}

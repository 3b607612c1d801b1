use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use herald_core::{Platform, Role};

use super::{Tool, ToolContext, ToolSpec};

/// A message found in earlier conversations.
#[derive(Debug, Clone, PartialEq)]
pub struct PastMessage {
    /// Its session.
    pub session_id: String,
    /// The session's title.
    pub title: Option<String>,
    /// Who wrote it.
    pub role: Role,
    /// Unix milliseconds.
    pub created_at: i64,
    /// The text around the hit.
    pub snippet: String,
}

/// Full-text search over one person's history, implemented over the store by whoever wires the
/// agent (the agent itself never touches SQL).
pub trait HistorySearch: Send + Sync {
    /// Messages of `user_id` on `platform` matching `query`, best first.
    fn search<'a>(
        &'a self,
        platform: Platform,
        user_id: &'a str,
        query: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<PastMessage>, String>>;
}

/// `session_search`: searches the asking person's own earlier conversations.
///
/// Who is asking comes from the [`ToolContext`] the loop hands over, never from the model's
/// arguments, so no prompt can make it read another person's history.
#[derive(Clone)]
pub struct SessionSearch {
    history: Arc<dyn HistorySearch>,
}

impl std::fmt::Debug for SessionSearch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SessionSearch")
    }
}

impl SessionSearch {
    /// The tool over this search.
    pub fn new(history: Arc<dyn HistorySearch>) -> Self {
        SessionSearch { history }
    }
}

impl Tool for SessionSearch {
    fn spec(&self) -> ToolSpec {
        ToolSpec {
            name: "session_search".into(),
            description: "Search this person's earlier conversations with you (full-text). \
                          Use it when they refer to something discussed before."
                .into(),
            parameters: serde_json::json!({
                "type": "object",
                "properties": {
                    "query": {"type": "string", "description": "words or a \"quoted phrase\" to look for"},
                    "limit": {"type": "integer", "minimum": 1, "maximum": 20, "description": "most results (default 5)"}
                },
                "required": ["query"]
            }),
        }
    }

    fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        arguments: serde_json::Value,
    ) -> BoxFuture<'a, Result<String, String>> {
        async move {
            let query = arguments
                .get("query")
                .and_then(|q| q.as_str())
                .ok_or("the argument `query` (a string) is required")?;
            let limit = arguments.get("limit").and_then(|l| l.as_u64()).unwrap_or(5).clamp(1, 20);
            let Some(user) = context.user_id.as_deref() else {
                return Ok("no earlier conversations: the person is not identified".to_owned());
            };
            let found = self.history.search(context.platform, user, query, limit as u32).await?;
            if found.is_empty() {
                return Ok(format!("no earlier messages match `{query}`"));
            }
            let lines: Vec<String> = found
                .iter()
                .map(|m| {
                    let when = chrono::DateTime::from_timestamp_millis(m.created_at)
                        .map(|t| t.format("%Y-%m-%d").to_string())
                        .unwrap_or_default();
                    let title = m.title.as_deref().map(|t| format!(" \"{t}\"")).unwrap_or_default();
                    format!("- {when} session {}{title}, {}: {}", m.session_id, m.role, m.snippet)
                })
                .collect();
            Ok(lines.join("\n"))
        }
        .boxed()
    }
}

//! The store seen from the agent: stored messages as agent messages and back, and
//! `session_search` over the store.

use std::sync::Arc;

use futures::FutureExt;
use futures::future::BoxFuture;
use herald_agent::tools::{CurrentTime, HistorySearch, PastMessage, SessionSearch};
use herald_agent::{Message, ToolCall, ToolRegistry, Usage};
use herald_core::Platform;
use herald_store::{NewMessage, SearchQuery, Store, StoredMessage, TokenUsage};

/// `session_search` and `current_time`, searching this store.
pub fn tools(store: &Store) -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register(CurrentTime);
    tools.register(SessionSearch::new(Arc::new(StoreHistory { store: store.clone() })));
    tools
}

/// [`HistorySearch`] over the store, limited to one person's sessions on one platform.
#[derive(Debug, Clone)]
pub struct StoreHistory {
    /// The store searched.
    pub store: Store,
}

impl HistorySearch for StoreHistory {
    fn search<'a>(
        &'a self,
        platform: Platform,
        user_id: &'a str,
        query: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<PastMessage>, String>> {
        async move {
            let query = SearchQuery {
                source: Some(platform),
                user_id: Some(user_id.to_owned()),
                limit,
                ..SearchQuery::new(query)
            };
            let hits = self.store.search(&query).await.map_err(|e| e.to_string())?;
            Ok(hits
                .into_iter()
                .map(|h| PastMessage {
                    session_id: h.session_id,
                    title: h.title,
                    role: h.role,
                    created_at: h.created_at,
                    snippet: h.snippet,
                })
                .collect())
        }
        .boxed()
    }
}

/// A stored message as the agent reads it.
pub fn to_agent(stored: StoredMessage) -> Message {
    Message {
        tool_calls: stored.tool_calls.as_ref().map(ToolCall::from_json).unwrap_or_default(),
        tool_call_id: stored.tool_call_id,
        tool_name: stored.tool_name,
        ..Message::new(stored.role, stored.content)
    }
}

/// An agent message as the store keeps it.
pub fn to_store(message: &Message) -> NewMessage {
    NewMessage {
        tool_calls: (!message.tool_calls.is_empty())
            .then(|| ToolCall::to_json(&message.tool_calls)),
        tool_call_id: message.tool_call_id.clone(),
        tool_name: message.tool_name.clone(),
        ..NewMessage::new(message.role, message.content.clone())
    }
}

/// The agent's token counts in the store's terms.
pub fn usage(usage: Usage) -> TokenUsage {
    let clamp = |n: u64| i64::try_from(n).unwrap_or(i64::MAX);
    TokenUsage {
        input: clamp(usage.prompt_tokens),
        output: clamp(usage.completion_tokens),
        ..TokenUsage::default()
    }
}

//! Tools the model may call: the registry, and the built-in `session_search` and
//! `current_time`.

mod current_time;
mod session_search;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::BoxFuture;
use herald_core::Platform;

pub use current_time::CurrentTime;
pub use session_search::{HistorySearch, PastMessage, SessionSearch};

/// Who is asking, handed to every tool by the loop, never taken from the model's arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolContext {
    /// Where the conversation happens.
    pub platform: Platform,
    /// The platform user id of the person chatting, when known.
    pub user_id: Option<String>,
    /// The session of the running turn.
    pub session_id: String,
}

/// What the model is told about a tool.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// The name the model calls it by.
    pub name: String,
    /// What it does, for the model.
    pub description: String,
    /// JSON Schema of its arguments.
    pub parameters: serde_json::Value,
}

/// A tool: a name, a description, a JSON-schema of its arguments, and an async call.
pub trait Tool: Send + Sync {
    /// The name, description and parameters.
    fn spec(&self) -> ToolSpec;

    /// Runs the tool. `Err` is a message for the model (the loop goes on), not a failure of
    /// the turn.
    fn call<'a>(
        &'a self,
        context: &'a ToolContext,
        arguments: serde_json::Value,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// The tools on offer, by name.
#[derive(Clone, Default)]
pub struct ToolRegistry {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl std::fmt::Debug for ToolRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.tools.keys()).finish()
    }
}

impl ToolRegistry {
    /// No tools.
    pub fn new() -> Self {
        ToolRegistry::default()
    }

    /// Adds a tool, replacing one of the same name.
    pub fn register(&mut self, tool: impl Tool + 'static) -> &mut Self {
        self.tools.insert(tool.spec().name, Arc::new(tool));
        self
    }

    /// The tool called `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// The specs of every tool, in name order.
    pub fn specs(&self) -> Vec<ToolSpec> {
        self.tools.values().map(|t| t.spec()).collect()
    }

    /// The names of every tool, in order, for error messages.
    pub fn names(&self) -> Vec<&str> {
        self.tools.keys().map(String::as_str).collect()
    }
}

//! herald's agent: the OpenAI-compatible provider, the tool registry and built-in tools, the
//! tool-calling loop and system prompt assembly.
//!
//! Depends only on herald-core. History comes in as data and the new messages go out as data:
//! the agent never touches SQL, and no wire type of the provider leaves this crate.

mod agent;
mod message;
mod prompt;
pub mod provider;
pub mod tools;

pub use agent::{Agent, TurnError, TurnOutput};
pub use message::{Message, ToolCall, Usage};
pub use prompt::{PromptContext, assemble_system_prompt};
pub use provider::{ChatRequest, Completion, OpenAiProvider, Provider, ProviderError, RetryPolicy};
pub use tools::{Tool, ToolContext, ToolRegistry, ToolSpec};

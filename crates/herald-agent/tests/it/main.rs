//! The agent against the scripted model server of herald-fakes, through the real provider.
#![allow(clippy::unwrap_used)]

mod loop_;
mod provider;
mod search;

use std::time::Duration;

use herald_agent::tools::CurrentTime;
use herald_agent::{OpenAiProvider, RetryPolicy, ToolContext, ToolRegistry};
use herald_core::Platform;
use herald_fakes::FakeModel;

/// A provider for the fake with quick retries.
pub fn provider(fake: &FakeModel, timeout: Duration) -> OpenAiProvider {
    let retry = RetryPolicy {
        attempts: 3,
        base_delay: Duration::from_millis(20),
        max_delay: Duration::from_secs(5),
    };
    OpenAiProvider::new(&fake.base_url(), Some("sk-test".into()), timeout, retry).unwrap()
}

/// The built-in time tool only.
pub fn time_tools() -> ToolRegistry {
    let mut tools = ToolRegistry::new();
    tools.register(CurrentTime);
    tools
}

/// A telegram user's turn.
pub fn context(user: &str) -> ToolContext {
    ToolContext {
        platform: Platform::Telegram,
        user_id: Some(user.into()),
        session_id: "s1".into(),
    }
}

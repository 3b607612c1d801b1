//! The model provider: a trait for "complete this conversation", its OpenAI-compatible
//! implementation, and the errors a caller can turn into one clear line.

mod error;
mod openai;
mod wire;

use std::future::Future;
use std::time::Duration;

pub use error::ProviderError;
pub use openai::OpenAiProvider;

use crate::message::{Message, Usage};
use crate::tools::ToolSpec;

/// One model call: the whole conversation so far and the tools on offer.
#[derive(Debug, Clone, Copy)]
pub struct ChatRequest<'a> {
    /// The model name.
    pub model: &'a str,
    /// The system prompt, sent first.
    pub system_prompt: &'a str,
    /// The conversation after the system prompt.
    pub messages: &'a [Message],
    /// The tools the model may call.
    pub tools: &'a [ToolSpec],
}

/// The model's answer to one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Completion {
    /// The assistant message (text, tool calls, or both).
    pub message: Message,
    /// Token counts, when the endpoint reported them.
    pub usage: Option<Usage>,
}

/// Something that completes conversations: the real endpoint, or a scripted stand-in.
pub trait Provider: Send + Sync {
    /// Sends the conversation and returns the model's next message.
    fn complete(
        &self,
        request: ChatRequest<'_>,
    ) -> impl Future<Output = Result<Completion, ProviderError>> + Send;
}

/// How often and how patiently a failed call is tried again.
#[derive(Debug, Clone, Copy)]
pub struct RetryPolicy {
    /// Attempts in all, the first included.
    pub attempts: u32,
    /// The first backoff; each later one doubles, with jitter.
    pub base_delay: Duration,
    /// No backoff (or `Retry-After`) is waited longer than this; a longer `Retry-After` fails.
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            attempts: 4,
            base_delay: Duration::from_millis(500),
            max_delay: Duration::from_secs(30),
        }
    }
}

impl RetryPolicy {
    /// The wait before attempt `attempt + 1` (counting from 1): exponential, with the upper
    /// half jittered so that clients that failed together do not retry together.
    pub fn backoff(&self, attempt: u32) -> Duration {
        let exp = self.base_delay.saturating_mul(1 << attempt.saturating_sub(1).min(16));
        let capped = exp.min(self.max_delay);
        capped.mul_f64(rand::random_range(0.5..=1.0))
    }
}

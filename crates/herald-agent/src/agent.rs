//! The tool-calling loop: model, tools, model, ... until the model answers in text or the
//! iteration cap is reached.

use tokio_util::sync::CancellationToken;
use tracing::{debug, instrument};

use crate::message::{Message, Usage};
use crate::provider::{ChatRequest, Provider, ProviderError};
use crate::tools::{ToolContext, ToolRegistry};

/// One agent run over one session: built fresh for every inbound message from the session's
/// stored system prompt.
#[derive(Debug)]
pub struct Agent<'a, P> {
    /// The model endpoint.
    pub provider: &'a P,
    /// The tools on offer.
    pub tools: &'a ToolRegistry,
    /// The model name.
    pub model: &'a str,
    /// The session's stored system prompt, sent verbatim.
    pub system_prompt: &'a str,
    /// Most model calls for one inbound message.
    pub max_iterations: u32,
}

/// What a turn produced: only the new messages (the delta), for the caller to store.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutput {
    /// Assistant messages and tool results, in order.
    pub messages: Vec<Message>,
    /// Tokens over all model calls of the turn.
    pub usage: Usage,
    /// How full the context is now: the last model call's prompt plus completion tokens, or 0
    /// when the endpoint reported no usage for it.
    pub context_tokens: u64,
    /// Whether the turn stopped at the iteration cap.
    pub hit_iteration_cap: bool,
}

impl TurnOutput {
    /// The text of the last assistant message: the answer to show.
    pub fn reply(&self) -> &str {
        self.messages
            .iter()
            .rev()
            .find(|m| m.role == herald_core::Role::Assistant)
            .map_or("", |m| m.content.as_str())
    }
}

/// A turn that did not finish. Nothing of it should be stored but the user's message, so the
/// session stays as it was before the turn.
#[derive(Debug, thiserror::Error)]
pub enum TurnError {
    /// The model call failed.
    #[error(transparent)]
    Provider(#[from] ProviderError),
    /// The turn was cancelled (`/stop`, Ctrl-C, or a newer message in interrupt mode).
    #[error("the turn was cancelled")]
    Cancelled,
}

impl<P: Provider> Agent<'_, P> {
    /// Runs the loop on `history` (which ends with the new user message) and returns the new
    /// messages. Cancellation is honoured at every model and tool boundary.
    #[instrument(skip_all, fields(session = %context.session_id))]
    pub async fn run(
        &self,
        history: &[Message],
        context: &ToolContext,
        cancel: &CancellationToken,
    ) -> Result<TurnOutput, TurnError> {
        let specs = self.tools.specs();
        let mut conversation = history.to_vec();
        let first_new = conversation.len();
        let mut usage = Usage::default();
        let mut context_tokens = 0;
        for iteration in 1..=self.max_iterations {
            let request = ChatRequest {
                model: self.model,
                system_prompt: self.system_prompt,
                messages: &conversation,
                tools: &specs,
            };
            let completion = tokio::select! {
                biased;
                () = cancel.cancelled() => return Err(TurnError::Cancelled),
                result = self.provider.complete(request) => result?,
            };
            // Each call resends the whole conversation, so the last one alone measures it.
            context_tokens =
                completion.usage.map_or(0, |u| u.prompt_tokens.saturating_add(u.completion_tokens));
            if let Some(u) = completion.usage {
                usage += u;
            }
            let calls = completion.message.tool_calls.clone();
            conversation.push(completion.message);
            if calls.is_empty() {
                return Ok(done(conversation, first_new, usage, context_tokens, false));
            }
            debug!(iteration, calls = calls.len(), "running tool calls");
            for call in calls {
                if cancel.is_cancelled() {
                    return Err(TurnError::Cancelled);
                }
                let output = self.call_tool(&call.name, &call.arguments, context, cancel).await?;
                conversation.push(Message::tool_result(&call.id, &call.name, output));
            }
        }
        conversation.push(Message::assistant(format!(
            "I stopped after {} steps without finishing. Say \"continue\" if you want me to go on.",
            self.max_iterations
        )));
        Ok(done(conversation, first_new, usage, context_tokens, true))
    }

    /// A tool's output, or what went wrong as a message the model can act on.
    async fn call_tool(
        &self,
        name: &str,
        arguments: &str,
        context: &ToolContext,
        cancel: &CancellationToken,
    ) -> Result<String, TurnError> {
        let Some(tool) = self.tools.get(name) else {
            return Ok(format!(
                "error: there is no tool `{name}`; the tools are: {}",
                self.tools.names().join(", ")
            ));
        };
        let arguments = if arguments.trim().is_empty() { "{}" } else { arguments };
        let value = match serde_json::from_str::<serde_json::Value>(arguments) {
            Ok(v) if v.is_object() => v,
            Ok(_) => return Ok(format!("error: the arguments of `{name}` must be a JSON object")),
            Err(e) => {
                return Ok(format!("error: the arguments of `{name}` are not valid JSON ({e})"));
            }
        };
        let result = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(TurnError::Cancelled),
            result = tool.call(context, value) => result,
        };
        Ok(result.unwrap_or_else(|e| format!("error: {e}")))
    }
}

fn done(
    conversation: Vec<Message>,
    first_new: usize,
    usage: Usage,
    context_tokens: u64,
    hit_iteration_cap: bool,
) -> TurnOutput {
    let messages = conversation.into_iter().skip(first_new).collect();
    TurnOutput { messages, usage, context_tokens, hit_iteration_cap }
}

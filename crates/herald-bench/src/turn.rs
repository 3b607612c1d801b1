//! Synthetic turns: the four messages the gateway persists when the agent answers a chat
//! message with one tool call, in varied text.

use herald_store::NewMessage;
use rand::{Rng, RngExt};
use serde::Serialize;

use crate::vocab::Vocabulary;

/// The system prompt of every benchmark session.
pub const SYSTEM_PROMPT: &str = "You are herald, a helpful agent reached from chat platforms. \
    Answer briefly, search past sessions with session_search when the user refers to them.";

/// The tool every synthetic turn calls.
pub const TOOL: &str = "session_search";

/// One turn as the gateway persists it: the inbound message, then the agent's reply.
#[derive(Debug, Clone)]
pub struct Turn {
    /// The person's message (about 200 bytes), written by `append_inbound`.
    pub user: NewMessage,
    /// A tool call, its result (about 1000 bytes) and the answer (about 600 bytes), written by
    /// one `append_messages`.
    pub reply: Vec<NewMessage>,
}

impl Turn {
    /// A turn of freshly drawn words.
    pub fn synthetic<R: Rng + ?Sized>(rng: &mut R) -> Turn {
        let vocab = Vocabulary::global();
        let call_id = format!("call_{:016x}", rng.random::<u64>());
        let arguments = serde_json::json!({ "query": vocab.text(rng, 20), "limit": 5 });
        let calls = serde_json::json!([{
            "id": call_id,
            "type": "function",
            "function": { "name": TOOL, "arguments": arguments.to_string() },
        }]);
        Turn {
            user: NewMessage::user(vocab.text(rng, 200)),
            reply: vec![
                NewMessage::assistant("").with_tool_calls(calls),
                NewMessage::tool(call_id, TOOL, vocab.text(rng, 1000)),
                NewMessage::assistant(vocab.text(rng, 600)),
            ],
        }
    }

    /// All four messages in order.
    pub fn messages(&self) -> Vec<NewMessage> {
        std::iter::once(self.user.clone()).chain(self.reply.iter().cloned()).collect()
    }
}

/// A message as a worker echoes it on stdout, for tests that compare it with what was stored.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct EchoedMessage {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Its text.
    pub content: String,
    /// The tool calls JSON, if any.
    pub tool_calls: Option<serde_json::Value>,
    /// The call a tool result answers.
    pub tool_call_id: Option<String>,
    /// The tool's name.
    pub tool_name: Option<String>,
    /// The platform's id, for the inbound message.
    pub platform_message_id: Option<String>,
}

impl From<&NewMessage> for EchoedMessage {
    fn from(m: &NewMessage) -> Self {
        EchoedMessage {
            role: m.role.as_str().to_owned(),
            content: m.content.clone(),
            tool_calls: m.tool_calls.clone(),
            tool_call_id: m.tool_call_id.clone(),
            tool_name: m.tool_name.clone(),
            platform_message_id: m.platform_message_id.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_turn_has_the_gateway_shape_and_sizes() {
        let turn = Turn::synthetic(&mut rand::rng());
        let [call, result, answer] = &turn.reply[..] else {
            panic!("reply of {}", turn.reply.len())
        };
        assert!((200..300).contains(&turn.user.content.len()));
        assert!(call.content.is_empty());
        let calls = call.tool_calls.as_ref().expect("tool calls");
        assert_eq!(calls[0]["function"]["name"], TOOL);
        let arguments = calls[0]["function"]["arguments"].as_str().expect("arguments string");
        assert!(serde_json::from_str::<serde_json::Value>(arguments).is_ok());
        assert_eq!(result.tool_call_id.as_deref(), calls[0]["id"].as_str());
        assert!((1000..1100).contains(&result.content.len()));
        assert!((600..700).contains(&answer.content.len()));
        assert_ne!(turn.user.content, Turn::synthetic(&mut rand::rng()).user.content);
    }
}

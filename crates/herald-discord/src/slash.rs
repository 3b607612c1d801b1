//! Slash commands on their way in: handed to the gateway as the command typed as text, then
//! acknowledged as the gateway took them (Discord wants an answer within 3 s): "thinking"
//! until the answer edits it, or, for someone who may not use the bot, one line only they see.

use std::sync::Arc;
use std::time::Duration;

use herald_core::{Ack, AdapterEvent, Inbound, SLASH_COMMANDS, SlashCommand, Taken, UserRef};
use serenity::all::{
    CommandDataOptionValue, CommandInteraction, CreateInteractionResponse,
    CreateInteractionResponseMessage,
};
use tokio::sync::{Mutex, oneshot};
use tracing::{Instrument, debug, warn};

use crate::error::classify;
use crate::intake::{Inner, lock};
use crate::send::Sender;

/// How long the gateway may take to say whether it took a command before it is acknowledged
/// anyway: well inside Discord's 3 s.
const DECIDE_WITHIN: Duration = Duration::from_millis(1500);

/// What the interaction was answered with so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answered {
    /// Nothing yet: the first answer is the response itself.
    Not,
    /// "Thinking": the first answer edits it.
    Deferred,
    /// A message: every answer follows it.
    Responded,
}

/// A slash command waiting for its answer.
#[derive(Debug)]
pub(crate) struct PendingCommand {
    pub(crate) interaction: Box<CommandInteraction>,
    /// Held while answering, so the acknowledgement and the gateway's answer never cross.
    pub(crate) answered: Arc<Mutex<Answered>>,
    /// Whether only the asker sees the answer.
    pub(crate) private: bool,
}

impl Inner {
    /// A slash command: handed to the gateway as the command typed as text, and acknowledged
    /// once the gateway said how it took it.
    pub(crate) async fn slash_command(self: &Arc<Self>, interaction: Box<CommandInteraction>) {
        let name = interaction.data.name.clone();
        let Some(listed) = SLASH_COMMANDS.iter().find(|c| c.name == name) else {
            debug!(command = %name, "a slash command herald does not have was ignored");
            return;
        };
        let chat = self.chat_of(interaction.channel_id, interaction.guild_id.is_some()).await;
        let text = command_text(&interaction, listed);
        let id = interaction.id.to_string();
        let user = UserRef {
            id: interaction.user.id.to_string(),
            name: Some(interaction.user.name.clone()),
        };
        // Registered before the gateway hears of it: its answer may come before the verdict.
        let answered = Arc::new(Mutex::new(Answered::Not));
        let pending = PendingCommand {
            interaction: interaction.clone(),
            answered: answered.clone(),
            private: listed.private,
        };
        lock(&self.commands).insert(id.clone(), pending);
        let (ack, taken) = Ack::answerable();
        let inbound = Inbound { id, chat, user, text, mentioned: true, reply_to_bot: false, ack };
        if self.events.send(AdapterEvent::Inbound(inbound)).await.is_err() {
            return;
        }
        // Waited for beside the intake, which goes on with the next message.
        let acknowledging = self.clone().acknowledge(interaction, listed, answered, taken);
        tokio::spawn(acknowledging.in_current_span());
    }

    /// Answers the interaction for now, as the gateway took it: "thinking" (or, for `/retry`,
    /// a line saying the answer follows), or the gateway's one line for someone refused.
    async fn acknowledge(
        self: Arc<Self>,
        interaction: Box<CommandInteraction>,
        listed: &'static SlashCommand,
        answered: Arc<Mutex<Answered>>,
        taken: oneshot::Receiver<Taken>,
    ) {
        tokio::pin!(taken);
        let first = tokio::time::timeout(DECIDE_WITHIN, &mut taken).await;
        let slow = first.is_err();
        let refused = |line: String| {
            let message = CreateInteractionResponseMessage::new().content(line).ephemeral(true);
            (CreateInteractionResponse::Message(message), Answered::Responded)
        };
        let (response, now) = match first {
            Ok(Ok(Taken::Refused(line))) => {
                lock(&self.commands).remove(&interaction.id.to_string());
                refused(line)
            }
            Ok(Err(_)) => {
                lock(&self.commands).remove(&interaction.id.to_string());
                refused("I could not take that command in just now; please try again.".into())
            }
            // Taken, or slow to say: acknowledged as usual, and the answer edits or follows.
            Ok(Ok(Taken::Kept)) | Err(_) if listed.answered_by_a_turn => {
                let message = CreateInteractionResponseMessage::new()
                    .content("Answering your last message again.");
                (CreateInteractionResponse::Message(message), Answered::Responded)
            }
            Ok(Ok(Taken::Kept)) | Err(_) => {
                let message = CreateInteractionResponseMessage::new().ephemeral(listed.private);
                (CreateInteractionResponse::Defer(message), Answered::Deferred)
            }
        };
        {
            let mut state = answered.lock().await;
            // The gateway's answer came first and was the response itself.
            if *state != Answered::Not {
                return;
            }
            match interaction.create_response(&self.http, response).await {
                Ok(()) => *state = now,
                Err(e) => {
                    let error = classify(&e, &self.settings.token);
                    warn!(command = %listed.name, error = error.text(), "could not acknowledge a slash command");
                }
            }
        }
        if slow && let Ok(Taken::Refused(line)) = taken.await {
            // Refused after the acknowledgement: the line is its answer after all.
            let pending = lock(&self.commands).remove(&interaction.id.to_string());
            if let Some(pending) = pending {
                let _ = Sender::new(self.clone()).answer_command(pending, &[line]).await;
            }
        }
    }
}

/// A slash command as the gateway reads it: `/name argument`.
fn command_text(interaction: &CommandInteraction, listed: &SlashCommand) -> String {
    let args: Vec<&str> = interaction
        .data
        .options
        .iter()
        .filter_map(|option| match &option.value {
            CommandDataOptionValue::String(value) => Some(value.as_str()),
            _ => None,
        })
        .collect();
    format!("/{} {}", listed.name, args.join(" ")).trim_end().to_owned()
}

//! Slash commands on their way in: acknowledged at once, then handed to the gateway as the
//! command typed as text; the answer edits the acknowledgement (see `send.rs`).

use std::sync::Arc;

use herald_core::{Ack, AdapterEvent, Inbound, SLASH_COMMANDS, SlashCommand, UserRef};
use serenity::all::{
    CommandDataOptionValue, CommandInteraction, CreateInteractionResponse,
    CreateInteractionResponseMessage,
};
use tracing::{debug, warn};

use crate::error::classify;
use crate::intake::{Inner, lock};

/// A slash command waiting for its answer.
#[derive(Debug)]
pub(crate) struct PendingCommand {
    pub(crate) interaction: Box<CommandInteraction>,
    /// Whether the response was deferred (the answer edits it) or already given.
    pub(crate) deferred: bool,
    /// Whether only the asker sees the answer.
    pub(crate) private: bool,
}

impl Inner {
    /// A slash command: acknowledged at once (Discord wants an answer within 3 s), then handed
    /// to the gateway as the command typed as text.
    pub(crate) async fn slash_command(self: &Arc<Self>, interaction: Box<CommandInteraction>) {
        let name = interaction.data.name.clone();
        let Some(listed) = SLASH_COMMANDS.iter().find(|c| c.name == name) else {
            debug!(command = %name, "a slash command herald does not have was ignored");
            return;
        };
        let chat = self.chat_of(interaction.channel_id, interaction.guild_id.is_some()).await;
        let deferred = self.acknowledge(&interaction, listed).await;
        let text = command_text(&interaction, listed);
        let id = interaction.id.to_string();
        let user = UserRef {
            id: interaction.user.id.to_string(),
            name: Some(interaction.user.name.clone()),
        };
        if let Some(deferred) = deferred {
            let pending = PendingCommand { interaction, deferred, private: listed.private };
            lock(&self.commands).insert(id.clone(), pending);
        }
        let inbound = Inbound {
            id,
            chat,
            user,
            text,
            mentioned: true,
            reply_to_bot: false,
            ack: Ack::none(),
        };
        let _ = self.events.send(AdapterEvent::Inbound(inbound)).await;
    }

    /// Answers the interaction for now: "thinking" until the gateway's answer edits it, or a
    /// line saying a reply follows. `Some(deferred)` when it worked.
    async fn acknowledge(
        &self,
        interaction: &CommandInteraction,
        listed: &SlashCommand,
    ) -> Option<bool> {
        let (response, deferred) = if listed.answered_by_a_turn {
            let message = CreateInteractionResponseMessage::new()
                .content("Answering your last message again.");
            (CreateInteractionResponse::Message(message), false)
        } else {
            let message = CreateInteractionResponseMessage::new().ephemeral(listed.private);
            (CreateInteractionResponse::Defer(message), true)
        };
        match interaction.create_response(&self.http, response).await {
            Ok(()) => Some(deferred),
            Err(e) => {
                let error = classify(&e, &self.settings.token);
                warn!(command = %listed.name, error = error.text(), "could not acknowledge a slash command; its answer goes to the channel");
                None
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

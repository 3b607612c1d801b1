//! What the gateway needs to know from the configuration, as plain values.

use crate::compress::CompressionSettings;
use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use herald_core::Platform;
use serde::Deserialize;

/// What a message does while its session's agent is running (`gateway.busy_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BusyInput {
    /// Waits its turn; every message is answered, in order.
    #[default]
    Queue,
    /// Stops the running turn at its next model or tool boundary and answers the new message.
    Interrupt,
}

/// Who may start a conversation in a direct message (each platform's `dm_policy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DmPolicy {
    /// Unknown users get a one-time code the operator approves with `herald pairing approve`.
    #[default]
    Pair,
    /// Only listed and approved users; others are ignored.
    Allowlist,
    /// Everyone.
    Open,
}

/// Who may talk to the bot on one platform.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Access {
    /// Platform user ids allowed everywhere; `"*"` allows everyone.
    pub allowed_users: Vec<String>,
    /// What happens to unknown users in direct messages.
    pub dm_policy: DmPolicy,
    /// In groups, answer only messages that mention the bot or reply to it.
    pub require_mention: bool,
    /// Group chats (channels) the bot answers in; empty: any. A thread counts as its parent
    /// channel. Direct messages are never affected.
    pub allowed_channels: Vec<String>,
}

impl Default for Access {
    fn default() -> Self {
        Access {
            allowed_users: Vec::new(),
            dm_policy: DmPolicy::Pair,
            require_mention: true,
            allowed_channels: Vec::new(),
        }
    }
}

impl Access {
    /// Whether the allowlist names this user (or everyone).
    pub fn lists(&self, user_id: &str) -> bool {
        self.allowed_users.iter().any(|u| u == "*" || u == user_id)
    }

    /// Whether the bot may answer in group chat `chat_id` (always, when no channel is listed).
    pub fn admits_channel(&self, chat_id: &str) -> bool {
        self.allowed_channels.is_empty() || self.allowed_channels.iter().any(|c| c == chat_id)
    }
}

/// The parts of the settings a reload may change while the gateway runs.
#[derive(Debug, Clone)]
pub struct Reloadable {
    /// The persona new sessions are given.
    pub persona: String,
    /// Who may talk to the bot, per platform.
    pub access: HashMap<Platform, Access>,
}

/// Everything the gateway is configured with.
#[derive(Debug, Clone)]
pub struct GatewaySettings {
    /// The most agent runs at once across all sessions.
    pub max_concurrent_runs: usize,
    /// Queue or interrupt.
    pub busy_input: BusyInput,
    /// In groups, each user gets their own session.
    pub group_sessions_per_user: bool,
    /// How long running turns may finish at shutdown.
    pub drain_timeout: Duration,
    /// The model new sessions use.
    pub model: String,
    /// Most model calls per inbound message.
    pub max_iterations: u32,
    /// How long an idle session worker lives before it is dropped.
    pub idle_worker: Duration,
    /// How long a pairing code is valid.
    pub pairing_ttl: Duration,
    /// When and how long conversations are compressed.
    pub compression: CompressionSettings,
    /// What a reload may change; shared so a reload applies to new messages at once.
    pub live: Arc<RwLock<Reloadable>>,
}

impl GatewaySettings {
    /// Settings with SPEC defaults and this persona and model.
    pub fn new(persona: impl Into<String>, model: impl Into<String>) -> Self {
        GatewaySettings {
            max_concurrent_runs: 16,
            busy_input: BusyInput::Queue,
            group_sessions_per_user: true,
            drain_timeout: Duration::from_secs(30),
            model: model.into(),
            max_iterations: 90,
            idle_worker: Duration::from_secs(300),
            pairing_ttl: Duration::from_secs(3600),
            compression: CompressionSettings::default(),
            live: Arc::new(RwLock::new(Reloadable {
                persona: persona.into(),
                access: HashMap::new(),
            })),
        }
    }

    /// Sets who may talk to the bot on a platform.
    pub fn with_access(self, platform: Platform, access: Access) -> Self {
        self.update(|live| {
            live.access.insert(platform, access);
        });
        self
    }

    /// Applies a change to the reloadable part.
    pub fn update(&self, change: impl FnOnce(&mut Reloadable)) {
        let mut live = self.live.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        change(&mut live);
    }

    /// A copy of the reloadable part as it is now.
    pub fn current(&self) -> Reloadable {
        self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// The persona new sessions get now.
    pub fn persona(&self) -> String {
        self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner).persona.clone()
    }

    /// Who may talk to the bot on `platform` now (deny everyone unknown when unset).
    pub fn access(&self, platform: Platform) -> Access {
        let live = self.live.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        live.access.get(&platform).cloned().unwrap_or_default()
    }
}

//! Fake servers for herald's tests and offline trials: the scripted OpenAI-compatible model
//! server ([`FakeModel`], also the `herald-fake-model` binary) and the Telegram Bot API
//! ([`FakeTelegram`], also the `herald-fake-telegram` binary), the first slice of a fake
//! Discord ([`FakeDiscord`]: REST v10 and the Gateway WebSocket), and Slack ([`FakeSlack`]: the
//! Web API and Socket Mode, also the `herald-fake-slack` binary). [`balancer::Balancer`] (also
//! the `herald-fake-balancer` binary) spreads requests over several herald replicas.
//!
//! Depends on nothing of ours, so any crate may use it in tests without a cycle; it is never
//! linked into the daemon. Every fake binds to loopback and speaks the real wire format, so the
//! real clients run against it unchanged.

mod accept;
pub mod balancer;
pub mod discord;
mod model;
pub mod program;
pub mod slack;
pub mod telegram;

pub use discord::FakeDiscord;
pub use model::{FakeModel, Fault, Reply};
pub use slack::FakeSlack;
pub use telegram::{FakeTelegram, TelegramFault};

//! Fake servers for herald's tests and offline trials: today the scripted OpenAI-compatible model
//! server ([`FakeModel`], also the `herald-fake-model` binary).
//!
//! Depends on nothing of ours, so any crate may use it in tests without a cycle; it is never
//! linked into the daemon. Every fake binds to loopback and speaks the real wire format, so the
//! real clients run against it unchanged.

mod model;

pub use model::{FakeModel, Fault, Reply};

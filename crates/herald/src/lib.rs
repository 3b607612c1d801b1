//! The `herald` binary's library half: configuration, the command line and the commands.
//!
//! Only this crate wires the others together; `main.rs` parses the command line, sets up
//! logging and hands over. Everything here is reachable from the binary and its tests.

pub mod chat;
pub mod cli;
pub mod commands;
pub mod config;
pub mod daemon;
pub mod logging;
pub mod output;
pub mod wiring;

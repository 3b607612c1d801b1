//! End-to-end tests: the real adapter and teloxide client against the fake Bot API.
#![allow(clippy::unwrap_used)]

mod common;
mod faults;
mod lifecycle;
mod poison;
mod receive;
mod replicas;
mod reply;
mod webhook;

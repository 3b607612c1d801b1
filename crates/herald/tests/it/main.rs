//! End-to-end tests of the `herald` binary: each runs the real executable against a store
//! prepared in a temporary directory, with HOME and the XDG variables pointed there too.
#![allow(clippy::unwrap_used)]

mod chat;
mod common;
mod compression;
mod config;
mod doctor;
mod export;
mod gateway;
mod search;
mod service;
mod sessions;

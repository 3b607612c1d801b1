//! The scripted model server: a real HTTP server on loopback that answers `POST
//! /v1/chat/completions` like an OpenAI-compatible provider.
//!
//! Each request is answered, in this order of precedence, by a queued [`Fault`], the sticky
//! fault of [`FakeModel::always_fail`], a queued [`Reply`], or the default behaviour (echo, and
//! tool calls for `search for ...` and `what time ...`). Every request body is recorded. An
//! answer reports the next queued usage ([`FakeModel::push_usage`]), else a rough estimate.
//!
//! While a context window is set ([`FakeModel::set_context_window`]), a request that gets past
//! the faults with a prompt larger than the window is refused as OpenAI refuses it, and takes
//! no reply or usage from the queues.

mod faults;
mod script;
mod server;
mod state;
mod wire;

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

pub use faults::Fault;
pub use script::Reply;
use state::Shared;

/// A running fake model server; it stops when dropped or on [`FakeModel::shutdown`].
#[derive(Debug)]
pub struct FakeModel {
    addr: SocketAddr,
    shared: Arc<Shared>,
    shutdown: CancellationToken,
    task: Option<JoinHandle<()>>,
}

impl FakeModel {
    /// The model id listed by `GET /v1/models`; requests may name any model.
    pub const MODEL: &'static str = "fake-model";

    /// Starts a server on `127.0.0.1` with a port chosen by the system.
    ///
    /// # Panics
    /// If no loopback port can be bound, which leaves a test nothing to do.
    pub async fn start() -> FakeModel {
        let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, 0));
        match FakeModel::start_on(loopback).await {
            Ok(fake) => fake,
            Err(err) => panic!("could not bind a loopback port for the fake model: {err}"),
        }
    }

    /// Starts a server on `addr` (port 0 picks a free one).
    pub async fn start_on(addr: SocketAddr) -> io::Result<FakeModel> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared::default());
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(server::serve(listener, shared.clone(), shutdown.clone()));
        Ok(FakeModel { addr, shared, shutdown, task: Some(task) })
    }

    /// The address the server listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL to configure a client with, like `http://127.0.0.1:PORT/v1`.
    pub fn base_url(&self) -> String {
        let mut addr = self.addr;
        if addr.ip().is_unspecified() {
            // Listening on every interface: loopback is the one address sure to reach it.
            addr.set_ip(Ipv4Addr::LOCALHOST.into());
        }
        format!("http://{addr}/v1")
    }

    /// Queues a reply for a later request, after any queued ones.
    pub fn push_reply(&self, reply: Reply) {
        self.shared.lock().replies.push_back(reply);
    }

    /// Queues a fault for a later request, after any queued ones; faults come before replies.
    pub fn push_fault(&self, fault: Fault) {
        self.shared.lock().faults.push_back(fault);
    }

    /// Makes the next answer report these token counts instead of the estimate, after any queued
    /// ones; a [`Reply::Raw`] answer carries its own and leaves the queue alone. Over HTTP:
    /// `POST /_fake/usage {"prompt_tokens": 7000, "completion_tokens": 50}`.
    pub fn push_usage(&self, prompt_tokens: u64, completion_tokens: u64) {
        self.shared.lock().usages.push_back(wire::Usage { prompt_tokens, completion_tokens });
    }

    /// Refuses, while set, every request whose prompt is larger than `tokens`, with OpenAI's 400
    /// `context_length_exceeded`. The prompt is the rough estimate the fake reports as
    /// `prompt_tokens`, counting the messages only: tool definitions are left out. Over HTTP:
    /// `POST /_fake/context_window {"tokens": 8192}`, or `{"tokens": null}` to lift it.
    pub fn set_context_window(&self, tokens: Option<u64>) {
        self.shared.lock().context_window = tokens;
    }

    /// Answers every request with `fault` once the queued faults are used up, until [`reset`].
    ///
    /// [`reset`]: FakeModel::reset
    pub fn always_fail(&self, fault: Fault) {
        self.shared.lock().always = Some(fault);
    }

    /// Waits this long before answering every chat request (on top of any [`Fault::Delay`]).
    pub fn set_latency(&self, latency: Duration) {
        self.shared.lock().latency = latency;
    }

    /// Every chat request body received so far, in order, including those answered by faults.
    ///
    /// A body that is not JSON is recorded as a JSON string of its text.
    pub fn requests(&self) -> Vec<Value> {
        self.shared.lock().requests.clone()
    }

    /// How many chat requests were received.
    pub fn request_count(&self) -> usize {
        self.shared.lock().requests.len()
    }

    /// The `Authorization` header of each chat request, aligned with [`FakeModel::requests`].
    pub fn authorizations(&self) -> Vec<Option<String>> {
        self.shared.lock().authorizations.clone()
    }

    /// Forgets queued replies, usages and faults, the sticky fault, the latency, the context
    /// window and the recorded requests.
    pub fn reset(&self) {
        self.shared.lock().reset();
    }

    /// Stops the server and waits until it no longer accepts connections.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(task) = self.task.take() {
            // A panicking server task has nothing left to clean up.
            let _ = task.await;
        }
    }
}

impl Drop for FakeModel {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

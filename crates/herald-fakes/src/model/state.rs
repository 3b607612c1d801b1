//! What a fake model server remembers between requests: its script, its faults and its record.
//!
//! One `std::sync::Mutex` guards it all; no lock is held across an `.await`.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use serde_json::Value;

use super::faults::Fault;
use super::script::{self, Answer, Reply};
use super::wire::{ChatRequest, Usage};

/// The state shared by the server's handlers and the [`super::FakeModel`] handle.
#[derive(Debug, Default)]
pub(crate) struct Shared(Mutex<State>);

impl Shared {
    /// Locks the state; a panic in another holder leaves it consistent, so poison is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The script, the knobs and the record.
#[derive(Debug, Default)]
pub(crate) struct State {
    pub faults: VecDeque<Fault>,
    pub replies: VecDeque<Reply>,
    pub usages: VecDeque<Usage>,
    pub always: Option<Fault>,
    pub latency: Duration,
    pub context_window: Option<u64>,
    pub requests: Vec<Value>,
    pub authorizations: Vec<Option<String>>,
    next_call: u64,
    next_completion: u64,
}

impl State {
    /// Records a chat request and takes the fault that answers it, if any.
    pub(crate) fn receive(&mut self, body: Value, authorization: Option<String>) -> Option<Fault> {
        self.requests.push(body);
        self.authorizations.push(authorization);
        self.faults.pop_front().or_else(|| self.always.clone())
    }

    /// Decides the answer to a valid request: the next scripted reply, else the default; and
    /// the next scripted usage for it, unless the answer is a raw body that has its own.
    pub(crate) fn answer(&mut self, request: &ChatRequest) -> (Answer, Option<Usage>) {
        let reply = self.replies.pop_front();
        let mut next_id = || {
            self.next_call += 1;
            format!("call_{}", self.next_call)
        };
        let answer = match reply {
            Some(reply) => script::scripted(reply, &mut next_id),
            None => script::default_answer(request, &mut next_id),
        };
        let usage = match answer {
            Answer::Raw(_) => None,
            _ => self.usages.pop_front(),
        };
        (answer, usage)
    }

    /// A fresh completion id.
    pub(crate) fn completion_id(&mut self) -> String {
        self.next_completion += 1;
        format!("chatcmpl-fake{}", self.next_completion)
    }

    /// Back to a fresh server; ids keep counting so they never repeat.
    pub(crate) fn reset(&mut self) {
        self.faults.clear();
        self.replies.clear();
        self.usages.clear();
        self.always = None;
        self.latency = Duration::ZERO;
        self.context_window = None;
        self.requests.clear();
        self.authorizations.clear();
    }
}

//! The postman: the one task that delivers events to Socket Mode connections, as Slack does.
//! Each event goes in an `events_api` envelope to one open connection (round robin); an
//! envelope not acknowledged within the acknowledgement timeout (3 s, as on Slack) is followed
//! by a new envelope with the same `event_id`, `retry_attempt` one higher and `retry_reason`
//! `timeout`, at most [`MAX_RETRIES`] times. Events wait, in order, while no connection is open.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;

use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::state::{Delivery, Shared, now_ms};

/// How many times Slack sends an unacknowledged event again.
pub const MAX_RETRIES: u32 = 3;

/// What the postman is told.
#[derive(Debug)]
pub(crate) enum Command {
    /// Deliver this `event_callback` payload.
    Deliver(Value),
    /// A connection said hello and takes envelopes through `outbox`.
    Open { id: u64, outbox: mpsc::UnboundedSender<Outbound> },
    /// A connection ended.
    Closed(u64),
    /// A connection received `{"envelope_id": …}`, at this Unix millisecond.
    Ack { envelope_id: String, at_ms: u64 },
    /// Tell every open connection this; none of them gets another envelope.
    Everyone(Outbound),
}

/// What a connection is told to do.
#[derive(Clone, Debug)]
pub(crate) enum Outbound {
    /// Send this envelope.
    Envelope(Value),
    /// Send `{"type": "disconnect", "reason": …}`, then close a moment later.
    Disconnect(String),
    /// Drop the socket without a close frame.
    Abort,
    /// Send nothing more, pongs included, as on a half-open socket; the client's close is
    /// still seen.
    Silence,
}

/// An event on its way, and which attempt this is.
#[derive(Clone, Debug)]
struct Pending {
    payload: Value,
    event_id: String,
    event_type: String,
    attempt: u32,
}

struct Postman {
    shared: Arc<Shared>,
    connections: Vec<(u64, mpsc::UnboundedSender<Outbound>)>,
    next: usize,
    waiting: VecDeque<Pending>,
    /// Envelopes sent and not acknowledged, by envelope id.
    outstanding: HashMap<String, Pending>,
    /// When each outstanding envelope times out; entries of acknowledged ones are skipped.
    deadlines: BTreeMap<(Instant, u64), String>,
    deadline_seq: u64,
    acked_events: HashSet<String>,
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    shutdown: CancellationToken,
) {
    let mut postman = Postman {
        shared,
        connections: Vec::new(),
        next: 0,
        waiting: VecDeque::new(),
        outstanding: HashMap::new(),
        deadlines: BTreeMap::new(),
        deadline_seq: 0,
        acked_events: HashSet::new(),
    };
    loop {
        let next_deadline = postman.deadlines.keys().next().map(|(at, _)| *at);
        tokio::select! {
            () = shutdown.cancelled() => return,
            command = commands.recv() => match command {
                Some(command) => postman.handle(command),
                None => return,
            },
            () = sleep_until(next_deadline) => postman.time_out(Instant::now()),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

impl Postman {
    fn handle(&mut self, command: Command) {
        match command {
            Command::Deliver(payload) => {
                let event_id = payload["event_id"].as_str().unwrap_or_default().to_owned();
                let event_type = payload["event"]["type"].as_str().unwrap_or_default().to_owned();
                self.send(Pending { payload, event_id, event_type, attempt: 0 });
            }
            Command::Open { id, outbox } => {
                self.connections.push((id, outbox));
                // Waiting events go out in the order they came.
                for pending in std::mem::take(&mut self.waiting) {
                    self.send(pending);
                }
            }
            Command::Closed(id) => self.connections.retain(|(open, _)| *open != id),
            Command::Ack { envelope_id, at_ms } => self.ack(&envelope_id, at_ms),
            Command::Everyone(outbound) => {
                for (_, outbox) in self.connections.drain(..) {
                    let _ = outbox.send(outbound.clone());
                }
            }
        }
    }

    /// Sends `pending` in a new envelope on the next open connection, or keeps it waiting.
    fn send(&mut self, pending: Pending) {
        while !self.connections.is_empty() {
            let index = self.next % self.connections.len();
            self.next = self.next.wrapping_add(1);
            let (connection, outbox) = &self.connections[index];
            let connection = *connection;
            let (envelope_id, timeout) = {
                let mut state = self.shared.lock();
                (state.next_envelope_id(), state.ack_timeout)
            };
            let envelope = envelope(&envelope_id, &pending);
            if outbox.send(Outbound::Envelope(envelope)).is_err() {
                self.connections.remove(index);
                continue;
            }
            self.record(&envelope_id, &pending, connection);
            self.deadline_seq += 1;
            self.deadlines
                .insert((Instant::now() + timeout, self.deadline_seq), envelope_id.clone());
            self.outstanding.insert(envelope_id, pending);
            return;
        }
        self.waiting.push_back(pending);
    }

    fn record(&self, envelope_id: &str, pending: &Pending, connection: u64) {
        {
            let mut state = self.shared.lock();
            let index = state.deliveries.len();
            state.deliveries.push(Delivery {
                envelope_id: envelope_id.to_owned(),
                event_id: pending.event_id.clone(),
                event_type: pending.event_type.clone(),
                retry_attempt: pending.attempt,
                connection,
                delivered_ms: now_ms(),
                acked_ms: None,
            });
            state.delivery_index.insert(envelope_id.to_owned(), index);
        }
        self.shared.bump();
    }

    fn ack(&mut self, envelope_id: &str, at_ms: u64) {
        {
            let mut state = self.shared.lock();
            match state.delivery_index.get(envelope_id).copied() {
                Some(index) => {
                    let delivery = &mut state.deliveries[index];
                    // The first acknowledgement counts; a repeated one changes nothing.
                    delivery.acked_ms.get_or_insert(at_ms);
                    let event_id = delivery.event_id.clone();
                    self.acked_events.insert(event_id);
                }
                None => state.stray_acks.push(envelope_id.to_owned()),
            }
        }
        self.outstanding.remove(envelope_id);
        self.shared.bump();
    }

    /// Sends again every event whose envelope timed out by `now`, unless another envelope of
    /// it was acknowledged meanwhile or its retries are spent.
    fn time_out(&mut self, now: Instant) {
        while let Some(entry) = self.deadlines.first_entry() {
            if entry.key().0 > now {
                return;
            }
            let envelope_id = entry.remove();
            let Some(mut pending) = self.outstanding.remove(&envelope_id) else { continue };
            if self.acked_events.contains(&pending.event_id) || pending.attempt >= MAX_RETRIES {
                continue;
            }
            pending.attempt += 1;
            self.send(pending);
        }
    }
}

/// The `events_api` envelope of `pending` under `envelope_id`.
fn envelope(envelope_id: &str, pending: &Pending) -> Value {
    json!({
        "envelope_id": envelope_id,
        "payload": pending.payload,
        "type": "events_api",
        "accepts_response_payload": false,
        "retry_attempt": pending.attempt,
        "retry_reason": if pending.attempt == 0 { "" } else { "timeout" },
    })
}

//! Socket Mode, kept by the adapter itself: [`SlackSettings::socket_connections`] slots, each
//! holding at most one connection at a time. slack-morphism's own listener opens a refused
//! connection again at once and replaces a silent one while still holding it; here a slot
//! closes what it holds before it opens another, and waits (capped, with jitter) after every
//! open that Slack refused or that failed.
//!
//! A slot calls `apps.connections.open`, connects, and waits for `hello`; Slack answers a
//! connection past the app's limit of [`MAX_SOCKET_CONNECTIONS`] with a `too_many_websockets`
//! disconnect instead, and while any slot is refused the adapter reports
//! [`AdapterEvent::Retrying`]. Envelopes are offered to the gateway in the order they come and
//! each is acknowledged once its message is settled, so a slow store holds no later envelope
//! back. A connection that sent nothing (no frame, ping or pong) for [`SILENT_AFTER`] is
//! closed, its TCP connection dropped, before the slot opens the next.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use herald_core::{AdapterEvent, backoff};
use serde::Deserialize;
use slack_morphism::SlackApiToken;
use slack_morphism::api::SlackApiAppsConnectionOpenRequest;
use slack_morphism::events::SlackPushEventCallback;
use slack_morphism::hyper_tokio::SlackHyperClient;
use slack_morphism::prelude::ValueStruct;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{Instant, timeout};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, warn};

use crate::error::{Failure, Secrets, classify};
use crate::intake::Intake;
use crate::{MAX_SOCKET_CONNECTIONS, SlackSettings};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// How often a connection is pinged.
const PING_EVERY: Duration = Duration::from_secs(5);
/// How long a connection may send nothing before it is given up (three pings unanswered).
const SILENT_AFTER: Duration = Duration::from_secs(15);
/// How long opening a connection may take: the URL, the WebSocket and `hello`.
const OPEN_WITHIN: Duration = Duration::from_secs(10);
/// How long one frame may take to go out: a socket that takes longer is lost.
const WRITE_WITHIN: Duration = Duration::from_secs(5);
/// How long a connection's close frame may take before its TCP connection is dropped anyway.
const CLOSE_WITHIN: Duration = Duration::from_secs(1);
/// How far apart the slots open their first connections, so that Slack's refreshes of them
/// do not all come at once.
const STAGGER: Duration = Duration::from_secs(1);
/// A connection that lasted this long starts the backoff afresh when it ends.
const STEADY: Duration = Duration::from_secs(30);
/// The least time between two opens of one slot when Slack asks for a new connection: a
/// refresh at once after `hello`, again and again, must not spin.
const REFRESH_GAP: Duration = Duration::from_secs(1);
/// Slack's reason for refusing a connection past the app's limit.
const TOO_MANY: &str = "too_many_websockets";

/// What Slack sends on a Socket Mode connection; the event inside an envelope is read with
/// slack-morphism's types.
#[derive(Debug, Deserialize)]
struct Frame {
    #[serde(rename = "type")]
    kind: String,
    envelope_id: Option<String>,
    reason: Option<String>,
    num_connections: Option<u64>,
    payload: Option<serde_json::Value>,
}

/// How a connection ended, or why it never opened.
#[derive(Debug)]
enum Ended {
    /// Slack asked for a new connection (`refresh_requested`, `warning`) after `hello`: opened
    /// again at once, at most once per [`REFRESH_GAP`]; before `hello` it counts as lost.
    Refreshed,
    /// Slack refused it: the app holds every connection it may.
    Refused(String),
    /// Closed, failed, silent, or not opened: tried again after a backoff, and no sooner than
    /// Slack's `Retry-After` when it sent one.
    Lost(String, Option<Duration>),
    /// The adapter is stopping.
    Stopped,
}

/// The adapter's Socket Mode connections.
#[derive(Debug)]
pub(crate) struct Sockets {
    client: Arc<SlackHyperClient>,
    token: SlackApiToken,
    intake: Arc<Intake>,
    secrets: Secrets,
    max_backoff: Duration,
    /// Connections that said hello and are open now.
    open: AtomicUsize,
    /// Slots whose last open Slack refused.
    refused: AtomicUsize,
}

impl Sockets {
    pub(crate) fn new(
        client: Arc<SlackHyperClient>,
        token: SlackApiToken,
        intake: Arc<Intake>,
        secrets: Secrets,
        settings: &SlackSettings,
    ) -> Sockets {
        Sockets {
            client,
            token,
            intake,
            secrets,
            max_backoff: settings.max_backoff,
            open: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        }
    }

    /// Keeps `count` connections (clamped to Slack's limit) until `shutdown`, then closes them.
    pub(crate) async fn run(self: Arc<Self>, count: u32, shutdown: CancellationToken) {
        let slots = TaskTracker::new();
        for index in 0..count.clamp(1, MAX_SOCKET_CONNECTIONS) {
            slots.spawn(self.clone().slot(index, shutdown.clone()));
        }
        slots.close();
        slots.wait().await;
    }

    /// One slot: a connection at a time, the next opened only once the last is closed.
    async fn slot(self: Arc<Self>, index: u32, shutdown: CancellationToken) {
        if !pause(STAGGER * index, &shutdown).await {
            return;
        }
        let mut failures = 0;
        let mut refused = false;
        loop {
            let began = Instant::now();
            let ended = match self.open(&shutdown).await {
                Ok((socket, connections)) => {
                    if refused {
                        refused = false;
                        self.refused.fetch_sub(1, Ordering::SeqCst);
                    }
                    self.opened(connections).await;
                    let ended = self.serve(socket, &shutdown).await;
                    self.open.fetch_sub(1, Ordering::SeqCst);
                    ended
                }
                Err(Ended::Refreshed) => Ended::Lost(
                    "socket mode: Slack asked for a new connection before hello".into(),
                    None,
                ),
                Err(ended) => ended,
            };
            if began.elapsed() >= STEADY {
                failures = 0;
            }
            let (error, after) = match ended {
                Ended::Stopped => return,
                Ended::Refreshed => {
                    debug!(slot = index, "slack asked for a new socket mode connection");
                    if !pause(REFRESH_GAP.saturating_sub(began.elapsed()), &shutdown).await {
                        return;
                    }
                    continue;
                }
                Ended::Refused(error) => {
                    if !refused {
                        refused = true;
                        self.refused.fetch_add(1, Ordering::SeqCst);
                    }
                    (error, None)
                }
                Ended::Lost(error, after) => (error, after),
            };
            let retry_in =
                jittered(backoff(failures, None, self.max_backoff)).max(after.unwrap_or_default());
            failures += 1;
            warn!(slot = index, %error, retry_ms = retry_in.as_millis() as u64, "socket mode connection lost");
            // Retrying while any slot is refused, or while nothing is connected.
            if refused || self.open.load(Ordering::SeqCst) == 0 {
                let _ = self.intake.events.send(AdapterEvent::Retrying { error, retry_in }).await;
            }
            if !pause(retry_in, &shutdown).await {
                return;
            }
        }
    }

    /// A connection that said `hello`, and how many the app holds by Slack's count; `Err` with
    /// why not (a refusal, a failure, the stop).
    async fn open(&self, shutdown: &CancellationToken) -> Result<(Socket, Option<u64>), Ended> {
        tokio::select! {
            () = shutdown.cancelled() => Err(Ended::Stopped),
            opened = timeout(OPEN_WITHIN, self.connect()) => match opened {
                Ok(opened) => opened,
                Err(_) => Err(Ended::Lost("socket mode: no hello from Slack in time".into(), None)),
            },
        }
    }

    async fn connect(&self) -> Result<(Socket, Option<u64>), Ended> {
        let request = SlackApiAppsConnectionOpenRequest::new();
        let url = match self.client.open_session(&self.token).apps_connections_open(&request).await
        {
            Ok(opened) => opened.url.value().to_string(),
            Err(e) => {
                let (error, after) = match classify(&e, "apps.connections.open", &self.secrets) {
                    Failure::Retry { error, after } => (error, after),
                    Failure::Refused { error, .. } => (error, None),
                };
                return Err(Ended::Lost(error, after));
            }
        };
        // The URL carries a ticket: it is never logged, nor is an error text that may hold it.
        let (mut socket, _) =
            tokio_tungstenite::connect_async(url.as_str()).await.map_err(|e| {
                Ended::Lost(format!("socket mode: could not connect ({})", kind(&e)), None)
            })?;
        loop {
            let text = match socket.next().await {
                Some(Ok(Message::Text(text))) => text,
                Some(Ok(Message::Close(_))) | None => {
                    return Err(Ended::Lost("socket mode: closed before hello".into(), None));
                }
                Some(Err(e)) => {
                    let error = format!("socket mode: failed before hello ({})", kind(&e));
                    return Err(Ended::Lost(error, None));
                }
                Some(Ok(_)) => continue,
            };
            let Ok(frame) = serde_json::from_str::<Frame>(text.as_str()) else { continue };
            match frame.kind.as_str() {
                "hello" => return Ok((socket, frame.num_connections)),
                "disconnect" => {
                    close(socket).await;
                    return Err(disconnected(frame.reason.as_deref()));
                }
                _ => continue,
            }
        }
    }

    /// Counts a connection that said hello; connected again once no slot is refused.
    async fn opened(&self, connections: Option<u64>) {
        self.open.fetch_add(1, Ordering::SeqCst);
        info!(connections, "socket mode connection opened");
        if self.refused.load(Ordering::SeqCst) == 0 {
            let connected = AdapterEvent::Connected { bot: self.intake.bot.name.clone() };
            let _ = self.intake.events.send(connected).await;
        }
    }

    /// Reads envelopes until the connection ends, and closes it.
    async fn serve(&self, socket: Socket, shutdown: &CancellationToken) -> Ended {
        let (mut sink, mut stream) = socket.split();
        let (acks, mut to_ack) = mpsc::unbounded_channel::<String>();
        let mut ping = tokio::time::interval_at(Instant::now() + PING_EVERY, PING_EVERY);
        let mut heard = Instant::now();
        let ended = loop {
            let out = tokio::select! {
                () = shutdown.cancelled() => break Ended::Stopped,
                Some(ack) = to_ack.recv() => Message::text(ack),
                _ = ping.tick() => {
                    if heard.elapsed() >= SILENT_AFTER {
                        let silent = format!("socket mode: nothing from Slack for {} s", SILENT_AFTER.as_secs());
                        break Ended::Lost(silent, None);
                    }
                    Message::Ping(Vec::new().into())
                }
                frame = stream.next() => {
                    heard = Instant::now();
                    match frame {
                        Some(Ok(Message::Text(text))) => {
                            let ended = self.frame(text.as_str(), &acks).await;
                            // The frame may have waited on a backed-up gateway, when nothing
                            // was read: that time is not Slack's silence.
                            heard = Instant::now();
                            match ended {
                                Some(ended) => break ended,
                                None => continue,
                            }
                        }
                        Some(Ok(Message::Close(_))) | None => {
                            break Ended::Lost("socket mode: Slack closed the connection".into(), None);
                        }
                        Some(Err(e)) => break Ended::Lost(format!("socket mode: {}", kind(&e)), None),
                        // Pings are answered by tungstenite as the socket is read.
                        Some(Ok(_)) => continue,
                    }
                }
            };
            if !matches!(timeout(WRITE_WITHIN, sink.send(out)).await, Ok(Ok(()))) {
                break Ended::Lost("socket mode: a frame could not be sent".into(), None);
            }
        };
        match sink.reunite(stream) {
            Ok(socket) => close(socket).await,
            Err(e) => drop(e),
        }
        ended
    }

    /// Handles one text frame; `Some` when it ends the connection.
    async fn frame(&self, text: &str, acks: &mpsc::UnboundedSender<String>) -> Option<Ended> {
        let Ok(frame) = serde_json::from_str::<Frame>(text) else {
            warn!("socket mode: a frame that is not Slack's was ignored");
            return None;
        };
        match frame.kind.as_str() {
            "disconnect" => Some(disconnected(frame.reason.as_deref())),
            "events_api" => {
                self.event(frame, acks).await;
                None
            }
            "hello" => None,
            // Interactions and slash commands: herald takes none, and an envelope left
            // unacknowledged would only come again.
            _ => {
                if let Some(id) = frame.envelope_id {
                    let _ = acks.send(ack(&id));
                }
                None
            }
        }
    }

    /// Offers an `events_api` envelope's event; its acknowledgement goes out once settled.
    async fn event(&self, frame: Frame, acks: &mpsc::UnboundedSender<String>) {
        let Some(id) = frame.envelope_id else { return };
        let payload = frame.payload.unwrap_or_default();
        let callback = match serde_json::from_value::<SlackPushEventCallback>(payload) {
            Ok(callback) => callback,
            Err(e) => {
                // It never reads better when Slack sends it again.
                warn!(error = %e, "an event herald cannot read was acknowledged and dropped");
                let _ = acks.send(ack(&id));
                return;
            }
        };
        match self.intake.offer(callback).await {
            Ok(None) => {
                let _ = acks.send(ack(&id));
            }
            Ok(Some(settlement)) => {
                let intake = self.intake.clone();
                let acks = acks.clone();
                tokio::spawn(async move {
                    match intake.wait(settlement).await {
                        Ok(()) => drop(acks.send(ack(&id))),
                        Err(error) => warn!(%error, "an event was left unacknowledged"),
                    }
                });
            }
            Err(error) => warn!(%error, "an event was left unacknowledged"),
        }
    }
}

/// What a `disconnect` with `reason` means for the slot.
fn disconnected(reason: Option<&str>) -> Ended {
    match reason.unwrap_or_default() {
        TOO_MANY => Ended::Refused(format!(
            "socket mode: Slack refused the connection ({TOO_MANY}): the app holds all \
             {MAX_SOCKET_CONNECTIONS} it may; keep replicas x socket_connections within \
             {MAX_SOCKET_CONNECTIONS}"
        )),
        "refresh_requested" | "warning" => Ended::Refreshed,
        other => Ended::Lost(format!("socket mode: Slack disconnected ({other})"), None),
    }
}

/// The acknowledgement of envelope `id`.
fn ack(id: &str) -> String {
    serde_json::json!({ "envelope_id": id }).to_string()
}

/// A WebSocket error's kind, without the texts that may carry the URL.
fn kind(error: &tokio_tungstenite::tungstenite::Error) -> String {
    use tokio_tungstenite::tungstenite::Error;
    match error {
        Error::Http(response) => format!("HTTP {}", response.status()),
        Error::Io(e) => e.kind().to_string(),
        Error::ConnectionClosed | Error::AlreadyClosed => "closed".into(),
        Error::Protocol(e) => e.to_string(),
        Error::Tls(_) => "TLS failed".into(),
        Error::Url(_) => "the URL Slack gave is not a WebSocket URL".into(),
        _ => "failed".into(),
    }
}

/// Sends a close frame if it goes out quickly, then drops the TCP connection: closed either
/// way before anything else is opened, even when Slack no longer answers.
async fn close(mut socket: Socket) {
    let _ = timeout(CLOSE_WITHIN, socket.close(None)).await;
}

/// Waits `wait` unless `shutdown` comes first; whether to go on.
async fn pause(wait: Duration, shutdown: &CancellationToken) -> bool {
    tokio::select! {
        () = shutdown.cancelled() => false,
        () = tokio::time::sleep(wait) => true,
    }
}

/// `wait` spread over its upper half, so that slots and replicas refused together do not all
/// try again at once.
fn jittered(wait: Duration) -> Duration {
    let half = wait / 2;
    half + half.mul_f64(rand::random_range(0.0..=1.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_in_the_upper_half() {
        let wait = Duration::from_secs(8);
        for _ in 0..100 {
            let jittered = jittered(wait);
            assert!(jittered >= wait / 2 && jittered <= wait, "{jittered:?}");
        }
    }

    #[test]
    fn slack_refusing_a_connection_is_told_from_a_refresh() {
        assert!(
            matches!(disconnected(Some(TOO_MANY)), Ended::Refused(e) if e.contains("within 10"))
        );
        assert!(matches!(disconnected(Some("refresh_requested")), Ended::Refreshed));
        assert!(matches!(disconnected(Some("link_disabled")), Ended::Lost(_, None)));
    }
}

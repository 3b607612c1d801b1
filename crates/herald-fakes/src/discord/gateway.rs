//! The Gateway WebSocket at `/` (any query, like `?v=10&encoding=json`), JSON text frames:
//! HELLO (op 10) on connect; IDENTIFY (op 2) → READY, or close 4004 for another token, 4010 for
//! a `shard` array that is not `[id, total]` with `id < total`, 4011 for fewer shards in all than
//! the fake requires;
//! HEARTBEAT (op 1) → HEARTBEAT_ACK (op 11) unless withheld; RESUME (op 6) → the dispatches after its `seq`,
//! then RESUMED, or INVALID_SESSION (op 9, `d: false`) for a session the fake never gave;
//! ops 3, 4, 8 and 31 accepted and ignored; any other op closes 4001; dispatches (op 0) with
//! increasing `s` once identified or resumed, each only on its shard (a server's on shard
//! `(guild_id >> 22) % total`, the rest on shard 0), as Discord routes them; a close code on
//! [`super::FakeDiscord::close_with`].

use std::sync::Arc;

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::FakeDiscord;
use super::server::Ctx;
use super::state::{Event, Identify, Shared, UNSHARDED, bot_user, shard_of};

/// Discord's heartbeat interval, in milliseconds.
pub const HEARTBEAT_INTERVAL_MS: u64 = 41_250;

/// The privileged Message Content intent.
const MESSAGE_CONTENT: u64 = 1 << 15;

pub(crate) async fn upgrade(State(ctx): State<Ctx>, ws: WebSocketUpgrade) -> Response {
    ws.on_upgrade(move |socket| connection(ctx, socket))
}

async fn send(socket: &mut WebSocket, payload: &Value) -> bool {
    socket.send(Message::Text(payload.to_string().into())).await.is_ok()
}

async fn close(socket: &mut WebSocket, code: u16, reason: &str) {
    let frame = CloseFrame { code, reason: reason.into() };
    let _ = socket.send(Message::Close(Some(frame))).await;
}

/// Takes a connection off the list of open ones when it ends, however it ends.
struct Listed {
    shared: Arc<Shared>,
    number: u64,
}

impl Listed {
    fn new(shared: &Arc<Shared>) -> Listed {
        let mut state = shared.lock();
        state.next_connection += 1;
        Listed { shared: shared.clone(), number: state.next_connection }
    }

    /// Lists the connection as receiving the dispatches of `shard`.
    fn receiving(&self, shard: [u64; 2]) {
        self.shared.lock().connections.insert(self.number, shard);
    }

    fn deaf(&self) {
        self.shared.lock().connections.remove(&self.number);
    }
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.deaf();
    }
}

/// The `shard` array of an IDENTIFY: `Ok(None)` when absent, `Err` unless it is `[id, total]`
/// with `id < total`.
fn shard_field(d: &Value) -> Result<Option<[u64; 2]>, ()> {
    let Some(array) = d.get("shard").filter(|s| !s.is_null()) else { return Ok(None) };
    match array.as_array().map(|a| a.iter().map(Value::as_u64).collect::<Vec<_>>()).as_deref() {
        Some([Some(id), Some(total)]) if id < total => Ok(Some([*id, *total])),
        _ => Err(()),
    }
}

async fn connection(ctx: Ctx, mut socket: WebSocket) {
    let listed = Listed::new(&ctx.shared);
    // Which dispatches this connection gets once identified or resumed.
    let mut shard = UNSHARDED;
    // Subscribed before anything is read from the log, so no dispatch falls between the two.
    let mut events = ctx.shared.events.subscribe();
    // An upgraded socket outlives its HTTP connection task: it watches for going down itself.
    let mut offline = ctx.shared.offline.subscribe();
    let interval = match ctx.shared.lock().heartbeat_interval_ms {
        0 => HEARTBEAT_INTERVAL_MS,
        ms => ms,
    };
    if !send(
        &mut socket,
        &json!({"op": 10, "s": null, "t": null, "d": {"heartbeat_interval": interval}}),
    )
    .await
    {
        return;
    }
    // The last seq this connection sent; `None` until identified or resumed.
    let mut sent_up_to: Option<u64> = None;
    loop {
        tokio::select! {
            () = ctx.shutdown.cancelled() => {
                close(&mut socket, 1001, "going away").await;
                return;
            }
            // Dropped with no close frame, as a network failure would.
            () = async { drop(offline.wait_for(|down| *down).await) } => return,
            event = events.recv() => match event {
                Ok(Event::Close(code)) => {
                    close(&mut socket, code, "closed by the fake").await;
                    return;
                }
                // Dropping the socket ends the TCP connection with no close frame.
                Ok(Event::Abort) => return,
                Ok(Event::Reconnect) => {
                    if !send(&mut socket, &json!({"op": 7, "s": null, "t": null, "d": null})).await {
                        return;
                    }
                }
                Ok(Event::InvalidSession(resumable)) => {
                    if !send(&mut socket, &json!({"op": 9, "s": null, "t": null, "d": resumable})).await {
                        return;
                    }
                    // Nothing more until the client identifies or resumes again.
                    sent_up_to = None;
                    listed.deaf();
                }
                Ok(Event::Dispatch(seq)) => {
                    // Sent from the log, so a lagged receiver or a replay never skips or repeats one.
                    if let Some(last) = sent_up_to.filter(|last| seq > *last) {
                        let Some(now) = replay(&ctx, &mut socket, last, shard).await else { return };
                        sent_up_to = Some(now);
                    }
                }
                // Lagged: the log has every dispatch missed, send them now.
                Err(RecvError::Lagged(_)) => {
                    if let Some(last) = sent_up_to {
                        let Some(now) = replay(&ctx, &mut socket, last, shard).await else { return };
                        sent_up_to = Some(now);
                    }
                }
                Err(RecvError::Closed) => return,
            },
            frame = socket.recv() => {
                let text = match frame {
                    Some(Ok(Message::Text(text))) => text,
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                    Some(Ok(_)) => continue,
                };
                let Ok(payload) = serde_json::from_str::<Value>(text.as_str()) else {
                    close(&mut socket, 4002, "Error while decoding payload.").await;
                    return;
                };
                match payload["op"].as_u64() {
                    Some(1) => {
                        let withheld = ctx.shared.lock().heartbeat_acks_withheld;
                        if !withheld && !send(&mut socket, &json!({"op": 11, "s": null, "t": null, "d": null})).await {
                            return;
                        }
                    }
                    Some(2) => {
                        if sent_up_to.is_some() {
                            close(&mut socket, 4005, "Already authenticated.").await;
                            return;
                        }
                        let token = payload["d"]["token"].as_str().unwrap_or_default().to_owned();
                        let intents = payload["d"]["intents"].as_u64().unwrap_or(0);
                        let good = token.strip_prefix("Bot ").unwrap_or(&token) == FakeDiscord::TOKEN;
                        let asked = shard_field(&payload["d"]);
                        let (session, seq, denied_content, required) = {
                            let mut state = ctx.shared.lock();
                            let sent = asked.ok().flatten();
                            state.identifies.push(Identify { token, intents, shard: sent });
                            // READY takes a sequence number of its own but is never replayed.
                            state.seq += 1;
                            let session = state.new_session(sent.unwrap_or(UNSHARDED));
                            (session, state.seq, state.message_content_denied, state.required_shards)
                        };
                        if !good {
                            close(&mut socket, 4004, "Authentication failed.").await;
                            return;
                        }
                        let Ok(asked) = asked else {
                            close(&mut socket, 4010, "Invalid shard.").await;
                            return;
                        };
                        shard = asked.unwrap_or(UNSHARDED);
                        if shard[1] < required {
                            close(&mut socket, 4011, "Sharding required.").await;
                            return;
                        }
                        if denied_content && intents & MESSAGE_CONTENT != 0 {
                            close(&mut socket, 4014, "Disallowed intent(s).").await;
                            return;
                        }
                        let ready = json!({"op": 0, "t": "READY", "s": seq, "d": {
                            "v": 10,
                            "user": bot_user(),
                            "guilds": [],
                            "session_id": session,
                            "resume_gateway_url": ctx.gateway_url,
                            "application": {"id": FakeDiscord::BOT_ID.to_string(), "flags": 0},
                            "shard": asked,
                        }});
                        if !send(&mut socket, &ready).await {
                            return;
                        }
                        listed.receiving(shard);
                        sent_up_to = Some(seq);
                    }
                    Some(6) => {
                        let d = &payload["d"];
                        let token = d["token"].as_str().unwrap_or_default();
                        if token.strip_prefix("Bot ").unwrap_or(token) != FakeDiscord::TOKEN {
                            close(&mut socket, 4004, "Authentication failed.").await;
                            return;
                        }
                        let known = d["session_id"].as_str().and_then(|s| {
                            ctx.shared.lock().sessions.iter().find(|(k, _)| k == s).map(|(_, shard)| *shard)
                        });
                        let Some(known) = known else {
                            if !send(&mut socket, &json!({"op": 9, "s": null, "t": null, "d": false})).await {
                                return;
                            }
                            continue;
                        };
                        shard = known;
                        let after = d["seq"].as_u64().unwrap_or(0);
                        let Some(last) = replay(&ctx, &mut socket, after, shard).await else { return };
                        let resumed = json!({"op": 0, "t": "RESUMED", "s": last, "d": {}});
                        if !send(&mut socket, &resumed).await {
                            return;
                        }
                        listed.receiving(shard);
                        sent_up_to = Some(last);
                    }
                    // Presence and voice state updates, guild member requests, soundboard
                    // requests: valid sends with nothing for the fake to do.
                    Some(3 | 4 | 8 | 31) => {}
                    _ => {
                        close(&mut socket, 4001, "Unknown opcode.").await;
                        return;
                    }
                }
            }
        }
    }
}

/// Sends every logged dispatch of `shard` after `after`; the last seq looked at (or `after`),
/// `None` when the socket failed.
async fn replay(ctx: &Ctx, socket: &mut WebSocket, after: u64, shard: [u64; 2]) -> Option<u64> {
    let pending: Vec<(u64, Value)> =
        ctx.shared.lock().log.iter().filter(|(s, _)| *s > after).cloned().collect();
    let mut last = after;
    for (seq, payload) in pending {
        if shard_of(&payload["d"], shard[1]) == shard[0] && !send(socket, &payload).await {
            return None;
        }
        last = seq;
    }
    Some(last)
}

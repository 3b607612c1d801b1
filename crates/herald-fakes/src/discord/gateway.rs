//! The Gateway WebSocket at `/` (any query, like `?v=10&encoding=json`), JSON text frames:
//! HELLO (op 10) on connect; IDENTIFY (op 2) → READY, or close 4004 for another token;
//! HEARTBEAT (op 1) → HEARTBEAT_ACK (op 11) unless withheld; RESUME (op 6) → the dispatches after its `seq`,
//! then RESUMED, or INVALID_SESSION (op 9, `d: false`) for a session the fake never gave;
//! ops 3, 4, 8 and 31 accepted and ignored; any other op closes 4001; dispatches (op 0) with
//! increasing `s` once identified or resumed; a close code on
//! [`super::FakeDiscord::close_with`].

use axum::extract::State;
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::response::Response;
use serde_json::{Value, json};
use tokio::sync::broadcast::error::RecvError;

use super::FakeDiscord;
use super::server::Ctx;
use super::state::{Event, Identify, bot_user};

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

async fn connection(ctx: Ctx, mut socket: WebSocket) {
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
                }
                Ok(Event::Dispatch(seq)) => {
                    // Sent from the log, so a lagged receiver or a replay never skips or repeats one.
                    if let Some(last) = sent_up_to.filter(|last| seq > *last) {
                        let Some(now) = replay(&ctx, &mut socket, last).await else { return };
                        sent_up_to = Some(now);
                    }
                }
                // Lagged: the log has every dispatch missed, send them now.
                Err(RecvError::Lagged(_)) => {
                    if let Some(last) = sent_up_to {
                        let Some(now) = replay(&ctx, &mut socket, last).await else { return };
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
                        let (session, seq, denied_content) = {
                            let mut state = ctx.shared.lock();
                            state.identifies.push(Identify { token, intents });
                            // READY takes a sequence number of its own but is never replayed.
                            state.seq += 1;
                            (state.new_session(), state.seq, state.message_content_denied)
                        };
                        if !good {
                            close(&mut socket, 4004, "Authentication failed.").await;
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
                        }});
                        if !send(&mut socket, &ready).await {
                            return;
                        }
                                                sent_up_to = Some(seq);
                    }
                    Some(6) => {
                        let d = &payload["d"];
                        let token = d["token"].as_str().unwrap_or_default();
                        if token.strip_prefix("Bot ").unwrap_or(token) != FakeDiscord::TOKEN {
                            close(&mut socket, 4004, "Authentication failed.").await;
                            return;
                        }
                        let known = d["session_id"].as_str().is_some_and(|s| ctx.shared.lock().sessions.iter().any(|k| k == s));
                        if !known {
                            if !send(&mut socket, &json!({"op": 9, "s": null, "t": null, "d": false})).await {
                                return;
                            }
                            continue;
                        }
                        let after = d["seq"].as_u64().unwrap_or(0);
                        let Some(last) = replay(&ctx, &mut socket, after).await else { return };
                        let resumed = json!({"op": 0, "t": "RESUMED", "s": last, "d": {}});
                        if !send(&mut socket, &resumed).await {
                            return;
                        }
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

/// Sends every logged dispatch after `after`; the last seq sent (or `after`), `None` when the
/// socket failed.
async fn replay(ctx: &Ctx, socket: &mut WebSocket, after: u64) -> Option<u64> {
    let pending: Vec<(u64, Value)> =
        ctx.shared.lock().log.iter().filter(|(s, _)| *s > after).cloned().collect();
    let mut last = after;
    for (seq, payload) in pending {
        if !send(socket, &payload).await {
            return None;
        }
        last = seq;
    }
    Some(last)
}

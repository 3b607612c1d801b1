//! The fake Slack over a plain WebSocket client and reqwest: Socket Mode (hello, envelopes,
//! acknowledgements, redelivery, disconnects) and the Web API's checks.

mod control;
mod socket;
mod web;

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use herald_fakes::FakeSlack;
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

const WAIT: Duration = Duration::from_secs(5);

/// Calls `method` with a JSON body and `token` as a bearer; (HTTP status, body).
async fn call(fake: &FakeSlack, method: &str, token: Option<&str>, body: Value) -> (u16, Value) {
    let mut request =
        reqwest::Client::new().post(format!("{}/{method}", fake.api_url())).json(&body);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Calls `method` with the bot token and a JSON body; the answer, whatever its `ok`.
async fn bot(fake: &FakeSlack, method: &str, body: Value) -> Value {
    let (status, answer) = call(fake, method, Some(FakeSlack::BOT_TOKEN), body).await;
    assert_eq!(status, 200, "{answer}");
    answer
}

/// The Socket Mode URL `apps.connections.open` gives.
async fn socket_url(fake: &FakeSlack) -> String {
    let (_, answer) =
        call(fake, "apps.connections.open", Some(FakeSlack::APP_TOKEN), json!({})).await;
    assert_eq!(answer["ok"], true, "{answer}");
    answer["url"].as_str().unwrap().to_owned()
}

/// A Socket Mode connection, its `hello` read; (socket, hello).
async fn connect(fake: &FakeSlack) -> (Ws, Value) {
    let url = socket_url(fake).await;
    let mut ws = tokio_tungstenite::connect_async(url).await.unwrap().0;
    let hello = next(&mut ws).await;
    assert_eq!(hello["type"], "hello", "{hello}");
    (ws, hello)
}

/// The next JSON text frame.
async fn next(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => {}
        }
    }
}

/// The next JSON text frame if one comes within `wait`.
async fn next_within(ws: &mut Ws, wait: Duration) -> Option<Value> {
    tokio::time::timeout(wait, next(ws)).await.ok()
}

/// Acknowledges `envelope` as a Socket Mode client does.
async fn ack(ws: &mut Ws, envelope: &Value) {
    let ack = json!({"envelope_id": envelope["envelope_id"]});
    ws.send(Message::Text(ack.to_string().into())).await.unwrap();
}

/// The next envelope, acknowledged; its event.
async fn acked_event(ws: &mut Ws) -> Value {
    let envelope = next(ws).await;
    assert_eq!(envelope["type"], "events_api", "{envelope}");
    ack(ws, &envelope).await;
    envelope["payload"]["event"].clone()
}

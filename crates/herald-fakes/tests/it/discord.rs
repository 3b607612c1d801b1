//! The fake Discord over a plain WebSocket client and reqwest: the gateway handshake, dispatches,
//! heartbeats, RESUME, and the REST checks.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use herald_fakes::FakeDiscord;
use herald_fakes::discord::{InboundMessage, Route, SendFault, SlashCommand};
use serde_json::{Value, json};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

pub(crate) type Ws = WebSocketStream<MaybeTlsStream<TcpStream>>;

pub(crate) const WAIT: Duration = Duration::from_secs(5);
/// The intents herald asks for: guild messages, direct messages, message content.
pub(crate) const INTENTS: u64 = (1 << 9) | (1 << 12) | (1 << 15);

pub(crate) async fn connect(fake: &FakeDiscord) -> Ws {
    let url: Value = reqwest::get(format!("{}/api/v10/gateway", fake.api_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = format!("{}/?v=10&encoding=json", url["url"].as_str().unwrap());
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

/// The next JSON frame.
pub(crate) async fn next(ws: &mut Ws) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
            Message::Close(frame) => panic!("closed: {frame:?}"),
            _ => {}
        }
    }
}

pub(crate) async fn send(ws: &mut Ws, payload: Value) {
    ws.send(Message::Text(payload.to_string().into())).await.unwrap();
}

/// The close code the server ends with.
pub(crate) async fn close_code(ws: &mut Ws) -> u16 {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
            Some(Ok(Message::Close(Some(frame)))) => return frame.code.into(),
            Some(Ok(_)) => {}
            other => panic!("no close frame: {other:?}"),
        }
    }
}

/// HELLO, IDENTIFY, READY; the READY payload.
async fn identify(ws: &mut Ws) -> Value {
    let hello = next(ws).await;
    assert_eq!(hello["op"], 10);
    assert_eq!(hello["d"]["heartbeat_interval"], 41_250);
    let d = json!({"token": FakeDiscord::TOKEN, "intents": INTENTS, "properties": {"os": "linux", "browser": "t", "device": "t"}});
    send(ws, json!({"op": 2, "d": d})).await;
    let ready = next(ws).await;
    assert_eq!((ready["op"].as_u64(), ready["t"].as_str()), (Some(0), Some("READY")));
    ready
}

fn rest(fake: &FakeDiscord, path: &str) -> String {
    format!("{}/api/v10{path}", fake.api_url())
}

async fn post(fake: &FakeDiscord, channel: u64, auth: &str, body: Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(rest(fake, &format!("/channels/{channel}/messages")))
        .header("authorization", auth)
        .json(&body)
        .send()
        .await
        .unwrap()
}

fn bot_auth() -> String {
    format!("Bot {}", FakeDiscord::TOKEN)
}

#[tokio::test]
async fn identify_gets_ready_and_the_intents_are_recorded() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    let ready = identify(&mut ws).await;
    assert_eq!(ready["d"]["user"]["id"], FakeDiscord::BOT_ID.to_string());
    assert!(ready["d"]["session_id"].as_str().is_some_and(|s| !s.is_empty()));
    assert_eq!(ready["d"]["resume_gateway_url"], fake.gateway_url());
    assert_eq!(fake.identifies()[0].intents, INTENTS);
}

#[tokio::test]
async fn heartbeats_are_acked() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    for _ in 0..2 {
        send(&mut ws, json!({"op": 1, "d": null})).await;
        assert_eq!(next(&mut ws).await["op"], 11);
    }
}

#[tokio::test]
async fn injected_messages_arrive_as_message_create_with_increasing_seq() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    let ready = identify(&mut ws).await;
    let (dm_id, _) = fake.inject_message(InboundMessage::dm(42, "hello"));
    fake.inject_message(InboundMessage::channel(7, 8, 43, "hi bot").mentioning_bot());
    fake.inject_message(InboundMessage::channel(7, 8, 44, "beep").from_bot());

    let dm = next(&mut ws).await;
    assert_eq!((dm["op"].as_u64(), dm["t"].as_str()), (Some(0), Some("MESSAGE_CREATE")));
    assert_eq!(dm["d"]["id"], dm_id.to_string());
    assert_eq!(dm["d"]["content"], "hello");
    assert_eq!(dm["d"]["author"]["id"], "42");
    assert_eq!(dm["d"]["channel_id"], FakeDiscord::dm_channel(42).to_string());
    assert!(dm["d"].get("guild_id").is_none());

    let mention = next(&mut ws).await;
    assert_eq!(mention["d"]["content"], format!("<@{}> hi bot", FakeDiscord::BOT_ID));
    assert_eq!(mention["d"]["mentions"][0]["id"], FakeDiscord::BOT_ID.to_string());
    assert_eq!(
        (mention["d"]["guild_id"].as_str(), mention["d"]["channel_id"].as_str()),
        (Some("7"), Some("8"))
    );

    let from_bot = next(&mut ws).await;
    assert_eq!(from_bot["d"]["author"]["bot"], true);

    let seqs: Vec<u64> =
        [&ready, &dm, &mention, &from_bot].iter().map(|p| p["s"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
}

#[tokio::test]
async fn a_post_is_recorded_and_answered_with_the_message() {
    let fake = FakeDiscord::start().await;
    let body = json!({
        "content": "an answer",
        "allowed_mentions": {"parse": []},
        "message_reference": {"message_id": "123", "fail_if_not_exists": false},
        "nonce": "n-1",
        "enforce_nonce": true,
    });
    let response = post(&fake, 8, &bot_auth(), body.clone()).await;
    assert_eq!(response.status(), 200);
    let message: Value = response.json().await.unwrap();
    assert_eq!(message["content"], "an answer");
    assert_eq!(message["author"]["id"], FakeDiscord::BOT_ID.to_string());

    let sent = fake.sent();
    assert_eq!(sent.len(), 1);
    assert_eq!(sent[0].channel_id, 8);
    assert_eq!(sent[0].content, "an answer");
    assert_eq!(sent[0].allowed_mentions, Some(json!({"parse": []})));
    assert_eq!(sent[0].message_reference.as_ref().unwrap()["message_id"], "123");
    assert_eq!(sent[0].nonce, Some(json!("n-1")));

    // The same enforced nonce again: the first message back, nothing new posted.
    let again: Value = post(&fake, 8, &bot_auth(), body).await.json().await.unwrap();
    assert_eq!(again["id"], message["id"]);
    assert_eq!(fake.sent().len(), 1);

    let over_http: Value = reqwest::get(format!("{}/_fake/sent?channel_id=8", fake.api_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(over_http[0]["content"], "an answer");
}

#[tokio::test]
async fn content_over_2000_characters_is_refused_with_50035() {
    let fake = FakeDiscord::start().await;
    // Characters, not bytes: 2000 of `é` fit.
    let fits = post(&fake, 8, &bot_auth(), json!({"content": "é".repeat(2000)})).await;
    assert_eq!(fits.status(), 200);
    let response = post(&fake, 8, &bot_auth(), json!({"content": "x".repeat(2001)})).await;
    assert_eq!(response.status(), 400);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["code"], 50035);
    assert_eq!(body["errors"]["content"]["_errors"][0]["code"], "BASE_TYPE_MAX_LENGTH");
    let empty = post(&fake, 8, &bot_auth(), json!({"content": ""})).await;
    assert_eq!(empty.status(), 400);
    assert_eq!(fake.sent().len(), 1);
}

#[tokio::test]
async fn a_bad_or_missing_token_gets_401() {
    let fake = FakeDiscord::start().await;
    for auth in ["Bot wrong", FakeDiscord::TOKEN, ""] {
        let response = post(&fake, 8, auth, json!({"content": "hi"})).await;
        assert_eq!(response.status(), 401, "{auth:?}");
        let body: Value = response.json().await.unwrap();
        assert_eq!(body["code"], 0);
    }
    let me = reqwest::get(rest(&fake, "/users/@me")).await.unwrap();
    assert_eq!(me.status(), 401);
    let me: Value = reqwest::Client::new()
        .get(rest(&fake, "/users/@me"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["id"], FakeDiscord::BOT_ID.to_string());
    let bot: Value = reqwest::Client::new()
        .get(rest(&fake, "/gateway/bot"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(bot["url"], fake.gateway_url());
    assert_eq!(bot["shards"], 1);
    assert!(fake.sent().is_empty());
}

#[tokio::test]
async fn a_bad_token_on_identify_closes_with_4004() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    send(&mut ws, json!({"op": 2, "d": {"token": "nope", "intents": INTENTS, "properties": {}}}))
        .await;
    assert_eq!(close_code(&mut ws).await, 4004);
}

#[tokio::test]
async fn close_with_sends_the_code() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    fake.close_with(4014);
    assert_eq!(close_code(&mut ws).await, 4014);
    // The same over the control API.
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    reqwest::Client::new()
        .post(format!("{}/_fake/close", fake.api_url()))
        .json(&json!({"code": 4000}))
        .send()
        .await
        .unwrap();
    assert_eq!(close_code(&mut ws).await, 4000);
}

#[tokio::test]
async fn resume_replays_what_was_missed_then_resumed() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    let ready = identify(&mut ws).await;
    let session = ready["d"]["session_id"].as_str().unwrap().to_owned();
    fake.inject_message(InboundMessage::dm(42, "seen"));
    let seen = next(&mut ws).await;
    assert_eq!(seen["d"]["content"], "seen");
    // Dropped without a close frame, as a client does when it means to resume.
    drop(ws);
    fake.inject_message(InboundMessage::dm(42, "missed 1"));
    fake.inject_message(InboundMessage::dm(42, "missed 2"));

    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    let d = json!({"token": FakeDiscord::TOKEN, "session_id": session, "seq": seen["s"]});
    send(&mut ws, json!({"op": 6, "d": d})).await;
    assert_eq!(next(&mut ws).await["d"]["content"], "missed 1");
    assert_eq!(next(&mut ws).await["d"]["content"], "missed 2");
    assert_eq!(next(&mut ws).await["t"], "RESUMED");
    // Live again.
    fake.inject_message(InboundMessage::dm(42, "after"));
    assert_eq!(next(&mut ws).await["d"]["content"], "after");

    // An unknown session: INVALID_SESSION, not resumable.
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    send(
        &mut ws,
        json!({"op": 6, "d": {"token": FakeDiscord::TOKEN, "session_id": "nope", "seq": 1}}),
    )
    .await;
    let invalid = next(&mut ws).await;
    assert_eq!((invalid["op"].as_u64(), invalid["d"].as_bool()), (Some(9), Some(false)));
}

#[tokio::test]
async fn the_bots_own_post_is_dispatched_to_the_gateway() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    assert_eq!(post(&fake, 8, &bot_auth(), json!({"content": "mine"})).await.status(), 200);
    let own = next(&mut ws).await;
    assert_eq!(own["t"], "MESSAGE_CREATE");
    assert_eq!(own["d"]["author"]["id"], FakeDiscord::BOT_ID.to_string());
    assert_eq!(fake.wait_sent(1, WAIT).await.len(), 1);
}

#[tokio::test]
async fn messages_injected_over_http_arrive() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    let body = json!({"author_id": 5, "content": "hey", "channel_id": 9, "guild_id": 3, "mention_bot": true});
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/_fake/messages", fake.api_url()))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let event = next(&mut ws).await;
    assert_eq!(event["d"]["id"], answer["id"]);
    assert_eq!(event["s"], answer["seq"]);
    assert_eq!(event["d"]["channel_id"], "9");
}

#[tokio::test]
async fn the_binary_prints_its_urls_serves_and_stops_on_sigterm() {
    use std::process::Stdio;
    use tokio::io::{AsyncBufReadExt, BufReader};

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_herald-fake-discord"))
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let rest_and_gateway = line.strip_prefix("fake discord listening on ").unwrap();
    let (api_url, _) = rest_and_gateway.split_once(' ').unwrap();
    assert!(api_url.starts_with("http://127.0.0.1:"), "{line}");
    let me: Value = reqwest::Client::new()
        .get(format!("{api_url}/api/v10/users/@me"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(me["id"], FakeDiscord::BOT_ID.to_string());

    let pid = child.id().unwrap().to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
    let status =
        tokio::time::timeout(Duration::from_secs(10), child.wait()).await.unwrap().unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn channel_history_after_an_id_brings_back_the_gap() {
    let fake = FakeDiscord::start().await;
    let (first, _) = fake.inject_message(InboundMessage::channel(7, 8, 43, "one"));
    fake.inject_message(InboundMessage::channel(7, 9, 43, "elsewhere"));
    fake.inject_message(InboundMessage::channel(7, 8, 43, "two"));
    assert_eq!(post(&fake, 8, &bot_auth(), json!({"content": "three"})).await.status(), 200);
    fake.inject_message(InboundMessage::channel(7, 8, 43, "four"));

    let get = |query: String| {
        let url = rest(&fake, &format!("/channels/8/messages{query}"));
        async move {
            reqwest::Client::new()
                .get(url)
                .header("authorization", bot_auth())
                .send()
                .await
                .unwrap()
        }
    };
    let contents = |messages: Value| -> Vec<String> {
        messages
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap().to_owned())
            .collect()
    };
    // Newest first, only this channel, the bot's own post included.
    let after: Value = get(format!("?after={first}")).await.json().await.unwrap();
    assert_eq!(contents(after), ["four", "three", "two"]);
    let oldest_two: Value = get(format!("?after={first}&limit=2")).await.json().await.unwrap();
    assert_eq!(contents(oldest_two), ["three", "two"]);
    let newest: Value = get("?limit=1".to_owned()).await.json().await.unwrap();
    assert_eq!(contents(newest), ["four"]);
    assert_eq!(get("?limit=101".to_owned()).await.status(), 400);
    let anonymous = reqwest::get(rest(&fake, "/channels/8/messages")).await.unwrap();
    assert_eq!(anonymous.status(), 401);
}

#[tokio::test]
async fn send_faults_answer_the_next_posts_in_order() {
    let fake = FakeDiscord::start().await;
    fake.push_send_fault(SendFault::TooManyRequests { retry_after: 1.5, global: false });
    fake.push_send_fault(SendFault::Status { status: 502 });
    let limited = post(&fake, 8, &bot_auth(), json!({"content": "a"})).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["retry-after"], "2");
    assert_eq!(limited.headers()["x-ratelimit-reset-after"], "1.500");
    let body: Value = limited.json().await.unwrap();
    assert_eq!((body["retry_after"].as_f64(), body["global"].as_bool()), (Some(1.5), Some(false)));
    assert_eq!(post(&fake, 8, &bot_auth(), json!({"content": "a"})).await.status(), 502);
    assert_eq!(post(&fake, 8, &bot_auth(), json!({"content": "a"})).await.status(), 200);
    assert_eq!(fake.sent().len(), 1);

    // Over HTTP too.
    let fault = json!({"kind": "too_many_requests", "retry_after": 0.2, "global": true});
    reqwest::Client::new()
        .post(format!("{}/_fake/send_fault", fake.api_url()))
        .json(&fault)
        .send()
        .await
        .unwrap();
    let limited = post(&fake, 8, &bot_auth(), json!({"content": "a"})).await;
    assert_eq!(limited.status(), 429);
    assert_eq!(limited.headers()["x-ratelimit-global"], "true");
}

#[tokio::test]
async fn reconnect_and_invalid_session_are_sent() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    let ready = identify(&mut ws).await;
    fake.reconnect();
    assert_eq!(next(&mut ws).await["op"], 7);
    fake.invalid_session(false);
    let invalid = next(&mut ws).await;
    assert_eq!((invalid["op"].as_u64(), invalid["d"].as_bool()), (Some(9), Some(false)));
    // The session is gone: resuming it is refused.
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    let d = json!({"token": FakeDiscord::TOKEN, "session_id": ready["d"]["session_id"], "seq": 1});
    send(&mut ws, json!({"op": 6, "d": d})).await;
    assert_eq!(next(&mut ws).await["op"], 9);
}

#[tokio::test]
async fn the_message_content_intent_denied_closes_with_4014() {
    let fake = FakeDiscord::start().await;
    fake.deny_message_content(true);
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    send(
        &mut ws,
        json!({"op": 2, "d": {"token": FakeDiscord::TOKEN, "intents": INTENTS, "properties": {}}}),
    )
    .await;
    assert_eq!(close_code(&mut ws).await, 4014);
    // Without that intent it identifies.
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    send(&mut ws, json!({"op": 2, "d": {"token": FakeDiscord::TOKEN, "intents": INTENTS & !(1 << 15), "properties": {}}})).await;
    assert_eq!(next(&mut ws).await["t"], "READY");
}

#[tokio::test]
async fn a_reply_to_the_bot_carries_the_reference_and_the_replied_message() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    let answer: Value =
        post(&fake, 8, &bot_auth(), json!({"content": "the answer"})).await.json().await.unwrap();
    next(&mut ws).await; // the bot's own post
    let answer_id: u64 = answer["id"].as_str().unwrap().parse().unwrap();
    fake.inject_message(InboundMessage::channel(7, 8, 43, "and then?").replying_to(answer_id));
    let reply = next(&mut ws).await;
    assert_eq!(reply["d"]["type"], 19);
    assert_eq!(reply["d"]["message_reference"]["message_id"], answer["id"]);
    assert_eq!(reply["d"]["referenced_message"]["author"]["id"], FakeDiscord::BOT_ID.to_string());
    assert_eq!(reply["d"]["mentions"][0]["id"], FakeDiscord::BOT_ID.to_string());
}

#[tokio::test]
async fn threads_typing_and_channels() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    let (message, _) =
        fake.inject_message(InboundMessage::channel(7, 8, 43, "open a thread").mentioning_bot());
    next(&mut ws).await;
    let client = reqwest::Client::new();
    let url = rest(&fake, &format!("/channels/8/messages/{message}/threads"));
    let created = client
        .post(&url)
        .header("authorization", bot_auth())
        .json(&json!({"name": "talk"}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status(), 201);
    let thread: Value = created.json().await.unwrap();
    assert_eq!(
        (thread["id"].as_str(), thread["type"].as_u64()),
        (Some(message.to_string().as_str()), Some(11))
    );
    assert_eq!(thread["parent_id"], "8");
    assert_eq!(next(&mut ws).await["t"], "THREAD_CREATE");
    // A second thread on the same message is refused.
    let again = client
        .post(&url)
        .header("authorization", bot_auth())
        .json(&json!({"name": "talk"}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 400);
    assert_eq!(again.json::<Value>().await.unwrap()["code"], 160004);

    // A thread opened by a user, and a message in it.
    let thread_id = fake.create_thread(7, 8, "user thread");
    assert_eq!(next(&mut ws).await["d"]["id"], thread_id.to_string());
    fake.inject_message(InboundMessage::channel(7, thread_id, 43, "in the thread"));
    assert_eq!(next(&mut ws).await["d"]["channel_id"], thread_id.to_string());

    let channel = |id: u64| {
        client
            .get(rest(&fake, &format!("/channels/{id}")))
            .header("authorization", bot_auth())
            .send()
    };
    assert_eq!(channel(thread_id).await.unwrap().json::<Value>().await.unwrap()["type"], 11);
    assert_eq!(channel(8).await.unwrap().json::<Value>().await.unwrap()["type"], 0);
    let unknown = channel(99).await.unwrap();
    assert_eq!(unknown.status(), 404);
    assert_eq!(unknown.json::<Value>().await.unwrap()["code"], 10003);
    fake.inject_message(InboundMessage::dm(42, "hi"));
    assert_eq!(fake.channel(FakeDiscord::dm_channel(42)).unwrap()["type"], 1);

    let typing = client
        .post(rest(&fake, "/channels/8/typing"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap();
    assert_eq!(typing.status(), 204);
    assert_eq!(fake.typing(), [8]);
}

#[tokio::test]
async fn down_for_a_while_then_resume_brings_back_the_gap() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    let ready = identify(&mut ws).await;
    fake.set_offline(true);
    // The open socket is dropped without a close frame.
    let ended = tokio::time::timeout(WAIT, ws.next()).await.unwrap();
    assert!(!matches!(ended, Some(Ok(Message::Close(Some(_))))), "{ended:?}");
    fake.inject_message(InboundMessage::dm(42, "while down"));
    // Nothing answers meanwhile, REST included.
    let url = format!("{}/?v=10", fake.gateway_url());
    assert!(tokio_tungstenite::connect_async(url).await.is_err());
    assert!(reqwest::get(rest(&fake, "/gateway")).await.is_err());

    fake.set_offline(false);
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["op"], 10);
    let d = json!({"token": FakeDiscord::TOKEN, "session_id": ready["d"]["session_id"], "seq": ready["s"]});
    send(&mut ws, json!({"op": 6, "d": d})).await;
    assert_eq!(next(&mut ws).await["d"]["content"], "while down");
    assert_eq!(next(&mut ws).await["t"], "RESUMED");
}

#[tokio::test]
async fn drop_connections_ends_sockets_without_a_close_frame() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    fake.drop_connections();
    let ended = tokio::time::timeout(WAIT, ws.next()).await.unwrap();
    assert!(!matches!(ended, Some(Ok(Message::Close(Some(_))))), "{ended:?}");
}

#[tokio::test]
async fn commands_are_put_and_a_slash_command_is_answered_once() {
    let fake = FakeDiscord::start().await;
    let client = reqwest::Client::new();
    let commands = json!([{"name": "new", "description": "start afresh", "type": 1}]);
    let url = rest(&fake, &format!("/applications/{}/commands", FakeDiscord::BOT_ID));
    let put =
        client.put(&url).header("authorization", bot_auth()).json(&commands).send().await.unwrap();
    assert_eq!(put.status(), 200);
    let listed: Value = client
        .get(&url)
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed[0]["name"], "new");
    assert_eq!((fake.command_puts(), fake.commands().len()), (1, 1));

    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    let command = SlashCommand {
        user_id: 42,
        name: "new".into(),
        options: vec![],
        channel_id: Some(8),
        guild_id: Some(7),
    };
    let (id, token) = fake.inject_command(command);
    let event = next(&mut ws).await;
    assert_eq!(event["t"], "INTERACTION_CREATE");
    assert_eq!(
        (event["d"]["type"].as_u64(), event["d"]["data"]["name"].as_str()),
        (Some(2), Some("new"))
    );
    assert_eq!(event["d"]["member"]["user"]["id"], "42");
    assert_eq!(event["d"]["token"], token);

    let answer = json!({"type": 4, "data": {"content": "started afresh", "flags": 64}});
    let callback = rest(&fake, &format!("/interactions/{id}/{token}/callback"));
    assert_eq!(client.post(&callback).json(&answer).send().await.unwrap().status(), 204);
    let twice = client.post(&callback).json(&answer).send().await.unwrap();
    assert_eq!(twice.status(), 400);
    assert_eq!(twice.json::<Value>().await.unwrap()["code"], 40060);
    let responses = fake.interaction_responses();
    assert_eq!(responses.len(), 1);
    assert_eq!((responses[0].kind, responses[0].data["flags"].as_u64()), (4, Some(64)));
    let unknown = client
        .post(rest(&fake, &format!("/interactions/{id}/wrong/callback")))
        .json(&answer)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);

    // The interaction webhook: a followup and an edit of the original answer.
    let webhook = rest(&fake, &format!("/webhooks/{}/{token}", FakeDiscord::BOT_ID));
    let followup = client.post(&webhook).json(&json!({"content": "more"})).send().await.unwrap();
    assert_eq!(followup.status(), 200);
    assert_eq!(followup.json::<Value>().await.unwrap()["channel_id"], "8");
    let edit = client
        .patch(format!("{webhook}/messages/@original"))
        .json(&json!({"content": "edited"}))
        .send()
        .await
        .unwrap();
    assert_eq!(edit.status(), 200);
    let followups = fake.followups();
    assert_eq!(
        (followups[0].edits_original, followups[0].body["content"].as_str()),
        (false, Some("more"))
    );
    assert_eq!(
        (followups[1].edits_original, followups[1].body["content"].as_str()),
        (true, Some("edited"))
    );
    let wrong = client
        .post(rest(&fake, &format!("/webhooks/{}/nope", FakeDiscord::BOT_ID)))
        .json(&json!({"content": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 404);
}

#[tokio::test]
async fn presence_updates_are_accepted_and_unknown_ops_close_4001() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    send(
        &mut ws,
        json!({"op": 3, "d": {"since": null, "activities": [], "status": "online", "afk": false}}),
    )
    .await;
    send(&mut ws, json!({"op": 1, "d": 1})).await;
    assert_eq!(next(&mut ws).await["op"], 11);
    send(&mut ws, json!({"op": 42, "d": null})).await;
    assert_eq!(close_code(&mut ws).await, 4001);
    let app: Value = reqwest::Client::new()
        .get(rest(&fake, "/oauth2/applications/@me"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(app["id"], FakeDiscord::BOT_ID.to_string());
}

#[tokio::test]
async fn a_forum_post_is_a_thread_whose_starter_message_shares_its_id() {
    let fake = FakeDiscord::start().await;
    let mut ws = connect(&fake).await;
    identify(&mut ws).await;
    let post = fake.create_forum_post(7, 9, "question", 43, "how do I?");
    let thread = next(&mut ws).await;
    assert_eq!(thread["t"], "THREAD_CREATE");
    assert_eq!(
        (thread["d"]["id"].as_str(), thread["d"]["parent_id"].as_str()),
        (Some(post.to_string().as_str()), Some("9"))
    );
    let starter = next(&mut ws).await;
    assert_eq!(starter["d"]["id"], post.to_string());
    assert_eq!(starter["d"]["channel_id"], post.to_string());
    assert_eq!(fake.channel(9).unwrap()["type"], 15);
    assert_eq!(fake.channel(post).unwrap()["owner_id"], "43");
}

#[tokio::test]
async fn faults_can_be_queued_for_other_routes() {
    let fake = FakeDiscord::start().await;
    fake.push_fault(Route::ListMessages, SendFault::Status { status: 503 });
    let fault = json!({"route": "typing", "kind": "too_many_requests", "retry_after": 0.5});
    let queued = reqwest::Client::new()
        .post(format!("{}/_fake/send_fault", fake.api_url()))
        .json(&fault)
        .send()
        .await
        .unwrap();
    assert_eq!(queued.status(), 200);
    let client = reqwest::Client::new();
    let list = client
        .get(rest(&fake, "/channels/8/messages"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 503);
    let typing = client
        .post(rest(&fake, "/channels/8/typing"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap();
    assert_eq!(typing.status(), 429);
    // Each fault answers once; the post had none.
    let list = client
        .get(rest(&fake, "/channels/8/messages"))
        .header("authorization", bot_auth())
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    assert_eq!(post(&fake, 8, &bot_auth(), json!({"content": "a"})).await.status(), 200);
}

#[tokio::test]
async fn the_heartbeat_interval_is_set_and_acks_can_be_withheld() {
    let fake = FakeDiscord::start().await;
    fake.set_heartbeat_interval(250);
    let mut ws = connect(&fake).await;
    assert_eq!(next(&mut ws).await["d"]["heartbeat_interval"], 250);
    fake.withhold_heartbeat_acks(true);
    send(&mut ws, json!({"op": 1, "d": null})).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), ws.next()).await.is_err(),
        "an ACK came"
    );
    fake.withhold_heartbeat_acks(false);
    send(&mut ws, json!({"op": 1, "d": null})).await;
    assert_eq!(next(&mut ws).await["op"], 11);
}

#[tokio::test]
async fn a_reply_to_an_unknown_message_is_refused_unless_told_not_to_fail() {
    let fake = FakeDiscord::start().await;
    let (known, _) = fake.inject_message(InboundMessage::channel(7, 8, 43, "question"));
    let reply = |id: String, fail: Option<bool>| {
        let mut reference = json!({"message_id": id});
        if let Some(fail) = fail {
            reference["fail_if_not_exists"] = json!(fail);
        }
        json!({"content": "answer", "message_reference": reference, "allowed_mentions": {"parse": []}})
    };
    assert_eq!(post(&fake, 8, &bot_auth(), reply(known.to_string(), None)).await.status(), 200);
    let unknown = post(&fake, 8, &bot_auth(), reply("1".into(), None)).await;
    assert_eq!(unknown.status(), 400);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["code"], 50035);
    assert!(body["errors"]["message_reference"].is_object(), "{body}");
    assert_eq!(post(&fake, 8, &bot_auth(), reply("1".into(), Some(false))).await.status(), 200);
    assert_eq!(fake.sent().len(), 2);
}

#[tokio::test]
async fn allowed_mentions_are_checked() {
    let fake = FakeDiscord::start().await;
    let with = |allowed: Value| json!({"content": "hi @everyone", "allowed_mentions": allowed});
    assert_eq!(post(&fake, 8, &bot_auth(), with(json!({"parse": []}))).await.status(), 200);
    assert_eq!(
        post(&fake, 8, &bot_auth(), with(json!({"parse": ["users"], "users": ["1"]})))
            .await
            .status(),
        400
    );
    assert_eq!(post(&fake, 8, &bot_auth(), with(json!({"parse": ["nobody"]}))).await.status(), 400);
    assert_eq!(
        post(&fake, 8, &bot_auth(), with(json!({"parse": ["users"], "replied_user": false})))
            .await
            .status(),
        200
    );
    assert_eq!(fake.sent().len(), 2);
}

//! The fake Discord's shards: the `shard` array of IDENTIFY checked, each dispatch sent only on
//! the connection of its shard, `GET /gateway/bot`'s `shards`, and 4011 for too few shards.

use herald_fakes::FakeDiscord;
use herald_fakes::discord::InboundMessage;
use serde_json::{Value, json};

use crate::discord::{INTENTS, Ws, close_code, connect, next, send};

/// HELLO, then IDENTIFY with `shard`; the next frame is left to the caller.
async fn identify_as(ws: &mut Ws, shard: Value) {
    assert_eq!(next(ws).await["op"], 10);
    let d = json!({"token": FakeDiscord::TOKEN, "intents": INTENTS, "shard": shard,
        "properties": {"os": "linux", "browser": "t", "device": "t"}});
    send(ws, json!({"op": 2, "d": d})).await;
}

/// The next dispatch's message text.
async fn next_content(ws: &mut Ws) -> String {
    let event = next(ws).await;
    assert_eq!(event["t"], "MESSAGE_CREATE");
    event["d"]["content"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn each_dispatch_goes_to_the_connection_of_its_shard() {
    let fake = FakeDiscord::start().await;
    let mut shard0 = connect(&fake).await;
    identify_as(&mut shard0, json!([0, 2])).await;
    let ready = next(&mut shard0).await;
    assert_eq!(ready["d"]["shard"], json!([0, 2]));
    let mut shard1 = connect(&fake).await;
    identify_as(&mut shard1, json!([1, 2])).await;
    assert_eq!(next(&mut shard1).await["t"], "READY");
    assert_eq!(fake.connections(), [[0, 2], [1, 2]]);
    let listed: Value = reqwest::get(format!("{}/_fake/connections", fake.api_url()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(listed, json!([{"shard": [0, 2]}, {"shard": [1, 2]}]));
    assert_eq!(fake.identifies()[1].shard, Some([1, 2]));

    let (on0, on1) = (FakeDiscord::guild_on_shard(0, 2, 0), FakeDiscord::guild_on_shard(1, 2, 0));
    assert_ne!(on0 >> 22, on1 >> 22);
    fake.inject_message(InboundMessage::channel(on1, 11, 7, "server on shard 1"));
    fake.inject_message(InboundMessage::channel(on0, 10, 7, "server on shard 0"));
    fake.inject_message(InboundMessage::dm(7, "a DM"));
    assert_eq!(next_content(&mut shard0).await, "server on shard 0");
    assert_eq!(next_content(&mut shard0).await, "a DM");
    assert_eq!(next_content(&mut shard1).await, "server on shard 1");
    // Nothing else reached shard 1: the next thing it gets is the next message of its own.
    fake.inject_message(InboundMessage::channel(on1, 11, 7, "again on shard 1"));
    assert_eq!(next_content(&mut shard1).await, "again on shard 1");

    drop(shard1);
    // The list drops a connection once the fake notices it is gone.
    fake.inject_message(InboundMessage::dm(7, "still here"));
    assert_eq!(next_content(&mut shard0).await, "still here");
    for _ in 0..100 {
        if fake.connections() == [[0, 2]] {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the closed connection is still listed: {:?}", fake.connections());
}

#[tokio::test]
async fn an_invalid_shard_closes_with_4010() {
    let fake = FakeDiscord::start().await;
    for shard in [json!([2, 2]), json!([0, 0]), json!([1]), json!("0,1"), json!([-1, 2])] {
        let mut ws = connect(&fake).await;
        identify_as(&mut ws, shard.clone()).await;
        assert_eq!(close_code(&mut ws).await, 4010, "{shard}");
    }
    assert!(fake.connections().is_empty());
}

#[tokio::test]
async fn too_few_shards_close_with_4011_and_gateway_bot_says_how_many() {
    let fake = FakeDiscord::start().await;
    let gateway_bot = || async {
        let answer: Value = reqwest::Client::new()
            .get(format!("{}/api/v10/gateway/bot", fake.api_url()))
            .header("authorization", format!("Bot {}", FakeDiscord::TOKEN))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        answer["shards"].clone()
    };
    assert_eq!(gateway_bot().await, 1);
    let asked = reqwest::Client::new()
        .post(format!("{}/_fake/shards", fake.api_url()))
        .json(&json!({"recommended": 2, "required": 2}))
        .send()
        .await
        .unwrap();
    assert!(asked.status().is_success());
    assert_eq!(gateway_bot().await, 2);
    for shard in [Value::Null, json!([0, 1])] {
        let mut ws = connect(&fake).await;
        identify_as(&mut ws, shard.clone()).await;
        assert_eq!(close_code(&mut ws).await, 4011, "{shard}");
    }
    let mut ws = connect(&fake).await;
    identify_as(&mut ws, json!([1, 2])).await;
    assert_eq!(next(&mut ws).await["t"], "READY");
}

//! Socket Mode: hello, envelopes and their acknowledgements, redelivery, the message +
//! app_mention pair, connections coming and going.

use std::time::Duration;

use futures::{SinkExt, StreamExt};
use herald_fakes::FakeSlack;
use herald_fakes::slack::{DisconnectReason, MAX_RETRIES, Post};
use serde_json::json;
use tokio_tungstenite::tungstenite::Message;

use super::{WAIT, ack, acked_event, bot, connect, next, next_within, socket_url};

#[tokio::test]
async fn hello_counts_the_open_connections() {
    let fake = FakeSlack::start().await;
    let (_first, hello) = connect(&fake).await;
    assert_eq!(hello["num_connections"], 1);
    assert_eq!(hello["connection_info"]["app_id"], FakeSlack::APP_ID);
    assert!(hello["debug_info"]["host"].as_str().is_some_and(|h| !h.is_empty()));
    let (_second, hello) = connect(&fake).await;
    assert_eq!(hello["num_connections"], 2);
    assert_eq!(fake.open_connections(), 2);
}

#[tokio::test]
async fn a_socket_url_opens_one_connection_only() {
    let fake = FakeSlack::start().await;
    let url = socket_url(&fake).await;
    assert!(url.starts_with("ws://127.0.0.1:"), "{url}");
    let _first = tokio_tungstenite::connect_async(&url).await.unwrap();
    assert!(tokio_tungstenite::connect_async(&url).await.is_err());
    let forged = url.replace("ticket=", "ticket=x");
    assert!(tokio_tungstenite::connect_async(&forged).await.is_err());
}

#[tokio::test]
async fn a_dm_arrives_in_an_envelope_and_its_acknowledgement_is_recorded() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    let injected = fake.inject(Post::dm("U42", "hello"));

    let envelope = next(&mut ws).await;
    assert_eq!(envelope["type"], "events_api");
    assert_eq!(envelope["accepts_response_payload"], false);
    assert_eq!(
        (envelope["retry_attempt"].as_u64(), envelope["retry_reason"].as_str()),
        (Some(0), Some(""))
    );
    let payload = &envelope["payload"];
    assert_eq!(payload["type"], "event_callback");
    assert_eq!(payload["team_id"], FakeSlack::TEAM_ID);
    assert_eq!(payload["api_app_id"], FakeSlack::APP_ID);
    assert_eq!(payload["event_id"], injected.event_ids[0]);
    let event = &payload["event"];
    assert_eq!(
        (event["type"].as_str(), event["channel_type"].as_str()),
        (Some("message"), Some("im"))
    );
    assert_eq!(event["channel"], FakeSlack::dm_channel("U42"));
    assert_eq!((event["user"].as_str(), event["text"].as_str()), (Some("U42"), Some("hello")));
    assert_eq!(event["ts"], injected.ts);
    assert!(event.get("subtype").is_none() && event.get("bot_id").is_none());

    ack(&mut ws, &envelope).await;
    assert!(fake.wait_for(WAIT, |f| f.deliveries()[0].acked_ms.is_some()).await);
    let delivery = &fake.deliveries()[0];
    assert_eq!(delivery.envelope_id, envelope["envelope_id"]);
    assert_eq!((delivery.event_type.as_str(), delivery.retry_attempt), ("message", 0));
    assert!(delivery.ack_delay().unwrap() < Duration::from_secs(3));
    assert!(fake.stray_acks().is_empty());
}

#[tokio::test]
async fn an_unacknowledged_event_comes_again_in_a_new_envelope_with_retry_attempt() {
    let fake = FakeSlack::start().await;
    fake.set_ack_timeout(Duration::from_millis(200));
    let (mut ws, _) = connect(&fake).await;
    fake.dm("U1", "are you there");
    let first = next(&mut ws).await;
    let again = next(&mut ws).await;
    assert_eq!(again["payload"]["event_id"], first["payload"]["event_id"]);
    assert_ne!(again["envelope_id"], first["envelope_id"]);
    assert_eq!(
        (again["retry_attempt"].as_u64(), again["retry_reason"].as_str()),
        (Some(1), Some("timeout"))
    );
    ack(&mut ws, &again).await;
    assert!(next_within(&mut ws, Duration::from_millis(600)).await.is_none());

    let deliveries = fake.deliveries();
    assert_eq!(deliveries.len(), 2);
    assert_eq!(deliveries[0].acked_ms, None);
    assert!(deliveries[1].acked_ms.is_some());
}

#[tokio::test]
async fn a_late_acknowledgement_of_the_first_envelope_stops_the_retries() {
    let fake = FakeSlack::start().await;
    fake.set_ack_timeout(Duration::from_millis(200));
    let (mut ws, _) = connect(&fake).await;
    fake.dm("U1", "slow");
    let first = next(&mut ws).await;
    let _retry = next(&mut ws).await;
    ack(&mut ws, &first).await;
    assert!(next_within(&mut ws, Duration::from_millis(600)).await.is_none());
    assert_eq!(fake.deliveries().len(), 2);
}

#[tokio::test]
async fn retries_stop_after_three() {
    let fake = FakeSlack::start().await;
    fake.set_ack_timeout(Duration::from_millis(100));
    let (mut ws, _) = connect(&fake).await;
    fake.dm("U1", "nobody acknowledges");
    for attempt in 0..=MAX_RETRIES {
        assert_eq!(next(&mut ws).await["retry_attempt"], attempt);
    }
    assert!(next_within(&mut ws, Duration::from_millis(400)).await.is_none());
}

#[tokio::test]
async fn a_mention_in_a_channel_comes_as_message_and_app_mention_with_one_ts() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    for mention_first in [false, true] {
        let mut post = Post::channel("C1", "U7", "what time is it").mentioning_bot();
        if mention_first {
            post = post.mention_first();
        }
        let injected = fake.inject(post);
        assert_eq!(injected.event_ids.len(), 2);
        assert_ne!(injected.event_ids[0], injected.event_ids[1]);
        let (one, two) = (acked_event(&mut ws).await, acked_event(&mut ws).await);
        let (message, mention) = if mention_first { (two, one) } else { (one, two) };
        assert_eq!(
            (message["type"].as_str(), message["channel_type"].as_str()),
            (Some("message"), Some("channel"))
        );
        assert_eq!(mention["type"], "app_mention");
        for event in [&message, &mention] {
            assert_eq!(event["ts"], injected.ts);
            assert_eq!(event["channel"], "C1");
            assert_eq!(event["user"], "U7");
            assert_eq!(event["text"], format!("<@{}> what time is it", FakeSlack::BOT_USER));
        }
    }
}

#[tokio::test]
async fn a_channel_post_without_a_mention_is_only_a_message() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    let injected = fake.inject(Post::channel("C1", "U7", "just chatting"));
    assert_eq!(injected.event_ids.len(), 1);
    fake.dm("U7", "marker");
    assert_eq!(acked_event(&mut ws).await["text"], "just chatting");
    assert_eq!(acked_event(&mut ws).await["text"], "marker");
}

#[tokio::test]
async fn thread_replies_bot_messages_edits_and_deletions_look_as_on_slack() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    let parent = fake.inject(Post::channel("C1", "U7", "top").mentioning_bot());
    acked_event(&mut ws).await;
    acked_event(&mut ws).await;

    fake.inject(Post::channel("C1", "U8", "follow-up").in_thread(&parent.ts));
    let reply = acked_event(&mut ws).await;
    assert_eq!(reply["thread_ts"], parent.ts);
    assert_eq!(reply["parent_user_id"], "U7");

    fake.inject(Post::channel("C1", "U9", "beep").from_bot("B123"));
    let from_bot = acked_event(&mut ws).await;
    assert_eq!(
        (from_bot["subtype"].as_str(), from_bot["bot_id"].as_str()),
        (Some("bot_message"), Some("B123"))
    );
    assert!(from_bot.get("user").is_none());

    let edit = fake.edit("C1", &parent.ts, "top, edited").unwrap();
    let changed = acked_event(&mut ws).await;
    assert_eq!(changed["subtype"], "message_changed");
    assert_eq!(changed["ts"], edit.ts);
    assert_eq!(changed["message"]["ts"], parent.ts);
    assert_eq!(changed["message"]["text"], "top, edited");
    assert_eq!(changed["previous_message"]["text"], format!("<@{}> top", FakeSlack::BOT_USER));

    fake.delete("C1", &parent.ts).unwrap();
    let deleted = acked_event(&mut ws).await;
    assert_eq!(
        (deleted["subtype"].as_str(), deleted["deleted_ts"].as_str()),
        (Some("message_deleted"), Some(parent.ts.as_str()))
    );
    assert!(fake.edit("C1", &parent.ts, "gone").is_none());
}

#[tokio::test]
async fn the_bots_own_posts_come_back_as_events() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    let dm = fake.dm("U1", "hi");
    acked_event(&mut ws).await;
    let channel = FakeSlack::dm_channel("U1");
    let posted = bot(
        &fake,
        "chat.postMessage",
        json!({"channel": channel, "text": "hello", "thread_ts": dm}),
    )
    .await;
    let own = acked_event(&mut ws).await;
    assert_eq!(
        (own["bot_id"].as_str(), own["user"].as_str()),
        (Some(FakeSlack::BOT_ID), Some(FakeSlack::BOT_USER))
    );
    assert_eq!(own["ts"], posted["ts"]);
    assert_eq!(own["thread_ts"], dm);

    fake.echo_own_posts(false);
    bot(&fake, "chat.postMessage", json!({"channel": channel, "text": "quiet"})).await;
    assert!(next_within(&mut ws, Duration::from_millis(300)).await.is_none());
}

#[tokio::test]
async fn events_wait_for_a_connection_and_keep_their_order() {
    let fake = FakeSlack::start().await;
    for n in 0..5 {
        fake.dm("U1", &format!("message {n}"));
    }
    let (mut ws, _) = connect(&fake).await;
    for n in 0..5 {
        assert_eq!(acked_event(&mut ws).await["text"], format!("message {n}"));
    }
}

#[tokio::test]
async fn each_event_goes_to_one_of_the_connections() {
    let fake = FakeSlack::start().await;
    let (mut one, _) = connect(&fake).await;
    let (mut two, _) = connect(&fake).await;
    fake.dm("U1", "a");
    fake.dm("U1", "b");
    let texts =
        [acked_event(&mut one).await["text"].clone(), acked_event(&mut two).await["text"].clone()];
    assert_eq!(texts.len(), 2);
    assert!(next_within(&mut one, Duration::from_millis(200)).await.is_none());
    assert!(next_within(&mut two, Duration::from_millis(200)).await.is_none());
    let connections: Vec<u64> = fake.deliveries().iter().map(|d| d.connection).collect();
    assert_eq!(connections, [1, 2]);
}

#[tokio::test]
async fn disconnect_warns_then_closes_and_later_events_go_to_the_new_connection() {
    let fake = FakeSlack::start().await;
    let (mut old, _) = connect(&fake).await;
    fake.disconnect(DisconnectReason::RefreshRequested);
    let message = next(&mut old).await;
    assert_eq!(
        (message["type"].as_str(), message["reason"].as_str()),
        (Some("disconnect"), Some("refresh_requested"))
    );
    assert!(message["debug_info"]["host"].is_string());
    let (mut new, _) = connect(&fake).await;
    fake.dm("U1", "after the refresh");
    assert_eq!(acked_event(&mut new).await["text"], "after the refresh");
    let closed = tokio::time::timeout(WAIT, async {
        loop {
            match old.next().await {
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return,
                Some(Ok(Message::Text(text))) => panic!("an envelope after disconnect: {text}"),
                Some(Ok(_)) => {}
            }
        }
    });
    closed.await.unwrap();
}

#[tokio::test]
async fn dropped_connections_end_without_a_close_frame() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    fake.drop_connections();
    match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
        None | Some(Err(_)) => {}
        other => panic!("expected the socket to end abruptly: {other:?}"),
    }
    assert!(fake.wait_for(WAIT, |f| f.open_connections() == 0).await);
}

#[tokio::test]
async fn pings_are_answered_until_the_connection_goes_silent() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    let pong = async |ws: &mut super::Ws| loop {
        match ws.next().await {
            Some(Ok(Message::Pong(body))) => return body,
            Some(Ok(_)) => {}
            other => panic!("no pong: {other:?}"),
        }
    };
    ws.send(Message::Ping(b"are you there".to_vec().into())).await.unwrap();
    let body = tokio::time::timeout(WAIT, pong(&mut ws)).await.unwrap();
    assert_eq!(&body[..], b"are you there");

    fake.silence();
    tokio::time::sleep(Duration::from_millis(100)).await;
    fake.dm("U1", "into the void?");
    ws.send(Message::Ping(b"still there".to_vec().into())).await.unwrap();
    assert!(tokio::time::timeout(Duration::from_millis(500), pong(&mut ws)).await.is_err());
    // The event waits for a connection that listens.
    let (mut fresh, _) = connect(&fake).await;
    assert_eq!(acked_event(&mut fresh).await["text"], "into the void?");
}

#[tokio::test]
async fn down_for_a_while_refuses_everything_then_comes_back() {
    let fake = FakeSlack::start().await;
    let (mut ws, _) = connect(&fake).await;
    fake.down_for(Duration::from_millis(500));
    match tokio::time::timeout(WAIT, ws.next()).await.unwrap() {
        None | Some(Err(_)) => {}
        other => panic!("expected the socket to be dropped: {other:?}"),
    }
    let refused = reqwest::Client::new()
        .post(format!("{}/auth.test", fake.api_url()))
        .bearer_auth(FakeSlack::BOT_TOKEN)
        .send()
        .await;
    assert!(refused.is_err(), "{refused:?}");
    fake.dm("U1", "sent while down");
    tokio::time::sleep(Duration::from_millis(600)).await;
    let (mut back, _) = connect(&fake).await;
    assert_eq!(acked_event(&mut back).await["text"], "sent while down");
}

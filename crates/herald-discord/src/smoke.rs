//! The adapter against the fake Discord through serenity: the shortest way through, kept
//! beside the daemon-level tests in the herald crate.

use std::time::Duration;

use herald_core::{Adapter, AdapterContext, AdapterEvent, ChatKind, Outbound};
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use crate::{DiscordAdapter, DiscordSettings};

async fn next_inbound(events: &mut mpsc::Receiver<AdapterEvent>) -> herald_core::Inbound {
    loop {
        let event = tokio::time::timeout(Duration::from_secs(10), events.recv())
            .await
            .expect("an event in time")
            .expect("the adapter is running");
        if let AdapterEvent::Inbound(inbound) = event {
            return inbound;
        }
    }
}

#[tokio::test]
async fn a_dm_comes_in_and_the_reply_goes_out_without_pings() {
    let fake = FakeDiscord::start().await;
    let mut settings = DiscordSettings::new(FakeDiscord::TOKEN);
    settings.api_url = Some(fake.api_url());
    let (events_tx, mut events) = mpsc::channel(64);
    let (outbound, outbound_rx) = mpsc::channel(64);
    let ctx = AdapterContext {
        events: events_tx,
        outbound: outbound_rx,
        cursor: None,
        channel_cursors: Default::default(),
        kept: Default::default(),
        claims: herald_core::Claims::solo(),
        positions: herald_core::Positions::default(),
    };
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(DiscordAdapter::new(settings).run(ctx, shutdown.clone()));
    loop {
        match tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
            Ok(Some(AdapterEvent::Connected { .. })) => break,
            Ok(Some(_)) => {}
            other => panic!("not connected: {other:?}"),
        }
    }
    fake.inject_message(InboundMessage::dm(7, "héllo 你好"));
    let inbound = next_inbound(&mut events).await;
    assert_eq!(inbound.text, "héllo 你好");
    assert_eq!(inbound.chat.kind, ChatKind::Direct);
    assert_eq!(inbound.user.id, "7");
    let (done, sent) = oneshot::channel();
    outbound
        .send(Outbound::Send {
            chat: inbound.chat.clone(),
            text: "@everyone hi".into(),
            reply_to: None,
            answers: None,
            track: Some(herald_core::Tracking::detached("12".into())),
            done: Some(done),
        })
        .await
        .unwrap();
    let ids = sent.await.unwrap().unwrap();
    assert_eq!(ids.len(), 1);
    let posted = fake.sent();
    assert_eq!(posted[0].content, "@everyone hi");
    let mentions = posted[0].allowed_mentions.clone().expect("allowed_mentions sent");
    assert_eq!(mentions["parse"], serde_json::json!([]));
    assert!(posted[0].enforce_nonce);
    inbound.ack.settle();
    shutdown.cancel();
    drop(outbound);
    tokio::time::timeout(Duration::from_secs(10), running).await.unwrap().unwrap().unwrap();
}

//! The adapter against the fake Slack through slack-morphism, driven through `Adapter::run`
//! as the gateway drives it.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use herald_core::{
    Adapter, AdapterContext, AdapterError, AdapterEvent, ChatRef, Inbound, Outbound, Platform,
    SendError, SentId, Tracking,
};
use herald_fakes::slack::{DisconnectReason, FakeSlack, Post, SlackFault};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{SlackAdapter, SlackSettings};

const PATIENCE: Duration = Duration::from_secs(15);

struct Harness {
    fake: FakeSlack,
    events: mpsc::Receiver<AdapterEvent>,
    outbound: mpsc::Sender<Outbound>,
    shutdown: CancellationToken,
    running: JoinHandle<Result<(), AdapterError>>,
}

fn settings(fake: &FakeSlack) -> SlackSettings {
    let mut settings = SlackSettings::new(FakeSlack::BOT_TOKEN, FakeSlack::APP_TOKEN);
    settings.api_url = Some(fake.api_url());
    settings.max_backoff = Duration::from_secs(1);
    settings
}

/// A running adapter's events, outbound channel, stop and task.
type Launched = (
    mpsc::Receiver<AdapterEvent>,
    mpsc::Sender<Outbound>,
    CancellationToken,
    JoinHandle<Result<(), AdapterError>>,
);

/// Runs an adapter with `settings`.
fn launch(settings: SlackSettings) -> Launched {
    let (events_tx, events) = mpsc::channel(64);
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
    let running = tokio::spawn(SlackAdapter::new(settings).run(ctx, shutdown.clone()));
    (events, outbound, shutdown, running)
}

impl Harness {
    async fn start() -> Harness {
        let fake = FakeSlack::start().await;
        let settings = settings(&fake);
        Harness::start_with(fake, settings).await
    }

    async fn start_with(fake: FakeSlack, settings: SlackSettings) -> Harness {
        let (events, outbound, shutdown, running) = launch(settings);
        let mut harness = Harness { fake, events, outbound, shutdown, running };
        harness.connected().await;
        harness
    }

    async fn event(&mut self) -> AdapterEvent {
        tokio::time::timeout(PATIENCE, self.events.recv())
            .await
            .expect("an event in time")
            .expect("the adapter is running")
    }

    /// Waits for `Connected`; whether `Retrying` came before it.
    async fn connected(&mut self) -> bool {
        let mut retried = false;
        loop {
            match self.event().await {
                AdapterEvent::Connected { bot } => {
                    assert_eq!(bot, FakeSlack::BOT_NAME);
                    return retried;
                }
                AdapterEvent::Retrying { error, .. } => {
                    assert!(!error.contains(FakeSlack::APP_TOKEN), "{error}");
                    retried = true;
                }
                AdapterEvent::Inbound(inbound) => panic!("not connected yet: {inbound:?}"),
                _ => {}
            }
        }
    }

    async fn inbound(&mut self) -> Inbound {
        loop {
            if let AdapterEvent::Inbound(inbound) = self.event().await {
                return inbound;
            }
        }
    }

    /// Asserts that nothing is offered within `quiet`.
    async fn nothing_offered(&mut self, quiet: Duration) {
        let deadline = tokio::time::Instant::now() + quiet;
        while let Ok(Some(event)) = tokio::time::timeout_at(deadline, self.events.recv()).await {
            if let AdapterEvent::Inbound(inbound) = event {
                panic!("offered: {inbound:?}");
            }
        }
    }

    async fn send(&self, chat: &ChatRef, text: &str) -> Result<Vec<SentId>, SendError> {
        self.send_tracked(chat, text, None).await
    }

    async fn send_tracked(
        &self,
        chat: &ChatRef,
        text: &str,
        track: Option<Tracking>,
    ) -> Result<Vec<SentId>, SendError> {
        let (done, sent) = oneshot::channel();
        let request = Outbound::Send {
            chat: chat.clone(),
            text: text.into(),
            reply_to: None,
            answers: None,
            track,
            done: Some(done),
        };
        self.outbound.send(request).await.expect("the adapter takes requests");
        tokio::time::timeout(PATIENCE, sent).await.expect("sent in time").expect("an outcome")
    }

    /// Waits until every event sent so far was acknowledged in one of its envelopes (an
    /// acknowledgement on a connection that dropped is lost, and the redelivery gets one).
    async fn all_acknowledged(&self) {
        let done = |fake: &FakeSlack| {
            let deliveries = fake.deliveries();
            deliveries.iter().all(|d| {
                deliveries.iter().any(|e| e.event_id == d.event_id && e.acked_ms.is_some())
            })
        };
        assert!(self.fake.wait_for(PATIENCE, done).await, "{:#?}", self.fake.deliveries());
    }

    async fn stop(self) {
        self.shutdown.cancel();
        drop(self.outbound);
        let stopped = tokio::time::timeout(PATIENCE, self.running).await.expect("stopped in time");
        stopped.expect("no panic").expect("a clean stop");
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

#[tokio::test]
async fn a_dm_is_offered_with_its_chat_user_and_text_and_acknowledged_once_settled() {
    let mut h = Harness::start().await;
    let ts = h.fake.dm("U1", "héllo &lt;you&gt; 你好");
    let inbound = h.inbound().await;
    assert_eq!(inbound.chat, ChatRef::direct(Platform::Slack, "D1"));
    assert_eq!(inbound.user.id, "U1");
    assert_eq!(inbound.text, "héllo <you> 你好");
    assert_eq!(inbound.id, format!("D1:{ts}"));
    assert!(h.fake.deliveries().iter().all(|d| d.acked_ms.is_none()), "acknowledged unsettled");
    inbound.ack.settle();
    h.all_acknowledged().await;
    h.stop().await;
}

#[tokio::test]
async fn the_message_and_app_mention_pair_is_offered_once_in_either_order() {
    let mut h = Harness::start().await;
    for post in [
        Post::channel("C1", "U1", "first").mentioning_bot(),
        Post::channel("C1", "U1", "second").mentioning_bot().mention_first(),
    ] {
        let injected = h.fake.inject(post);
        assert_eq!(injected.event_ids.len(), 2);
        let inbound = h.inbound().await;
        assert!(inbound.mentioned);
        assert_eq!(inbound.id, format!("C1:{}", injected.ts));
        // Answered in a thread on the post: the thread is the conversation's already.
        assert_eq!(inbound.chat, ChatRef::group(Platform::Slack, "C1").in_thread(&injected.ts));
        inbound.ack.settle();
    }
    h.nothing_offered(Duration::from_millis(500)).await;
    h.all_acknowledged().await;
    assert_eq!(h.fake.deliveries().len(), 4);
    h.stop().await;
}

#[tokio::test]
async fn a_redelivery_is_offered_once_and_acknowledged_after_settling() {
    let mut h = Harness::start().await;
    h.fake.set_ack_timeout(Duration::from_millis(200));
    h.fake.dm("U2", "slow store");
    let inbound = h.inbound().await;
    // Slack gives up waiting and delivers the event again while the gateway holds it.
    let redelivered = |fake: &FakeSlack| fake.deliveries().iter().any(|d| d.retry_attempt >= 1);
    assert!(h.fake.wait_for(PATIENCE, redelivered).await);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(h.fake.deliveries().iter().all(|d| d.acked_ms.is_none()), "acknowledged unsettled");
    let settled_ms = now_ms();
    inbound.ack.settle();
    h.all_acknowledged().await;
    let deliveries = h.fake.deliveries();
    assert!(deliveries.len() >= 2);
    assert!(deliveries.iter().all(|d| d.event_id == deliveries[0].event_id));
    assert!(deliveries.iter().all(|d| d.acked_ms.is_none_or(|acked| acked >= settled_ms)));
    h.nothing_offered(Duration::from_millis(500)).await;
    h.stop().await;
}

#[tokio::test]
async fn an_envelope_not_settled_in_time_is_left_to_slack_and_answered_once() {
    let fake = FakeSlack::start().await;
    let mut settings = settings(&fake);
    settings.ack_wait = Duration::from_millis(100);
    let mut h = Harness::start_with(fake, settings).await;
    h.fake.set_ack_timeout(Duration::from_millis(300));
    h.fake.dm("U2", "very slow store");
    let inbound = h.inbound().await;
    let retried = |fake: &FakeSlack| fake.deliveries().iter().any(|d| d.retry_attempt >= 1);
    assert!(h.fake.wait_for(PATIENCE, retried).await);
    assert!(h.fake.deliveries().iter().all(|d| d.acked_ms.is_none()));
    inbound.ack.settle();
    // A later copy finds the message settled and is acknowledged.
    let acked = |fake: &FakeSlack| fake.deliveries().iter().any(|d| d.acked_ms.is_some());
    assert!(h.fake.wait_for(PATIENCE, acked).await, "{:#?}", h.fake.deliveries());
    h.nothing_offered(Duration::from_millis(300)).await;
    h.stop().await;
}

#[tokio::test]
async fn bots_edits_deletions_and_the_bots_own_posts_are_ignored() {
    let mut h = Harness::start().await;
    let ts = h.fake.dm("U3", "original");
    let first = h.inbound().await;
    first.ack.settle();
    h.fake.inject(Post::channel("C1", "U9", "beep <!channel>").from_bot("B0OTHER"));
    h.fake.edit("D3", &ts, "edited").expect("the message exists");
    h.fake.delete("D3", &ts).expect("the message exists");
    // The bot's own answer comes back as a `message` event, as on Slack.
    h.send(&first.chat, "my answer").await.expect("sent");
    h.fake.dm("U3", "after");
    let next = h.inbound().await;
    assert_eq!(next.text, "after");
    next.ack.settle();
    h.nothing_offered(Duration::from_millis(300)).await;
    h.all_acknowledged().await;
    h.stop().await;
}

#[tokio::test]
async fn answers_go_to_the_thread_and_its_follow_ups_need_no_mention() {
    let mut h = Harness::start().await;
    let post = h.fake.inject(Post::channel("C1", "U1", "question").mentioning_bot());
    let inbound = h.inbound().await;
    inbound.ack.settle();
    h.send(&inbound.chat, "**answer**").await.expect("sent");
    let posted = h.fake.posted_in("C1");
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].thread_ts.as_deref(), Some(post.ts.as_str()));
    assert!(posted[0].thread_found);
    assert_eq!(posted[0].text, "*answer*");
    // Someone else follows up in the thread without a mention: still addressed, same chat.
    h.fake.inject(Post::channel("C1", "U2", "and then?").in_thread(&post.ts));
    let follow_up = h.inbound().await;
    assert!(follow_up.mentioned);
    assert_eq!(follow_up.chat, inbound.chat);
    follow_up.ack.settle();
    // A channel post without a mention is offered as not addressed, for the gateway to gate.
    h.fake.inject(Post::channel("C1", "U2", "chatter"));
    let chatter = h.inbound().await;
    assert!(!chatter.addressed());
    chatter.ack.settle();
    h.stop().await;
}

#[tokio::test]
async fn a_rate_limited_reply_waits_and_is_posted_once() {
    let mut h = Harness::start().await;
    let ts = h.fake.dm("U4", "hi");
    let inbound = h.inbound().await;
    inbound.ack.settle();
    h.fake.push_fault("chat.postMessage", SlackFault::RateLimited { retry_after: 1 });
    h.fake.push_fault("chat.postMessage", SlackFault::Status { status: 503 });
    let started = tokio::time::Instant::now();
    let ids = h.send(&inbound.chat, "answer").await.expect("sent after the faults");
    assert!(started.elapsed() >= Duration::from_secs(1), "Retry-After honoured");
    assert_eq!(ids.len(), 1);
    let posted = h.fake.posted();
    assert_eq!(posted.len(), 1);
    assert_eq!(posted[0].thread_ts, None, "a DM is answered in place, not under {ts}");
    let statuses: Vec<u16> = h.fake.calls_of("chat.postMessage").iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 503, 200]);
    // A refusal is final.
    let lost = ChatRef::direct(Platform::Slack, "D404");
    let refused = h.send(&lost, "to nobody").await;
    assert!(matches!(&refused, Err(SendError::Rejected(e)) if e.contains("channel_not_found")));
    h.stop().await;
}

#[tokio::test]
async fn messages_still_come_after_a_disconnect_and_an_abrupt_close() {
    // One connection: a second one's `Connected` would not tell which loss it follows.
    let fake = FakeSlack::start().await;
    let mut settings = settings(&fake);
    settings.socket_connections = 1;
    let mut h = Harness::start_with(fake, settings).await;
    h.fake.disconnect(DisconnectReason::RefreshRequested);
    h.fake.dm("U5", "after the refresh");
    h.connected().await;
    let first = h.inbound().await;
    assert_eq!(first.text, "after the refresh");
    first.ack.settle();
    h.all_acknowledged().await;
    h.fake.drop_connections();
    h.fake.dm("U5", "after the drop");
    assert!(h.connected().await, "the lost connection is reported");
    let second = h.inbound().await;
    assert_eq!(second.text, "after the drop");
    second.ack.settle();
    h.all_acknowledged().await;
    assert!(h.fake.connections_opened() >= 3);
    h.stop().await;
}

#[tokio::test]
async fn refused_tokens_stop_the_adapter_naming_their_variable() {
    let fake = FakeSlack::start().await;
    fake.set_invalid_auth(true);
    let (_events, _outbound, _shutdown, running) = launch(settings(&fake));
    let stopped =
        tokio::time::timeout(PATIENCE, running).await.expect("in time").expect("no panic");
    match stopped {
        Err(AdapterError::Unauthorized { platform: Platform::Slack, hint, detail }) => {
            assert_eq!(hint, "SLACK_BOT_TOKEN");
            assert!(detail.contains("invalid_auth"), "{detail}");
        }
        other => panic!("not refused: {other:?}"),
    }
    fake.set_invalid_auth(false);
    let mut wrong_app = settings(&fake);
    wrong_app.app_token = "xapp-wrong".into();
    let (_events, _outbound, _shutdown, running) = launch(wrong_app);
    let stopped =
        tokio::time::timeout(PATIENCE, running).await.expect("in time").expect("no panic");
    let error = stopped.expect_err("refused");
    assert!(matches!(&error, AdapterError::Unauthorized { hint, .. } if hint == "SLACK_APP_TOKEN"));
    assert!(!error.to_string().contains("xapp-wrong"), "{error}");
}

#[tokio::test]
async fn long_answers_are_split_with_balanced_fences_and_broadcasts_never_notify() {
    let mut h = Harness::start().await;
    let chat = ChatRef::direct(Platform::Slack, "D6");
    h.fake.dm("U6", "hello");
    h.inbound().await.ack.settle();
    let code: String = (0..150).map(|n| format!("let value_{n:03} = compute({n});\n")).collect();
    let answer = format!("Here it is:\n\n```rust\n{code}```\n\n{}", "Done. ".repeat(150));
    assert!(answer.chars().count() >= 5000);
    let ids = h.send(&chat, &answer).await.expect("sent");
    let posted = h.fake.posted();
    assert_eq!(ids.len(), posted.len());
    assert!(posted.len() >= 2);
    for part in &posted {
        assert!(part.text.chars().count() <= crate::MAX_MESSAGE_LEN);
        assert_eq!(part.text.matches("```").count() % 2, 0, "unbalanced: {}", part.text);
    }
    h.send(&chat, "<!channel> <!here> <!everyone> @channel look").await.expect("sent");
    let last = h.fake.posted().pop().expect("posted");
    assert!(!last.text.contains("<!"), "{}", last.text);
    assert!(!last.text.contains("@channel"), "{}", last.text);
    h.stop().await;
}

#[tokio::test]
async fn a_working_reaction_shows_until_the_answer_is_sent() {
    let mut h = Harness::start().await;
    let ts = h.fake.dm("U7", "think hard");
    let inbound = h.inbound().await;
    inbound.ack.settle();
    for _ in 0..2 {
        h.outbound.send(Outbound::Typing { chat: inbound.chat.clone() }).await.expect("taken");
    }
    let added = |fake: &FakeSlack| !fake.reactions().is_empty();
    assert!(h.fake.wait_for(PATIENCE, added).await);
    assert_eq!(h.fake.reactions_on("D7", &ts), ["hourglass_flowing_sand"]);
    h.send(&inbound.chat, "done").await.expect("sent");
    let reactions = h.fake.reactions();
    assert_eq!(reactions.len(), 2, "{reactions:?}");
    assert!(reactions[0].added && !reactions[1].added);
    assert_eq!((reactions[1].channel.as_str(), reactions[1].timestamp.as_str()), ("D7", &*ts));
    assert!(h.fake.reactions_on("D7", &ts).is_empty());
    h.stop().await;
}

#[tokio::test]
async fn every_piece_slack_took_before_a_crash_is_found_and_only_the_rest_posted() {
    let mut h = Harness::start().await;
    let chat = ChatRef::direct(Platform::Slack, "D8");
    h.fake.dm("U8", "a long one");
    h.inbound().await.ack.settle();
    let answer = "word ".repeat(2500);
    let stored_at = i64::try_from(now_ms()).unwrap();
    let tracked = |again| Some(Tracking::new("77".into(), 0, again, stored_at).0);
    // Slack takes every piece; the process dies before their progress reaches the store.
    let ids = h.send_tracked(&chat, &answer, tracked(false)).await.expect("sent");
    assert!(ids.len() >= 3, "{ids:?}");
    // Started again from piece 0: every piece is found, with one read of the history.
    let again = h.send_tracked(&chat, &answer, tracked(true)).await.expect("found");
    assert_eq!(again, ids);
    assert_eq!(h.fake.posted().len(), ids.len(), "nothing posted twice");
    assert_eq!(h.fake.calls_of("conversations.history").len(), 1);
    // Only the first two pieces on Slack: the rest goes out after them.
    for ts in &ids[2..] {
        h.fake.delete("D8", ts).expect("deleted");
    }
    let resumed = h.send_tracked(&chat, &answer, tracked(true)).await.expect("resumed");
    assert_eq!(resumed[..2], ids[..2]);
    assert_eq!(h.fake.posted().len(), ids.len() * 2 - 2, "only the missing pieces posted");
    h.stop().await;
}

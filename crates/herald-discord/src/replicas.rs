//! Adapters sharing the bot's shards through claims, against the fake Discord with real
//! serenity: each shard connected by the one adapter holding its claim, every message heard
//! once, a shard taken over by another adapter with the gap fetched, and an adapter holding
//! no shard connected for sending.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use herald_core::{
    Adapter, AdapterContext, AdapterEvent, ChatRef, Claim, Claimer, Claims, Inbound, Outbound,
    Platform,
};
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::{DiscordAdapter, DiscordSettings};

const WAIT: Duration = Duration::from_secs(15);

/// Who may hold each name, and who holds it: the test hands a name to one replica at a time
/// and can take it away, as the store does for replicas on PostgreSQL.
#[derive(Default)]
struct Board {
    /// The replica each name is meant for (absent: nobody).
    meant: HashMap<String, usize>,
    /// The replica holding each name, and the token that tells it the claim is lost.
    held: HashMap<String, (usize, CancellationToken)>,
}

#[derive(Clone)]
struct TestClaims {
    board: Arc<Mutex<Board>>,
    changed: Arc<watch::Sender<u64>>,
}

impl TestClaims {
    fn new() -> TestClaims {
        TestClaims { board: Arc::default(), changed: Arc::new(watch::Sender::new(0)) }
    }

    /// The claims replica `replica` sees.
    fn replica(&self, replica: usize) -> Claims {
        Claims::new(ReplicaClaims { replica, claims: self.clone() })
    }

    /// Means `name` for `replica` (or nobody): its holder, if another, loses it at once.
    fn give(&self, name: &str, replica: Option<usize>) {
        {
            let mut board = self.board.lock().unwrap();
            match replica {
                Some(replica) => board.meant.insert(name.to_owned(), replica),
                None => board.meant.remove(name),
            };
            if let Some((holder, lost)) = board.held.get(name)
                && Some(*holder) != replica
            {
                lost.cancel();
            }
        }
        self.changed.send_modify(|n| *n += 1);
    }
}

struct ReplicaClaims {
    replica: usize,
    claims: TestClaims,
}

/// Frees the name when the claim is dropped.
struct Release {
    name: String,
    replica: usize,
    claims: TestClaims,
}

impl Drop for Release {
    fn drop(&mut self) {
        let mut board = self.claims.board.lock().unwrap();
        if board.held.get(&self.name).is_some_and(|(holder, _)| *holder == self.replica) {
            board.held.remove(&self.name);
        }
        drop(board);
        self.claims.changed.send_modify(|n| *n += 1);
    }
}

impl Claimer for ReplicaClaims {
    fn hold(&self, name: String) -> Pin<Box<dyn Future<Output = Claim> + Send>> {
        let (replica, claims) = (self.replica, self.claims.clone());
        Box::pin(async move {
            let mut changed = claims.changed.subscribe();
            loop {
                {
                    let mut board = claims.board.lock().unwrap();
                    if board.meant.get(&name) == Some(&replica) && !board.held.contains_key(&name) {
                        let lost = CancellationToken::new();
                        board.held.insert(name.clone(), (replica, lost.clone()));
                        let release = Release { name, replica, claims: claims.clone() };
                        return Claim::new(lost, Some(Box::new(release)));
                    }
                }
                changed.changed().await.expect("the test's claims outlive the adapters");
            }
        })
    }
}

/// One adapter, as one replica runs it.
struct Replica {
    events: mpsc::Receiver<AdapterEvent>,
    outbound: mpsc::Sender<Outbound>,
    shutdown: CancellationToken,
    running: JoinHandle<Result<(), herald_core::AdapterError>>,
}

impl Replica {
    fn start(
        fake: &FakeDiscord,
        claims: Claims,
        channel_cursors: BTreeMap<String, String>,
    ) -> Self {
        let mut settings = DiscordSettings::new(FakeDiscord::TOKEN);
        settings.api_url = Some(fake.api_url());
        settings.shards = 2;
        settings.register_commands = false;
        let (events_tx, events) = mpsc::channel(256);
        let (outbound, outbound_rx) = mpsc::channel(16);
        let ctx = AdapterContext {
            events: events_tx,
            outbound: outbound_rx,
            cursor: None,
            channel_cursors,
            kept: BTreeMap::new(),
            claims,
            positions: herald_core::Positions::default(),
        };
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(DiscordAdapter::new(settings).run(ctx, shutdown.clone()));
        Replica { events, outbound, shutdown, running }
    }

    /// Stops the adapter as the gateway does, and waits for it.
    async fn stop(self) {
        self.shutdown.cancel();
        drop(self.outbound);
        let stopped = tokio::time::timeout(WAIT, self.running).await.expect("stopped in time");
        stopped.expect("the adapter did not panic").expect("the adapter stopped cleanly");
    }

    /// The next message handed to the gateway, settled as the gateway would.
    async fn inbound(&mut self) -> Inbound {
        loop {
            let event = tokio::time::timeout(WAIT, self.events.recv())
                .await
                .expect("a message in time")
                .expect("the adapter is running");
            if let AdapterEvent::Inbound(inbound) = event {
                return inbound;
            }
        }
    }

    async fn text(&mut self) -> String {
        let inbound = self.inbound().await;
        let text = inbound.text.clone();
        inbound.ack.settle();
        text
    }

    async fn connected(&mut self) {
        loop {
            match tokio::time::timeout(WAIT, self.events.recv()).await {
                Ok(Some(AdapterEvent::Connected { .. })) => return,
                Ok(Some(AdapterEvent::Inbound(inbound))) => {
                    panic!("a message before connecting: {}", inbound.text)
                }
                Ok(Some(_)) => {}
                other => panic!("not connected: {other:?}"),
            }
        }
    }

    /// Every message handed over so far, without waiting.
    fn rest(&mut self) -> Vec<String> {
        let mut texts = Vec::new();
        while let Ok(event) = self.events.try_recv() {
            if let AdapterEvent::Inbound(inbound) = event {
                texts.push(inbound.text.clone());
            }
        }
        texts
    }
}

/// Waits until the fake's open connections are `shards` (in any order).
async fn connections(fake: &FakeDiscord, shards: &[[u64; 2]]) {
    let mut want = shards.to_vec();
    want.sort_unstable();
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let mut open = fake.connections();
        open.sort_unstable();
        if open == want {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "connections {open:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn each_shard_is_connected_by_one_replica_and_moves_with_its_claim() {
    let fake = FakeDiscord::start().await;
    // Discord closes a connection with too few shards for the bot's servers.
    fake.require_shards(2);
    let (guild0, guild1) =
        (FakeDiscord::guild_on_shard(0, 2, 0), FakeDiscord::guild_on_shard(1, 2, 0));
    let (channel0, channel1, quiet1) = (10, 11, 12);
    // Both replicas start from the store's cursors: `quiet1` was read up to this message.
    let (before, _) = fake.inject_message(InboundMessage::channel(guild1, quiet1, 7, "read"));
    let cursors = BTreeMap::from([(quiet1.to_string(), before.to_string())]);

    let claims = TestClaims::new();
    claims.give("discord:shard:0", Some(1));
    claims.give("discord:shard:1", Some(0));
    let mut a = Replica::start(&fake, claims.replica(0), cursors.clone());
    let mut b = Replica::start(&fake, claims.replica(1), cursors);
    a.connected().await;
    b.connected().await;
    connections(&fake, &[[0, 2], [1, 2]]).await;
    assert!(fake.identifies().iter().all(|identify| identify.shard.is_some_and(|s| s[1] == 2)));

    // A server on each shard and a DM: each heard by the replica holding its shard, once.
    fake.inject_message(InboundMessage::channel(guild0, channel0, 7, "on shard 0"));
    fake.inject_message(InboundMessage::channel(guild1, channel1, 7, "on shard 1"));
    fake.inject_message(InboundMessage::dm(8, "a DM"));
    assert_eq!(b.text().await, "on shard 0");
    assert_eq!(b.text().await, "a DM");
    assert_eq!(a.text().await, "on shard 1");

    // Shard 1 taken from A: A closes its connection, and while nobody holds it a message comes.
    claims.give("discord:shard:1", None);
    connections(&fake, &[[0, 2]]).await;
    fake.inject_message(InboundMessage::channel(guild1, quiet1, 7, "while nobody listened"));
    // B takes it over: it identifies as shard 1 and fetches the gap.
    claims.give("discord:shard:1", Some(1));
    connections(&fake, &[[0, 2], [1, 2]]).await;
    let shard1 = fake.identifies().iter().filter(|i| i.shard == Some([1, 2])).count();
    assert_eq!(shard1, 2, "shard 1 identified again, by its new holder");
    assert_eq!(b.text().await, "while nobody listened");
    fake.inject_message(InboundMessage::channel(guild1, channel1, 7, "after the move"));
    assert_eq!(b.text().await, "after the move");
    assert!(a.rest().is_empty(), "A heard nothing after giving the shard up");
    assert!(b.rest().is_empty(), "B heard each message once");

    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_shard_taken_over_fetches_its_gap_whatever_is_heard_live_first() {
    let fake = FakeDiscord::start().await;
    let guild1 = FakeDiscord::guild_on_shard(1, 2, 0);
    // Five channels read up to here: four fetched at once after the takeover, held by the fake,
    // while the fifth, whose cursor is read later, hears a newer message live.
    let mut cursors = BTreeMap::new();
    for channel in 20..25 {
        let (read, _) = fake.inject_message(InboundMessage::channel(guild1, channel, 7, "read"));
        cursors.insert(channel.to_string(), read.to_string());
    }
    let claims = TestClaims::new();
    let mut b = Replica::start(&fake, claims.replica(1), cursors);
    b.connected().await;
    fake.inject_message(InboundMessage::channel(guild1, 24, 7, "while nobody listened 1"));
    fake.inject_message(InboundMessage::channel(guild1, 24, 7, "while nobody listened 2"));
    fake.hold_history(true);
    claims.give("discord:shard:1", Some(1));
    connections(&fake, &[[1, 2]]).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.history_requests() < 4 {
        assert!(tokio::time::Instant::now() < deadline, "the fetches never came");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Heard live while its channel's gap is still being fetched: it comes after the gap.
    fake.inject_message(InboundMessage::channel(guild1, 24, 7, "live"));
    fake.hold_history(false);
    assert_eq!(b.text().await, "while nobody listened 1");
    assert_eq!(b.text().await, "while nobody listened 2");
    assert_eq!(b.text().await, "live");
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_holding_no_shard_is_connected_and_sends() {
    let fake = FakeDiscord::start().await;
    let claims = TestClaims::new();
    let mut idle = Replica::start(&fake, claims.replica(0), BTreeMap::new());
    idle.connected().await;
    assert!(fake.identifies().is_empty(), "no gateway connection without a shard");
    let chat = ChatRef::direct(Platform::Discord, FakeDiscord::dm_channel(7).to_string());
    let (done, sent) = oneshot::channel();
    let send = Outbound::Send {
        chat,
        text: "from a replica without shards".into(),
        reply_to: None,
        answers: None,
        track: None,
        done: Some(done),
    };
    idle.outbound.send(send).await.unwrap();
    sent.await.unwrap().unwrap();
    assert_eq!(fake.sent()[0].content, "from a replica without shards");
    idle.stop().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_replica_holding_no_shard_still_learns_of_a_refused_token() {
    let fake = FakeDiscord::start().await;
    let mut settings = DiscordSettings::new("not-the-token");
    settings.api_url = Some(fake.api_url());
    let (events, _events) = mpsc::channel(16);
    let (_outbound, outbound) = mpsc::channel(16);
    let ctx = AdapterContext {
        events,
        outbound,
        cursor: None,
        channel_cursors: BTreeMap::new(),
        kept: BTreeMap::new(),
        claims: TestClaims::new().replica(0),
        positions: herald_core::Positions::default(),
    };
    let run = DiscordAdapter::new(settings).run(ctx, CancellationToken::new());
    let refused = tokio::time::timeout(WAIT, run).await.expect("refused in time").unwrap_err();
    assert_eq!(
        refused.to_string(),
        "discord refused the token: GET /users/@me answered 401 (unauthorized); check DISCORD_BOT_TOKEN"
    );
}

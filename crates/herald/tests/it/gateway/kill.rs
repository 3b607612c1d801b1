//! Kill tests: `herald gateway` is SIGKILLed at seeded points while many chats queue messages
//! behind a slow model, on each platform alone and on all three at once, and started again.
//! Once it is quiet, every message sent (before, between and after the kills) is answered, in
//! order, exactly once; the only doubles allowed are those the outbox says a crash may send
//! twice, and only on a platform that cannot deduplicate its sends. A Slack message whose
//! event reached only a killed process comes back by Slack's redelivery seconds later, after
//! newer ones: it must be answered once, in any place.
//!
//! Seeds are fixed so that a failure can be run again: `HERALD_KILL_SEED=N` runs one seed.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use herald_fakes::FakeModel;
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use herald_fakes::slack::{FakeSlack, Post};
use herald_fakes::telegram::FakeTelegram;

use super::discord::discord_section;
use super::process::GatewayProcess;
use super::slack::slack_section;
use super::telegram_section;
use crate::common::World;

/// Seeds of each test; each drives its own run (latency, pacing, kill points).
const SEEDS: [u64; 2] = [0x5eed_0001, 0x5eed_0002];
/// Chats of a platform tested alone, and of each platform when the three run at once.
const CHATS_ALONE: usize = 12;
const CHATS_EACH: usize = 6;
/// Messages each chat sends after its first (answered before the kills begin).
const ROUNDS: usize = 12;
/// SIGKILLs per run.
const KILLS: usize = 2;
/// The longest wait for anything the daemon should do.
const PATIENCE: Duration = Duration::from_secs(60);
/// The longest wait, after the last restart, for every answer: a few seconds' work (and
/// Slack's redelivery after 3 s) on a busy machine.
const QUIET: Duration = Duration::from_secs(30);

/// New replies one platform's outbox may have sent and not yet marked delivered at once
/// (`SENDS_IN_FLIGHT` in crates/herald-gateway/src/outbox.rs; README, "Delivery is at least
/// once").
const SENDS_IN_FLIGHT: usize = 32;
/// Replies sent again (after a restart) one platform's outbox may have in flight at once
/// (`RESENDS_IN_FLIGHT` there).
const RESENDS_IN_FLIGHT: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Side {
    Telegram,
    Discord,
    Slack,
}

impl Side {
    /// Replies a kill may send twice: on one platform, and in one chat. Telegram has no
    /// idempotent send, so whatever was in flight (new sends and resends both) may go twice,
    /// and a chat has one reply in flight at a time. Discord enforces the reply's `nonce`, and
    /// Slack's adapter looks for the reply's mark before sending it again (herald_core's
    /// `Tracking`), so neither posts a reply twice.
    fn doubles_per_kill(self) -> (usize, usize) {
        match self {
            Side::Telegram => (SENDS_IN_FLIGHT + RESENDS_IN_FLIGHT, 1),
            Side::Discord | Side::Slack => (0, 0),
        }
    }
}

/// One conversation: the DM of user number `n` on `side`.
#[derive(Clone, Copy, Debug)]
struct Chat {
    side: Side,
    n: usize,
}

impl Chat {
    fn telegram_user(self) -> i64 {
        7001 + self.n as i64
    }

    fn discord_user(self) -> u64 {
        3101 + self.n as u64
    }

    fn slack_user(self) -> String {
        format!("U7{:03}", self.n)
    }

    fn name(self) -> String {
        match self.side {
            Side::Telegram => format!("telegram {}", self.telegram_user()),
            Side::Discord => format!("discord {}", self.discord_user()),
            Side::Slack => format!("slack {}", self.slack_user()),
        }
    }

    /// Message `m` of this chat: unique, so that each answer names its question.
    fn text(self, m: usize) -> String {
        format!("{} n{m}", self.name())
    }

    /// What the fake model answers to message `m`.
    fn answer(self, m: usize) -> String {
        format!("echo: {}", self.text(m))
    }
}

/// splitmix64: a seeded generator, so that a run's choices come back with its seed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `low..=high`.
    fn between(&mut self, low: u64, high: u64) -> u64 {
        low + self.next() % (high - low + 1)
    }

    fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.between(low, high))
    }

    fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.between(0, i as u64) as usize;
            items.swap(i, j);
        }
    }
}

/// The people writing to the bot: the platform fakes and their chats. Cloned into the task
/// that keeps sending while the daemon is killed and started again.
#[derive(Clone)]
struct People {
    telegram: Option<FakeTelegram>,
    discord: Option<FakeDiscord>,
    slack: Option<FakeSlack>,
    chats: Vec<Chat>,
    /// Each Slack message's event ids, and which chat and message it is.
    slack_events: Arc<Mutex<HashMap<String, (usize, usize)>>>,
}

impl People {
    /// Sends message `m` of chat number `c` as its user would.
    fn send(&self, c: usize, m: usize) {
        let chat = self.chats[c];
        let text = chat.text(m);
        match chat.side {
            Side::Telegram => {
                self.telegram.as_ref().unwrap().dm(chat.telegram_user(), &text);
            }
            Side::Discord => {
                let message = InboundMessage::dm(chat.discord_user(), &text);
                self.discord.as_ref().unwrap().inject_message(message);
            }
            Side::Slack => {
                let post = Post::dm(&chat.slack_user(), &text);
                let injected = self.slack.as_ref().unwrap().inject(post);
                let mut events = self.slack_events.lock().unwrap();
                events.extend(injected.event_ids.into_iter().map(|id| (id, (c, m))));
            }
        }
    }

    /// Message `m` of every chat, in a seeded order.
    fn send_round(&self, m: usize, rng: &mut Rng) {
        let mut chats: Vec<usize> = (0..self.chats.len()).collect();
        rng.shuffle(&mut chats);
        for c in chats {
            self.send(c, m);
        }
    }

    /// The messages (chat number, message) herald took in only when Slack sent their event
    /// again: the first envelope went to a killed process, so they come in after later
    /// messages and are answered after them.
    fn slack_late(&self) -> HashSet<(usize, usize)> {
        let Some(slack) = &self.slack else { return HashSet::new() };
        let deliveries = slack.deliveries();
        let first_taken =
            |event: &str| deliveries.iter().find(|d| d.event_id == event && d.acked_ms.is_some());
        let events = self.slack_events.lock().unwrap();
        events
            .iter()
            .filter(|(event, _)| first_taken(event).is_some_and(|d| d.retry_attempt > 0))
            .map(|(_, message)| *message)
            .collect()
    }

    /// What each chat was sent by the bot, in order, in the order of `self.chats`.
    fn answers(&self) -> Vec<Vec<String>> {
        let telegram = self.telegram.as_ref().map(FakeTelegram::sent).unwrap_or_default();
        let discord = self.discord.as_ref().map(FakeDiscord::sent).unwrap_or_default();
        let slack = self.slack.as_ref().map(FakeSlack::posted).unwrap_or_default();
        let answers = |chat: &Chat| -> Vec<String> {
            match chat.side {
                Side::Telegram => {
                    let user = chat.telegram_user();
                    telegram.iter().filter(|m| m.chat_id == user).map(|m| m.text.clone()).collect()
                }
                Side::Discord => {
                    let channel = FakeDiscord::dm_channel(chat.discord_user());
                    let own = discord.iter().filter(|m| m.channel_id == channel);
                    own.map(|m| m.content.clone()).collect()
                }
                Side::Slack => {
                    let channel = FakeSlack::dm_channel(&chat.slack_user());
                    slack.iter().filter(|p| p.channel == channel).map(|p| p.text.clone()).collect()
                }
            }
        };
        self.chats.iter().map(answers).collect()
    }

    /// How many replies the bot sent, on every platform.
    fn reply_count(&self) -> usize {
        self.telegram.as_ref().map_or(0, |t| t.sent().len())
            + self.discord.as_ref().map_or(0, |d| d.sent().len())
            + self.slack.as_ref().map_or(0, |s| s.posted().len())
    }

    /// Whether every chat got an answer to each of its messages `0..messages`.
    fn all_answered(&self, messages: usize) -> bool {
        self.chats.iter().zip(self.answers()).all(|(chat, got)| {
            (0..messages).all(|m| got.iter().any(|text| *text == chat.answer(m)))
        })
    }

    /// Whether Slack got an acknowledgement for every event it sent (so none comes again).
    fn slack_acknowledged(&self) -> bool {
        self.slack.as_ref().is_none_or(|slack| {
            let deliveries = slack.deliveries();
            let acked: HashSet<&str> = deliveries
                .iter()
                .filter(|d| d.acked_ms.is_some())
                .map(|d| d.event_id.as_str())
                .collect();
            deliveries.iter().all(|d| acked.contains(d.event_id.as_str()))
        })
    }
}

/// A gateway child process with the fakes of `sides` and the fake model.
struct KillDaemon {
    world: World,
    people: People,
    model: FakeModel,
    process: GatewayProcess,
    seed: u64,
}

impl KillDaemon {
    /// Fakes for `sides`, `chats` users allowed on each, and a gateway connected to them all.
    async fn start(sides: &[Side], chats: usize, seed: u64) -> KillDaemon {
        let model = FakeModel::start().await;
        let mut config = format!(
            "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\nrequest_timeout_s = 5\n\
             [gateway]\ndrain_timeout_s = 10\n",
            model.base_url(),
        );
        let all: Vec<Chat> =
            sides.iter().flat_map(|&side| (0..chats).map(move |n| Chat { side, n })).collect();
        let of = |side: Side| all.iter().copied().filter(move |c| c.side == side);
        let (mut telegram, mut discord, mut slack) = (None, None, None);
        if sides.contains(&Side::Telegram) {
            let fake = FakeTelegram::start().await;
            let users: Vec<i64> = of(Side::Telegram).map(Chat::telegram_user).collect();
            config.push_str(&telegram_section(&fake, &users));
            telegram = Some(fake);
        }
        if sides.contains(&Side::Discord) {
            let fake = FakeDiscord::start().await;
            let users: Vec<u64> = of(Side::Discord).map(Chat::discord_user).collect();
            config.push_str(&discord_section(&fake, &users));
            discord = Some(fake);
        }
        if sides.contains(&Side::Slack) {
            let fake = FakeSlack::start().await;
            let users: Vec<String> = of(Side::Slack).map(Chat::slack_user).collect();
            config.push_str(&slack_section(&fake, &users));
            slack = Some(fake);
        }
        let world = World::with_config(&config);
        let process = GatewayProcess::new(&world, &[]);
        let slack_events = Arc::default();
        let people = People { telegram, discord, slack, chats: all, slack_events };
        let mut d = KillDaemon { world, people, model, process, seed };
        d.spawn().await;
        d
    }

    /// Starts the gateway and waits until it polls Telegram, has a Discord session ready and
    /// Slack's socket open (Discord and Slack send only to a connection that is up).
    async fn spawn(&mut self) {
        let p = &self.people;
        let polls = p.telegram.as_ref().map_or(0, |t| t.get_updates_offsets().len());
        let identified = p.discord.as_ref().map_or(0, |d| d.identifies().len());
        let connected = self.logs().matches("connected to Discord").count();
        let opened = p.slack.as_ref().map_or(0, FakeSlack::connections_opened);
        self.process.launch(&self.world);
        self.until("the gateway never connected to every platform", |d| {
            let p = &d.people;
            p.telegram.as_ref().is_none_or(|t| t.get_updates_offsets().len() > polls)
                && p.discord.as_ref().is_none_or(|fake| {
                    fake.identifies().len() > identified
                        && d.logs().matches("connected to Discord").count() > connected
                })
                && p.slack
                    .as_ref()
                    .is_none_or(|s| s.connections_opened() > opened && s.open_connections() > 0)
        })
        .await;
    }

    /// SIGKILL, and waits until the process is gone.
    async fn kill(&mut self) {
        self.process.signal("KILL");
        self.process.stop(PATIENCE).await;
    }

    /// Waits until `done` holds; fails with `what`, the seed and the log's tail after
    /// [`PATIENCE`] or when the gateway exited.
    async fn until(&mut self, what: &str, done: impl Fn(&KillDaemon) -> bool) {
        let started = Instant::now();
        while !done(self) {
            let what = format!("seed {:#x}: {what}", self.seed);
            assert!(started.elapsed() < PATIENCE, "{what}\n{}", self.log_tail());
            if let Some(status) = self.process.exited() {
                panic!("{what}: the gateway exited with {status}\n{}", self.log_tail());
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }

    /// The last lines of the gateway's log, across its runs.
    fn log_tail(&self) -> String {
        let logs = self.logs();
        let lines: Vec<&str> = logs.lines().collect();
        // Long lines (serenity logs whole events) cut, so that the tail stays readable.
        let cut = |line: &&str| match line.char_indices().nth(300) {
            Some((at, _)) => format!("{} …", &line[..at]),
            None => (*line).to_owned(),
        };
        let tail: Vec<String> = lines[lines.len().saturating_sub(80)..].iter().map(cut).collect();
        let tail = tail.join("\n");
        format!("--- the gateway's log, last {} lines ---\n{tail}", lines.len().min(80))
    }

    fn logs(&self) -> String {
        self.process.logs()
    }
}

/// What one chat got, against what it sent.
struct Verdict {
    /// Messages never answered.
    lost: Vec<usize>,
    /// Answers to no message of this chat.
    strange: Vec<String>,
    /// Answers sent more than once, and how often.
    twice: Vec<(String, usize)>,
    /// Whether each answer first appeared after the previous message's.
    in_order: bool,
}

impl Verdict {
    /// `late` are the messages herald took in after later ones (see
    /// [`People::slack_late`]): their place in the order is not checked.
    fn of(chat: Chat, messages: usize, got: &[String], late: &HashSet<usize>) -> Verdict {
        let expected: Vec<String> = (0..messages).map(|m| chat.answer(m)).collect();
        let mut times: HashMap<&str, usize> = HashMap::new();
        for text in got {
            *times.entry(text.as_str()).or_default() += 1;
        }
        // The order is checked among the answered messages (the lost are told apart).
        let in_place: Vec<&String> = expected
            .iter()
            .enumerate()
            .filter(|(m, e)| !late.contains(m) && times.contains_key(e.as_str()))
            .map(|(_, e)| e)
            .collect();
        let mut seen = HashSet::new();
        let firsts = got.iter().filter(|t| seen.insert(t.as_str()) && in_place.contains(t));
        Verdict {
            lost: (0..messages).filter(|&m| !times.contains_key(expected[m].as_str())).collect(),
            strange: got.iter().filter(|t| !expected.contains(t)).cloned().collect(),
            twice: times
                .iter()
                .filter(|(_, n)| **n > 1)
                .map(|(text, n)| ((*text).to_owned(), *n))
                .collect(),
            in_order: firsts.zip(&in_place).all(|(a, b)| a == *b),
        }
    }

    /// Replies sent more than once, counted beyond the first.
    fn doubles(&self) -> usize {
        self.twice.iter().map(|(_, n)| n - 1).sum()
    }
}

/// One run: the first message of every chat answered, then [`ROUNDS`] more rounds of messages
/// sent at a seeded pace, faster than the model answers, by a task that goes on through the
/// kills, the downtime and the restarts; meanwhile [`KILLS`] SIGKILLs, each after a seeded
/// number of model requests and a seeded pause, and a seeded downtime. Then every message is
/// answered, in order, once but for the bound.
async fn kill_run(sides: &[Side], chats: usize, seed: u64) {
    let mut rng = Rng(seed);
    let mut d = KillDaemon::start(sides, chats, seed).await;
    // Between 0.2 and 0.3 s a turn: messages queue behind the running turns.
    let latency = rng.millis(200, 300);
    d.model.set_latency(latency);
    // A first message from each chat answered: each channel is known before the kills (Discord
    // backfills only channels it handled).
    d.people.send_round(0, &mut rng);
    d.until("the first messages were never answered", |d| d.people.all_answered(1)).await;

    let people = d.people.clone();
    let mut pace = Rng(rng.next());
    let sender = tokio::spawn(async move {
        for m in 1..=ROUNDS {
            people.send_round(m, &mut pace);
            tokio::time::sleep(pace.millis(80, 250)).await;
        }
    });
    let mut plan = format!("seed {seed:#x}: {sides:?}, {chats} chats each, latency {latency:?}");
    let chats = d.people.chats.len() as u64;
    for _ in 0..KILLS {
        // Killed while turns run and others wait behind them: some time into a turn, or just
        // as a reply landed, while the replies written with it are on their way out (the
        // window in which a reply may go twice).
        if rng.between(0, 1) == 0 {
            let requests = d.model.request_count() + rng.between(1, chats) as usize;
            d.until("the model was never asked", |d| d.model.request_count() >= requests).await;
            let pause = rng.millis(0, 250);
            tokio::time::sleep(pause).await;
            let _ = write!(plan, "; killed {pause:?} after model request {requests}");
        } else {
            let replies = d.people.reply_count() + rng.between(1, chats) as usize;
            let started = Instant::now();
            while d.people.reply_count() < replies {
                assert!(
                    started.elapsed() < PATIENCE,
                    "seed {seed:#x}: no replies\n{}",
                    d.log_tail()
                );
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            let _ = write!(plan, "; killed at reply {replies}");
        }
        d.kill().await;
        let down = rng.millis(50, 400);
        tokio::time::sleep(down).await;
        let _ = write!(plan, ", down {down:?}");
        d.spawn().await;
    }
    sender.await.unwrap();
    eprintln!("{plan}");

    let messages = ROUNDS + 1;
    let started = Instant::now();
    while !(d.people.all_answered(messages) && d.people.slack_acknowledged())
        && started.elapsed() < QUIET
    {
        if let Some(status) = d.process.exited() {
            panic!("{plan}: the gateway exited with {status}\n{}", d.log_tail());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Anything sent twice goes right after the restart, before the answers waited for above.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let answers = d.people.answers();
    let mut problems = String::new();
    let late = d.people.slack_late();
    let mut doubles: HashMap<Side, usize> = HashMap::new();
    for (c, (chat, got)) in d.people.chats.iter().zip(&answers).enumerate() {
        let late: HashSet<usize> =
            late.iter().filter(|(of, _)| *of == c).map(|(_, m)| *m).collect();
        let verdict = Verdict::of(*chat, messages, got, &late);
        let (_, per_chat) = chat.side.doubles_per_kill();
        *doubles.entry(chat.side).or_default() += verdict.doubles();
        let mut mine = String::new();
        if !verdict.lost.is_empty() {
            let _ = writeln!(mine, "messages {:?} never answered;", verdict.lost);
        }
        if !verdict.strange.is_empty() {
            let _ = writeln!(mine, "answers not its own: {:?};", verdict.strange);
        }
        if verdict.doubles() > per_chat * KILLS {
            let _ = writeln!(mine, "sent more than once: {:?};", verdict.twice);
        }
        if !verdict.in_order {
            let _ = writeln!(mine, "answered out of order;");
        }
        if !mine.is_empty() {
            let _ = writeln!(problems, "{}: {mine}    got: {got:?}", chat.name());
            if !late.is_empty() {
                let _ = writeln!(problems, "    (Slack sent messages {late:?} again: any order)");
            }
        }
    }
    for (side, twice) in &doubles {
        let (per_platform, _) = side.doubles_per_kill();
        eprintln!("{plan}: {side:?} sent {twice} replies twice");
        if *twice > per_platform * KILLS {
            let allowed = per_platform * KILLS;
            let _ = writeln!(problems, "{side:?}: {twice} replies sent twice, {allowed} allowed");
        }
    }
    if !problems.is_empty() && started.elapsed() >= QUIET {
        let _ = writeln!(problems, "(not all answered after {QUIET:?})");
    }
    assert!(problems.is_empty(), "{plan}\n{problems}{}", d.log_tail());
    assert_eq!(d.process.stop(PATIENCE).await, 0, "{plan}\n{}", d.log_tail());
}

/// The seeds to run: [`SEEDS`], or the one `HERALD_KILL_SEED` names.
fn seeds() -> Vec<u64> {
    match std::env::var("HERALD_KILL_SEED") {
        Ok(seed) => {
            let seed = seed.trim_start_matches("0x");
            vec![u64::from_str_radix(seed, 16).expect("HERALD_KILL_SEED in hex")]
        }
        Err(_) => SEEDS.to_vec(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_telegram_answers_every_message_once_in_order() {
    for seed in seeds() {
        kill_run(&[Side::Telegram], CHATS_ALONE, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_discord_answers_every_message_once_in_order() {
    for seed in seeds() {
        kill_run(&[Side::Discord], CHATS_ALONE, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_slack_answers_every_message_once_in_order() {
    for seed in seeds() {
        kill_run(&[Side::Slack], CHATS_ALONE, seed).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kill_all_three_at_once_answers_every_message_once_in_order() {
    for seed in seeds() {
        kill_run(&[Side::Telegram, Side::Discord, Side::Slack], CHATS_EACH, seed).await;
    }
}

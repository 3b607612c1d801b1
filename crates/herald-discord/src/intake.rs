//! Messages and slash commands on their way in: each offered once (live, replayed on a resume,
//! or fetched after a gap), turned into an [`Inbound`] in the order Discord dispatched it, and
//! its channel's cursor moved once the gateway settled it and every older one.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use herald_core::{Ack, AdapterEvent, ChatRef, Inbound, Platform, UserRef};
use serenity::all::{
    Cache, Channel, ChannelId, ChannelType, CommandInteraction, Http, Message, MessageType, RoleId,
    UserId,
};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::DiscordSettings;
use crate::error::classify;
use crate::shards::shard_of;
use crate::slash::PendingCommand;

/// How many recent ids are remembered to drop a second copy of an event.
const SEEN: usize = 65_536;
/// How long after a message was not kept its channel is fetched again.
const REFETCH_AFTER: Duration = Duration::from_secs(5);

/// Something Discord dispatched (or that was fetched) for the bot to read.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// Heard live.
    Message(Box<Message>),
    /// Fetched over REST after a gap: older than what was heard live meanwhile.
    Fetched(Box<Message>),
    Interaction(Box<CommandInteraction>),
    /// What a fetch after `shard`'s gap found in `channel` was all offered before this.
    GapFilled {
        channel: u64,
        shard: u32,
    },
}

impl Incoming {
    /// The id second copies share; `None` for what is never a copy.
    fn id(&self) -> Option<u64> {
        match self {
            Incoming::Message(message) | Incoming::Fetched(message) => Some(message.id.get()),
            Incoming::Interaction(interaction) => Some(interaction.id.get()),
            Incoming::GapFilled { .. } => None,
        }
    }
}

/// The bot, as READY described it.
#[derive(Debug, Clone)]
pub(crate) struct Bot {
    pub(crate) id: UserId,
    pub(crate) name: String,
}

/// What a channel is, for the session key of its messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// A server text channel (or anything that is not a thread).
    Channel,
    /// A thread or forum post, inside `parent`.
    Thread { parent: u64 },
}

/// How far one channel's messages were settled.
#[derive(Debug, Default)]
struct Progress {
    /// Offered and not yet settled (`false`) or settled (`true`), by id.
    open: BTreeMap<u64, bool>,
    /// The shards whose gap before everything in `open` is not fetched yet. Messages heard
    /// live meanwhile are newer than the gap: the cursor waits, or a fetch after it would
    /// start past the gap.
    gaps: BTreeSet<u32>,
}

impl Progress {
    /// Marks `id` settled; the new cursor when it and everything older is.
    fn settle(&mut self, id: u64) -> Option<u64> {
        if let Some(done) = self.open.get_mut(&id) {
            *done = true;
        }
        self.advance()
    }

    /// The gap `shard` left was fetched (and what it held offered); the new cursor, if any.
    fn gap_filled(&mut self, shard: u32) -> Option<u64> {
        self.gaps.remove(&shard);
        self.advance()
    }

    /// Takes the settled messages off the front; the newest of them, unless a gap is open.
    fn advance(&mut self) -> Option<u64> {
        if !self.gaps.is_empty() {
            return None;
        }
        let mut cursor = None;
        while let Some(entry) = self.open.first_entry() {
            if !*entry.get() {
                break;
            }
            cursor = Some(entry.remove_entry().0);
        }
        cursor
    }
}

/// Recent ids, to drop second copies.
#[derive(Debug, Default)]
struct Seen {
    ids: HashSet<u64>,
    order: VecDeque<u64>,
}

impl Seen {
    /// Whether `id` is new (and remembers it).
    fn first(&mut self, id: u64) -> bool {
        if !self.ids.insert(id) {
            return false;
        }
        self.order.push_back(id);
        if self.order.len() > SEEN
            && let Some(old) = self.order.pop_front()
        {
            self.ids.remove(&old);
        }
        true
    }

    fn forget(&mut self, id: u64) {
        self.ids.remove(&id);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The adapter's state, shared by the event handler, the intake task and the senders.
#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) settings: DiscordSettings,
    pub(crate) http: Arc<Http>,
    pub(crate) events: mpsc::Sender<AdapterEvent>,
    pub(crate) bot: RwLock<Option<Bot>>,
    /// Each connected shard's cache (of its servers), by shard id.
    pub(crate) caches: Mutex<BTreeMap<u32, Arc<Cache>>>,
    /// The server of every channel seen (`None`: a DM), to tell which shard's it is.
    pub(crate) guilds: Mutex<HashMap<u64, Option<u64>>>,
    /// The shards held here: connected (`true`) or not yet or no longer.
    pub(crate) shards_up: Mutex<BTreeMap<u32, bool>>,
    /// Whether the slash commands are being (or were) registered by this process.
    pub(crate) registering: AtomicBool,
    pub(crate) places: Mutex<HashMap<u64, Place>>,
    pub(crate) commands: Mutex<HashMap<String, PendingCommand>>,
    /// What a thread opened on a message is named after: the message's text.
    pub(crate) thread_names: Mutex<HashMap<u64, String>>,
    /// The saved values (the registered command set).
    pub(crate) kept: Mutex<BTreeMap<String, String>>,
    funnel: mpsc::UnboundedSender<Incoming>,
    seen: Mutex<Seen>,
    progress: Mutex<HashMap<u64, Progress>>,
    /// Messages heard live in a channel whose gap is still being fetched, in the order heard:
    /// offered once the fetch was, so that a chat's messages are answered in the order written.
    held: Mutex<HashMap<u64, Vec<Message>>>,
    /// The newest settled message of every channel known, where a fetch after a gap starts.
    pub(crate) cursors: Mutex<BTreeMap<u64, u64>>,
    pub(crate) shutdown: CancellationToken,
}

impl Inner {
    /// The shared state, and the receiving end of the intake queue.
    pub(crate) fn new(
        settings: DiscordSettings,
        http: Arc<Http>,
        events: mpsc::Sender<AdapterEvent>,
        channel_cursors: &BTreeMap<String, String>,
        kept: BTreeMap<String, String>,
        shutdown: CancellationToken,
    ) -> (Arc<Inner>, mpsc::UnboundedReceiver<Incoming>) {
        let (funnel, queue) = mpsc::unbounded_channel();
        let cursors = channel_cursors
            .iter()
            .filter_map(|(channel, cursor)| Some((channel.parse().ok()?, cursor.parse().ok()?)))
            .collect();
        let inner = Inner {
            settings,
            http,
            events,
            bot: RwLock::new(None),
            caches: Mutex::default(),
            guilds: Mutex::default(),
            shards_up: Mutex::default(),
            registering: AtomicBool::new(false),
            places: Mutex::default(),
            commands: Mutex::default(),
            thread_names: Mutex::default(),
            kept: Mutex::new(kept),
            funnel,
            seen: Mutex::default(),
            progress: Mutex::default(),
            held: Mutex::default(),
            cursors: Mutex::new(cursors),
            shutdown,
        };
        (Arc::new(inner), queue)
    }

    /// Moves each channel's position to the saved one where that is further on, and learns
    /// the channels only the saved positions know.
    pub(crate) fn catch_up(&self, saved: BTreeMap<String, String>) {
        let mut cursors = lock(&self.cursors);
        for (channel, cursor) in saved {
            let (Ok(channel), Ok(cursor)) = (channel.parse::<u64>(), cursor.parse::<u64>()) else {
                continue;
            };
            let known = cursors.entry(channel).or_insert(cursor);
            *known = (*known).max(cursor);
        }
    }

    pub(crate) fn bot(&self) -> Option<Bot> {
        self.bot.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Queues an event unless it was seen already. Called in dispatch order from the shard's
    /// collector, and from the (unordered) event handler for what the collector missed.
    pub(crate) fn offer(&self, incoming: Incoming) {
        if incoming.id().is_none_or(|id| lock(&self.seen).first(id)) {
            let _ = self.funnel.send(incoming);
        }
    }

    /// Holds the cursor of every channel known where it is: `shard` starts a session whose
    /// gap is fetched from there (see [`Progress::gaps`]). Called before the session's first
    /// message is read.
    pub(crate) fn gap_opened(&self, shard: u32) {
        let total = self.settings.shards.max(1);
        let channels: Vec<u64> = lock(&self.cursors).keys().copied().collect();
        let guilds = lock(&self.guilds);
        let mut progress = lock(&self.progress);
        for channel in channels {
            // A channel known to be another shard's is not held by this one's gap; one whose
            // server is not known yet is, until the fetch finds out.
            if guilds.get(&channel).is_some_and(|guild| shard_of(*guild, total) != shard) {
                continue;
            }
            progress.entry(channel).or_default().gaps.insert(shard);
        }
    }

    /// `shard` went to another replica before its gap was fetched here: that replica fetches
    /// it from the saved positions. What this one heard live meanwhile was neither offered nor
    /// settled; it is forgotten, so the cursors stay before the gap for the next holder.
    pub(crate) fn gap_abandoned(&self, shard: u32) {
        let mut progress = lock(&self.progress);
        let mut held = lock(&self.held);
        let mut seen = lock(&self.seen);
        for (channel, progress) in progress.iter_mut() {
            if progress.gaps.remove(&shard) && progress.gaps.is_empty() {
                for message in held.remove(channel).unwrap_or_default() {
                    seen.forget(message.id.get());
                }
            }
        }
    }

    /// Remembers that `thread` is a thread in `parent`.
    pub(crate) fn thread_seen(&self, thread: u64, parent: u64) {
        lock(&self.places).insert(thread, Place::Thread { parent });
    }

    /// Reads the intake queue until it closes; the order of the queue is kept.
    pub(crate) async fn take(self: Arc<Self>, mut queue: mpsc::UnboundedReceiver<Incoming>) {
        while let Some(incoming) = queue.recv().await {
            // Not offered to the gateway and not settled: the next start fetches it again.
            if self.shutdown.is_cancelled() {
                continue;
            }
            match incoming {
                Incoming::Message(message) => {
                    let channel = message.channel_id.get();
                    let gap =
                        lock(&self.progress).get(&channel).is_some_and(|p| !p.gaps.is_empty());
                    match gap {
                        true => lock(&self.held).entry(channel).or_default().push(*message),
                        false => self.message(*message).await,
                    }
                }
                Incoming::Fetched(message) => self.message(*message).await,
                Incoming::Interaction(interaction) => self.slash_command(interaction).await,
                Incoming::GapFilled { channel, shard } => {
                    let (cursor, filled) = {
                        let mut progress = lock(&self.progress);
                        let progress = progress.entry(channel).or_default();
                        (progress.gap_filled(shard), progress.gaps.is_empty())
                    };
                    if filled {
                        let held = lock(&self.held).remove(&channel).unwrap_or_default();
                        for message in held {
                            self.message(message).await;
                        }
                    }
                    if let Some(cursor) = cursor {
                        self.moved(channel, cursor).await;
                    }
                }
            }
        }
    }

    async fn message(self: &Arc<Self>, message: Message) {
        let Some(bot) = self.bot() else { return };
        let ordinary = matches!(message.kind, MessageType::Regular | MessageType::InlineReply);
        // No bot-to-bot loops: other bots, webhooks and the bot's own posts are never read.
        if !ordinary
            || message.author.bot
            || message.webhook_id.is_some()
            || message.author.id == bot.id
        {
            return;
        }
        let channel = message.channel_id.get();
        lock(&self.guilds).insert(channel, message.guild_id.map(|guild| guild.get()));
        let chat = self.chat_of(message.channel_id, message.guild_id.is_some()).await;
        let roles = self.bot_roles(&message);
        let mentioned = message.mentions.iter().any(|user| user.id == bot.id)
            || message.mention_roles.iter().any(|role| roles.contains(role))
            || mention_tokens(bot.id, &roles).iter().any(|token| message.content.contains(token));
        let reply_to_bot =
            message.referenced_message.as_ref().is_some_and(|quoted| quoted.author.id == bot.id);
        let text = strip_mentions(&message.content, bot.id, &roles);
        let id = message.id.get();
        if self.settings.auto_thread && chat.thread.is_none() && message.guild_id.is_some() {
            lock(&self.thread_names).insert(id, thread_name(&text));
        }
        let user = UserRef { id: message.author.id.to_string(), name: Some(message.author.name) };
        let (ack, settled) = Ack::new();
        lock(&self.progress).entry(channel).or_default().open.insert(id, false);
        let inbound =
            Inbound { id: id.to_string(), chat, user, text, mentioned, reply_to_bot, ack };
        // Nothing to read (an attachment alone, a bare mention): settled without the gateway.
        if inbound.text.is_empty() {
            inbound.ack.settle();
        } else if self.events.send(AdapterEvent::Inbound(inbound)).await.is_err() {
            return;
        }
        tokio::spawn(self.clone().settled(channel, id, settled));
    }

    /// Moves the channel's cursor once `id` is settled; a message not kept is fetched again.
    async fn settled(self: Arc<Self>, channel: u64, id: u64, settled: oneshot::Receiver<()>) {
        if settled.await.is_err() {
            lock(&self.seen).forget(id);
            if !self.shutdown.is_cancelled() {
                tokio::time::sleep(REFETCH_AFTER).await;
                self.backfill_channel(channel).await;
            }
            return;
        }
        let Some(cursor) = lock(&self.progress).entry(channel).or_default().settle(id) else {
            return;
        };
        self.moved(channel, cursor).await;
    }

    /// Moves `channel`'s cursor to `cursor` (never back) and reports it.
    async fn moved(&self, channel: u64, cursor: u64) {
        {
            let mut cursors = lock(&self.cursors);
            let known = cursors.entry(channel).or_default();
            if *known >= cursor {
                return;
            }
            *known = cursor;
        }
        let event = AdapterEvent::ChannelCursor {
            channel: channel.to_string(),
            cursor: cursor.to_string(),
        };
        let _ = self.events.send(event).await;
    }

    /// The chat of something written in `channel`: a DM, a server channel, or a thread in one.
    pub(crate) async fn chat_of(&self, channel: ChannelId, in_server: bool) -> ChatRef {
        let id = channel.to_string();
        if !in_server {
            return ChatRef::direct(Platform::Discord, id);
        }
        match self.place(channel).await {
            Place::Thread { parent } => {
                ChatRef::group(Platform::Discord, parent.to_string()).in_thread(id)
            }
            Place::Channel => ChatRef::group(Platform::Discord, id),
        }
    }

    /// What `channel` is: a thread (and its parent) or a channel, asked of Discord once.
    async fn place(&self, channel: ChannelId) -> Place {
        if let Some(place) = lock(&self.places).get(&channel.get()) {
            return *place;
        }
        let place = match self.http.get_channel(channel).await {
            Ok(Channel::Guild(found)) => match (found.kind, found.parent_id) {
                (
                    ChannelType::PublicThread
                    | ChannelType::PrivateThread
                    | ChannelType::NewsThread,
                    Some(parent),
                ) => Place::Thread { parent: parent.get() },
                _ => Place::Channel,
            },
            Ok(_) => Place::Channel,
            Err(e) => {
                let error = classify(&e, &self.settings.token);
                warn!(channel = %channel, error = error.text(), "could not look the channel up; its messages are taken as the channel's, not a thread's");
                return Place::Channel;
            }
        };
        lock(&self.places).insert(channel.get(), place);
        place
    }

    /// The roles Discord manages for this bot in the message's server (mentioning one
    /// addresses the bot).
    fn bot_roles(&self, message: &Message) -> Vec<RoleId> {
        let (Some(guild), Some(bot)) = (message.guild_id, self.bot()) else { return Vec::new() };
        if message.mention_roles.is_empty() && !message.content.contains("<@&") {
            return Vec::new();
        }
        // The server is in the cache of the shard it is on; any shard's will do to find it.
        let caches: Vec<Arc<Cache>> = lock(&self.caches).values().cloned().collect();
        caches
            .iter()
            .find_map(|cache| {
                let guild = cache.guild(guild)?;
                Some(
                    guild
                        .roles
                        .values()
                        .filter(|role| role.tags.bot_id == Some(bot.id))
                        .map(|r| r.id)
                        .collect(),
                )
            })
            .unwrap_or_default()
    }
}

/// The mentions of the bot that may appear in a message's text.
fn mention_tokens(bot: UserId, roles: &[RoleId]) -> Vec<String> {
    let mut tokens = vec![format!("<@{bot}>"), format!("<@!{bot}>")];
    tokens.extend(roles.iter().map(|role| format!("<@&{role}>")));
    tokens
}

/// The text the model sees: the bot's mentions removed, wherever they are, and nothing else
/// changed (line breaks and indentation, in code above all, stay as written).
pub(crate) fn strip_mentions(content: &str, bot: UserId, roles: &[RoleId]) -> String {
    let mut text = content.to_owned();
    for token in mention_tokens(bot, roles) {
        while let Some(at) = text.find(&token) {
            let mut end = at + token.len();
            // "a <@1> b" reads "a b": one space beside the mention goes with it.
            let blank_before = text[..at].chars().next_back().is_none_or(char::is_whitespace);
            if blank_before && text[end..].starts_with(' ') {
                end += 1;
            }
            text.replace_range(at..end, "");
        }
    }
    text.trim().to_owned()
}

/// A thread's name from the message that opened it: its first line, at most 80 characters.
fn thread_name(text: &str) -> String {
    let line = text.lines().next().unwrap_or_default().trim();
    let name: String = line.chars().take(80).collect();
    if name.is_empty() { "conversation".to_owned() } else { name }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mentions_are_removed_wherever_they_are() {
        let bot = UserId::new(42);
        let role = RoleId::new(7);
        assert_eq!(strip_mentions("<@42> hello", bot, &[]), "hello");
        assert_eq!(strip_mentions("hi <@!42>, how are you", bot, &[]), "hi , how are you");
        assert_eq!(strip_mentions("<@&7> привет 你好", bot, &[role]), "привет 你好");
        assert_eq!(strip_mentions("<@43> stays", bot, &[]), "<@43> stays");
        assert_eq!(strip_mentions("<@42>", bot, &[]), "");
        assert_eq!(strip_mentions("a <@42> b", bot, &[]), "a b");
        assert_eq!(
            strip_mentions("<@42> fix this:\n```\nfn main() {\n    go();\n}\n```", bot, &[]),
            "fix this:\n```\nfn main() {\n    go();\n}\n```"
        );
    }

    #[test]
    fn a_channel_cursor_moves_only_past_settled_messages() {
        let mut progress = Progress::default();
        for id in [1, 2, 3] {
            progress.open.insert(id, false);
        }
        assert_eq!(progress.settle(2), None);
        assert_eq!(progress.settle(1), Some(2));
        assert_eq!(progress.settle(3), Some(3));
        assert!(progress.open.is_empty());
    }

    #[test]
    fn a_channel_cursor_waits_for_the_gaps_before_live_messages() {
        let mut progress = Progress::default();
        progress.gaps.extend([0, 1]);
        progress.open.insert(30, false);
        assert_eq!(progress.settle(30), None, "heard live, newer than the gap");
        assert_eq!(progress.gap_filled(0), None, "shard 1's gap is still open");
        // The fetch offered the gap's messages before saying it was done.
        progress.open.insert(12, false);
        assert_eq!(progress.gap_filled(1), None);
        assert_eq!(progress.settle(12), Some(30));
        assert!(progress.open.is_empty());
    }

    #[test]
    fn thread_names_are_a_short_first_line() {
        assert_eq!(thread_name("  how do I deploy?\nmore"), "how do I deploy?");
        assert_eq!(thread_name(""), "conversation");
        assert_eq!(thread_name(&"я".repeat(200)).chars().count(), 80);
    }

    #[test]
    fn seen_ids_are_dropped_until_forgotten() {
        let mut seen = Seen::default();
        assert!(seen.first(5));
        assert!(!seen.first(5));
        seen.forget(5);
        assert!(seen.first(5));
    }
}

//! Events on their way in: each post offered once however many copies of it arrive (its
//! `message` and `app_mention` events, Slack's redeliveries), and every envelope held until
//! the gateway settled the message it carried.
//!
//! The rule for the pair: a post is remembered when it is offered, with whether it was offered
//! as addressed to the bot. A later `message` copy of a remembered post is dropped; a later
//! `app_mention` copy is dropped only if the post was offered as addressed, so a copy that
//! the gateway ignored as not addressed never hides the mention. A channel `message` that
//! carries `<@BOT>` is the mention itself, so whichever copy comes first is the one answered.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use herald_core::{Ack, AdapterEvent, ChatRef, Inbound, Placement, Platform, ReplyStyle, UserRef};
use slack_morphism::events::{SlackEventCallbackBody, SlackPushEventCallback};
use slack_morphism::prelude::ValueStruct;
use tokio::sync::{mpsc, watch};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::SlackSettings;

/// How many recent events, posts, threads and chats are remembered.
const REMEMBERED: usize = 65_536;

/// The bot, as `auth.test` described it.
#[derive(Debug, Clone)]
pub(crate) struct Bot {
    /// Its user id, which `<@…>` mentions name.
    pub(crate) user: String,
    /// Its name, for the gateway's status.
    pub(crate) name: String,
    /// Its bot id (`B…`, `bot_id` on its messages), when `auth.test` gave one.
    pub(crate) id: Option<String>,
}

/// Why an envelope is left unacknowledged (Slack delivers it again).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unsettled(pub(crate) String);

/// What became of an offered message: `None` while the gateway has it, then whether it was
/// kept (stored or deliberately ignored) or dropped unsettled.
pub(crate) type Settlement = watch::Receiver<Option<bool>>;

/// A map that forgets its oldest entries past [`REMEMBERED`].
#[derive(Debug)]
struct Recent<K, V> {
    map: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K, V> Default for Recent<K, V> {
    fn default() -> Self {
        Recent { map: HashMap::new(), order: VecDeque::new() }
    }
}

impl<K: Hash + Eq + Clone, V> Recent<K, V> {
    fn get(&self, key: &K) -> Option<&V> {
        self.map.get(key)
    }

    fn insert(&mut self, key: K, value: V) {
        if self.map.insert(key.clone(), value).is_none() {
            self.order.push_back(key);
            while self.order.len() > REMEMBERED {
                if let Some(old) = self.order.pop_front() {
                    self.map.remove(&old);
                }
            }
        }
    }

    fn remove(&mut self, key: &K) -> Option<V> {
        // The key stays in `order` until it ages out; removing it there would cost a scan.
        self.map.remove(key)
    }
}

/// A post: its channel and `ts`.
type PostKey = (String, String);

#[derive(Debug, Default)]
struct Memory {
    /// Events offered, by event id: a redelivery waits for the first offer's settlement.
    events: Recent<String, Settlement>,
    /// Posts offered, with whether they were offered as addressed.
    posts: Recent<PostKey, bool>,
    /// Threads the bot answered in, by channel and thread `ts`.
    threads: Recent<PostKey, ()>,
    /// The newest message offered in each chat: where a working reaction goes.
    newest: Recent<ChatRef, PostKey>,
    /// Chats showing a working reaction now, and the message it is on.
    working: HashMap<ChatRef, PostKey>,
    /// The messages a working reaction was put on (an answer within a second gets none).
    shown: HashSet<PostKey>,
}

/// Which event of a post this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Message,
    Mention,
}

/// What becomes of one event.
#[derive(Debug)]
enum Decision {
    /// Nothing to offer: acknowledged at once.
    Done,
    /// A redelivery: acknowledged once the first offer is settled.
    Wait(Settlement),
    /// A new post: offered, and acknowledged once settled.
    Offer(Box<Inbound>, Settlement),
}

/// A user's post, read from an event.
#[derive(Debug)]
struct Post {
    copy: Kind,
    channel: String,
    /// `im` for a DM; `None` for `app_mention`, which Slack sends for conversations only.
    channel_type: Option<String>,
    ts: String,
    thread_ts: Option<String>,
    user: String,
    text: String,
}

/// The adapter's state for events: shared by the Socket Mode callbacks and the senders.
#[derive(Debug)]
pub(crate) struct Intake {
    pub(crate) bot: Bot,
    style: ReplyStyle,
    thread_follow_ups: bool,
    ack_wait: Duration,
    pub(crate) events: mpsc::Sender<AdapterEvent>,
    pub(crate) shutdown: CancellationToken,
    memory: Mutex<Memory>,
}

impl Intake {
    pub(crate) fn new(
        settings: &SlackSettings,
        bot: Bot,
        events: mpsc::Sender<AdapterEvent>,
        shutdown: CancellationToken,
    ) -> Intake {
        let style = if settings.reply_in_thread { ReplyStyle::Thread } else { ReplyStyle::Quote };
        Intake {
            bot,
            style,
            thread_follow_ups: settings.thread_follow_ups,
            ack_wait: settings.ack_wait,
            events,
            shutdown,
            memory: Mutex::default(),
        }
    }

    fn memory(&self) -> MutexGuard<'_, Memory> {
        self.memory.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Handles one event; `Ok` acknowledges its envelope, `Err` leaves it to Slack's redelivery.
    #[cfg(test)]
    pub(crate) async fn handle(
        self: &std::sync::Arc<Self>,
        callback: SlackPushEventCallback,
    ) -> Result<(), Unsettled> {
        match self.offer(callback).await? {
            None => Ok(()),
            Some(settlement) => self.wait(settlement).await,
        }
    }

    /// Offers one event to the gateway: `None` when its envelope may be acknowledged at once,
    /// or what to wait for ([`Intake::wait`]) before it is; `Err` leaves it to Slack's
    /// redelivery. Offered in the order the events come; the waits may overlap.
    pub(crate) async fn offer(
        self: &std::sync::Arc<Self>,
        callback: SlackPushEventCallback,
    ) -> Result<Option<Settlement>, Unsettled> {
        if self.shutdown.is_cancelled() {
            return Err(Unsettled("the adapter is stopping; the next start takes it".into()));
        }
        match self.decide(callback) {
            Decision::Done => Ok(None),
            Decision::Wait(settlement) => Ok(Some(settlement)),
            Decision::Offer(inbound, settlement) => {
                if self.events.send(AdapterEvent::Inbound(*inbound)).await.is_err() {
                    return Err(Unsettled("the gateway is gone".into()));
                }
                Ok(Some(settlement))
            }
        }
    }

    /// What to do with an event, decided under one lock so that two copies of a post never
    /// both pass.
    fn decide(self: &std::sync::Arc<Self>, callback: SlackPushEventCallback) -> Decision {
        let event_id = callback.event_id.value().clone();
        let mut memory = self.memory();
        if let Some(settlement) = memory.events.get(&event_id).cloned() {
            debug!(event = %event_id, "a redelivered event waits for its first offer");
            return Decision::Wait(settlement);
        }
        let Some(post) = self.read(callback.event) else { return Decision::Done };
        let key = (post.channel.clone(), post.ts.clone());
        match (memory.posts.get(&key), post.copy) {
            (Some(_), Kind::Message) | (Some(true), Kind::Mention) => {
                debug!(event = %event_id, "the post's other copy was offered already");
                return Decision::Done;
            }
            _ => {}
        }
        let (inbound, settled) = self.inbound(post, &memory);
        memory.posts.insert(key.clone(), inbound.addressed());
        if inbound.text.is_empty() {
            // A bare mention: nothing to read, and nothing to answer.
            return Decision::Done;
        }
        memory.newest.insert(inbound.chat.clone(), key.clone());
        let (publish, settlement) = watch::channel(None);
        memory.events.insert(event_id.clone(), settlement.clone());
        tokio::spawn(self.clone().watch_settlement(event_id, key, settled, publish));
        Decision::Offer(Box::new(inbound), settlement)
    }

    /// Publishes what became of an offer; a message dropped unsettled is forgotten, so that
    /// Slack's redelivery of it is offered again.
    async fn watch_settlement(
        self: std::sync::Arc<Self>,
        event_id: String,
        key: PostKey,
        settled: tokio::sync::oneshot::Receiver<()>,
        publish: watch::Sender<Option<bool>>,
    ) {
        let kept = settled.await.is_ok();
        if !kept {
            let mut memory = self.memory();
            memory.events.remove(&event_id);
            memory.posts.remove(&key);
        }
        publish.send_replace(Some(kept));
    }

    /// Waits at most `ack_wait` for `settlement`: `Ok` acknowledges the envelope.
    pub(crate) async fn wait(&self, mut settlement: Settlement) -> Result<(), Unsettled> {
        let settled = tokio::time::timeout(self.ack_wait, settlement.wait_for(Option::is_some))
            .await
            .map(|seen| seen.map(|value| *value));
        match settled {
            Ok(Ok(Some(true))) => Ok(()),
            Ok(_) => Err(Unsettled("the message was not kept; Slack delivers it again".into())),
            Err(_) => Err(Unsettled(format!(
                "the message was not settled within {} ms; Slack delivers it again",
                self.ack_wait.as_millis()
            ))),
        }
    }

    /// The user's post an event carries; `None` for everything herald does not read: other
    /// bots, the bot itself, edits, deletions, joins and every other subtype.
    fn read(&self, event: SlackEventCallbackBody) -> Option<Post> {
        match event {
            SlackEventCallbackBody::Message(message) => {
                let user = message.sender.user?.value().clone();
                if message.subtype.is_some()
                    || message.sender.bot_id.is_some()
                    || message.hidden == Some(true)
                    || user == self.bot.user
                {
                    return None;
                }
                let origin = message.origin;
                Some(Post {
                    copy: Kind::Message,
                    channel: origin.channel?.value().clone(),
                    channel_type: origin.channel_type.map(|t| t.0),
                    ts: origin.ts.value().clone(),
                    thread_ts: origin.thread_ts.map(|t| t.value().clone()),
                    user,
                    text: message.content.and_then(|c| c.text).unwrap_or_default(),
                })
            }
            SlackEventCallbackBody::AppMention(mention) => {
                let user = mention.user.value().clone();
                // An edit that adds a mention is not a new message.
                if mention.edited.is_some() || user == self.bot.user {
                    return None;
                }
                Some(Post {
                    copy: Kind::Mention,
                    channel: mention.channel.value().clone(),
                    channel_type: None,
                    ts: mention.origin.ts.value().clone(),
                    thread_ts: mention.origin.thread_ts.map(|t| t.value().clone()),
                    user,
                    text: mention.content.text.unwrap_or_default(),
                })
            }
            _ => None,
        }
    }

    /// The gateway's message for `post`, and the receiver its settlement resolves.
    fn inbound(
        &self,
        post: Post,
        memory: &Memory,
    ) -> (Inbound, tokio::sync::oneshot::Receiver<()>) {
        let direct = match &post.channel_type {
            Some(kind) => kind == "im",
            None => post.copy == Kind::Message && post.channel.starts_with('D'),
        };
        let thread = post.thread_ts.clone().filter(|thread| *thread != post.ts);
        let chat = if direct {
            ChatRef::direct(Platform::Slack, &post.channel)
        } else {
            ChatRef::group(Platform::Slack, &post.channel)
        };
        let chat = match &thread {
            Some(thread) => chat.in_thread(thread.clone()),
            None if direct => chat,
            // Answered in a thread on the post: that thread is the conversation's already.
            None => Placement::of(&chat, &post.ts, self.style).follow_ups(&chat),
        };
        let followed = thread.as_ref().is_some_and(|thread| {
            self.thread_follow_ups
                && memory.threads.get(&(post.channel.clone(), thread.clone())).is_some()
        });
        let mentioned = post.copy == Kind::Mention || mentions(&post.text, &self.bot.user);
        let (ack, settled) = Ack::new();
        let inbound = Inbound {
            id: format!("{}:{}", post.channel, post.ts),
            chat,
            user: UserRef::new(post.user),
            text: strip_mentions(&post.text, &self.bot.user),
            mentioned: mentioned || followed,
            reply_to_bot: false,
            ack,
        };
        (inbound, settled)
    }

    /// Remembers that the bot answered in `thread` of `channel`.
    pub(crate) fn follow(&self, channel: &str, thread: &str) {
        self.memory().threads.insert((channel.to_owned(), thread.to_owned()), ());
    }

    /// The message to put a working reaction on for `chat`, unless one is there already.
    pub(crate) fn start_working(&self, chat: &ChatRef) -> Option<PostKey> {
        let mut memory = self.memory();
        if memory.working.contains_key(chat) {
            return None;
        }
        let target = memory.newest.get(chat)?.clone();
        memory.working.insert(chat.clone(), target.clone());
        Some(target)
    }

    /// The message whose working reaction should go now that `chat` got its answer.
    pub(crate) fn stop_working(&self, chat: &ChatRef) -> Option<PostKey> {
        self.memory().working.remove(chat)
    }

    /// Whether `chat` still waits for its answer on `target` (and marks the reaction shown).
    pub(crate) fn still_working(&self, chat: &ChatRef, target: &PostKey) -> bool {
        let mut memory = self.memory();
        let waiting = memory.working.get(chat) == Some(target);
        if waiting {
            memory.shown.insert(target.clone());
        }
        waiting
    }

    /// Whether the working reaction went on `target` (and forgets it).
    pub(crate) fn shown(&self, target: &PostKey) -> bool {
        self.memory().shown.remove(target)
    }
}

/// Whether `text` mentions user `bot` (`<@U1>` or `<@U1|name>`).
fn mentions(text: &str, bot: &str) -> bool {
    text.contains(&format!("<@{bot}>")) || text.contains(&format!("<@{bot}|"))
}

/// The text the model reads: the bot's mentions removed, Slack's three escapes undone.
pub(crate) fn strip_mentions(text: &str, bot: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let open = format!("<@{bot}");
    while let Some(at) = rest.find(&open) {
        let after = &rest[at + open.len()..];
        let end = match after.as_bytes().first() {
            Some(b'>') => Some(1),
            Some(b'|') => after.find('>').map(|close| close + 1),
            _ => None,
        };
        let Some(end) = end else {
            out.push_str(&rest[..at + open.len()]);
            rest = after;
            continue;
        };
        out.push_str(&rest[..at]);
        rest = after[end..].strip_prefix(' ').unwrap_or(&after[end..]);
    }
    out.push_str(rest);
    out.trim().replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&")
}

#[cfg(test)]
#[path = "intake_tests.rs"]
mod tests;

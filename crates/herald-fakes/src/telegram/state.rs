//! What the fake Bot API remembers: the update queue, the chats and their messages, the knobs and
//! the record of calls.
//!
//! One `std::sync::Mutex` guards it all and is never held across an `.await`. Waiters (long
//! polls, [`super::FakeTelegram::wait_sent`]) subscribe to a `watch` channel *before* looking at
//! the state, so a change between their look and their wait still wakes them.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Mutex, MutexGuard, PoisonError};

use serde_json::{Value, json};
use tokio::sync::watch;

use super::faults::TelegramFault;
use super::records::{EditedMessage, RecordedRequest, SentMessage};
use super::user::ChatKind;
use super::wire;

/// The first update id; any number would do, as long as ids only grow.
const FIRST_UPDATE: i64 = 10_000;

/// The state shared by the server's handlers and the handles.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    /// Bumped whenever an update is queued, a webhook changes or a webhook post ends.
    pub updates: watch::Sender<u64>,
    /// Bumped whenever the bot sends a message.
    pub sent: watch::Sender<u64>,
    /// Whether the Bot API is unreachable.
    pub offline: watch::Sender<bool>,
}

impl Default for Shared {
    fn default() -> Shared {
        Shared {
            state: Mutex::new(State::default()),
            updates: watch::Sender::new(0),
            sent: watch::Sender::new(0),
            offline: watch::Sender::new(false),
        }
    }
}

impl Shared {
    /// Locks the state; a panic in another holder leaves it consistent, so poison is ignored.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `queue` on the state, then wakes the long polls.
    pub(crate) fn queue<T>(&self, queue: impl FnOnce(&mut State) -> T) -> T {
        let result = queue(&mut self.lock());
        self.updates.send_modify(|n| *n += 1);
        result
    }

    /// Whether the Bot API is unreachable now.
    pub(crate) fn is_offline(&self) -> bool {
        *self.offline.borrow()
    }
}

/// A chat the fake has seen a message in, or sent one to.
#[derive(Debug)]
pub(crate) struct Chat {
    pub json: Value,
    pub kind: ChatKind,
    next_message: i64,
}

/// A message the fake keeps, to reply to and edit.
#[derive(Debug)]
pub(crate) struct Stored {
    pub from_bot: bool,
    pub text: String,
    pub parse_mode: Option<String>,
    pub json: Value,
}

/// An update not confirmed (polling) or not answered 2xx (webhook) yet.
#[derive(Debug)]
pub(crate) struct Queued {
    pub id: i64,
    /// Updates of one lane are posted to a webhook one at a time, in order.
    pub lane: Lane,
    /// The update, serialized once.
    pub text: String,
}

/// What orders webhook posts: the chat, or the update alone when its chat cannot be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Lane {
    Chat(i64),
    Update(i64),
}

/// A webhook set with `setWebhook`.
#[derive(Debug, Clone)]
pub(crate) struct Webhook {
    pub url: String,
    pub secret: Option<String>,
    pub max_connections: usize,
    pub allowed_updates: Option<Vec<serde_json::Value>>,
}

impl Webhook {
    /// A webhook at `url` with no secret and Telegram's defaults, set by a test.
    pub(crate) fn unchecked(url: String) -> Webhook {
        Webhook { url, secret: None, max_connections: 40, allowed_updates: None }
    }
}

/// The queue, the chats, the knobs and the record.
#[derive(Debug)]
pub(crate) struct State {
    next_update: i64,
    /// Unconfirmed updates, by ascending id.
    pub queue: VecDeque<Queued>,
    /// The message of every update ever queued, as JSON text, for redelivery.
    queued: HashMap<i64, String>,
    pub chats: HashMap<i64, Chat>,
    pub messages: HashMap<(i64, i64), Stored>,
    /// The bot's latest message per chat and topic.
    pub last_bot: HashMap<(i64, Option<i64>), i64>,
    pub sent: Vec<SentMessage>,
    pub edits: Vec<EditedMessage>,
    pub actions: Vec<(i64, String)>,
    pub requests: Vec<RecordedRequest>,
    pub offsets: Vec<Option<i64>>,
    pub faults: HashMap<String, VecDeque<TelegramFault>>,
    pub reject_markup: bool,
    pub webhook: Option<Webhook>,
    /// Updates being posted to the webhook now.
    pub in_flight: HashSet<i64>,
    /// Updates whose last post failed: when to try again, and how many posts failed.
    pub retry: HashMap<i64, (tokio::time::Instant, u32)>,
    /// Updates the webhook answered 2xx, in the order it did.
    pub delivered: Vec<i64>,
    /// Every webhook post made: the update and the HTTP status (`None`: no answer).
    pub posts: Vec<(i64, Option<u16>)>,
    /// The last failed post, as `getWebhookInfo` reports it: unix time and description.
    pub webhook_error: Option<(u64, String)>,
    pub commands: Value,
}

impl Default for State {
    fn default() -> State {
        State {
            next_update: FIRST_UPDATE,
            queue: VecDeque::new(),
            queued: HashMap::new(),
            chats: HashMap::new(),
            messages: HashMap::new(),
            last_bot: HashMap::new(),
            sent: Vec::new(),
            edits: Vec::new(),
            actions: Vec::new(),
            requests: Vec::new(),
            offsets: Vec::new(),
            faults: HashMap::new(),
            reject_markup: false,
            webhook: None,
            in_flight: HashSet::new(),
            retry: HashMap::new(),
            delivered: Vec::new(),
            posts: Vec::new(),
            webhook_error: None,
            commands: json!([]),
        }
    }
}

impl State {
    /// Queues a `message` update under a new id; call through [`Shared::queue`].
    pub(crate) fn queue_message(&mut self, message: &Value) -> i64 {
        self.queue_text(message.to_string())
    }

    /// Queues an update whose `message` is this JSON text, written into the update as it is.
    pub(crate) fn queue_text(&mut self, message: String) -> i64 {
        let id = self.next_update;
        self.next_update += 1;
        self.queue.push_back(queued(id, &message));
        self.queued.insert(id, message);
        id
    }

    /// Queues update `id` again, same id and all, as Telegram does when it is not sure the
    /// first copy arrived; `false` if it was never queued. One still queued stays as it is.
    pub(crate) fn repeat(&mut self, id: i64) -> bool {
        let Some(message) = self.queued.get(&id) else {
            return false;
        };
        if self.queue.iter().all(|q| q.id != id) {
            let at = self.queue.iter().position(|q| q.id > id).unwrap_or(self.queue.len());
            self.queue.insert(at, queued(id, message));
        }
        true
    }

    /// The message of update `id` as JSON text, if it was ever queued.
    pub(crate) fn queued_message(&self, id: i64) -> Option<&str> {
        self.queued.get(&id).map(String::as_str)
    }

    /// Forgets the updates `offset` confirms: those below it, or all but the last `-offset`.
    pub(crate) fn confirm(&mut self, offset: Option<i64>) {
        match offset {
            Some(offset) if offset < 0 => {
                let keep = usize::try_from(offset.unsigned_abs()).unwrap_or(usize::MAX);
                let forget = self.queue.len().saturating_sub(keep);
                self.queue.drain(..forget);
            }
            Some(offset) => {
                while self.queue.front().is_some_and(|q| q.id < offset) {
                    self.queue.pop_front();
                }
            }
            None => {}
        }
    }

    /// The first `limit` unconfirmed updates, serialized.
    pub(crate) fn batch(&self, limit: usize) -> Vec<&str> {
        self.queue.iter().take(limit).map(|q| q.text.as_str()).collect()
    }

    /// How many updates are not confirmed yet.
    pub(crate) fn pending(&self) -> usize {
        self.queue.len()
    }

    /// Forgets every unconfirmed update (`deleteWebhook` with `drop_pending_updates`).
    pub(crate) fn drop_pending(&mut self) {
        self.queue.clear();
    }

    /// The chat `id`; one never seen is taken to be private (positive id), a forum (when a
    /// topic is named) or a supergroup, so tests may send anywhere.
    pub(crate) fn chat(&mut self, id: i64, thread: Option<i64>) -> &mut Chat {
        self.chats.entry(id).or_insert_with(|| {
            let kind = match (id > 0, thread) {
                (true, _) => ChatKind::Private,
                (false, Some(_)) => ChatKind::Forum,
                (false, None) => ChatKind::Supergroup,
            };
            Chat { json: wire::chat(id, kind), kind, next_message: 1 }
        })
    }

    /// A new message id in chat `id`.
    pub(crate) fn allocate(&mut self, id: i64) -> i64 {
        let chat = self.chat(id, None);
        let message = chat.next_message;
        chat.next_message += 1;
        message
    }

    /// Makes sure ids in chat `id` go past `message` (a topic's id is its first message's).
    pub(crate) fn reserve(&mut self, id: i64, message: i64) {
        let chat = self.chat(id, None);
        chat.next_message = chat.next_message.max(message + 1);
    }

    /// A kept message as it appears nested in another (without its own `reply_to_message`).
    pub(crate) fn nested(&self, chat: i64, message: i64) -> Option<Value> {
        let mut json = self.messages.get(&(chat, message))?.json.clone();
        if let Value::Object(fields) = &mut json {
            fields.remove("reply_to_message");
        }
        Some(json)
    }

    /// Takes the next fault queued for `method` (lowercase).
    pub(crate) fn take_fault(&mut self, method: &str) -> Option<TelegramFault> {
        self.faults.get_mut(method)?.pop_front()
    }

    /// Forgets what the bot did and called; the updates, chats and knobs stay.
    pub(crate) fn reset_records(&mut self) {
        self.sent.clear();
        self.edits.clear();
        self.actions.clear();
        self.requests.clear();
        self.offsets.clear();
        self.delivered.clear();
        self.posts.clear();
    }
}

/// Update `id` with this `message` text, in the lane of its chat.
fn queued(id: i64, message: &str) -> Queued {
    #[derive(serde::Deserialize)]
    struct Chat {
        id: i64,
    }
    // Values read as raw text, so that a raw message with lone surrogates still finds its chat.
    let fields: Option<HashMap<String, &serde_json::value::RawValue>> =
        serde_json::from_str(message).ok();
    let chat = fields.as_ref().and_then(|f| f.get("chat")).map(|chat| chat.get());
    let lane = chat
        .and_then(|chat| serde_json::from_str::<Chat>(chat).ok())
        .map_or(Lane::Update(id), |chat| Lane::Chat(chat.id));
    Queued { id, lane, text: format!("{{\"update_id\":{id},\"message\":{message}}}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_confirm_what_lies_below_them() {
        let mut state = State::default();
        let ids: Vec<i64> = (0..4).map(|i| state.queue_message(&json!({ "n": i }))).collect();
        assert!(ids.windows(2).all(|w| w[1] == w[0] + 1));
        state.confirm(None);
        assert_eq!(state.pending(), 4);
        state.confirm(Some(ids[1]));
        assert_eq!(state.pending(), 3);
        assert!(state.batch(1)[0].contains(&format!("\"update_id\":{}", ids[1])));
        state.confirm(Some(-1));
        assert_eq!(state.batch(100).len(), 1);
        assert!(state.batch(100)[0].contains(&ids[3].to_string()));
        state.confirm(Some(ids[3] + 1));
        assert_eq!(state.pending(), 0);
        assert_eq!(state.queued_message(ids[0]), Some(r#"{"n":0}"#));
    }
}

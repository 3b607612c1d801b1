//! The router: every inbound message authorized, mapped to its session key and handed to
//! that key's worker; workers spawned on demand and dropped when idle.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use herald_agent::Provider;
use herald_core::{
    AdapterEvent, ChatKind, ChatRef, Inbound, Placement, Platform, SessionKey, UserRef,
};
use herald_store::{QueuedInbound, Session};
use tokio::sync::mpsc;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::auth::{self, Pairing, Verdict};
use crate::commands::Command;
use crate::cursors::{CursorKey, Cursors};
use crate::link::{PlatformState, PlatformStates};
use crate::outbox::Parcel;
use crate::settings::DmPolicy;
use crate::shared::Shared;
use crate::worker::{Idle, Input, start};

/// Inputs a worker may have waiting before the router waits for it.
const WORKER_INBOX: usize = 256;

/// What reaches the router from the adapter tasks.
#[derive(Debug)]
pub(crate) enum Event {
    /// Something the adapter reported.
    Adapter(AdapterEvent),
    /// The adapter returned: `Some(error)` when it failed.
    Stopped(Option<String>),
}

/// A key's task: its session's worker, or what queues the key's messages for the replica
/// holding it.
pub(crate) struct WorkerHandle {
    inbox: mpsc::Sender<Input>,
    sent: u64,
    /// Whether the task runs the session here (holds its lock).
    holds: Arc<AtomicBool>,
}

impl WorkerHandle {
    fn holds(&self) -> bool {
        self.holds.load(Ordering::Acquire)
    }
}

/// The router's state.
pub(crate) struct Router<P> {
    pub(crate) shared: Arc<Shared<P>>,
    pub(crate) workers: HashMap<SessionKey, WorkerHandle>,
    pub(crate) tracker: TaskTracker,
    pub(crate) states: PlatformStates,
    pub(crate) cursors: Cursors,
    idle: mpsc::Sender<Idle>,
    pairing: Pairing,
}

impl<P: Provider + 'static> Router<P> {
    pub(crate) fn new(
        shared: Arc<Shared<P>>,
        states: PlatformStates,
        cursors: Cursors,
        idle: mpsc::Sender<Idle>,
    ) -> Self {
        Router {
            shared,
            workers: HashMap::new(),
            tracker: TaskTracker::new(),
            states,
            cursors,
            idle,
            pairing: Pairing::default(),
        }
    }

    /// Picks up what a previous run left: sessions whose last message was not answered, then
    /// messages that were queued, in arrival order.
    pub(crate) async fn recover(&mut self) {
        // Replies stored before the last stop but never taken by their platform go first, in
        // their sessions' lines: what the workers answer next is queued behind them. Replicas
        // sharing a store claim such replies one by one instead (see replicas.rs): some of
        // them are another live replica's, on their way out.
        let replies = match self.shared.store.is_shared() {
            true => Ok(Vec::new()),
            false => self.shared.store.undelivered().await,
        };
        match replies {
            Ok(replies) => {
                if !replies.is_empty() {
                    info!(
                        replies = replies.len(),
                        "sending the replies stored before the last stop"
                    );
                }
                for reply in replies {
                    self.shared.outbox.post(Parcel::recovered(reply));
                }
            }
            Err(e) => warn!(error = %e, "could not read the replies left undelivered"),
        }
        match self.shared.store.unanswered_sessions().await {
            Ok(sessions) => {
                for session in sessions {
                    let Some(((chat, user), key)) = resume_target(&session) else { continue };
                    if self.shared.links.contains_key(&chat.platform) {
                        info!(key = %key, session = %session.id, "answering a message left unanswered at the last stop");
                        self.dispatch(key, Input::Resume(chat, user)).await;
                    }
                }
            }
            Err(e) => warn!(error = %e, "could not look for unanswered sessions"),
        }
        // Each key's worker takes its queue in at start, in arrival order.
        match self.shared.store.queued_inbound().await {
            Ok(queued) => {
                let mut keys: Vec<String> = Vec::new();
                for message in queued {
                    if self.shared.links.contains_key(&message.chat.platform)
                        && !keys.contains(&message.session_key)
                    {
                        keys.push(message.session_key);
                    }
                }
                for key in keys {
                    self.dispatch(SessionKey::from_stored(key), Input::Pull).await;
                }
            }
            Err(e) => warn!(error = %e, "could not read the inbound queue"),
        }
    }

    pub(crate) async fn on_event(&mut self, platform: Platform, event: Event) {
        match event {
            Event::Adapter(AdapterEvent::Inbound(inbound)) => self.on_inbound(inbound).await,
            Event::Adapter(
                event @ (AdapterEvent::Cursor(_)
                | AdapterEvent::ChannelCursor { .. }
                | AdapterEvent::Keep { .. }),
            ) => {
                if let Some((key, value)) = CursorKey::of_event(platform, &event) {
                    self.cursors.save(key, value);
                }
            }
            Event::Adapter(AdapterEvent::Connected { bot }) => {
                info!(%platform, %bot, "platform connected");
                self.states.set(platform, PlatformState::Connected { bot });
            }
            Event::Adapter(AdapterEvent::Retrying { error, retry_in }) => {
                warn!(%platform, %error, retry_in_ms = retry_in.as_millis() as u64, "platform connection lost; retrying");
                self.states.set(platform, PlatformState::Retrying { error });
            }
            Event::Stopped(Some(error)) => {
                self.states.set(platform, PlatformState::Failed { error: error.clone() });
                // When none is left the gateway stops and says why, once.
                if self.states.all_failed().is_none() {
                    error!(%platform, %error, "platform stopped; the other platforms keep running");
                }
            }
            Event::Stopped(None) => info!(%platform, "platform stopped"),
        }
    }

    async fn on_inbound(&mut self, inbound: Inbound) {
        let platform = inbound.chat.platform;
        let access = self.shared.settings.access(platform);
        let verdict = match auth::authorize(&self.shared.store, &access, &inbound).await {
            Ok(verdict) => verdict,
            Err(e) => {
                warn!(%platform, error = %e, "could not check authorization; the message will be delivered again");
                return;
            }
        };
        match verdict {
            _ if !matches!(verdict, Verdict::Allowed(_)) && inbound.ack.answers_refusal() => {
                debug!(%platform, user = %inbound.user.id, chat = %inbound.chat.id, ?verdict, "command refused");
                self.refuse(inbound, verdict).await;
            }
            Verdict::Ignore(why) => {
                debug!(%platform, user = %inbound.user.id, chat = %inbound.chat.id, why, "message ignored");
                inbound.ack.settle();
            }
            Verdict::Pair => self.on_unknown(inbound).await,
            Verdict::Allowed(allowed) => {
                let mut inbound = inbound;
                // A command is answered where it was written; a message the platform answers
                // in a thread on it moves there now, so its session is the thread's from the
                // first answer on (see herald_core::reply).
                if Command::parse(&inbound.text).is_none() {
                    let style = self.shared.reply_style(platform);
                    let placement = Placement::of(&inbound.chat, &inbound.id, style);
                    inbound.chat = placement.follow_ups(&inbound.chat);
                }
                let key = SessionKey::for_chat(
                    &inbound.chat,
                    &inbound.user,
                    self.shared.settings.group_sessions_per_user,
                );
                self.dispatch(key, Input::Inbound(inbound, allowed)).await;
            }
        }
    }

    /// An unknown user in a DM: a pairing code (or `/whoami`), never the model.
    async fn on_unknown(&mut self, inbound: Inbound) {
        let platform = inbound.chat.platform;
        let reply = if Command::parse(&inbound.text) == Some(Command::Whoami) {
            Some(format!(
                "Your {platform} user id is {}. You may not talk to me yet.",
                inbound.user.id
            ))
        } else {
            let ttl = self.shared.settings.pairing_ttl;
            match self.pairing.reply(&self.shared.store, &inbound, ttl, false).await {
                Ok(reply) => reply,
                Err(e) => {
                    warn!(%platform, error = %e, "could not issue a pairing code; the message will be delivered again");
                    return;
                }
            }
        };
        if let (Some(reply), Some(link)) = (reply, self.shared.links.get(&platform)) {
            link.notify(&inbound.chat, reply).await;
        }
        inbound.ack.settle();
    }

    /// Someone not answered here who asked where only they see the answer (a slash command):
    /// one line for them, and nothing else. A stranger hears how to get in.
    async fn refuse(&mut self, inbound: Inbound, verdict: Verdict) {
        let platform = inbound.chat.platform;
        let user = &inbound.user.id;
        let line = if !verdict.stranger() {
            "I don't answer in this channel.".to_owned()
        } else if Command::parse(&inbound.text) == Some(Command::Whoami) {
            format!("Your {platform} user id is {user}. You may not talk to me yet.")
        } else if self.shared.settings.access(platform).dm_policy == DmPolicy::Pair {
            let ttl = self.shared.settings.pairing_ttl;
            match self.pairing.reply(&self.shared.store, &inbound, ttl, true).await {
                Ok(reply) => reply.unwrap_or_default(),
                Err(e) => {
                    // Unsettled: the adapter tells them to try again.
                    warn!(%platform, error = %e, "could not issue a pairing code");
                    return;
                }
            }
        } else {
            format!(
                "You may not talk to me. Your {platform} user id is {user}; the operator of this \
                 bot can allow it."
            )
        };
        inbound.ack.refuse(line);
    }

    /// Hands an input to its key's task, started when there is none. The task asks for the
    /// session's lock itself: the router never waits for the store here, where every other
    /// chat's message waits too.
    async fn dispatch(&mut self, key: SessionKey, input: Input) {
        let mut input = input;
        for _ in 0..2 {
            let handle = match self.workers.get_mut(&key) {
                Some(handle) => handle,
                None => {
                    let (inbox, inputs) = mpsc::channel(WORKER_INBOX);
                    let holds = Arc::new(AtomicBool::new(false));
                    let task = start::serve(
                        key.clone(),
                        self.shared.clone(),
                        self.idle.clone(),
                        inputs,
                        holds.clone(),
                    );
                    self.tracker.spawn(task);
                    self.workers.entry(key.clone()).or_insert(WorkerHandle {
                        inbox,
                        sent: 0,
                        holds,
                    })
                }
            };
            handle.sent += 1;
            match handle.inbox.send(input).await {
                Ok(()) => return,
                Err(mpsc::error::SendError(back)) => {
                    debug!(key = %key, "a session worker had stopped; starting it again");
                    self.workers.remove(&key);
                    input = back;
                }
            }
        }
    }

    /// Whether this replica runs `key`'s session now.
    fn holds(&self, key: &SessionKey) -> bool {
        self.workers.get(key).is_some_and(WorkerHandle::holds)
    }

    /// A message was queued for `key`: the key's worker here, if there is one, takes it in
    /// (reading it from the queue when the notification did not carry it). Every replica
    /// hears every queued message; one without the key's worker leaves it to the replica that
    /// has one, or to the sweep for keys whose holder is gone.
    pub(crate) async fn on_queued(&mut self, key: SessionKey, message: Option<Box<QueuedInbound>>) {
        if self.holds(&key) {
            let input = message.map_or(Input::Pull, Input::Queued);
            self.dispatch(key, input).await;
        }
    }

    /// The sweep found messages queued for `key`: a worker here has them (it queued them, or
    /// heard of them); otherwise their holder may have died, and this replica takes them if it
    /// gets the lock.
    pub(crate) async fn on_orphan(&mut self, key: SessionKey) {
        if !self.holds(&key) {
            self.dispatch(key, Input::Pull).await;
        }
    }

    /// Notifications may have been missed (the store's listening connection came back): every
    /// worker here looks at its queue once.
    pub(crate) async fn on_missed(&mut self) {
        let keys: Vec<SessionKey> =
            self.workers.iter().filter(|(_, h)| h.holds()).map(|(k, _)| k.clone()).collect();
        for key in keys {
            self.dispatch(key, Input::Pull).await;
        }
    }

    /// A session left unanswered (its replica died mid-turn): answered here if this replica
    /// gets its lock.
    pub(crate) async fn on_unanswered(&mut self, session: Session) {
        let Some(((chat, user), key)) = resume_target(&session) else { return };
        if self.holds(&key) || !self.shared.links.contains_key(&chat.platform) {
            return;
        }
        info!(key = %key, session = %session.id, "a message is left unanswered; answering it here if no replica runs its session");
        self.dispatch(key, Input::Resume(chat, user)).await;
    }

    /// Drops an idle worker, unless something was sent to it after it said so.
    pub(crate) fn on_idle(&mut self, idle: Idle) {
        if self.workers.get(&idle.key).is_some_and(|h| h.sent == idle.received) {
            self.workers.remove(&idle.key);
        }
    }
}

/// Where to answer a stored session: its chat, its user and its key.
fn resume_target(session: &Session) -> Option<((ChatRef, UserRef), SessionKey)> {
    let key = SessionKey::from_stored(session.session_key.clone()?);
    let kind = ChatKind::from_stored(session.chat_type.as_deref().unwrap_or_default());
    let chat = ChatRef {
        platform: session.source,
        id: session.chat_id.clone()?,
        kind,
        thread: session.thread_id.clone(),
    };
    let user = UserRef::new(session.user_id.clone().unwrap_or_default());
    Some(((chat, user), key))
}

//! Platform cursors: how they are named in the store, and saved off the router's loop.
//!
//! A cursor is a platform's own position (Telegram's update offset) or, for a platform whose
//! positions are per channel, one channel's (Discord's newest handled message id), or a value
//! an adapter keeps across restarts (Discord's registered command set). This module alone knows
//! how each is stored; the router and the adapters only pass them along.
//!
//! A cursor write waits its turn behind every other write of the store; done inside the router
//! it would hold up every chat's messages behind it, worst in a burst of new sessions. Only the
//! newest cursor of each platform matters, and saving one late only means a restart may see
//! some updates again (they are deduplicated), so the router hands the newest value over and
//! one task writes it when it can.

use std::collections::BTreeMap;
use std::sync::Arc;

use herald_core::{AdapterEvent, Platform};
use herald_store::{Store, StoreError};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

/// The stored name of a platform-wide position: the name it has always had, so that existing
/// databases resume where they were.
const PLATFORM_WIDE: &str = "offset";
/// The stored names' prefixes of channel positions and kept values.
const CHANNEL: &str = "channel:";
const KEPT: &str = "kept:";

/// Which position a cursor is.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct CursorKey {
    /// The platform.
    pub(crate) platform: Platform,
    /// The channel, for a platform whose positions are per channel.
    pub(crate) channel: Option<String>,
    /// The name of a kept value instead of a position.
    pub(crate) kept: Option<String>,
}

impl CursorKey {
    /// A platform's own position.
    pub(crate) fn platform(platform: Platform) -> Self {
        CursorKey { platform, channel: None, kept: None }
    }

    /// One channel's position on `platform`.
    pub(crate) fn channel(platform: Platform, channel: impl Into<String>) -> Self {
        CursorKey { platform, channel: Some(channel.into()), kept: None }
    }

    /// A value `platform`'s adapter keeps across restarts.
    pub(crate) fn kept(platform: Platform, name: impl Into<String>) -> Self {
        CursorKey { platform, channel: None, kept: Some(name.into()) }
    }

    /// The key and value an adapter's event asks to persist, if it is one of those.
    pub(crate) fn of_event(platform: Platform, event: &AdapterEvent) -> Option<(Self, &str)> {
        match event {
            AdapterEvent::Cursor(cursor) => Some((CursorKey::platform(platform), cursor)),
            AdapterEvent::ChannelCursor { channel, cursor } => {
                Some((CursorKey::channel(platform, channel.clone()), cursor))
            }
            AdapterEvent::Keep { name, value } => {
                Some((CursorKey::kept(platform, name.clone()), value))
            }
            _ => None,
        }
    }

    /// The name the store keeps this position under, beside its platform.
    fn stored_name(&self) -> String {
        match (&self.channel, &self.kept) {
            (_, Some(name)) => format!("{KEPT}{name}"),
            (Some(channel), None) => format!("{CHANNEL}{channel}"),
            (None, None) => PLATFORM_WIDE.to_owned(),
        }
    }
}

/// What `platform`'s adapter saved before: its position, its channels' positions and its kept
/// values.
#[derive(Debug, Default)]
pub(crate) struct Saved {
    pub(crate) cursor: Option<String>,
    pub(crate) channels: BTreeMap<String, String>,
    pub(crate) kept: BTreeMap<String, String>,
}

/// Everything saved for `platform`, where its adapter resumes. A chat with an open session
/// but no saved position (it was never saved before a crash) resumes after the newest message
/// stored in it, the oldest such one where sessions share it, so a fetch after a gap covers it.
pub(crate) async fn load(store: &Store, platform: Platform) -> Result<Saved, StoreError> {
    let mut saved = Saved::default();
    for (name, value) in store.cursors(platform).await? {
        if name == PLATFORM_WIDE {
            saved.cursor = Some(value);
        } else if let Some(channel) = name.strip_prefix(CHANNEL) {
            saved.channels.insert(channel.to_owned(), value);
        } else if let Some(kept) = name.strip_prefix(KEPT) {
            saved.kept.insert(kept.to_owned(), value);
        }
    }
    let mut stored: BTreeMap<String, String> = BTreeMap::new();
    for (chat, newest) in store.newest_inbound(platform).await? {
        if saved.channels.contains_key(&chat) {
            continue;
        }
        let oldest = stored.entry(chat).or_insert_with(|| newest.clone());
        if older(&newest, oldest) {
            *oldest = newest;
        }
    }
    saved.channels.extend(stored);
    Ok(saved)
}

/// Whether position `a` comes before `b`: as numbers where both are (snowflakes), else as text.
fn older(a: &str, b: &str) -> bool {
    match (a.parse::<u128>(), b.parse::<u128>()) {
        (Ok(a), Ok(b)) => a < b,
        _ => a < b,
    }
}

/// The position `key` was saved at, if any.
#[cfg(test)]
pub(crate) async fn saved(store: &Store, key: &CursorKey) -> Result<Option<String>, StoreError> {
    store.cursor(key.platform, &key.stored_name()).await
}

/// The router's side: where the newest cursors go.
#[derive(Debug, Clone)]
pub(crate) struct Cursors {
    latest: Arc<watch::Sender<BTreeMap<CursorKey, String>>>,
}

impl Cursors {
    /// Starts the task that saves cursors; it ends, having saved the last ones, when every
    /// handle is dropped.
    pub(crate) fn start(store: Store) -> (Cursors, JoinHandle<()>) {
        let (latest, rx) = watch::channel(BTreeMap::new());
        let saver = tokio::spawn(keep(store, rx));
        (Cursors { latest: Arc::new(latest) }, saver)
    }

    /// Records the newest position of `key`; never waits.
    pub(crate) fn save(&self, key: CursorKey, cursor: &str) {
        self.latest.send_modify(|all| {
            all.insert(key, cursor.to_owned());
        });
    }
}

async fn keep(store: Store, mut latest: watch::Receiver<BTreeMap<CursorKey, String>>) {
    let mut saved: BTreeMap<CursorKey, String> = BTreeMap::new();
    loop {
        // After the last handle is gone the final values are still there to save.
        let closed = latest.changed().await.is_err();
        let all = latest.borrow_and_update().clone();
        for (key, cursor) in all {
            if saved.get(&key) == Some(&cursor) {
                continue;
            }
            match store.set_cursor(key.platform, &key.stored_name(), &cursor).await {
                Ok(()) => {
                    saved.insert(key, cursor);
                }
                Err(e) => warn!(
                    platform = %key.platform,
                    channel = key.channel.as_deref(),
                    kept = key.kept.as_deref(),
                    error = %e,
                    "could not save the platform cursor; a restart may see some messages again (they are deduplicated)"
                ),
            }
        }
        if closed {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use herald_store::StoreOptions;

    #[tokio::test]
    async fn the_newest_cursor_is_saved_when_the_handles_go() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(StoreOptions::new(dir.path().join("state.db"))).await.unwrap();
        let (cursors, saver) = Cursors::start(store.clone());
        for offset in 1..=100 {
            cursors.save(CursorKey::platform(Platform::Telegram), &offset.to_string());
        }
        cursors.clone().save(CursorKey::platform(Platform::Slack), "s");
        cursors.save(CursorKey::channel(Platform::Discord, "c1"), "11");
        cursors.save(CursorKey::channel(Platform::Discord, "c2"), "22");
        cursors.save(CursorKey::channel(Platform::Discord, "c1"), "12");
        cursors.save(CursorKey::kept(Platform::Discord, "commands"), "h");
        drop(cursors);
        saver.await.unwrap();
        let saved = async |key| saved(&store, &key).await.unwrap();
        assert_eq!(saved(CursorKey::platform(Platform::Telegram)).await.as_deref(), Some("100"));
        assert_eq!(saved(CursorKey::platform(Platform::Slack)).await.as_deref(), Some("s"));
        assert_eq!(saved(CursorKey::channel(Platform::Discord, "c1")).await.as_deref(), Some("12"));
        assert_eq!(saved(CursorKey::channel(Platform::Discord, "c2")).await.as_deref(), Some("22"));
        assert_eq!(saved(CursorKey::platform(Platform::Discord)).await, None);
        let discord = load(&store, Platform::Discord).await.unwrap();
        assert_eq!(discord.cursor, None);
        assert_eq!(discord.channels.len(), 2);
        assert_eq!(discord.channels["c1"], "12");
        assert_eq!(discord.kept["commands"], "h");
        // The name Telegram's offset was always stored under: an upgrade resumes from it.
        assert_eq!(
            store.cursor(Platform::Telegram, "offset").await.unwrap().as_deref(),
            Some("100")
        );
    }
}

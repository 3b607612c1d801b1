//! Platform cursors saved off the router's loop.
//!
//! A cursor write waits its turn behind every other write of the store; done inside the router
//! it would hold up every chat's messages behind it, worst in a burst of new sessions. Only the
//! newest cursor of each platform matters, and saving one late only means a restart may see
//! some updates again (they are deduplicated), so the router hands the newest value over and
//! one task writes it when it can.

use std::collections::BTreeMap;
use std::sync::Arc;

use herald_core::Platform;
use herald_store::Store;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::warn;

use crate::router::CURSOR;

/// The router's side: where the newest cursors go.
#[derive(Debug, Clone)]
pub(crate) struct Cursors {
    latest: Arc<watch::Sender<BTreeMap<Platform, String>>>,
}

impl Cursors {
    /// Starts the task that saves cursors; it ends, having saved the last ones, when every
    /// handle is dropped.
    pub(crate) fn start(store: Store) -> (Cursors, JoinHandle<()>) {
        let (latest, rx) = watch::channel(BTreeMap::new());
        let saver = tokio::spawn(keep(store, rx));
        (Cursors { latest: Arc::new(latest) }, saver)
    }

    /// Records a platform's newest cursor; never waits.
    pub(crate) fn save(&self, platform: Platform, cursor: &str) {
        self.latest.send_modify(|all| {
            all.insert(platform, cursor.to_owned());
        });
    }
}

async fn keep(store: Store, mut latest: watch::Receiver<BTreeMap<Platform, String>>) {
    let mut saved: BTreeMap<Platform, String> = BTreeMap::new();
    loop {
        // After the last handle is gone the final values are still there to save.
        let closed = latest.changed().await.is_err();
        let all = latest.borrow_and_update().clone();
        for (platform, cursor) in all {
            if saved.get(&platform) == Some(&cursor) {
                continue;
            }
            match store.set_cursor(platform, CURSOR, &cursor).await {
                Ok(()) => {
                    saved.insert(platform, cursor);
                }
                Err(e) => warn!(
                    %platform,
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
            cursors.save(Platform::Telegram, &offset.to_string());
        }
        cursors.clone().save(Platform::Slack, "s");
        drop(cursors);
        saver.await.unwrap();
        assert_eq!(store.cursor(Platform::Telegram, CURSOR).await.unwrap().as_deref(), Some("100"));
        assert_eq!(store.cursor(Platform::Slack, CURSOR).await.unwrap().as_deref(), Some("s"));
    }
}

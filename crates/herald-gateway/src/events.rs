//! The adapters' events read as one stream, each tagged with its platform where it starts.
//!
//! Every adapter gets a channel of its own, so the receiving end of that channel knows the
//! platform: no task copies events into a shared channel just to tag them. An adapter's result
//! comes after its last event, so a failure is never overtaken by an older "connected".

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use futures::Stream;
use herald_core::{AdapterEvent, Platform};
use tokio::sync::{mpsc, oneshot};

use crate::router::Event;

/// How many events an adapter may have waiting before it waits for the router.
pub(crate) const EVENTS_QUEUE: usize = 1024;

/// One adapter's events, then its end.
#[derive(Debug)]
pub(crate) struct PlatformEvents {
    platform: Platform,
    events: mpsc::Receiver<AdapterEvent>,
    stopped: Option<oneshot::Receiver<Option<String>>>,
}

/// The adapter's side of a [`PlatformEvents`].
pub(crate) struct AdapterEnds {
    /// Where the adapter reports its events.
    pub(crate) events: mpsc::Sender<AdapterEvent>,
    /// Where the adapter's task reports how it ended: `Some(error)` when it failed.
    pub(crate) stopped: oneshot::Sender<Option<String>>,
}

impl PlatformEvents {
    /// A stream of `platform`'s events and the ends its adapter task holds.
    pub(crate) fn new(platform: Platform) -> (PlatformEvents, AdapterEnds) {
        let (events, events_rx) = mpsc::channel(EVENTS_QUEUE);
        let (stopped, stopped_rx) = oneshot::channel();
        let stream = PlatformEvents { platform, events: events_rx, stopped: Some(stopped_rx) };
        (stream, AdapterEnds { events, stopped })
    }
}

impl Stream for PlatformEvents {
    type Item = (Platform, Event);

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let platform = this.platform;
        let Some(stopped) = &mut this.stopped else { return Poll::Ready(None) };
        // The channel closes once the adapter has returned and dropped its sender.
        if let Some(event) = ready!(this.events.poll_recv(cx)) {
            return Poll::Ready(Some((platform, Event::Adapter(event))));
        }
        let result = ready!(Pin::new(stopped).poll(cx));
        this.stopped = None;
        // A task that panicked never reported: that is a failure too.
        let error = result.unwrap_or_else(|_| Some("the adapter task panicked".to_owned()));
        Poll::Ready(Some((platform, Event::Stopped(error))))
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use futures::stream::SelectAll;

    use super::*;

    #[tokio::test]
    async fn events_come_tagged_and_the_end_comes_last() {
        let mut all = SelectAll::new();
        let (telegram, ends) = PlatformEvents::new(Platform::Telegram);
        all.push(telegram);
        let (slack, slack_ends) = PlatformEvents::new(Platform::Slack);
        all.push(slack);
        ends.events.send(AdapterEvent::Cursor("1".into())).await.unwrap();
        ends.stopped.send(Some("refused".into())).unwrap();
        ends.events.send(AdapterEvent::Cursor("2".into())).await.unwrap();
        drop(ends.events);
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(match all.next().await.expect("an event") {
                (p, Event::Adapter(AdapterEvent::Cursor(c))) => format!("{p} {c}"),
                (p, Event::Stopped(e)) => format!("{p} stopped {e:?}"),
                (p, other) => panic!("{p}: {other:?}"),
            });
        }
        assert_eq!(seen, ["telegram 1", "telegram 2", "telegram stopped Some(\"refused\")"]);
        drop(slack_ends);
        let (p, end) = all.next().await.expect("slack's end");
        assert!(matches!((p, end), (Platform::Slack, Event::Stopped(Some(_)))));
        assert!(all.next().await.is_none());
    }
}

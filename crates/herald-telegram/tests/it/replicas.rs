//! Polling among replicas: only the holder of the `telegram:poller` claim polls, and when it
//! loses the claim the next holder takes over.
//!
//! What the adapter guarantees, and what these tests check: an update is never lost in a
//! handover (one the old poller fetched but Telegram had not confirmed is fetched again by the
//! next), and one confirmed is never fetched again. A message fetched by both in a handover is
//! handed on twice, under the same id; the store's dedupe above the adapter answers it once.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

use herald_core::{AdapterEvent, Claim, Claimer, Claims};
use herald_fakes::telegram::FakeTelegram;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::common::{Running, WAIT, settings};

/// Hands each name to one replica at a time, and can take it away: a stand-in for the store.
#[derive(Clone)]
struct Referee {
    holder: watch::Sender<usize>,
    held: Arc<Mutex<Option<CancellationToken>>>,
}

impl Referee {
    /// Replica 0 holds the name at first.
    fn new() -> Referee {
        Referee { holder: watch::Sender::new(0), held: Arc::default() }
    }

    /// The claims of replica `id`.
    fn claims(&self, id: usize) -> Claims {
        Claims::new(Replica { id, referee: self.clone() })
    }

    /// Takes the name from its holder and hands it to replica `id`.
    fn hand_to(&self, id: usize) {
        if let Some(lost) = self.held.lock().unwrap().take() {
            lost.cancel();
        }
        self.holder.send_replace(id);
    }
}

struct Replica {
    id: usize,
    referee: Referee,
}

impl Claimer for Replica {
    fn hold(&self, _name: String) -> Pin<Box<dyn Future<Output = Claim> + Send>> {
        let (id, referee) = (self.id, self.referee.clone());
        Box::pin(async move {
            let mut holder = referee.holder.subscribe();
            holder.wait_for(|holder| *holder == id).await.unwrap();
            let lost = CancellationToken::new();
            *referee.held.lock().unwrap() = Some(lost.clone());
            Claim::new(lost, None)
        })
    }
}

/// Waits until Telegram has confirmed every queued update.
async fn confirmed(fake: &FakeTelegram) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.pending_updates() > 0 {
        assert!(tokio::time::Instant::now() < deadline, "the updates are confirmed");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// Receives `n` messages on `adapter`, settling each; their texts.
async fn receive(adapter: &mut Running, n: usize) -> Vec<String> {
    let mut texts = Vec::new();
    for _ in 0..n {
        let inbound = adapter.inbound().await;
        texts.push(inbound.text.clone());
        inbound.ack.settle();
    }
    texts
}

/// Whether any event so far is a message.
fn no_message_in(adapter: &mut Running) -> bool {
    let mut none = true;
    while let Ok(event) = adapter.events.try_recv() {
        none &= !matches!(event, AdapterEvent::Inbound(_));
    }
    none
}

#[tokio::test]
async fn only_the_claim_holder_polls_and_the_next_takes_over_without_repeats() {
    let fake = FakeTelegram::start().await;
    let referee = Referee::new();
    let mut a = Running::start_with(settings(&fake), None, referee.claims(0));
    let mut b = Running::start_with(settings(&fake), None, referee.claims(1));
    a.wait_connected().await;
    b.wait_connected().await;

    for n in 0..5 {
        fake.dm(1, &format!("a{n}"));
    }
    assert_eq!(receive(&mut a, 5).await, ["a0", "a1", "a2", "a3", "a4"]);
    confirmed(&fake).await;
    // Sending works on the replica that does not poll.
    b.send(crate::common::dm(1), "from b").await.unwrap();

    referee.hand_to(1);
    // The replica that let go still sends: it says it is connected, not retrying.
    let bot = a
        .until(|e| match e {
            AdapterEvent::Connected { bot } => Some(bot),
            AdapterEvent::Retrying { error, .. } => {
                panic!("a paused poller is not retrying: {error}")
            }
            _ => None,
        })
        .await;
    assert!(!bot.is_empty());
    for n in 0..5 {
        fake.dm(1, &format!("b{n}"));
    }
    assert_eq!(receive(&mut b, 5).await, ["b0", "b1", "b2", "b3", "b4"]);
    confirmed(&fake).await;
    assert!(no_message_in(&mut a), "the replica without the claim polls nothing");
    assert!(no_message_in(&mut b), "nothing confirmed is fetched again");
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

#[tokio::test]
async fn an_update_unconfirmed_at_the_handover_is_fetched_again_by_the_next_poller() {
    let fake = FakeTelegram::start().await;
    let referee = Referee::new();
    let mut a = Running::start_with(settings(&fake), None, referee.claims(0));
    let mut b = Running::start_with(settings(&fake), None, referee.claims(1));
    a.wait_connected().await;
    b.wait_connected().await;

    fake.dm(2, "in the handover");
    let held = a.inbound().await;
    // The claim moves while replica a has not settled the message, so Telegram still has it.
    referee.hand_to(1);
    let again = b.inbound().await;
    assert_eq!((again.id.as_str(), again.text.as_str()), (held.id.as_str(), "in the handover"));
    held.ack.settle();
    again.ack.settle();
    confirmed(&fake).await;
    assert!(no_message_in(&mut a));
    a.stop().await.unwrap();
    b.stop().await.unwrap();
}

//! What reaches the daemon more than once, or should not reach the model at all: the
//! `message` + `app_mention` pair of one post, Slack's redelivery, strangers and bots.

use std::time::Duration;

use herald_fakes::slack::{FakeSlack, Post};

use super::super::settle;
use super::{CHANNEL, SlackDaemon, texts, user};

#[tokio::test(flavor = "multi_thread")]
async fn slack_the_pair_in_either_order_is_answered_once_and_acked_in_time() {
    let mut d = SlackDaemon::start().await;
    let first = d.slack.inject(Post::channel(CHANNEL, &user(1), "message first").mentioning_bot());
    let second = d
        .slack
        .inject(Post::channel(CHANNEL, &user(2), "mention first").mentioning_bot().mention_first());
    assert_eq!(first.event_ids.len(), 2, "a message and an app_mention event");
    let posted = d.replies(CHANNEL, 2).await;
    settle().await;
    let posted_now = d.slack.posted_in(CHANNEL);
    assert_eq!(posted_now.len(), 2, "{posted_now:#?}");
    let mut answers: Vec<(&str, Option<&str>)> =
        posted.iter().map(|p| (p.text.as_str(), p.thread_ts.as_deref())).collect();
    answers.sort();
    assert_eq!(
        answers,
        [
            ("echo: mention first", Some(second.ts.as_str())),
            ("echo: message first", Some(first.ts.as_str())),
        ]
    );
    let deliveries = d.all_acknowledged_in_time().await;
    let kinds = |kind: &str| deliveries.iter().filter(|d| d.event_type == kind).count();
    assert_eq!(kinds("app_mention"), 2, "{deliveries:#?}");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_redelivered_event_is_answered_once() {
    let mut d = SlackDaemon::start().await;
    // Slack gives up on an acknowledgement almost at once, so the event comes again.
    d.slack.set_ack_timeout(Duration::from_millis(1));
    let dm = FakeSlack::dm_channel(&user(3));
    let ts = d.slack.dm(&user(3), "say it once");
    let retried = |fake: &FakeSlack| fake.deliveries().iter().any(|d| d.retry_attempt >= 1);
    assert!(d.slack.wait_for(Duration::from_secs(10), retried).await, "never redelivered");
    d.slack.set_ack_timeout(Duration::from_secs(3));
    assert_eq!(texts(&d.replies(&dm, 1).await), ["echo: say it once"]);
    // Another message after it shows the daemon went past the copies.
    d.slack.dm(&user(3), "and this");
    assert_eq!(texts(&d.replies(&dm, 2).await), ["echo: say it once", "echo: and this"]);
    settle().await;
    assert_eq!(d.slack.posted_in(&dm).len(), 2);
    let deliveries = d.slack.deliveries();
    let copies = deliveries.iter().filter(|x| x.event_id == deliveries[0].event_id).count();
    assert!(copies >= 2, "{deliveries:#?}");
    assert_eq!(d.model.request_count(), 2, "the model saw {ts} once");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

fn code_in(text: &str) -> String {
    let at = text.find("approve slack ").expect("the approve command in the reply") + 14;
    text[at..at + 8].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_stranger_is_paired_and_bots_are_ignored() {
    let mut d = SlackDaemon::start().await;
    let stranger = "U9999";
    let dm = FakeSlack::dm_channel(stranger);
    d.slack.dm(stranger, "let me in");
    let posted = d.replies(&dm, 1).await;
    assert!(posted[0].text.contains("pairing code"), "{posted:#?}");
    let code = code_in(&posted[0].text);
    assert_eq!(d.model.request_count(), 0, "the model never sees an unauthorized message");
    let approved = d.herald(&["pairing", "approve", "slack", &code]).ok();
    assert!(approved.contains(stranger), "{approved}");
    d.slack.dm(stranger, "now?");
    assert_eq!(d.replies(&dm, 2).await[1].text, "echo: now?");

    // Another bot, in a DM and in the channel mentioning ours: nothing is answered.
    d.slack.inject(Post::dm(&user(1), "beep").from_bot("B0OTHER"));
    d.slack.inject(Post::channel(CHANNEL, &user(1), "beep").mentioning_bot().from_bot("B0OTHER"));
    let alice = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "a person");
    assert_eq!(texts(&d.replies(&alice, 1).await), ["echo: a person"]);
    settle().await;
    assert_eq!(d.slack.posted_in(&alice).len(), 1);
    assert!(d.slack.posted_in(CHANNEL).is_empty());
    assert_eq!(d.model.request_count(), 2);
    d.all_acknowledged_in_time().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

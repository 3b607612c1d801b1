//! Slack conversations through the daemon: DMs and their sessions, many DMs at once, a
//! mention answered in a thread that is the session from then on, chatter left alone.

use std::time::Duration;

use herald_core::Platform;
use herald_fakes::slack::{FakeSlack, Post};

use super::super::settle;
use super::{CHANNEL, SlackDaemon, texts, user};

#[tokio::test(flavor = "multi_thread")]
async fn slack_dm_is_answered_stored_and_continued_by_the_next_one() {
    let mut d = SlackDaemon::start().await;
    let (alice, dm) = (user(1), FakeSlack::dm_channel(&user(1)));
    d.slack.dm(&alice, "hello there");
    let posted = d.replies(&dm, 1).await;
    assert_eq!(posted[0].text, "echo: hello there");
    assert_eq!(posted[0].thread_ts, None, "a DM is answered in place");
    d.slack.dm(&alice, "and again");
    assert_eq!(texts(&d.replies(&dm, 2).await), ["echo: hello there", "echo: and again"]);

    let store = d.store().await;
    let session = store.routed_session(&format!("slack:dm:{dm}")).await.unwrap().unwrap();
    assert_eq!(session.source, Platform::Slack);
    assert_eq!(session.chat_id.as_deref(), Some(dm.as_str()));
    assert_eq!(session.user_id.as_deref(), Some(alice.as_str()));
    assert_eq!(session.message_count, 4, "two messages and two answers in one session");
    store.close().await;
    d.all_acknowledged_in_time().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_fifty_dms_with_three_messages_each_are_answered_in_order_and_acked_in_time() {
    let mut d = SlackDaemon::start().await;
    for round in 0..3 {
        for n in 0..50 {
            d.slack.dm(&user(n), &format!("u{n} m{round}"));
        }
    }
    for n in 0..50 {
        let dm = FakeSlack::dm_channel(&user(n));
        let posted = d.replies_within(&dm, 3, Duration::from_secs(60)).await;
        let expected: Vec<String> = (0..3).map(|r| format!("echo: u{n} m{r}")).collect();
        assert_eq!(texts(&posted), expected, "user {n}");
    }
    // Every envelope: the 150 DMs and the bot's own 150 answers Slack echoes back (the last
    // echoes may still be on their way).
    let echoed = |fake: &FakeSlack| fake.deliveries().len() >= 300;
    assert!(d.slack.wait_for(Duration::from_secs(20), echoed).await, "{}", d.logs());
    d.all_acknowledged_in_time().await;
    settle().await;
    assert_eq!(d.slack.posted().len(), 150, "nothing answered twice");
    let store = d.store().await;
    assert_eq!(store.list_sessions(&Default::default()).await.unwrap().len(), 50);
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_mention_is_answered_in_a_thread_that_follow_ups_continue() {
    let mut d = SlackDaemon::start().await;
    d.slack.inject(Post::channel(CHANNEL, &user(1), "just chatting"));
    let post = d.slack.inject(Post::channel(CHANNEL, &user(1), "what is up?").mentioning_bot());
    let posted = d.replies(CHANNEL, 1).await;
    assert_eq!(posted[0].text, "echo: what is up?", "the mention itself is not echoed");
    assert_eq!(posted[0].thread_ts.as_deref(), Some(post.ts.as_str()));
    assert!(posted[0].thread_found);

    // Someone else follows up in the thread without a mention: the same conversation.
    d.slack.inject(Post::channel(CHANNEL, &user(2), "and then?").in_thread(&post.ts));
    let posted = d.replies(CHANNEL, 2).await;
    assert_eq!(posted[1].text, "echo: and then?");
    assert_eq!(posted[1].thread_ts.as_deref(), Some(post.ts.as_str()));

    settle().await;
    assert_eq!(d.slack.posted().len(), 2, "the chatter and each copy answered at most once");
    let store = d.store().await;
    let key = format!("slack:group:{CHANNEL}:thread:{}", post.ts);
    let session = store.routed_session(&key).await.unwrap().expect("the thread's session");
    assert_eq!(session.source, Platform::Slack);
    assert_eq!(session.message_count, 4, "the mention, the follow-up and both answers");
    assert_eq!(store.list_sessions(&Default::default()).await.unwrap().len(), 1);
    store.close().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

//! The daemon stopped and started again on the same store: Slack's events of before the
//! restart are not answered again, and what comes after is answered once.

use herald_fakes::slack::{FakeSlack, Post};

use super::super::settle;
use super::{CHANNEL, SlackDaemon, texts, user};

#[tokio::test(flavor = "multi_thread")]
async fn slack_a_restart_on_the_same_store_answers_nothing_twice() {
    let mut d = SlackDaemon::start().await;
    let dm = FakeSlack::dm_channel(&user(1));
    d.slack.dm(&user(1), "before");
    d.slack.dm(&user(1), "before again");
    let post = d.slack.inject(Post::channel(CHANNEL, &user(2), "a question").mentioning_bot());
    d.replies(&dm, 2).await;
    d.replies(CHANNEL, 1).await;
    d.every_event_acknowledged_in_time().await;
    let asked = d.model.request_count();
    assert_eq!(d.stop().await, 0, "{}", d.logs());

    d.spawn().await;
    settle().await;
    assert_eq!(d.slack.posted().len(), 3, "nothing answered again: {:#?}", d.slack.posted());
    d.slack.dm(&user(1), "after");
    let posted = d.replies(&dm, 3).await;
    assert_eq!(texts(&posted), ["echo: before", "echo: before again", "echo: after"]);
    settle().await;
    assert_eq!(d.slack.posted_in(&dm).len(), 3, "the new message answered once");
    let in_thread = d.slack.posted_in(CHANNEL);
    assert_eq!(texts(&in_thread), ["echo: a question"], "the mention answered once");
    assert_eq!(in_thread[0].thread_ts.as_deref(), Some(post.ts.as_str()));
    assert_eq!(d.model.request_count(), asked + 1, "only the new message reached the model");
    d.every_event_acknowledged_in_time().await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

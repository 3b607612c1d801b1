//! Conversations on Discord: a DM session, fifty busy channels in order, a long answer split
//! at Discord's limit, and a turn finished during the drain.

use std::time::Duration;

use herald_core::Platform;
use herald_fakes::Reply;
use herald_fakes::discord::FakeDiscord;

use super::{DiscordDaemon, USERS, settle};

#[tokio::test(flavor = "multi_thread")]
async fn a_dm_is_answered_and_the_next_dm_continues_the_session() {
    let mut d = DiscordDaemon::start("").await;
    let user = USERS[0];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "hello there");
    assert_eq!(d.replies(channel, 1).await[0].content, "echo: hello there");
    d.dm(user, "and again");
    let sent = d.replies(channel, 2).await;
    assert_eq!(DiscordDaemon::texts(&sent), ["echo: hello there", "echo: and again"]);

    let store = d.store().await;
    let session = store.routed_session(&format!("discord:dm:{channel}")).await.unwrap().unwrap();
    assert_eq!(session.source, Platform::Discord);
    assert_eq!(session.chat_id.as_deref(), Some(channel.to_string().as_str()));
    assert_eq!(session.user_id.as_deref(), Some(user.to_string().as_str()));
    assert_eq!(session.chat_type.as_deref(), Some("dm"));
    assert_eq!(session.message_count, 4, "two user messages and two answers in one session");
    let prompt = store.system_prompt(&session.id).await.unwrap().unwrap();
    assert!(prompt.contains("Discord"), "{prompt}");
    assert_eq!(store.list_sessions(&Default::default()).await.unwrap().len(), 1);
    store.close().await;
    let second = d.model.requests().pop().unwrap();
    assert_eq!(
        second["messages"].as_array().unwrap().len(),
        4,
        "system + 3 history messages: {second}"
    );
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

#[tokio::test(flavor = "multi_thread")]
async fn fifty_channels_are_all_answered_in_order_within_each() {
    let d = DiscordDaemon::start("").await;
    let channels: Vec<u64> = (0..50).map(|c| 880_000 + c).collect();
    let mut asked = vec![Vec::new(); channels.len()];
    for round in 0..3 {
        for (index, channel) in channels.iter().enumerate() {
            let user = USERS[index % USERS.len()];
            asked[index].push(d.mention(*channel, user, &format!("c{index} m{round}")));
        }
    }
    for (index, channel) in channels.iter().enumerate() {
        let sent = d.replies(*channel, 3).await;
        let expected: Vec<String> = (0..3).map(|r| format!("echo: c{index} m{r}")).collect();
        assert_eq!(DiscordDaemon::texts(&sent), expected, "channel {channel}");
        let quoted: Vec<String> = sent
            .iter()
            .map(|m| {
                let reference = m.message_reference.as_ref().expect("a reply reference");
                reference["message_id"].as_str().unwrap().to_owned()
            })
            .collect();
        let ids: Vec<String> = asked[index].iter().map(u64::to_string).collect();
        assert_eq!(quoted, ids, "each answer quotes its question, channel {channel}");
    }
    settle().await;
    assert_eq!(d.discord.sent().len(), 150, "nothing answered twice");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_long_answer_with_code_is_split_under_2000_characters_outside_fences() {
    let mut d = DiscordDaemon::start("").await;
    let code: Vec<String> =
        (0..120).map(|i| format!("    let value_{i:03} = compute({i});")).collect();
    let prose = "This paragraph explains the code below in some detail. ".repeat(20);
    let answer =
        format!("{prose}\n\n```rust\nfn main() {{\n{}\n}}\n```\n\n{prose}", code.join("\n"));
    assert!(answer.chars().count() >= 5000, "{}", answer.chars().count());
    d.model.push_reply(Reply::text(&answer));
    let user = USERS[1];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "show me the code");
    let all_there = |d: &DiscordDaemon| {
        let sent = d.sent_to(channel);
        sent.iter().map(|m| m.content.matches("explains the code below").count()).sum::<usize>()
            >= 40
    };
    d.until("the whole answer never arrived", all_there).await;
    let first = d.sent_to(channel);
    settle().await;
    let sent = d.sent_to(channel);
    assert_eq!(sent.len(), first.len(), "nothing more arrived");
    assert!(sent.len() >= 3, "{} parts", sent.len());
    for part in &sent {
        assert!(part.content.chars().count() <= 2000, "{} characters", part.content.len());
        assert_eq!(part.content.matches("```").count() % 2, 0, "fences balanced: {}", part.content);
    }
    let joined: String = sent.iter().map(|m| m.content.as_str()).collect::<Vec<_>>().join("\n");
    for line in &code {
        assert_eq!(joined.matches(line.as_str()).count(), 1, "{line} arrives once");
    }
    assert_eq!(joined.matches("explains the code below").count(), 40, "all the prose arrives");
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_during_a_turn_lets_it_finish_and_post_its_answer() {
    let mut d = DiscordDaemon::start("").await;
    d.model.set_latency(Duration::from_millis(1500));
    let user = USERS[0];
    d.dm(user, "slow one");
    d.until("the model was never asked", |d| d.model.request_count() > 0).await;
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    let sent = d.sent_to(FakeDiscord::dm_channel(user));
    assert_eq!(DiscordDaemon::texts(&sent), ["echo: slow one"], "{}", d.logs());
}

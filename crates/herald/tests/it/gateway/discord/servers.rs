//! Server channels: the bot answers when mentioned or replied to, a thread is its own
//! session, and `auto_thread` moves a conversation into exactly one thread on the message.

use herald_fakes::discord::InboundMessage;

use super::{DiscordDaemon, GUILD, USERS, settle};

#[tokio::test(flavor = "multi_thread")]
async fn only_mentions_and_replies_to_the_bot_are_answered_without_the_mention() {
    let d = DiscordDaemon::start("").await;
    let channel = 40_001;
    let user = USERS[0];
    d.discord.inject_message(InboundMessage::channel(GUILD, channel, user, "just chatting"));
    let asked = d.mention(channel, user, "what is the time?");
    let sent = d.replies(channel, 1).await;
    assert_eq!(sent[0].content, "echo: what is the time?");
    let reference = sent[0].message_reference.as_ref().expect("a reply reference");
    assert_eq!(reference["message_id"], asked.to_string());
    let prompt = d.last_prompt();
    assert_eq!(prompt, ["what is the time?"], "no mention and no unaddressed chatter");

    let reply =
        InboundMessage::channel(GUILD, channel, user, "and tomorrow?").replying_to(sent[0].id);
    d.discord.inject_message(reply);
    let sent = d.replies(channel, 2).await;
    assert_eq!(sent[1].content, "echo: and tomorrow?");
    d.discord.inject_message(InboundMessage::channel(GUILD, channel, user, "chatting on"));
    settle().await;
    assert_eq!(d.sent_to(channel).len(), 2, "{}", d.logs());
    assert_eq!(d.model.request_count(), 2, "the model saw only the addressed messages");
    assert!(!d.model.requests().iter().any(|r| r.to_string().contains("chatting")));
    assert!(!d.model.requests().iter().any(|r| r.to_string().contains("<@")));
}

#[tokio::test(flavor = "multi_thread")]
async fn a_thread_is_a_session_of_its_own() {
    let d = DiscordDaemon::start("").await;
    let channel = 40_002;
    let user = USERS[0];
    d.mention(channel, user, "in the channel");
    d.replies(channel, 1).await;
    let thread = d.discord.create_thread(GUILD, channel, "a topic");
    d.mention(thread, user, "in the thread");
    assert_eq!(d.replies(thread, 1).await[0].content, "echo: in the thread");
    d.mention(thread, USERS[1], "me too in the thread");
    assert_eq!(d.replies(thread, 2).await[1].content, "echo: me too in the thread");
    assert_eq!(d.sent_to(channel).len(), 1, "the thread's answers stay in the thread");

    let store = d.store().await;
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 2, "{sessions:?}");
    let in_thread: Vec<_> =
        sessions.iter().filter(|s| s.thread_id.as_deref() == Some(&thread.to_string())).collect();
    assert_eq!(in_thread.len(), 1, "one session for the thread, shared: {sessions:?}");
    assert_eq!(in_thread[0].message_count, 4);
    assert_eq!(in_thread[0].chat_id.as_deref(), Some(channel.to_string().as_str()));
    store.close().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn auto_thread_opens_one_thread_on_the_message_and_the_talk_goes_on_there() {
    let mut d = DiscordDaemon::start("auto_thread = true").await;
    let channel = 40_003;
    let user = USERS[2];
    let asked = d.mention(channel, user, "how do I deploy?\nwith details");
    let sent = d.replies(asked, 1).await;
    assert_eq!(sent[0].content, "echo: how do I deploy?\nwith details");
    let thread = d.discord.channel(asked).expect("a thread with the message's id");
    assert_eq!(thread["type"], 11);
    assert_eq!(thread["parent_id"], channel.to_string());
    assert_eq!(thread["name"], "how do I deploy?");
    assert!(d.sent_to(channel).is_empty(), "nothing posted in the channel itself");

    d.mention(asked, user, "and then?");
    assert_eq!(d.replies(asked, 2).await[1].content, "echo: and then?");
    // After a restart the thread is looked up, not opened again.
    assert_eq!(d.stop().await, 0, "{}", d.logs());
    d.spawn().await;
    d.mention(asked, user, "after the restart?");
    assert_eq!(d.replies(asked, 3).await[2].content, "echo: after the restart?");
    assert_eq!(d.discord.threads().len(), 1, "{:?}", d.discord.threads());

    let store = d.store().await;
    let sessions = store.list_sessions(&Default::default()).await.unwrap();
    assert_eq!(sessions.len(), 1, "the conversation never changed session: {sessions:?}");
    assert_eq!(sessions[0].thread_id.as_deref(), Some(asked.to_string().as_str()));
    assert_eq!(sessions[0].message_count, 6);
    store.close().await;
}

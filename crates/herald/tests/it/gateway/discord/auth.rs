//! Who the bot answers on Discord: a pairing code for a stranger's DM, silence for strangers
//! and bots in servers, and answers that never ping anyone.

use herald_fakes::Reply;
use herald_fakes::discord::{FakeDiscord, InboundMessage};
use serde_json::json;

use super::{DiscordDaemon, GUILD, USERS, settle};

#[tokio::test(flavor = "multi_thread")]
async fn a_strangers_dm_gets_a_pairing_code_and_the_model_nothing() {
    let d = DiscordDaemon::start("").await;
    let stranger = 9_999;
    d.dm(stranger, "let me in");
    let sent = d.replies(FakeDiscord::dm_channel(stranger), 1).await;
    assert!(sent[0].content.contains("pairing code"), "{:?}", sent[0]);
    assert!(sent[0].content.contains("approve discord "), "{:?}", sent[0]);
    settle().await;
    assert_eq!(d.model.request_count(), 0, "the model never sees an unauthorized message");
    let listed = d.world.herald(&["pairing", "list"]).ok();
    assert!(listed.contains("9999"), "{listed}");
}

#[tokio::test(flavor = "multi_thread")]
async fn strangers_and_bots_in_servers_are_ignored() {
    let d = DiscordDaemon::start("").await;
    let channel = 41_001;
    d.mention(channel, 9_998, "stranger here");
    let bot = InboundMessage::channel(GUILD, channel, 6_000, "another bot").mentioning_bot();
    d.discord.inject_message(bot.from_bot());
    // A bot that is even on the allowlist is not answered (no bot-to-bot loops).
    let allowed_bot = InboundMessage::channel(GUILD, channel, USERS[1], "allowed but a bot");
    d.discord.inject_message(allowed_bot.mentioning_bot().from_bot());
    d.mention(channel, USERS[0], "a friend");
    let sent = d.replies(channel, 1).await;
    assert_eq!(sent[0].content, "echo: a friend");
    settle().await;
    assert_eq!(d.sent_to(channel).len(), 1, "{:?}", d.sent_to(channel));
    assert_eq!(d.model.request_count(), 1, "the model saw only the friend");
    assert!(d.discord.sent().iter().all(|m| m.channel_id == channel), "no pairing codes in DMs");
}

#[tokio::test(flavor = "multi_thread")]
async fn everyone_in_an_answer_pings_nobody() {
    let d = DiscordDaemon::start("").await;
    d.model.push_reply(Reply::text("hey @everyone and @here, <@&55> and <@3002>!"));
    let channel = 41_002;
    d.mention(channel, USERS[0], "announce it");
    let sent = d.replies(channel, 1).await;
    assert_eq!(sent[0].content, "hey @everyone and @here, <@&55> and <@3002>!");
    let allowed = sent[0].allowed_mentions.as_ref().expect("allowed_mentions sent");
    assert_eq!(allowed["parse"], json!([]), "{allowed}");
    for listed in ["users", "roles"] {
        let ids = allowed.get(listed).and_then(|v| v.as_array()).map_or(0, Vec::len);
        assert_eq!(ids, 0, "{allowed}");
    }
    assert_ne!(allowed["replied_user"], json!(true), "{allowed}");
}

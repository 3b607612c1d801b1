//! Slash commands on Discord: as interactions (acknowledged at once, the answer edits the
//! deferred response, private ones ephemeral), as typed text, and registered only when the
//! set changed; a stranger's get one line only they see, and nothing else happens.

use herald_fakes::discord::{FakeDiscord, SlashCommand};
use serde_json::json;

use super::{DiscordDaemon, GUILD, Setup, USERS, settle};

/// Logs the adapter's debug lines, to see a registration skipped.
const DEBUG: &[(&str, &str)] = &[("RUST_LOG", "info,herald_discord=debug")];

fn slash(user: u64, name: &str, options: Vec<serde_json::Value>) -> SlashCommand {
    SlashCommand { user_id: user, name: name.into(), options, channel_id: None, guild_id: None }
}

/// The one answer each of `commands` got, as (ephemeral, text), once every one has its answer;
/// also checks that nothing else was answered, posted or stored.
async fn only_answers(d: &mut DiscordDaemon, commands: &[u64]) -> Vec<(bool, String)> {
    let n = commands.len();
    d.until("a command was never answered", |d| d.discord.interaction_responses().len() >= n).await;
    settle().await;
    let responses = d.discord.interaction_responses();
    assert_eq!(responses.len(), n, "one answer each: {responses:?}");
    assert!(d.discord.followups().is_empty(), "nothing follows: {:?}", d.discord.followups());
    assert!(d.discord.sent().is_empty(), "nothing posted: {:?}", d.discord.sent());
    assert_eq!(d.model.request_count(), 0);
    let sessions = d.store().await.list_sessions(&Default::default()).await.unwrap();
    assert!(sessions.is_empty(), "no session touched: {sessions:?}");
    let mut answers = Vec::new();
    for id in commands {
        let response = responses.iter().find(|r| r.interaction_id == *id);
        let response = response.unwrap_or_else(|| panic!("{id} unanswered: {responses:?}"));
        assert_eq!(response.kind, 4, "a message, never a deferral: {responses:?}");
        let text = response.data["content"].as_str().unwrap_or_default().to_owned();
        answers.push((response.data["flags"] == json!(64), text));
    }
    answers
}

#[tokio::test(flavor = "multi_thread")]
async fn a_strangers_commands_get_the_pairing_instructions_only_they_see() {
    let mut d = DiscordDaemon::start("").await;
    let stranger = 9_997;
    let (retry, _) = d.discord.inject_command(slash(stranger, "retry", vec![]));
    let in_server = SlashCommand {
        channel_id: Some(46_001),
        guild_id: Some(GUILD),
        ..slash(stranger, "new", vec![])
    };
    let (new, _) = d.discord.inject_command(in_server);
    let answers = only_answers(&mut d, &[retry, new]).await;
    let listed = d.world.herald(&["pairing", "list"]).ok();
    let pending = listed.lines().find(|l| l.contains("user 9997"));
    let code = pending.and_then(|l| l.split_whitespace().nth(1));
    let code = code.unwrap_or_else(|| panic!("a pending code: {listed}"));
    for (ephemeral, text) in answers {
        assert!(ephemeral, "{text}");
        assert!(text.contains(&format!("Your pairing code is {code}.")), "{text}");
        assert!(text.contains(&format!("herald pairing approve discord {code}")), "{text}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn without_pairing_a_strangers_commands_hear_they_may_not() {
    let mut d = DiscordDaemon::start("dm_policy = \"allowlist\"\n").await;
    let stranger = 9_996;
    let (retry, _) = d.discord.inject_command(slash(stranger, "retry", vec![]));
    let (new, _) = d.discord.inject_command(slash(stranger, "new", vec![]));
    for (ephemeral, text) in only_answers(&mut d, &[retry, new]).await {
        assert!(ephemeral, "{text}");
        assert_eq!(
            text,
            "You may not talk to me. Your discord user id is 9996; the operator of this bot can allow it."
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn slash_commands_are_answered_as_interactions_and_as_text() {
    let mut d = DiscordDaemon::start_with(Setup { env: DEBUG, ..Setup::default() }).await;
    d.wait_log("slash commands registered with Discord", 1).await;
    assert_eq!(d.discord.command_puts(), 1);
    let names: Vec<String> =
        d.discord.commands().iter().map(|c| c["name"].as_str().unwrap().to_owned()).collect();
    assert!(names.contains(&"status".to_owned()) && names.contains(&"new".to_owned()), "{names:?}");

    let user = USERS[0];
    let channel = FakeDiscord::dm_channel(user);
    d.dm(user, "hello");
    d.replies(channel, 1).await;

    let (status, _) = d.discord.inject_command(slash(user, "status", vec![]));
    d.until("the status command was never answered", |d| !d.discord.followups().is_empty()).await;
    let responses = d.discord.interaction_responses();
    assert_eq!(responses.len(), 1, "{responses:?}");
    assert_eq!(responses[0].interaction_id, status);
    assert_eq!(responses[0].kind, 5, "deferred: {responses:?}");
    assert_eq!(responses[0].data["flags"], json!(64), "ephemeral: {responses:?}");
    let followups = d.discord.followups();
    assert!(followups[0].edits_original, "{followups:?}");
    let answer = followups[0].body["content"].as_str().unwrap();
    assert!(answer.contains("Session:") && answer.contains("Messages: 2"), "{answer}");

    let title = json!({"name": "name", "type": 3, "value": "tea plans"});
    let (titled, _) = d.discord.inject_command(slash(user, "title", vec![title]));
    d.until("the title command was never answered", |d| d.discord.followups().len() > 1).await;
    let responses = d.discord.interaction_responses();
    assert_eq!(responses[1].interaction_id, titled);
    assert_eq!(responses[1].kind, 5, "{responses:?}");
    assert_ne!(responses[1].data["flags"], json!(64), "seen by everyone: {responses:?}");
    let followups = d.discord.followups();
    assert!(followups[1].edits_original, "{followups:?}");
    assert!(followups[1].body["content"].as_str().unwrap().contains("tea plans"), "{followups:?}");

    d.dm(user, "/status");
    let sent = d.replies(channel, 2).await;
    assert!(sent[1].content.contains("Title: tea plans"), "{:?}", sent[1]);
    assert_eq!(d.model.request_count(), 1, "no command reached the model");

    assert_eq!(d.stop().await, 0, "{}", d.logs());
    d.spawn().await;
    d.wait_log("the slash commands are registered already", 1).await;
    assert_eq!(d.discord.command_puts(), 1, "the same set is not registered again");
}

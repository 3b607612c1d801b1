//! Deny by default: pairing codes for unknown DMs, silence for unknown group members and
//! unaddressed group chatter, and for every group outside `allowed_channels`.

use herald_fakes::telegram::UserMessage;

use super::reload::edit_config;
use super::{Daemon, settle};

fn code_in(text: &str) -> String {
    let at = text.find("approve telegram ").expect("the approve command in the reply") + 17;
    text[at..at + 8].to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn an_unknown_user_is_paired_before_being_answered() {
    let d = Daemon::start("").await;
    d.telegram.dm(777, "let me in");
    let sent = d.replies(777, 1).await;
    let code = code_in(&sent[0].text);
    assert_eq!(d.model.request_count(), 0, "the model never sees an unauthorized message");

    let wrong = d.herald(&["pairing", "approve", "telegram", "ZZZZZZZZ"]);
    assert!(wrong.fails(1).contains("no pending pairing code"));
    let listed = d.herald(&["pairing", "list"]).ok();
    assert!(listed.contains(&code) && listed.contains("777"), "{listed}");

    let approved = d.herald(&["pairing", "approve", "telegram", &code.to_lowercase()]).ok();
    assert!(approved.contains("777"), "{approved}");
    let again = d.herald(&["pairing", "approve", "telegram", &code]);
    assert!(again.fails(1).contains("no pending pairing code"), "a code works once");

    d.telegram.dm(777, "now?");
    assert_eq!(d.replies(777, 2).await[1].text, "echo: now?");

    assert!(d.herald(&["pairing", "revoke", "telegram", "777"]).ok().contains("revoked"));
    d.telegram.dm(777, "still there?");
    let sent = d.replies(777, 3).await;
    assert!(sent[2].text.contains("pairing code"), "{:?}", sent[2]);
}

#[tokio::test(flavor = "multi_thread")]
async fn four_strangers_all_get_codes_and_writing_again_takes_no_second_slot() {
    let d = Daemon::start("").await;
    let strangers = [2001, 2002, 2003, 2004];
    let mut codes = Vec::new();
    for user in strangers {
        d.telegram.dm(user, "let me in");
        let sent = d.replies(user, 1).await;
        assert!(sent[0].text.contains("pairing code"), "{user}: {:?}", sent[0]);
        codes.push(code_in(&sent[0].text));
    }
    // The first stranger writes again; an allowed user's answer after it shows the gateway
    // has handled that message.
    d.telegram.dm(2001, "hello? let me in");
    d.telegram.dm(1001, "ping");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: ping");

    let listed = crate::common::json(&d.herald(&["pairing", "list", "--json"]).ok());
    let pending = listed["pending"].as_array().unwrap();
    let mut found: Vec<(String, String)> = pending
        .iter()
        .map(|p| {
            (p["user_id"].as_str().unwrap().to_owned(), p["code"].as_str().unwrap().to_owned())
        })
        .collect();
    found.sort();
    let expected: Vec<(String, String)> =
        strangers.iter().map(|u| u.to_string()).zip(codes.iter().cloned()).collect();
    assert_eq!(found, expected, "one code per stranger, the same after writing again: {listed}");
    assert!(pending.iter().all(|p| p["expires_at"].as_i64() > p["created_at"].as_i64()));
    let text = d.herald(&["pairing", "list"]).ok();
    for (user, code) in strangers.iter().zip(&codes) {
        let line = text.lines().find(|l| l.contains(code.as_str())).expect("a line per code");
        let user = format!("user {user}");
        assert!(
            line.contains(&user) && line.contains("asked ") && line.contains("expires"),
            "{line}"
        );
    }

    for (user, code) in strangers.iter().zip(&codes) {
        let approved = d.herald(&["pairing", "approve", "telegram", code]).ok();
        assert!(approved.contains(&user.to_string()), "{approved}");
        d.telegram.dm(*user, "now?");
        let sent = d.replies(*user, 2).await;
        assert_eq!(sent.last().unwrap().text, "echo: now?", "{user}: {sent:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn an_expired_code_is_refused() {
    let d = Daemon::start("").await;
    let store = d.store().await;
    let request = herald_store::NewPairing {
        platform: herald_core::Platform::Telegram,
        code: "ABCDEFGH",
        user_id: "888",
        display_name: None,
        chat_id: "888",
        ttl_ms: 1,
        max_pending: 3,
    };
    store.request_pairing(&request).await.unwrap();
    store.close().await;
    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    let refused = d.herald(&["pairing", "approve", "telegram", "ABCDEFGH"]);
    assert!(refused.fails(1).contains("expired"));
}

#[tokio::test(flavor = "multi_thread")]
async fn groups_answer_only_known_users_who_mention_the_bot() {
    let d = Daemon::start("").await;
    d.telegram.inject(UserMessage::group(-42, 777, "hey bot").mention());
    d.telegram.inject(UserMessage::group(-42, 1001, "just chatting"));
    d.telegram.inject(UserMessage::group(-42, 1001, "answer me").mention());
    let sent = d.replies(-42, 1).await;
    settle().await;
    let sent_now = d.telegram.sent_to(-42);
    assert_eq!(sent_now.len(), 1, "{sent_now:?}");
    assert_eq!(sent[0].text, "echo: answer me");
    assert_eq!(d.model.request_count(), 1);
}

#[tokio::test(flavor = "multi_thread")]
async fn allowed_channels_keep_the_bot_to_listed_groups_and_reload_at_once() {
    let d = Daemon::start("").await;
    d.telegram.inject(UserMessage::group(-43, 1001, "anywhere?").mention());
    assert_eq!(d.replies(-43, 1).await[0].text, "echo: anywhere?", "no list: every group");

    let allowlist = "allowed_users = [\"1001\", \"1002\", \"1003\"]";
    edit_config(&d, allowlist, &format!("{allowlist}\nallowed_channels = [\"-42\"]"));
    d.signal("HUP");
    d.wait_log("telegram.allowed_channels", 1).await;
    d.telegram.inject(UserMessage::group(-43, 1001, "still here?").mention());
    d.telegram.inject(UserMessage::group(-42, 1001, "and here?").mention());
    assert_eq!(d.replies(-42, 1).await[0].text, "echo: and here?");
    d.telegram.dm(1001, "a DM is no channel");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: a DM is no channel");
    settle().await;
    assert_eq!(d.telegram.sent_to(-43).len(), 1, "a group not listed is not answered");
    assert_eq!(d.model.request_count(), 3, "the model never saw the ignored message");

    edit_config(&d, "[\"-42\"]", "[\"-43\"]");
    d.signal("HUP");
    d.wait_log("telegram.allowed_channels", 2).await;
    d.telegram.inject(UserMessage::group(-43, 1001, "now?").mention());
    assert_eq!(d.replies(-43, 2).await[1].text, "echo: now?");
}

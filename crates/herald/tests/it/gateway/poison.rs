//! Poison updates through the real daemon: a message Telegram cut inside an emoji is answered,
//! one nobody can read is skipped, and every other chat keeps being answered.

use herald_fakes::telegram::FakeTelegram;

use super::Daemon;

/// The log line that says `what` about update `id`, at WARN.
fn warned(logs: &str, what: &str, id: i64) -> bool {
    let id = format!("update={id}");
    logs.lines().any(|line| line.contains("WARN") && line.contains(what) && line.contains(&id))
}

#[tokio::test(flavor = "multi_thread")]
async fn a_poison_update_is_repaired_or_skipped_and_other_chats_keep_being_answered() {
    let d = Daemon::start("").await;
    d.telegram.dm(1001, "before");
    let cut = d.telegram.inject_raw(
        r#"{"message_id":1,"date":1700000000,"chat":{"id":1002,"type":"private","first_name":"Ann"},"from":{"id":1002,"is_bot":false,"first_name":"Ann"},"text":"hi \ud83d"}"#,
    );
    d.telegram.dm(1003, "after");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: before");
    assert_eq!(d.replies(1002, 1).await[0].text, "echo: hi \u{FFFD}");
    assert_eq!(d.replies(1003, 1).await[0].text, "echo: after");

    let broken = d.telegram.inject_raw(
        r#"{"message_id":"x","date":1700000000,"chat":{"id":1002,"type":"private","first_name":"Ann"},"text":"secret \udc00"}"#,
    );
    d.telegram.dm(1002, "still there?");
    d.telegram.dm(1001, "and me?");
    assert_eq!(d.replies(1002, 2).await[1].text, "echo: still there?");
    assert_eq!(d.replies(1001, 2).await[1].text, "echo: and me?");

    let logs = d.logs();
    assert!(warned(&logs, "lone UTF-16 surrogates", cut), "{logs}");
    assert!(warned(&logs, "could not be read", broken), "{logs}");
    assert!(!logs.contains("secret") && !logs.contains(FakeTelegram::TOKEN), "{logs}");
}

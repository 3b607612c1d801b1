//! SIGHUP: the config file read again; a newly allowed user is answered at once, and a broken
//! file leaves the daemon running as it was.

use super::Daemon;

/// Rewrites the daemon's config file with `from` replaced by `to`.
pub(super) fn edit_config(d: &Daemon, from: &str, to: &str) {
    let text = std::fs::read_to_string(&d.world.config).unwrap();
    assert!(text.contains(from), "{from:?} not in\n{text}");
    std::fs::write(&d.world.config, text.replace(from, to)).unwrap();
}

const ALLOWLIST: &str = "allowed_users = [\"1001\", \"1002\", \"1003\"]";

#[tokio::test(flavor = "multi_thread")]
async fn sighup_applies_a_new_allowlist_and_survives_a_broken_file() {
    let mut d = Daemon::start("").await;
    d.telegram.dm(2001, "hello?");
    let first = d.replies(2001, 1).await;
    assert!(
        first[0].text.contains("approve telegram"),
        "a stranger gets a pairing code: {first:?}"
    );

    edit_config(&d, ALLOWLIST, "allowed_users = [\"1001\", \"1002\", \"1003\", \"2001\"]");
    d.signal("HUP");
    d.wait_log("configuration reloaded", 1).await;
    d.telegram.dm(2001, "hello again");
    assert_eq!(d.replies(2001, 2).await[1].text, "echo: hello again");
    assert_eq!(d.model.request_count(), 1, "only the allowed message reached the model");

    // a key that needs a restart is named, and the rest still applies
    edit_config(&d, "request_timeout_s = 5", "request_timeout_s = 6");
    d.signal("HUP");
    d.wait_log("configuration reloaded", 2).await;
    d.wait_log("model.request_timeout_s", 1).await;

    std::fs::write(&d.world.config, "[telegram\nallowed_users = ").unwrap();
    d.signal("HUP");
    d.wait_log("could not reload the configuration", 1).await;
    assert!(d.is_running(), "{}", d.logs());
    d.telegram.dm(2001, "still there?");
    assert_eq!(d.replies(2001, 3).await[2].text, "echo: still there?");
    d.telegram.dm(1001, "me too");
    assert_eq!(d.replies(1001, 1).await[0].text, "echo: me too");
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

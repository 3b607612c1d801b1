//! The Web API: tokens, `chat.postMessage` and `chat.update` checked as Slack checks them,
//! reactions, faults.

use herald_fakes::FakeSlack;
use herald_fakes::slack::{MAX_TEXT, Post, SlackFault};
use serde_json::{Value, json};

use super::{bot, call};

/// A fake where user U1 wrote "hi" in its DM and U7 "top" in channel C1; (fake, DM ts, C1 ts).
async fn with_messages() -> (FakeSlack, String, String) {
    let fake = FakeSlack::start().await;
    let dm = fake.dm("U1", "hi");
    let top = fake.inject(Post::channel("C1", "U7", "top")).ts;
    (fake, dm, top)
}

fn error(answer: &Value) -> &str {
    assert_eq!(answer["ok"], false, "{answer}");
    answer["error"].as_str().unwrap()
}

#[tokio::test]
async fn tokens_are_checked_as_slack_checks_them() {
    let (fake, _, _) = with_messages().await;
    let post = json!({"channel": "C1", "text": "hi"});
    let check = async |method: &str, token: Option<&str>, body: &Value| {
        let (status, answer) = call(&fake, method, token, body.clone()).await;
        assert_eq!(status, 200);
        answer["error"].as_str().map(str::to_owned)
    };
    assert_eq!(check("chat.postMessage", None, &post).await.as_deref(), Some("not_authed"));
    assert_eq!(
        check("chat.postMessage", Some("xoxb-wrong"), &post).await.as_deref(),
        Some("invalid_auth")
    );
    assert_eq!(
        check("chat.postMessage", Some(FakeSlack::APP_TOKEN), &post).await.as_deref(),
        Some("not_allowed_token_type")
    );
    assert_eq!(
        check("apps.connections.open", Some(FakeSlack::BOT_TOKEN), &json!({})).await.as_deref(),
        Some("not_allowed_token_type")
    );
    // A token in a JSON body does not count.
    let with_token = json!({"channel": "C1", "text": "hi", "token": FakeSlack::BOT_TOKEN});
    assert_eq!(check("chat.postMessage", None, &with_token).await.as_deref(), Some("not_authed"));

    fake.set_invalid_auth(true);
    assert_eq!(
        check("auth.test", Some(FakeSlack::BOT_TOKEN), &json!({})).await.as_deref(),
        Some("invalid_auth")
    );
    assert_eq!(
        check("apps.connections.open", Some(FakeSlack::APP_TOKEN), &json!({})).await.as_deref(),
        Some("invalid_auth")
    );
    fake.set_invalid_auth(false);
    assert_eq!(check("auth.test", Some(FakeSlack::BOT_TOKEN), &json!({})).await, None);
    assert!(fake.posted().is_empty());
    // The record keeps the answer and never the token.
    let calls = fake.calls_of("chat.postMessage");
    assert_eq!(calls[0].error.as_deref(), Some("not_authed"));
    assert!(calls.iter().all(|c| c.args.get("token").is_none()));
}

#[tokio::test]
async fn auth_test_names_the_bot() {
    let fake = FakeSlack::start().await;
    let answer = bot(&fake, "auth.test", json!({})).await;
    assert_eq!(answer["ok"], true);
    assert_eq!(answer["user_id"], FakeSlack::BOT_USER);
    assert_eq!(answer["bot_id"], FakeSlack::BOT_ID);
    assert_eq!(answer["team_id"], FakeSlack::TEAM_ID);
    assert_eq!(answer["user"], FakeSlack::BOT_NAME);
}

#[tokio::test]
async fn a_post_gets_a_fresh_ts_and_is_recorded() {
    let (fake, dm, _) = with_messages().await;
    let channel = FakeSlack::dm_channel("U1");
    let body = json!({"channel": channel, "text": "*hello*", "thread_ts": dm, "mrkdwn": true});
    let first = bot(&fake, "chat.postMessage", body.clone()).await;
    assert_eq!(first["ok"], true, "{first}");
    assert_eq!(first["channel"], channel);
    assert_eq!(first["message"]["text"], "*hello*");
    assert_eq!(first["message"]["bot_id"], FakeSlack::BOT_ID);
    assert_eq!(first["message"]["thread_ts"], dm);
    let second = bot(&fake, "chat.postMessage", body).await;
    let ts = |answer: &Value| answer["ts"].as_str().unwrap().parse::<f64>().unwrap();
    assert!(ts(&second) > ts(&first) && ts(&first) > dm.parse::<f64>().unwrap());
    let shape = first["ts"].as_str().unwrap().split_once('.').unwrap();
    assert_eq!((shape.0.len(), shape.1.len()), (10, 6), "{first}");

    let posted = &fake.posted()[0];
    assert_eq!((posted.channel.as_str(), posted.text.as_str()), (channel.as_str(), "*hello*"));
    assert_eq!((posted.thread_ts.as_deref(), posted.thread_found), (Some(dm.as_str()), true));
    assert_eq!((posted.ts.as_str(), posted.mrkdwn), (first["ts"].as_str().unwrap(), Some(true)));
    // To a user id: the bot's DM with them.
    let to_user = bot(&fake, "chat.postMessage", json!({"channel": "U1", "text": "psst"})).await;
    assert_eq!(to_user["channel"], channel);
}

#[tokio::test]
async fn a_form_post_is_read_like_json() {
    let (fake, _, top) = with_messages().await;
    let form = [
        ("token", FakeSlack::BOT_TOKEN),
        ("channel", "C1"),
        ("text", "from a form"),
        ("thread_ts", top.as_str()),
        ("blocks", r#"[{"type":"section","text":{"type":"mrkdwn","text":"hi"}}]"#),
    ];
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/chat.postMessage", fake.api_url()))
        .form(&form)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["ok"], true, "{answer}");
    let posted = &fake.posted()[0];
    assert_eq!((posted.text.as_str(), posted.thread_found), ("from a form", true));
    assert_eq!(posted.blocks.as_ref().unwrap()[0]["type"], "section");
}

#[tokio::test]
async fn bad_posts_are_refused_as_slack_refuses_them() {
    let (fake, _, _) = with_messages().await;
    let refused = async |body: Value| error(&bot(&fake, "chat.postMessage", body).await).to_owned();
    assert_eq!(refused(json!({"channel": "C404", "text": "hi"})).await, "channel_not_found");
    assert_eq!(refused(json!({"text": "hi"})).await, "channel_not_found");
    assert_eq!(refused(json!({"channel": "C1", "text": ""})).await, "no_text");
    assert_eq!(refused(json!({"channel": "C1"})).await, "no_text");
    assert_eq!(
        refused(json!({"channel": "C1", "text": "x".repeat(MAX_TEXT + 1)})).await,
        "msg_too_long"
    );
    assert_eq!(
        refused(json!({"channel": "C1", "blocks": "not json"})).await,
        "invalid_blocks_format"
    );
    assert_eq!(
        refused(json!({"channel": "C1", "blocks": [{"text": "no type"}]})).await,
        "invalid_blocks"
    );
    assert!(fake.posted().is_empty());

    // Characters, not bytes: 40,000 of `é` fit; blocks alone need no text.
    let fits =
        bot(&fake, "chat.postMessage", json!({"channel": "C1", "text": "é".repeat(MAX_TEXT)}))
            .await;
    assert_eq!(fits["ok"], true);
    let blocks = json!([{"type": "section", "text": {"type": "mrkdwn", "text": "hi"}}]);
    assert_eq!(
        bot(&fake, "chat.postMessage", json!({"channel": "C1", "blocks": blocks})).await["ok"],
        true
    );
    // Slack documents no error for a thread_ts that names no message; the record says so.
    bot(&fake, "chat.postMessage", json!({"channel": "C1", "text": "t", "thread_ts": "1.000001"}))
        .await;
    assert!(!fake.posted()[2].thread_found);
}

#[tokio::test]
async fn the_bot_updates_its_own_messages_only() {
    let (fake, _, top) = with_messages().await;
    let posted = bot(&fake, "chat.postMessage", json!({"channel": "C1", "text": "draft"})).await;
    let ts = posted["ts"].as_str().unwrap();
    let updated =
        bot(&fake, "chat.update", json!({"channel": "C1", "ts": ts, "text": "final"})).await;
    assert_eq!((updated["ok"].as_bool(), updated["text"].as_str()), (Some(true), Some("final")));
    assert_eq!(fake.updates()[0].text, "final");

    let refused = async |body: Value| error(&bot(&fake, "chat.update", body).await).to_owned();
    assert_eq!(
        refused(json!({"channel": "C1", "ts": top, "text": "mine now"})).await,
        "cant_update_message"
    );
    assert_eq!(
        refused(json!({"channel": "C1", "ts": "1.000001", "text": "x"})).await,
        "message_not_found"
    );
    assert_eq!(refused(json!({"channel": "C1", "ts": ts, "text": ""})).await, "no_text");
    assert_eq!(
        refused(json!({"channel": "C1", "ts": ts, "text": "x".repeat(MAX_TEXT + 1)})).await,
        "msg_too_long"
    );
}

#[tokio::test]
async fn reactions_come_and_go_once() {
    let (fake, dm, _) = with_messages().await;
    let channel = FakeSlack::dm_channel("U1");
    let react = async |method: &str, name: &str, ts: &str| {
        let answer =
            bot(&fake, method, json!({"channel": channel, "timestamp": ts, "name": name})).await;
        answer["error"].as_str().map(str::to_owned)
    };
    assert_eq!(react("reactions.add", "eyes", &dm).await, None);
    assert_eq!(fake.reactions_on(&channel, &dm), ["eyes"]);
    assert_eq!(react("reactions.add", "eyes", &dm).await.as_deref(), Some("already_reacted"));
    assert_eq!(react("reactions.add", ":eyes:", &dm).await.as_deref(), Some("invalid_name"));
    assert_eq!(
        react("reactions.add", "eyes", "1.000001").await.as_deref(),
        Some("message_not_found")
    );
    assert_eq!(react("reactions.add", "eyes", "yesterday").await.as_deref(), Some("bad_timestamp"));
    assert_eq!(react("reactions.remove", "eyes", &dm).await, None);
    assert_eq!(react("reactions.remove", "eyes", &dm).await.as_deref(), Some("no_reaction"));
    assert!(fake.reactions_on(&channel, &dm).is_empty());
    let added: Vec<bool> = fake.reactions().iter().map(|r| r.added).collect();
    assert_eq!(added, [true, false]);
    let unknown =
        bot(&fake, "reactions.add", json!({"channel": "C404", "timestamp": dm, "name": "eyes"}))
            .await;
    assert_eq!(error(&unknown), "channel_not_found");
    let nothing = bot(&fake, "reactions.add", json!({"name": "eyes"})).await;
    assert_eq!(error(&nothing), "no_item_specified");
}

#[tokio::test]
async fn faults_answer_the_next_calls_of_a_method() {
    let (fake, _, _) = with_messages().await;
    fake.push_faults("chat.postMessage", SlackFault::RateLimited { retry_after: 2 }, 2);
    fake.push_fault("chat.postMessage", SlackFault::Status { status: 503 });
    fake.push_fault("chat.postMessage", SlackFault::Error { error: "fatal_error".into() });
    let body = json!({"channel": "C1", "text": "hi"});
    for _ in 0..2 {
        let response = reqwest::Client::new()
            .post(format!("{}/chat.postMessage", fake.api_url()))
            .bearer_auth(FakeSlack::BOT_TOKEN)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "2");
        let answer: Value = response.json().await.unwrap();
        assert_eq!(error(&answer), "ratelimited");
    }
    let (status, answer) =
        call(&fake, "chat.postMessage", Some(FakeSlack::BOT_TOKEN), body.clone()).await;
    assert_eq!((status, error(&answer)), (503, "service_unavailable"));
    assert_eq!(error(&bot(&fake, "chat.postMessage", body.clone()).await), "fatal_error");
    assert_eq!(bot(&fake, "chat.postMessage", body).await["ok"], true);
    assert_eq!(fake.posted().len(), 1);
    let statuses: Vec<u16> = fake.calls_of("chat.postMessage").iter().map(|c| c.status).collect();
    assert_eq!(statuses, [429, 429, 503, 200, 200]);
    // Other methods are untouched by the queue.
    assert_eq!(bot(&fake, "auth.test", json!({})).await["ok"], true);
}

#[tokio::test]
async fn an_unknown_method_is_404() {
    let fake = FakeSlack::start().await;
    let (status, answer) =
        call(&fake, "chat.postMesage", Some(FakeSlack::BOT_TOKEN), json!({})).await;
    assert_eq!((status, error(&answer)), (404, "unknown_method"));
}

#[tokio::test]
async fn conversations_info_over_get_and_the_assistant_status() {
    let (fake, dm, _) = with_messages().await;
    let info = async |channel: &str| -> Value {
        reqwest::Client::new()
            .get(format!("{}/conversations.info?channel={channel}", fake.api_url()))
            .bearer_auth(FakeSlack::BOT_TOKEN)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap()
    };
    let im = info(&FakeSlack::dm_channel("U1")).await;
    assert_eq!(
        (im["channel"]["is_im"].as_bool(), im["channel"]["user"].as_str()),
        (Some(true), Some("U1"))
    );
    let channel = info("C1").await;
    assert_eq!(
        (channel["channel"]["is_channel"].as_bool(), channel["channel"]["is_member"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(error(&info("C404").await), "channel_not_found");

    let status = json!({"channel_id": FakeSlack::dm_channel("U1"), "thread_ts": dm, "status": "is thinking..."});
    assert_eq!(bot(&fake, "assistant.threads.setStatus", status).await["ok"], true);
    let missing = bot(&fake, "assistant.threads.setStatus", json!({"status": "x"})).await;
    assert_eq!(error(&missing), "invalid_arguments");
    assert_eq!(fake.calls_of("assistant.threads.setStatus")[0].args["status"], "is thinking...");
}

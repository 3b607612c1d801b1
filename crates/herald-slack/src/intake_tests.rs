use std::sync::Arc;

use serde_json::{Value, json};

use super::*;

#[test]
fn mentions_of_the_bot_are_removed_and_escapes_undone() {
    let check = |text: &str, expected: &str| assert_eq!(strip_mentions(text, "UB"), expected);
    check("<@UB> hello", "hello");
    check("hi <@UB|herald> there", "hi there");
    check("<@UB>", "");
    check("<@UBX> stays", "<@UBX> stays");
    check("a &lt;b&gt; &amp;amp;", "a <b> &amp;");
    check("<@UB> привет 你好", "привет 你好");
    assert!(mentions("x <@UB|herald>", "UB"));
    assert!(!mentions("x <@UBX>", "UB"));
}

#[test]
fn recent_maps_forget_the_oldest() {
    let mut recent = Recent::default();
    for n in 0..REMEMBERED + 2 {
        recent.insert(n, ());
    }
    assert!(recent.get(&0).is_none());
    assert!(recent.get(&1).is_none());
    assert!(recent.get(&(REMEMBERED + 1)).is_some());
}

const BOT: &str = "UBOT";

fn intake() -> (Arc<Intake>, mpsc::Receiver<AdapterEvent>) {
    let (events, offered) = mpsc::channel(16);
    let mut settings = SlackSettings::new("xoxb-t", "xapp-t");
    settings.ack_wait = Duration::from_secs(5);
    let bot = Bot { user: BOT.into(), name: "herald".into(), id: None };
    (Arc::new(Intake::new(&settings, bot, events, CancellationToken::new())), offered)
}

/// An `event_callback` of `event` under `event_id`, as Socket Mode carries it.
fn callback(event_id: &str, event: Value) -> SlackPushEventCallback {
    let payload = json!({
        "team_id": "T1", "api_app_id": "A1", "event": event, "type": "event_callback",
        "event_id": event_id, "event_time": 1_700_000_000,
    });
    serde_json::from_value(payload).expect("a valid event_callback")
}

fn message(text: &str) -> Value {
    json!({"type": "message", "channel": "C1", "channel_type": "channel", "user": "U1",
           "text": text, "ts": "1700000000.000100"})
}

fn app_mention(text: &str) -> Value {
    json!({"type": "app_mention", "channel": "C1", "user": "U1", "text": text,
           "ts": "1700000000.000100"})
}

/// Hands `event` to the intake; the offered message (settled at once), if any.
async fn offer(
    intake: &Arc<Intake>,
    offered: &mut mpsc::Receiver<AdapterEvent>,
    event: SlackPushEventCallback,
) -> Option<Inbound> {
    let handled = tokio::spawn({
        let intake = intake.clone();
        async move { intake.handle(event).await }
    });
    let inbound = tokio::select! {
        Some(AdapterEvent::Inbound(inbound)) = offered.recv() => Some(inbound),
        _ = tokio::time::sleep(Duration::from_millis(200)) => None,
    };
    let settled = inbound.map(|inbound| {
        let Inbound { id, chat, user, text, mentioned, reply_to_bot, ack } = inbound;
        ack.settle();
        Inbound { id, chat, user, text, mentioned, reply_to_bot, ack: Ack::none() }
    });
    assert!(handled.await.expect("no panic").is_ok(), "the envelope is acknowledged");
    settled
}

#[tokio::test]
async fn a_gated_off_message_copy_never_hides_its_mention() {
    let (intake, mut offered) = intake();
    // The `message` copy reads as not addressed (Slack's mention markup it does not carry).
    let first = offer(&intake, &mut offered, callback("Ev1", message("hello"))).await;
    assert!(!first.expect("offered").addressed());
    let mention = offer(&intake, &mut offered, callback("Ev2", app_mention("hello"))).await;
    let mention = mention.expect("the mention is offered after all");
    assert!(mention.mentioned);
    assert_eq!(mention.id, "C1:1700000000.000100");
    // Any further copy or redelivery is dropped.
    assert!(offer(&intake, &mut offered, callback("Ev3", message("hello"))).await.is_none());
    assert!(offer(&intake, &mut offered, callback("Ev2", app_mention("hello"))).await.is_none());
}

#[tokio::test]
async fn a_message_copy_carrying_the_mention_is_the_mention() {
    let (intake, mut offered) = intake();
    let text = format!("<@{BOT}> hi");
    let first = offer(&intake, &mut offered, callback("Ev1", message(&text))).await;
    let first = first.expect("offered");
    assert!(first.mentioned);
    assert_eq!(first.text, "hi");
    assert!(offer(&intake, &mut offered, callback("Ev2", app_mention(&text))).await.is_none());
}

#[tokio::test]
async fn an_offer_dropped_unsettled_is_offered_again_on_redelivery() {
    let (intake, mut offered) = intake();
    let handled = tokio::spawn({
        let intake = intake.clone();
        async move { intake.handle(callback("Ev1", message("hi"))).await }
    });
    let Some(AdapterEvent::Inbound(inbound)) = offered.recv().await else { panic!("offered") };
    drop(inbound);
    assert!(handled.await.expect("no panic").is_err(), "not acknowledged");
    let again = offer(&intake, &mut offered, callback("Ev1", message("hi"))).await;
    assert_eq!(again.expect("offered again").text, "hi");
}

use serde_json::{Value, json};
use teloxide::types::Update;

use super::*;

const BOT: u64 = 1000;

fn bot() -> BotIdentity {
    BotIdentity { id: BOT, username: "herald_bot".into() }
}

/// A message update from user 42 in `chat`, with `extra` fields merged into the message.
fn update(chat: Value, text: &str, entities: Value, extra: Value) -> Update {
    let mut message = json!({
        "message_id": 7,
        "date": 0,
        "chat": chat,
        "from": {"id": 42, "is_bot": false, "first_name": "Ann", "username": "ann"},
        "text": text,
        "entities": entities,
    });
    if let (Some(message), Value::Object(extra)) = (message.as_object_mut(), extra) {
        message.extend(extra);
    }
    // teloxide's `Update` reads from text, not from a `Value`.
    serde_json::from_str(&json!({"update_id": 1, "message": message}).to_string()).unwrap()
}

fn group() -> Value {
    json!({"id": -100, "type": "supergroup", "title": "g"})
}

fn private() -> Value {
    json!({"id": 42, "type": "private", "first_name": "Ann"})
}

fn entity(kind: &str, offset: usize, length: usize) -> Value {
    json!({"type": kind, "offset": offset, "length": length})
}

/// The text and `mentioned` of a group message, or `None` when it is skipped.
fn check(text: &str, entities: Value, expected: Option<(&str, bool)>) {
    let got = inbound(&update(group(), text, entities, json!({})), &bot());
    let got = got.as_ref().map(|m| (m.text.as_str(), m.mentioned));
    assert_eq!(got, expected, "for {text:?}");
}

#[test]
fn a_dm_is_a_direct_chat_with_a_stable_id() {
    let msg = inbound(&update(private(), "hi", json!([]), json!({})), &bot()).unwrap();
    assert_eq!(msg.id, "42:7");
    assert_eq!(msg.chat, ChatRef::direct(Platform::Telegram, "42"));
    assert_eq!(msg.user, UserRef { id: "42".into(), name: Some("ann".into()) });
    assert_eq!((msg.text.as_str(), msg.mentioned, msg.reply_to_bot), ("hi", false, false));
}

#[test]
fn mentions_and_commands_for_the_bot_are_stripped() {
    check("hello", json!([]), Some(("hello", false)));
    check("@herald_bot  what is up", json!([entity("mention", 0, 11)]), Some(("what is up", true)));
    check("hey @Herald_Bot there", json!([entity("mention", 4, 11)]), Some(("hey there", true)));
    check("@someone_else hi", json!([entity("mention", 0, 13)]), Some(("@someone_else hi", false)));
    check("/new@herald_bot", json!([entity("bot_command", 0, 15)]), Some(("/new", true)));
    check(
        "/title@herald_bot Trip",
        json!([entity("bot_command", 0, 17)]),
        Some(("/title Trip", true)),
    );
    check("/new", json!([entity("bot_command", 0, 4)]), Some(("/new", false)));
    check("/new@other_bot", json!([entity("bot_command", 0, 14)]), None);
}

#[test]
fn entity_offsets_count_utf16_units() {
    // "🎉" is two UTF-16 units and four bytes.
    check("🎉 @herald_bot go", json!([entity("mention", 3, 11)]), Some(("🎉 go", true)));
    // Offsets inside a character or past the end are ignored, not a panic.
    check(
        "🎉 x",
        json!([entity("mention", 1, 2), entity("mention", 3, 40)]),
        Some(("🎉 x", false)),
    );
}

#[test]
fn a_text_mention_of_the_bot_counts() {
    let mention = json!([{"type": "text_mention", "offset": 0, "length": 6,
        "user": {"id": BOT, "is_bot": true, "first_name": "Herald"}}]);
    check("Herald hi", mention, Some(("hi", true)));
}

#[test]
fn replies_and_topics() {
    let reply = json!({"reply_to_message": {"message_id": 3, "date": 0, "chat": group(),
        "from": {"id": BOT, "is_bot": true, "first_name": "Herald"}, "text": "earlier"}});
    let msg = inbound(&update(group(), "yes", json!([]), reply), &bot()).unwrap();
    assert!(msg.reply_to_bot && msg.addressed());

    // In a topic, the implicit reply to the topic's first message is not a reply to the bot.
    let topic = json!({"message_thread_id": 5, "is_topic_message": true,
        "reply_to_message": {"message_id": 5, "date": 0, "chat": group(),
            "from": {"id": BOT, "is_bot": true, "first_name": "Herald"},
            "forum_topic_created": {"name": "t", "icon_color": 0}}});
    let msg = inbound(&update(group(), "in topic", json!([]), topic), &bot()).unwrap();
    assert_eq!(msg.chat, ChatRef::group(Platform::Telegram, "-100").in_thread("5"));
    assert!(!msg.reply_to_bot);
}

#[test]
fn messages_not_for_the_bot_are_skipped() {
    let from_bot = json!({"from": {"id": 5, "is_bot": true, "first_name": "B"}});
    assert!(inbound(&update(group(), "x", json!([]), from_bot), &bot()).is_none());
    let channel = json!({"id": -200, "type": "channel", "title": "c"});
    assert!(inbound(&update(channel, "x", json!([]), json!({})), &bot()).is_none());
    let mut sticker = update(private(), "x", json!([]), json!({}));
    if let UpdateKind::Message(msg) = &mut sticker.kind {
        msg.kind = serde_json::from_value::<Message>(json!({"message_id": 1, "date": 0,
            "chat": private(), "sticker": {"file_id": "f", "file_unique_id": "u", "type": "regular",
            "width": 1, "height": 1, "is_animated": false, "is_video": false}}))
        .unwrap()
        .kind;
    }
    assert!(inbound(&sticker, &bot()).is_none());
}

use std::time::{Duration, Instant};

use herald_fakes::telegram::{FakeTelegram, UserMessage};
use teloxide::prelude::*;
use teloxide::types::{MessageEntityKind, ThreadId};

use super::{WAIT, bot, only_message, poll, take};

#[tokio::test]
async fn get_me_describes_the_bot() {
    let fake = FakeTelegram::start().await;
    let me = bot(&fake).get_me().await.unwrap();
    assert_eq!(me.id.0, u64::try_from(FakeTelegram::BOT_ID).unwrap());
    assert!(me.is_bot);
    assert_eq!(me.username(), FakeTelegram::BOT_USERNAME);
    assert!(me.can_join_groups);
    assert_eq!(fake.requests()[0].method, "getme");
}

#[tokio::test]
async fn a_dm_arrives_from_its_user_in_their_private_chat() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.inject(UserMessage::dm(42, "hello there").from_user("ann"));
    let message = only_message(&bot).await;
    assert_eq!(message.text(), Some("hello there"));
    assert!(message.chat.is_private());
    assert_eq!(message.chat.id, ChatId(42));
    let from = message.from.as_ref().unwrap();
    assert_eq!((from.id.0, from.is_bot, from.username.as_deref()), (42, false, Some("ann")));
    assert!(message.entities().unwrap_or_default().is_empty());
    assert!(message.reply_to_message().is_none() && message.thread_id.is_none());
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
    let now = i64::try_from(now.as_secs()).unwrap();
    assert!((now - message.date.timestamp()).abs() < 60, "{:?}", message.date);
}

#[tokio::test]
async fn a_group_mention_carries_a_mention_entity_in_utf16_units() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let mut offset = None;
    fake.inject(UserMessage::group(-100, 42, "what is up").mention());
    let message = take(&bot, &mut offset).await;
    assert!(message.chat.is_supergroup());
    assert_eq!(message.text(), Some("@herald_test_bot what is up"));
    let entity = &message.entities().unwrap()[0];
    assert_eq!((&entity.kind, entity.offset, entity.length), (&MessageEntityKind::Mention, 0, 16));

    let text = "héllo 👋 @herald_test_bot";
    fake.inject(UserMessage { mention: true, ..UserMessage::group(-100, 42, text) });
    let message = take(&bot, &mut offset).await;
    let entity = &message.entities().unwrap()[0];
    assert_eq!((entity.offset, entity.length), (9, 16));
    let parsed = message.parse_entities().unwrap();
    assert_eq!(parsed[0].text(), "@herald_test_bot", "teloxide finds the name at the offset");
}

#[tokio::test]
async fn a_command_for_the_bot_is_a_bot_command_entity() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.inject(UserMessage::group(-100, 42, "/new@herald_test_bot"));
    let message = only_message(&bot).await;
    let entity = &message.entities().unwrap()[0];
    assert_eq!(
        (&entity.kind, entity.offset, entity.length),
        (&MessageEntityKind::BotCommand, 0, 20)
    );
}

#[tokio::test]
async fn a_topic_message_carries_its_thread_and_the_topic_root() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.inject(UserMessage::topic(-100, 7, 42, "in a topic"));
    let message = only_message(&bot).await;
    assert_eq!(message.text(), Some("in a topic"));
    assert_eq!(message.thread_id, Some(ThreadId(teloxide::types::MessageId(7))));
    assert!(message.is_topic_message);
    assert!(message.id.0 > 7, "ids in a topic come after the topic's: {}", message.id);
    let teloxide::types::ChatKind::Public(chat) = &message.chat.kind else {
        panic!("{:?}", message.chat)
    };
    let teloxide::types::PublicChatKind::Supergroup(group) = &chat.kind else { panic!("{chat:?}") };
    assert!(group.is_forum);
    let root = message.reply_to_message().expect("topic messages reply to the topic's root");
    assert_eq!(root.id.0, 7);
    assert_eq!(root.forum_topic_created().unwrap().name, "Topic 7");
    assert_ne!(root.from.as_ref().unwrap().id.0, 1000, "the root is not the bot's");
}

#[tokio::test]
async fn a_reply_to_the_bot_nests_the_bots_latest_message() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let mut offset = None;
    fake.inject(UserMessage::group(-100, 42, "yes please").reply_to_bot());
    let first = take(&bot, &mut offset).await;
    let quoted = first.reply_to_message().unwrap();
    let from = quoted.from.as_ref().unwrap();
    assert_eq!((from.id.0, from.is_bot), (1000, true));
    assert!(quoted.id.0 < first.id.0);

    let sent = bot.send_message(ChatId(-100), "an answer").await.unwrap();
    fake.inject(UserMessage::group(-100, 42, "thanks").reply_to_bot());
    let second = take(&bot, &mut offset).await;
    let quoted = second.reply_to_message().unwrap();
    assert_eq!((quoted.id, quoted.text()), (sent.id, Some("an answer")));
}

#[tokio::test]
async fn offsets_confirm_and_forget_the_updates_below_them() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let ids: Vec<i64> = (0..3).map(|i| fake.dm(42, &format!("m{i}"))).collect();
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "{ids:?}");
    assert_eq!(poll(&bot, None).await.len(), 3);
    assert_eq!(fake.pending_updates(), 3, "seeing is not confirming");
    let rest = poll(&bot, Some(ids[1])).await;
    assert_eq!(rest.iter().map(|(id, _)| *id).collect::<Vec<_>>(), ids[1..]);
    let ids_in_chat: Vec<i32> = rest.iter().map(|(_, m)| m.id.0).collect();
    assert_eq!(ids_in_chat, [2, 3], "message ids count per chat");
    assert!(poll(&bot, Some(ids[2] + 1)).await.is_empty());
    assert_eq!(fake.pending_updates(), 0);
    assert_eq!(fake.get_updates_offsets(), [None, Some(ids[1]), Some(ids[2] + 1)]);

    for i in 0..5 {
        fake.dm(7, &format!("n{i}"));
    }
    let limited = bot.get_updates().limit(2).await.unwrap();
    assert_eq!(limited.len(), 2);
}

#[tokio::test]
async fn a_long_poll_returns_as_soon_as_an_update_arrives() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let injector = fake.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(150)).await;
        injector.dm(42, "mid-wait");
    });
    let started = Instant::now();
    let updates = tokio::time::timeout(WAIT, bot.get_updates().timeout(10)).await.unwrap().unwrap();
    let waited = started.elapsed();
    assert_eq!(updates.len(), 1);
    assert!(waited >= Duration::from_millis(100) && waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test]
async fn a_long_poll_without_updates_ends_empty_at_its_timeout() {
    let fake = FakeTelegram::start().await;
    let started = Instant::now();
    let updates = bot(&fake).get_updates().timeout(1).await.unwrap();
    let waited = started.elapsed();
    assert!(updates.is_empty());
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(3), "{waited:?}");
}

#[tokio::test]
async fn a_redelivery_is_the_same_message_under_a_new_update_id() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let first = fake.dm(42, "twice");
    let (_, original) = poll(&bot, None).await.remove(0);
    assert!(poll(&bot, Some(first + 1)).await.is_empty());
    let again = fake.redeliver(first);
    assert!(again > first);
    let updates = poll(&bot, None).await;
    assert_eq!(updates.len(), 1);
    let (id, redelivered) = &updates[0];
    assert_eq!(*id, again);
    assert_eq!((redelivered.chat.id, redelivered.id), (original.chat.id, original.id));
    assert_eq!(redelivered.text(), Some("twice"));
}

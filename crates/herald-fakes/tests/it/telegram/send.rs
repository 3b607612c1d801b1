use std::time::{Duration, Instant};

use herald_fakes::telegram::{EditedMessage, FakeTelegram, SentMessage, UserMessage};
use teloxide::prelude::*;
use teloxide::types::{BotCommand, ChatAction, MessageId, ParseMode, ReplyParameters, ThreadId};
use teloxide::{ApiError, RequestError};

use super::{WAIT, bot, raw};

/// The API error a request must fail with.
fn api_error<T: std::fmt::Debug>(result: Result<T, RequestError>) -> ApiError {
    match result {
        Err(RequestError::Api(error)) => error,
        other => panic!("expected an API error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_sent_message_is_the_bots_and_is_recorded() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.inject(UserMessage::topic(-100, 7, 42, "question"));
    let sent = bot
        .send_message(ChatId(-100), "<b>answer</b>")
        .parse_mode(ParseMode::Html)
        .message_thread_id(ThreadId(MessageId(7)))
        .reply_parameters(ReplyParameters::new(MessageId(8)))
        .await
        .unwrap();
    assert_eq!(sent.from.as_ref().unwrap().id.0, 1000);
    assert_eq!(sent.chat.id, ChatId(-100));
    assert_eq!(sent.id, MessageId(9), "after the topic root and the question");
    assert_eq!(sent.thread_id, Some(ThreadId(MessageId(7))));
    assert_eq!(sent.reply_to_message().unwrap().text(), Some("question"));
    assert_eq!(
        fake.sent(),
        [SentMessage {
            message_id: 9,
            chat_id: -100,
            thread_id: Some(7),
            text: "<b>answer</b>".into(),
            parse_mode: Some("HTML".into()),
            reply_to: Some(8),
        }]
    );

    let other = bot.send_message(ChatId(5), "to a chat never seen").await.unwrap();
    assert!(other.chat.is_private());
    assert_eq!(other.id, MessageId(1), "ids count per chat");
    assert_eq!(fake.sent_to(5).len(), 1);
    assert_eq!(fake.sent_to(-100).len(), 1);
}

#[tokio::test]
async fn text_that_telegram_refuses_is_refused() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    // 2049 emoji are 4098 UTF-16 units though only 2049 characters.
    let long = "👋".repeat(2049);
    assert_eq!(api_error(bot.send_message(ChatId(1), long).await), ApiError::MessageIsTooLong);
    let fits = "👋".repeat(2048);
    bot.send_message(ChatId(1), fits).await.unwrap();
    assert_eq!(api_error(bot.send_message(ChatId(1), " \n").await), ApiError::MessageTextIsEmpty);
    assert_eq!(fake.sent().len(), 1, "refused messages are not sent");
    assert_eq!(fake.requests().len(), 3, "but they are recorded");
}

#[tokio::test]
async fn rejected_markup_fails_only_with_a_parse_mode() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    fake.reject_markup(true);
    let html = bot.send_message(ChatId(42), "<b>hi</b>").parse_mode(ParseMode::Html).await;
    assert!(matches!(api_error(html), ApiError::CantParseEntities(_)));
    bot.send_message(ChatId(42), "<b>hi</b>").await.unwrap();
    let (status, body) = raw(
        &fake,
        FakeTelegram::TOKEN,
        "sendMessage",
        serde_json::json!({"chat_id": 42, "text": "x", "parse_mode": "MarkdownV2"}),
    )
    .await;
    assert_eq!((status, body["error_code"].as_u64()), (400, Some(400)));
    assert!(body["description"].as_str().unwrap().starts_with("Bad Request: can't parse entities"));
    fake.reject_markup(false);
    bot.send_message(ChatId(42), "<b>hi</b>").parse_mode(ParseMode::Html).await.unwrap();
    let modes: Vec<_> = fake.sent_to(42).into_iter().map(|m| m.parse_mode).collect();
    assert_eq!(modes, [None, Some("HTML".to_owned())]);
}

#[tokio::test]
async fn edits_change_the_bots_messages_only() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sent = bot.send_message(ChatId(42), "draft").await.unwrap();
    let edited = bot
        .edit_message_text(ChatId(42), sent.id, "<b>final</b>")
        .parse_mode(ParseMode::Html)
        .await
        .unwrap();
    assert_eq!((edited.id, edited.text()), (sent.id, Some("<b>final</b>")));
    assert!(edited.edit_date().is_some());
    let same =
        bot.edit_message_text(ChatId(42), sent.id, "<b>final</b>").parse_mode(ParseMode::Html);
    assert_eq!(api_error(same.await), ApiError::MessageNotModified);
    let missing = bot.edit_message_text(ChatId(42), MessageId(99), "x").await;
    assert_eq!(api_error(missing), ApiError::MessageToEditNotFound);
    fake.dm(42, "mine");
    let users = bot.edit_message_text(ChatId(42), MessageId(2), "x").await;
    assert_eq!(api_error(users), ApiError::MessageCantBeEdited);
    assert_eq!(
        fake.edits(),
        [EditedMessage {
            chat_id: 42,
            message_id: sent.id.0.into(),
            text: "<b>final</b>".into(),
            parse_mode: Some("HTML".into()),
        }]
    );
}

#[tokio::test]
async fn chat_actions_and_commands_are_recorded() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    bot.send_chat_action(ChatId(42), ChatAction::Typing).await.unwrap();
    bot.send_chat_action(ChatId(-100), ChatAction::UploadDocument).await.unwrap();
    assert_eq!(
        fake.chat_actions(),
        [(42, "typing".to_owned()), (-100, "upload_document".to_owned())]
    );
    let commands = vec![BotCommand::new("new", "start over")];
    bot.set_my_commands(commands.clone()).await.unwrap();
    assert_eq!(bot.get_my_commands().await.unwrap(), commands);
    let recorded = fake.requests();
    assert_eq!(recorded[2].method, "setmycommands");
    assert_eq!(recorded[2].body["commands"][0]["command"], "new");
}

#[tokio::test]
async fn wait_sent_wakes_on_sends_and_gives_up_at_its_timeout() {
    let fake = FakeTelegram::start().await;
    let bot = bot(&fake);
    let sender = bot.clone();
    tokio::spawn(async move {
        for chat in 1..=20 {
            sender.send_message(ChatId(chat), "hi").await.unwrap();
        }
    });
    let all = fake.wait_sent(20, WAIT).await;
    assert_eq!(all.len(), 20);
    let started = Instant::now();
    assert_eq!(fake.wait_sent(21, Duration::from_millis(100)).await.len(), 20);
    assert!(started.elapsed() >= Duration::from_millis(100));

    fake.reset_records();
    assert!(fake.sent().is_empty() && fake.requests().is_empty());
    fake.dm(1, "updates stay");
    assert_eq!(fake.pending_updates(), 1);
}

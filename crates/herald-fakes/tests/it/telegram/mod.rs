//! The fake Telegram Bot API, driven with the real teloxide client (and reqwest where teloxide
//! hides the wire).

mod control;
mod faults;
mod receive;
mod send;
mod webhook;

use std::time::Duration;

use herald_fakes::telegram::FakeTelegram;
use teloxide::prelude::*;
use teloxide::types::{Message, UpdateKind};

/// A teloxide bot pointed at `fake`.
pub fn bot(fake: &FakeTelegram) -> Bot {
    bot_with_token(fake, FakeTelegram::TOKEN)
}

/// A teloxide bot with `token` pointed at `fake`.
pub fn bot_with_token(fake: &FakeTelegram, token: &str) -> Bot {
    Bot::new(token).set_api_url(reqwest::Url::parse(&fake.api_url()).unwrap())
}

/// One `getUpdates` that must succeed without waiting; the updates as (id, message).
pub async fn poll(bot: &Bot, offset: Option<i64>) -> Vec<(i64, Message)> {
    let mut request = bot.get_updates().timeout(0);
    if let Some(offset) = offset {
        request = request.offset(i32::try_from(offset).unwrap());
    }
    request.await.unwrap().into_iter().map(|u| (i64::from(u.id.0), message(u.kind))).collect()
}

/// The one message update waiting now.
pub async fn only_message(bot: &Bot) -> Message {
    let mut updates = poll(bot, None).await;
    assert_eq!(updates.len(), 1, "{updates:?}");
    updates.remove(0).1
}

/// The one message waiting after `offset`, which then moves past it.
pub async fn take(bot: &Bot, offset: &mut Option<i64>) -> Message {
    let mut updates = poll(bot, *offset).await;
    assert_eq!(updates.len(), 1, "{updates:?}");
    let (id, message) = updates.remove(0);
    *offset = Some(id + 1);
    message
}

fn message(kind: UpdateKind) -> Message {
    match kind {
        UpdateKind::Message(message) => message,
        other => panic!("not a message update: {other:?}"),
    }
}

/// A raw Bot API call with reqwest: status and JSON body.
pub async fn raw(
    fake: &FakeTelegram,
    token: &str,
    method: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value) {
    let url = format!("{}/bot{token}/{method}", fake.api_url());
    let response = reqwest::Client::new().post(url).json(&body).send().await.unwrap();
    (response.status().as_u16(), response.json().await.unwrap())
}

/// Long enough for anything local, short enough to fail fast.
pub const WAIT: Duration = Duration::from_secs(5);

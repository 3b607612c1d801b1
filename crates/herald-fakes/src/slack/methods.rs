//! The Web API methods, checked as Slack checks them: `auth.test`, `apps.connections.open`
//! (a single-use Socket Mode URL), `chat.postMessage` and `chat.update` (`channel_not_found`,
//! `no_text`, `msg_too_long` past [`MAX_TEXT`] characters, `invalid_blocks_format`,
//! `message_not_found`, `cant_update_message`), `reactions.add` and `reactions.remove`
//! (`invalid_name`, `no_item_specified`, `bad_timestamp`, `message_not_found`,
//! `already_reacted`, `no_reaction`), `conversations.info` and `assistant.threads.setStatus`;
//! `conversations.history` and `conversations.replies` are in `history.rs`.

use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::FakeSlack;
use super::events::stored_message;
use super::server::Ctx;
use super::state::{Channel, Posted, Reaction, State, Stored, Updated};
use super::web::{Args, Caller, failure};

/// The longest `text` Slack takes, in characters.
pub const MAX_TEXT: usize = 40_000;
/// The most blocks one message may have.
const MAX_BLOCKS: usize = 50;

pub(crate) fn answer(ctx: &Ctx, method: &str, _caller: Caller, args: &Args) -> Response {
    let answered = match method {
        "auth.test" => Ok(auth_test()),
        "apps.connections.open" => Ok(connections_open(ctx)),
        "chat.postMessage" => post_message(ctx, args),
        "chat.update" => update(ctx, args),
        "reactions.add" => react(ctx, args, true),
        "reactions.remove" => react(ctx, args, false),
        "conversations.info" => conversations_info(ctx, args),
        "assistant.threads.setStatus" => set_status(ctx, args),
        "conversations.history" | "conversations.replies" => {
            return super::history::answer(ctx, method, args);
        }
        _ => Err("unknown_method"),
    };
    match answered {
        Ok(body) => Json(body).into_response(),
        Err(error) => failure(error),
    }
}

fn auth_test() -> Value {
    json!({
        "ok": true, "url": "https://herald-test.slack.com/", "team": "herald test",
        "user": FakeSlack::BOT_NAME, "team_id": FakeSlack::TEAM_ID,
        "user_id": FakeSlack::BOT_USER, "bot_id": FakeSlack::BOT_ID,
        "is_enterprise_install": false,
    })
}

fn connections_open(ctx: &Ctx) -> Value {
    let ticket = ctx.shared.lock().next_ticket();
    let url = format!("{}/link/?ticket={ticket}&app_id={}", ctx.socket_url, FakeSlack::APP_ID);
    json!({"ok": true, "url": url})
}

/// `ts`-shaped: digits, a dot, digits.
fn valid_ts(ts: &str) -> bool {
    ts.split_once('.').is_some_and(|(secs, micros)| {
        !secs.is_empty()
            && !micros.is_empty()
            && secs.bytes().chain(micros.bytes()).all(|b| b.is_ascii_digit())
    })
}

/// The channel `id` names: a known conversation, or a user id for the bot's DM with someone who
/// wrote to it (Slack takes a user id there).
fn resolve(state: &mut State, id: Option<String>) -> Result<String, &'static str> {
    let id = id.ok_or("channel_not_found")?;
    if state.channels.contains_key(&id) {
        return Ok(id);
    }
    let known_user = id.starts_with(['U', 'W'])
        && state.messages.iter().any(|m| m.user.as_deref() == Some(id.as_str()));
    if !known_user {
        return Err("channel_not_found");
    }
    let dm = FakeSlack::dm_channel(&id);
    state.remember_channel(&dm, Some(&id));
    Ok(dm)
}

/// The text and blocks of a message to post or change, or Slack's error for them.
fn content(args: &Args) -> Result<(String, Option<Value>), &'static str> {
    let blocks = args.json("blocks").map_err(|()| "invalid_blocks_format")?;
    if let Some(blocks) = &blocks {
        let Some(list) = blocks.as_array() else { return Err("invalid_blocks_format") };
        let typed = list.iter().all(|b| b["type"].as_str().is_some_and(|t| !t.is_empty()));
        if list.len() > MAX_BLOCKS || !typed {
            return Err("invalid_blocks");
        }
    }
    let attachments = args.json("attachments").map_err(|()| "invalid_attachments")?;
    let text = args.text("text").unwrap_or_default();
    let has_blocks = blocks.as_ref().and_then(Value::as_array).is_some_and(|b| !b.is_empty());
    let has_attachments =
        attachments.as_ref().and_then(Value::as_array).is_some_and(|a| !a.is_empty());
    if text.is_empty() && !has_blocks && !has_attachments {
        return Err("no_text");
    }
    if text.chars().count() > MAX_TEXT {
        return Err("msg_too_long");
    }
    Ok((text, blocks))
}

/// The bot's message as its `message` event comes back.
fn own_event(stored: &Stored) -> Value {
    let mut event = stored_message(stored);
    event["channel"] = json!(stored.channel);
    event["channel_type"] = json!(Channel::kind(&stored.channel));
    event["event_ts"] = json!(stored.ts);
    event
}

/// A message's `metadata` as Slack takes it: an object with a non-empty `event_type` and, if
/// any, an object `event_payload`.
fn metadata(args: &Args) -> Result<Option<Value>, &'static str> {
    let Some(metadata) = args.json("metadata").map_err(|()| "invalid_metadata_format")? else {
        return Ok(None);
    };
    let typed = metadata["event_type"].as_str().is_some_and(|t| !t.is_empty());
    let payload = metadata.get("event_payload").is_none_or(Value::is_object);
    if !metadata.is_object() || !typed || !payload {
        return Err("invalid_metadata_format");
    }
    Ok(Some(metadata))
}

fn post_message(ctx: &Ctx, args: &Args) -> Result<Value, &'static str> {
    let (text, blocks) = content(args)?;
    let metadata = metadata(args)?;
    let thread_ts = args.required("thread_ts");
    let mut state = ctx.shared.lock();
    let channel = resolve(&mut state, args.required("channel"))?;
    let thread_found = thread_ts.as_deref().is_some_and(|parent| {
        valid_ts(parent) && state.messages.iter().any(|m| m.channel == channel && m.ts == parent)
    });
    let ts = state.next_ts();
    let stored = Stored {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts: thread_ts.clone(),
        user: Some(FakeSlack::BOT_USER.to_owned()),
        bot_id: Some(FakeSlack::BOT_ID.to_owned()),
        text: text.clone(),
        deleted: false,
        reactions: Vec::new(),
        metadata: metadata.clone(),
    };
    let mut message = stored_message(&stored);
    if let Some(blocks) = &blocks {
        message["blocks"] = blocks.clone();
    }
    let event = own_event(&stored);
    state.messages.push(stored);
    state.posted.push(Posted {
        channel: channel.clone(),
        ts: ts.clone(),
        thread_ts,
        thread_found,
        text,
        blocks,
        mrkdwn: args.flag("mrkdwn"),
        metadata,
    });
    ctx.shared.echo(&mut state, event);
    Ok(json!({"ok": true, "channel": channel, "ts": ts, "message": message}))
}

fn update(ctx: &Ctx, args: &Args) -> Result<Value, &'static str> {
    let (text, _) = content(args)?;
    let ts = args.required("ts").ok_or("message_not_found")?;
    let mut state = ctx.shared.lock();
    let channel = resolve(&mut state, args.required("channel"))?;
    let edit_ts = state.next_ts();
    let stored = state.message_mut(&channel, &ts).ok_or("message_not_found")?;
    if stored.bot_id.as_deref() != Some(FakeSlack::BOT_ID) {
        return Err("cant_update_message");
    }
    let previous = stored_message(stored);
    stored.text = text.clone();
    let mut message = stored_message(stored);
    message["edited"] = json!({"user": FakeSlack::BOT_USER, "ts": edit_ts});
    let event = json!({
        "type": "message", "subtype": "message_changed", "hidden": true, "channel": channel,
        "channel_type": Channel::kind(&channel), "ts": edit_ts, "event_ts": edit_ts,
        "message": message, "previous_message": previous,
    });
    state.updated.push(Updated { channel: channel.clone(), ts: ts.clone(), text: text.clone() });
    ctx.shared.echo(&mut state, event);
    Ok(json!({"ok": true, "channel": channel, "ts": ts, "text": text, "message": message}))
}

/// An emoji name as Slack takes it: no surrounding colons, lowercase letters, digits, `_`,
/// `+`, `-`, `'`, and a `::skin-tone-N` suffix.
fn valid_name(name: &str) -> bool {
    let base = name.split_once("::").map_or(name, |(base, _)| base);
    !base.is_empty()
        && base
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_+-'".contains(&b))
}

fn react(ctx: &Ctx, args: &Args, add: bool) -> Result<Value, &'static str> {
    let name = args.required("name").filter(|n| valid_name(n)).ok_or("invalid_name")?;
    let (Some(channel), Some(timestamp)) = (args.required("channel"), args.required("timestamp"))
    else {
        return Err("no_item_specified");
    };
    if !valid_ts(&timestamp) {
        return Err("bad_timestamp");
    }
    let mut state = ctx.shared.lock();
    if !state.channels.contains_key(&channel) {
        return Err("channel_not_found");
    }
    let stored = state.message_mut(&channel, &timestamp).ok_or("message_not_found")?;
    let present = stored.reactions.iter().position(|r| *r == name);
    match (add, present) {
        (true, Some(_)) => return Err("already_reacted"),
        (true, None) => stored.reactions.push(name.clone()),
        (false, None) => return Err("no_reaction"),
        (false, Some(index)) => {
            stored.reactions.remove(index);
        }
    }
    state.reactions.push(Reaction { channel, timestamp, name, added: add });
    Ok(json!({"ok": true}))
}

fn conversations_info(ctx: &Ctx, args: &Args) -> Result<Value, &'static str> {
    let id = args.required("channel").ok_or("channel_not_found")?;
    let state = ctx.shared.lock();
    let channel = state.channels.get(&id).ok_or("channel_not_found")?;
    let kind = Channel::kind(&channel.id);
    let mut info = json!({
        "id": channel.id, "created": 1_700_000_000, "is_archived": false, "is_member": true,
        "is_channel": kind == "channel", "is_group": kind == "group", "is_im": kind == "im",
        "is_mpim": false, "is_private": kind != "channel", "is_general": false,
    });
    match &channel.user {
        Some(user) => info["user"] = json!(user),
        None => info["name"] = json!(format!("channel-{}", channel.id.to_ascii_lowercase())),
    }
    Ok(json!({"ok": true, "channel": info}))
}

fn set_status(ctx: &Ctx, args: &Args) -> Result<Value, &'static str> {
    let (Some(channel), Some(thread_ts)) =
        (args.required("channel_id"), args.required("thread_ts"))
    else {
        return Err("invalid_arguments");
    };
    // `status` may be empty: that clears it.
    if args.text("status").is_none() || !valid_ts(&thread_ts) {
        return Err("invalid_arguments");
    }
    if !ctx.shared.lock().channels.contains_key(&channel) {
        return Err("channel_not_found");
    }
    Ok(json!({"ok": true}))
}

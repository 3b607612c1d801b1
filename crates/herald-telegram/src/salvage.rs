//! A `getUpdates` answer teloxide refused as invalid JSON, read again update by update.
//!
//! Telegram writes text with a lone UTF-16 surrogate (an emoji cut in half) as a `\ud83d` escape,
//! which is not Unicode: serde_json refuses it, teloxide then refuses the whole batch, and a batch
//! never read never moves the offset, so one such message would stop the bot for everyone. Here
//! lone surrogates become U+FFFD, and an update that still cannot be read is kept as
//! `UpdateKind::Error` with its id only, so that the poller skips it and the offset moves on.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;
use teloxide::RequestError;
use teloxide::types::{Update, UpdateId, UpdateKind};
use tracing::{debug, warn};

/// A successful answer, each update kept as its own JSON text to be read on its own.
#[derive(Deserialize)]
struct Answer<'a> {
    ok: bool,
    #[serde(borrow)]
    result: Vec<&'a RawValue>,
}

/// The updates of a batch teloxide refused as invalid JSON; any other error is given back.
pub(crate) fn batch(err: RequestError) -> Result<Vec<Update>, RequestError> {
    if let RequestError::InvalidJson { raw, .. } = &err
        && let Some(updates) = updates(raw)
    {
        return Ok(updates);
    }
    Err(err)
}

/// The updates of `answer`, or `None` when it is not a successful `getUpdates` answer at all.
fn updates(answer: &str) -> Option<Vec<Update>> {
    // Raw values skip string contents unchecked, so lone surrogates do not fail this first pass.
    let answer: Answer<'_> = serde_json::from_str(answer).ok()?;
    if !answer.ok {
        return None;
    }
    debug!(updates = answer.result.len(), "reading a batch teloxide refused one update at a time");
    Some(answer.result.into_iter().filter_map(|raw| update(raw.get())).collect())
}

/// One update: as it is, repaired, or an `UpdateKind::Error`; `None` when it has no id.
pub(crate) fn update(text: &str) -> Option<Update> {
    if let Ok(update) = serde_json::from_str::<Update>(text) {
        return Some(update);
    }
    let repaired = repair_surrogates(text);
    let id = serde_json::from_str::<Value>(&repaired)
        .ok()
        .and_then(|value| value.get("update_id")?.as_u64())
        .and_then(|id| u32::try_from(id).ok());
    let Some(id) = id else {
        warn!("telegram update skipped: it has no update_id");
        return None;
    };
    if matches!(repaired, Cow::Owned(_))
        && let Ok(update) = serde_json::from_str::<Update>(&repaired)
    {
        warn!(update = id, "telegram update held lone UTF-16 surrogates; read with U+FFFD");
        return Some(update);
    }
    // The body is dropped, not kept: it is the user's text and must not reach a log.
    Some(Update { id: UpdateId(id), kind: UpdateKind::Error(Value::Null) })
}

/// `json` with each `\uXXXX` escape of a lone UTF-16 surrogate (one not in a high-low pair)
/// replaced by `\ufffd`, the replacement character.
pub(crate) fn repair_surrogates(json: &str) -> Cow<'_, str> {
    let bytes = json.as_bytes();
    let mut repaired = String::new();
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        if bytes[at] != b'\\' {
            at += 1;
            continue;
        }
        let Some(unit) = escaped_unit(bytes, at) else {
            // Another escape, `\\` included: its second byte cannot start an escape.
            at += 2;
            continue;
        };
        let high = (0xD800..0xDC00).contains(&unit);
        let low = (0xDC00..0xE000).contains(&unit);
        if high && escaped_unit(bytes, at + 6).is_some_and(|next| (0xDC00..0xE000).contains(&next))
        {
            at += 12;
        } else if high || low {
            repaired.push_str(&json[copied..at]);
            repaired.push_str("\\ufffd");
            at += 6;
            copied = at;
        } else {
            at += 6;
        }
    }
    if copied == 0 {
        return Cow::Borrowed(json);
    }
    repaired.push_str(&json[copied..]);
    Cow::Owned(repaired)
}

/// The code unit of the `\uXXXX` escape at `at`, if there is one.
fn escaped_unit(bytes: &[u8], at: usize) -> Option<u16> {
    let escape = bytes.get(at..at + 6)?;
    let (prefix, hex) = escape.split_at(2);
    if prefix != b"\\u" || !hex.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // Four ASCII hex digits: both conversions hold.
    u16::from_str_radix(std::str::from_utf8(hex).ok()?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(json: &str, expected: &str) {
        assert_eq!(repair_surrogates(json), expected, "for {json}");
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        check(r#""hi \ud83d""#, r#""hi \ufffd""#);
        check(r#""\ude00 low""#, r#""\ufffd low""#);
        check(r#""\uD83D\uDE00""#, r#""\uD83D\uDE00""#);
        check(r#""\ud83d\ude00 \ud83D\uDe00""#, r#""\ud83d\ude00 \ud83D\uDe00""#);
        check(r#""\uDE00\uD83D""#, r#""\ufffd\ufffd""#);
        check(r#""\ud83d\ud83d\ude00""#, r#""\ufffd\ud83d\ude00""#);
        check(r#""\ud83d\n""#, r#""\ufffd\n""#);
        check(r#""\ud83d\u0041""#, r#""\ufffd\u0041""#);
        check(r#""cut at the end \uD83D"#, r#""cut at the end \ufffd"#);
    }

    #[test]
    fn only_escapes_are_touched() {
        check(r#""a backslash, then ud83d: \\ud83d""#, r#""a backslash, then ud83d: \\ud83d""#);
        check(r#""\\\ud83d""#, r#""\\\ufffd""#);
        check(r#""\u00e9 é \"\ud83d\" 👋""#, r#""\u00e9 é \"\ufffd\" 👋""#);
        check(r#""\ud83""#, r#""\ud83""#);
        check(r#""\u+d83""#, r#""\u+d83""#);
        check("\\", "\\");
        assert!(matches!(repair_surrogates(r#""\ud83d\ude00""#), Cow::Borrowed(_)));
    }

    #[test]
    fn a_refused_batch_is_read_update_by_update() {
        let message = |text: &str| {
            format!(
                r#"{{"message_id":1,"date":1,"chat":{{"id":7,"type":"private","first_name":"A"}},"from":{{"id":7,"is_bot":false,"first_name":"A"}},"text":{text}}}"#
            )
        };
        let answer = format!(
            r#"{{"ok":true,"result":[{{"update_id":1,"message":{}}},{{"update_id":2,"message":{}}},{{"update_id":3,"message":{{"chat":"\udc00"}}}},{{"message":{}}},{{"update_id":5,"message":{}}}]}}"#,
            message(r#""fine""#),
            message(r#""hi \ud83d""#),
            message(r#""no id \ud83d""#),
            message(r#""also fine""#),
        );
        let refused = RequestError::InvalidJson {
            source: std::sync::Arc::new(serde_json::from_str::<Value>("x").unwrap_err()),
            raw: answer.into(),
        };
        let read: Vec<(u32, Option<String>)> = batch(refused)
            .unwrap()
            .into_iter()
            .map(|update| {
                let text = match update.kind {
                    UpdateKind::Message(message) => message.text().map(str::to_owned),
                    UpdateKind::Error(_) => None,
                    other => panic!("{other:?}"),
                };
                (update.id.0, text)
            })
            .collect();
        let text = |s: &str| Some(s.to_owned());
        assert_eq!(
            read,
            [(1, text("fine")), (2, text("hi \u{FFFD}")), (3, None), (5, text("also fine"))]
        );
    }

    #[test]
    fn other_failures_stay_failures() {
        for raw in ["<html>bad gateway</html>", r#"{"ok":false,"description":"x \ud83d"}"#] {
            let source = std::sync::Arc::new(serde_json::from_str::<Value>("x").unwrap_err());
            let refused = RequestError::InvalidJson { source, raw: raw.into() };
            assert!(matches!(batch(refused), Err(RequestError::InvalidJson { .. })), "{raw}");
        }
        let network = RequestError::Io(std::sync::Arc::new(std::io::Error::other("down")));
        assert!(matches!(batch(network), Err(RequestError::Io(_))));
    }
}

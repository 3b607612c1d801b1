//! A markdown reply as Telegram messages: chunks whose HTML fits one message.

use herald_core::{LengthUnit, chunk};

use crate::MAX_MESSAGE_LEN;
use crate::markup::to_telegram_html;

/// Below this many units per chunk, re-splitting is pointless: send the markdown as plain text.
const MIN_LIMIT: usize = 64;

/// One message of a reply, in both forms: HTML to send, markdown to fall back on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Piece {
    /// The chunk as Telegram HTML, when it converted to something that fits.
    pub(crate) html: Option<String>,
    /// The markdown chunk, sent without a parse mode when Telegram rejects the HTML.
    pub(crate) plain: String,
}

/// Splits `markdown` into messages of at most 4096 UTF-16 units each, in order.
pub(crate) fn pieces(markdown: &str) -> Vec<Piece> {
    let mut out = Vec::new();
    split_into(markdown, MAX_MESSAGE_LEN, &mut out);
    out
}

fn split_into(markdown: &str, limit: usize, out: &mut Vec<Piece>) {
    for part in chunk(markdown, limit, LengthUnit::Utf16) {
        if part.trim().is_empty() {
            continue;
        }
        let html = to_telegram_html(&part);
        let len = LengthUnit::Utf16.len(&html);
        if len <= MAX_MESSAGE_LEN {
            let html = Some(html).filter(|h| !h.trim().is_empty());
            out.push(Piece { html, plain: part });
            continue;
        }
        // Escapes and tags made the chunk longer than the markdown: split it finer, shrinking
        // in proportion and by at least a tenth so that this ends.
        let smaller = (limit * MAX_MESSAGE_LEN / len).min(limit - limit / 10 - 1);
        if smaller < MIN_LIMIT {
            out.push(Piece { html: None, plain: part });
        } else {
            split_into(&part, smaller, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utf16(text: &str) -> usize {
        LengthUnit::Utf16.len(text)
    }

    #[test]
    fn a_short_reply_is_one_html_message() {
        let pieces = pieces("**hi** there");
        assert_eq!(pieces.len(), 1);
        assert_eq!(pieces[0].plain, "**hi** there");
        assert!(pieces[0].html.as_deref().is_some_and(|h| h.contains("<b>hi</b>")));
    }

    #[test]
    fn markup_that_grows_past_the_limit_is_split_again() {
        // Every `<` becomes `&lt;`: 4200 characters of markdown are 6300 units of HTML.
        let text = "a < b ".repeat(700);
        let pieces = pieces(&text);
        assert!(pieces.len() > 1);
        for piece in &pieces {
            let html = piece.html.as_deref().expect("each piece converts");
            assert!(utf16(html) <= MAX_MESSAGE_LEN, "{} units", utf16(html));
        }
        let rejoined: String =
            pieces.iter().map(|p| p.plain.as_str()).collect::<Vec<_>>().join(" ");
        assert_eq!(rejoined.matches('<').count(), 700);
    }

    #[test]
    fn an_empty_reply_has_no_messages() {
        assert!(pieces("  \n").is_empty());
    }
}

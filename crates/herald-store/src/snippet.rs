//! Snippets of word-index hits, made from the message text here rather than by FTS5.
//!
//! FTS5's `snippet()` needs the query evaluated again over the hits: for a rare phrase with a
//! common word in it (`"restart the server"`), that is another walk through the whole index,
//! as long as the search itself. The hits are already known, so their text only needs the
//! query's words marked: split and folded as the index's tokenizer does (`unicode61
//! remove_diacritics 2`: letters, digits and private-use characters make words; case and
//! accents do not count), a phrase marked as one span, a prefix marking the whole word. A hit
//! on a tool's name alone shows the start of its text, unmarked.

use unicode_normalization::UnicodeNormalization;
use unicode_normalization::char::is_combining_mark;

/// Words shown around the best hits, as FTS5's `snippet(..., 16)`.
const WORDS: usize = 16;
/// The most of a message's text (in bytes) looked at for its snippet.
const SCANNED: usize = 64 * 1024;

/// What to mark: each phrase of the query as folded words, and whether its last is a prefix.
#[derive(Debug)]
pub(crate) struct Marks {
    phrases: Vec<(Vec<String>, bool)>,
}

/// A word of a text: where it is, and how the index sees it.
struct Word {
    start: usize,
    end: usize,
    folded: String,
}

impl Marks {
    /// The marks for the query's phrases (`(text, prefix)`).
    pub(crate) fn new<'a>(phrases: impl IntoIterator<Item = (&'a str, bool)>) -> Marks {
        let phrases = phrases
            .into_iter()
            .map(|(text, prefix)| (words(text).into_iter().map(|w| w.folded).collect(), prefix))
            .filter(|(words, _): &(Vec<String>, bool)| !words.is_empty())
            .collect();
        Marks { phrases }
    }

    /// Up to [`WORDS`] words of `text` around its best stretch of matches, each match between
    /// `open` and `close`, with `…` where text was left out.
    pub(crate) fn snippet(&self, text: &str, open: &str, close: &str) -> String {
        // A long tool output is looked at only so far: a snippet is a glimpse, not a scan.
        let whole = text.len();
        let text = &text[..text.floor_char_boundary(SCANNED)];
        let words = words(text);
        let spans = self.matches(&words);
        let (from, to) = window(words.len(), &spans);
        let mut out = String::new();
        if from > 0 {
            out.push('…');
        }
        let start = if from == 0 { 0 } else { words[from].start };
        let end = if to == words.len() { text.len() } else { words[to - 1].end };
        let mut at = start;
        for &(first, last) in spans.iter().filter(|(first, last)| *first >= from && *last < to) {
            out.push_str(&text[at..words[first].start]);
            out.push_str(open);
            out.push_str(&text[words[first].start..words[last].end]);
            out.push_str(close);
            at = words[last].end;
        }
        out.push_str(&text[at..end]);
        if to < words.len() || text.len() < whole {
            out.push('…');
        }
        out
    }

    /// The matches in `words`, as (first, last) word indexes, in order and not overlapping.
    fn matches(&self, words: &[Word]) -> Vec<(usize, usize)> {
        let mut spans = Vec::new();
        let mut i = 0;
        while i < words.len() {
            let longest = self
                .phrases
                .iter()
                .filter(|(phrase, prefix)| matches_at(words, i, phrase, *prefix))
                .map(|(phrase, _)| phrase.len())
                .max();
            match longest {
                Some(len) => {
                    spans.push((i, i + len - 1));
                    i += len;
                }
                None => i += 1,
            }
        }
        spans
    }
}

fn matches_at(words: &[Word], at: usize, phrase: &[String], prefix: bool) -> bool {
    let Some(tail) = words.get(at..at + phrase.len()) else { return false };
    tail.iter().zip(phrase).enumerate().all(|(j, (word, want))| {
        if prefix && j + 1 == phrase.len() {
            word.folded.starts_with(want.as_str())
        } else {
            word.folded == *want
        }
    })
}

/// The words shown, `from..to`: the [`WORDS`] that hold the most matches, starting at one.
fn window(len: usize, spans: &[(usize, usize)]) -> (usize, usize) {
    if len <= WORDS {
        return (0, len);
    }
    // The earliest of the fullest windows; spans are in order and do not overlap, so the end
    // of the window only moves forward.
    let (mut best, mut most, mut end) = (0, 0, 0);
    for (i, &(first, _)) in spans.iter().enumerate() {
        end = end.max(i);
        while end < spans.len() && spans[end].1 < first + WORDS {
            end += 1;
        }
        if end - i > most {
            (best, most) = (first, end - i);
        }
    }
    let from = best.min(len - WORDS);
    (from, from + WORDS)
}

/// The words of `text` as the index's tokenizer splits and folds them.
fn words(text: &str) -> Vec<Word> {
    let mut words = Vec::new();
    let mut current: Option<Word> = None;
    for (at, c) in text.char_indices() {
        let end = at + c.len_utf8();
        if is_word_char(c) {
            let word =
                current.get_or_insert_with(|| Word { start: at, end, folded: String::new() });
            word.end = end;
            fold_into(c, &mut word.folded);
        } else if let Some(word) = current.take() {
            words.push(word);
        }
    }
    words.extend(current);
    words
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || is_combining_mark(c) || ('\u{E000}'..='\u{F8FF}').contains(&c)
}

/// Lower case without accents: `É` and `é` are `e`, as the index folds them.
fn fold_into(c: char, out: &mut String) {
    if c.is_ascii() {
        out.push(c.to_ascii_lowercase());
        return;
    }
    for base in std::iter::once(c).nfd().filter(|d| !is_combining_mark(*d)) {
        out.extend(base.to_lowercase());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(phrases: &[(&str, bool)], text: &str, expected: &str) {
        let marks = Marks::new(phrases.iter().copied());
        assert_eq!(marks.snippet(text, "[", "]"), expected, "{phrases:?} in {text:?}");
    }

    #[test]
    fn words_phrases_and_prefixes_are_marked() {
        check(&[("router", false)], "The Router, router!", "The [Router], [router]!");
        check(&[("exit code", false)], "exit code 3, not exit 3", "[exit code] 3, not exit 3");
        check(&[("deploy", true)], "Deployed by the DEPLOYER", "[Deployed] by the [DEPLOYER]");
        check(&[("chat-send", false)], "run chat send now", "run [chat send] now");
        check(&[("cafe", false)], "un café, Café", "un [café], [Café]");
        check(&[("v2.1", false)], "upgrade to v2.1 today", "upgrade to [v2.1] today");
        check(&[("nothing", false)], "no match here", "no match here");
    }

    #[test]
    fn long_text_shows_the_fullest_stretch_of_matches() {
        let text = (0..40).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ");
        // Near the end, the window moves back to stay full.
        let end = format!("…{} [w30] {}", words_from(24, 29), words_from(31, 39));
        check(&[("w30", false)], &text, &end);
        check(
            &[("w2", false), ("w20", false), ("w22", false)],
            &text,
            &format!("…[w20] w21 [w22] {}…", words_from(23, 35)),
        );
        check(&[("w0", false)], &text, &format!("[w0] {}…", words_from(1, 15)));
    }

    fn words_from(from: usize, to: usize) -> String {
        (from..=to).map(|i| format!("w{i}")).collect::<Vec<_>>().join(" ")
    }

    #[test]
    fn a_long_text_is_looked_at_only_so_far() {
        let text = "router ".repeat(100_000);
        let snippet = Marks::new([("router", false)]).snippet(&text, "[", "]");
        assert!(snippet.starts_with("[router] [router]") && snippet.ends_with('…'), "{snippet}");
        let late = format!("{}needle", "x ".repeat(50_000));
        assert!(!Marks::new([("needle", false)]).snippet(&late, "[", "]").contains('['));
        // One word longer than what is looked at still says that text was left out.
        let word = "a".repeat(SCANNED + 10);
        let snippet = Marks::new([("b", false)]).snippet(&word, "[", "]");
        assert!(snippet.ends_with('…') && snippet.len() < word.len(), "{}", snippet.len());
    }

    #[test]
    fn any_text_gives_a_snippet() {
        let marks = Marks::new([("é", false), ("x", true)]);
        for text in ["", "…", "e\u{301}", "🙂 x🙂x", "\u{E000}telegram", "a\nb\tc"] {
            let _ = marks.snippet(text, "**", "**");
        }
        assert_eq!(marks.snippet("e\u{301}t\u{e9}", "[", "]"), "e\u{301}t\u{e9}");
    }
}

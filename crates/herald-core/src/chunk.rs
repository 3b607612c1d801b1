//! Splitting a markdown reply into messages that each fit a platform's length limit.
//!
//! A split falls on the best boundary before the limit: a blank line, else a line break, else
//! other whitespace, else between two chars (never inside one, so never inside a UTF-16
//! surrogate pair). A split inside a fenced code block ends the chunk with a closing fence line
//! and starts the next by reopening the fence, info string and all, so every chunk renders on its
//! own. Lengths are summed and boundaries listed once up front, so chunking stays linear in the
//! text instead of re-measuring the remainder for every chunk.

use std::ops::Range;

use crate::LengthUnit;

/// Splits the markdown `text` into chunks of at most `max` measured in `unit`, in reading order.
///
/// Text that fits comes back as one chunk, unchanged; text that is only whitespace gives none.
/// Whitespace where a split falls is dropped; nothing else is lost or reordered. A split inside a
/// fenced code block closes the fence at the end of the chunk and reopens it at the start of the
/// next; those added lines count toward `max`. Where `max` leaves no room for them around one
/// char, that block is split without repair, so its chunks' fences do not balance. A char is
/// never split: a `max` below one char's length (0, or 1 for an emoji in UTF-16) gives that char
/// a chunk of its own, longer than `max`.
pub fn chunk(text: &str, max: usize, unit: LengthUnit) -> Vec<String> {
    plan(text, max, unit).into_iter().map(|piece| piece.assemble(text)).collect()
}

/// One chunk before assembly: the span of the input it carries and the fence lines added around it.
#[derive(Debug)]
struct Piece {
    reopen: String,
    body: Range<usize>,
    close: String,
}

impl Piece {
    fn assemble(&self, text: &str) -> String {
        [self.reopen.as_str(), &text[self.body.clone()], self.close.as_str()].concat()
    }
}

fn plan(text: &str, max: usize, unit: LengthUnit) -> Vec<Piece> {
    if text.chars().all(char::is_whitespace) {
        return Vec::new();
    }
    if unit.len(text) <= max {
        return vec![Piece { reopen: String::new(), body: 0..text.len(), close: String::new() }];
    }
    Splitter::new(text, max, unit).pieces()
}

/// A fenced code block of the input.
#[derive(Debug)]
struct Fence {
    /// The opening line, without its line break.
    open: Range<usize>,
    /// The closing line; empty at the end of the text when the block is never closed.
    close: Range<usize>,
    /// The opening line and a line break, to start a chunk that begins inside the block.
    reopen: String,
    reopen_len: usize,
    /// A line break and a closing line, to end a chunk that stops inside the block.
    closing: String,
    closing_len: usize,
    /// Whether `max` leaves room for `reopen`, `closing` and one char between them; splits in a
    /// block that is not repairable get no fence lines added.
    repairable: bool,
}

/// Where a split ends one chunk and where the next one starts, the whitespace between dropped.
#[derive(Debug, Clone, Copy)]
struct Split {
    end: usize,
    next: usize,
}

/// A split chosen for the chunk starting at some position, with the fence lines it needs.
#[derive(Debug)]
struct Cut<'a> {
    end: usize,
    next: usize,
    reopen: Option<&'a Fence>,
    close: Option<&'a Fence>,
}

#[derive(Debug)]
struct Splitter<'a> {
    text: &'a str,
    max: usize,
    /// `units[i]` is the length of the chars that start before byte `i`.
    units: Vec<usize>,
    fences: Vec<Fence>,
    /// Whitespace runs by strength: blank lines, then line breaks, then spaces; each by position.
    splits: [Vec<Split>; 3],
}

impl<'a> Splitter<'a> {
    fn new(text: &'a str, max: usize, unit: LengthUnit) -> Self {
        let mut units = Vec::with_capacity(text.len() + 1);
        units.push(0);
        let mut total = 0;
        for c in text.chars() {
            total += match unit {
                LengthUnit::Utf16 => c.len_utf16(),
                LengthUnit::Chars => 1,
            };
            units.extend(std::iter::repeat_n(total, c.len_utf8()));
        }
        Splitter { text, max, units, fences: fences(text, max, unit), splits: splits(text) }
    }

    fn pieces(&self) -> Vec<Piece> {
        let stop = self.text.trim_end_matches(is_break).len();
        let mut pos = self.settle(0).next;
        let mut out = Vec::new();
        while pos < stop {
            let reopen = self.fence_at(pos);
            let head = reopen.map_or(0, |f| f.reopen_len);
            let cut = if head + self.units[stop] - self.units[pos] <= self.max {
                Cut { end: stop, next: stop, reopen, close: None }
            } else {
                self.best(pos, reopen).unwrap_or_else(|| self.forced(pos, reopen))
            };
            if !self.text[pos..cut.end].chars().all(char::is_whitespace) {
                out.push(Piece {
                    reopen: cut.reopen.map(|f| f.reopen.clone()).unwrap_or_default(),
                    body: pos..cut.end,
                    close: cut.close.map(|f| f.closing.clone()).unwrap_or_default(),
                });
            }
            pos = cut.next;
        }
        out
    }

    /// The best split for a chunk starting at `pos`: the last boundary of the strongest kind
    /// that fits, else the last char boundary that fits.
    fn best<'s>(&'s self, pos: usize, reopen: Option<&'s Fence>) -> Option<Cut<'s>> {
        let head = reopen.map_or(0, |f| f.reopen_len);
        let target = self.units[pos] + (self.max - head);
        let limit = pos + self.units[pos..].partition_point(|&u| u <= target) - 1;
        for class in &self.splits {
            let below = class.partition_point(|s| s.end <= limit);
            let found = class[..below]
                .iter()
                .rev()
                .take_while(|s| s.end > pos)
                .find_map(|&split| self.cut(pos, reopen, split));
            if found.is_some() {
                return found;
            }
        }
        let mut at = limit;
        while at > pos {
            let split = self.settle(at);
            if split.end > pos
                && let Some(cut) = self.cut(pos, reopen, split)
            {
                return Some(cut);
            }
            // Every position in a whitespace run settles the same: skip the run whole.
            at = prev_boundary(self.text, split.end.min(at));
        }
        None
    }

    /// The chunk starting at `pos` cut at `split`, if it fits and spares every fence line.
    fn cut<'s>(&'s self, pos: usize, reopen: Option<&'s Fence>, split: Split) -> Option<Cut<'s>> {
        if self.touches_marker(split.end) || self.touches_marker(split.next) {
            return None;
        }
        let close = self.fence_at(split.end);
        let len = reopen.map_or(0, |f| f.reopen_len)
            + (self.units[split.end] - self.units[pos])
            + close.map_or(0, |f| f.closing_len);
        (len <= self.max).then_some(Cut { end: split.end, next: split.next, reopen, close })
    }

    /// One char alone, when nothing longer fits; it drops the fence lines if they do not fit.
    fn forced<'s>(&'s self, pos: usize, reopen: Option<&'s Fence>) -> Cut<'s> {
        let c =
            self.text[pos..].chars().next().expect("pos is before stop, so a char starts there");
        let end = pos + c.len_utf8();
        let next = self.settle(end).next.max(end);
        let close = self.fence_at(end);
        let len = reopen.map_or(0, |f| f.reopen_len)
            + (self.units[end] - self.units[pos])
            + close.map_or(0, |f| f.closing_len);
        if len <= self.max {
            Cut { end, next, reopen, close }
        } else {
            Cut { end, next, reopen: None, close: None }
        }
    }

    /// The split at char boundary `at`: the chunk ends before the whitespace around `at`, and
    /// the next starts after it, keeping the indentation of the line it starts on.
    fn settle(&self, at: usize) -> Split {
        let end = self.text[..at].trim_end_matches(is_break).len();
        let after = self.text.len() - self.text[at..].trim_start_matches(is_break).len();
        let next = match self.text[end..after].rfind('\n') {
            Some(i) => end + i + 1,
            None => after,
        };
        Split { end, next }
    }

    /// The repairable block that position `at` is inside of, past its opening line.
    fn fence_at(&self, at: usize) -> Option<&Fence> {
        let fence = self.fence_before(at)?;
        (fence.repairable && fence.open.end < at && at < fence.close.end).then_some(fence)
    }

    /// Whether a chunk ending or starting at `at` cuts a repairable block's opening or closing
    /// line, or leaves a chunk whose part of the block is empty.
    fn touches_marker(&self, at: usize) -> bool {
        self.fence_before(at).is_some_and(|f| {
            f.repairable && (at <= f.open.end || (f.close.start <= at && at < f.close.end))
        })
    }

    fn fence_before(&self, at: usize) -> Option<&Fence> {
        self.fences[..self.fences.partition_point(|f| f.open.start < at)].last()
    }
}

/// Whitespace a split may fall on and drop; no-break spaces are meant to hold text together.
fn is_break(c: char) -> bool {
    c.is_whitespace() && !matches!(c, '\u{a0}' | '\u{2007}' | '\u{202f}')
}

fn prev_boundary(text: &str, at: usize) -> usize {
    text[..at].char_indices().next_back().map_or(0, |(i, _)| i)
}

/// Every whitespace run between two words, by strength: runs holding a blank line, runs holding
/// a line break, the rest.
fn splits(text: &str) -> [Vec<Split>; 3] {
    let mut out: [Vec<Split>; 3] = Default::default();
    // (start, line breaks, the byte after the last line break)
    let mut run: Option<(usize, usize, usize)> = None;
    for (i, c) in text.char_indices() {
        if is_break(c) {
            let (_, breaks, after) = run.get_or_insert((i, 0, 0));
            if c == '\n' {
                *breaks += 1;
                *after = i + 1;
            }
        } else if let Some((start, breaks, after)) = run.take()
            && start > 0
        {
            let next = if breaks > 0 { after } else { i };
            out[2 - breaks.min(2)].push(Split { end: start, next });
        }
    }
    out
}

/// A line opening or closing a fenced block: indentation, three or more backticks or tildes,
/// and the info string after them.
#[derive(Debug)]
struct Marker<'a> {
    indent: &'a str,
    fence: &'a str,
    info: &'a str,
}

impl<'a> Marker<'a> {
    // Any indentation is accepted, not just CommonMark's three spaces: a model often indents a
    // block inside a list item by four.
    fn parse(line: &'a str) -> Option<Self> {
        let body = line.trim_start_matches([' ', '\t']);
        let indent = &line[..line.len() - body.len()];
        let ch = body.chars().next().filter(|c| matches!(c, '`' | '~'))?;
        let info = body.trim_start_matches(ch);
        let fence = &body[..body.len() - info.len()];
        (fence.len() >= 3).then_some(Marker { indent, fence, info })
    }

    fn opens(&self) -> bool {
        !(self.fence.starts_with('`') && self.info.contains('`'))
    }

    fn closes(&self, open: &Marker<'_>) -> bool {
        self.fence.as_bytes()[0] == open.fence.as_bytes()[0]
            && self.fence.len() >= open.fence.len()
            && self.info.trim().is_empty()
    }
}

/// Every fenced block of `text`, in order; one left open runs to the end.
fn fences(text: &str, max: usize, unit: LengthUnit) -> Vec<Fence> {
    let widest = unit.len("\u{1F600}");
    let fence = |open: Range<usize>, marker: &Marker<'_>, close: Range<usize>| {
        let reopen = format!("{}\n", text[open.clone()].trim_end());
        let closing = format!("\n{}{}", marker.indent, marker.fence);
        let (reopen_len, closing_len) = (unit.len(&reopen), unit.len(&closing));
        let repairable = reopen_len + closing_len + widest <= max;
        Fence { open, close, reopen, reopen_len, closing, closing_len, repairable }
    };
    let mut out = Vec::new();
    let mut open: Option<(Range<usize>, Marker<'_>)> = None;
    let mut start = 0;
    for line in text.split_inclusive('\n') {
        let span = start..start + line.trim_end_matches(['\n', '\r']).len();
        start += line.len();
        let Some(marker) = Marker::parse(&text[span.clone()]) else { continue };
        match open.take() {
            None if marker.opens() => open = Some((span, marker)),
            Some((from, opener)) if marker.closes(&opener) => out.push(fence(from, &opener, span)),
            other => open = other,
        }
    }
    if let Some((from, opener)) = open {
        out.push(fence(from, &opener, text.len()..text.len()));
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use proptest::prelude::*;

    use super::*;

    const UTF16: LengthUnit = LengthUnit::Utf16;
    const CHARS: LengthUnit = LengthUnit::Chars;

    #[track_caller]
    fn check(input: &str, max: usize, expected: &[&str]) {
        assert_eq!(chunk(input, max, CHARS), expected, "chunking {input:?} to {max}");
    }

    /// Whether every fenced block the chunk opens it also closes.
    fn balanced(chunk: &str) -> bool {
        let mut open: Option<&str> = None;
        for line in chunk.lines() {
            let body = line.trim_start();
            let Some(ch @ ('`' | '~')) = body.chars().next() else { continue };
            let fence = &body[..body.len() - body.trim_start_matches(ch).len()];
            let info = &body[fence.len()..];
            if fence.len() < 3 {
                continue;
            }
            match open {
                None if !(ch == '`' && info.contains('`')) => open = Some(fence),
                Some(o)
                    if o.starts_with(ch) && fence.len() >= o.len() && info.trim().is_empty() =>
                {
                    open = None;
                }
                _ => {}
            }
        }
        open.is_none()
    }

    #[test]
    fn text_that_fits_is_one_chunk_unchanged() {
        check("  hello\n\nworld \n", 100, &["  hello\n\nworld \n"]);
        check("exactly10!", 10, &["exactly10!"]);
    }

    #[test]
    fn empty_or_blank_text_gives_no_chunk() {
        check("", 10, &[]);
        check(" \n\t\n ", 10, &[]);
        check(" \n\t\n ", 1, &[]);
    }

    #[test]
    fn paragraphs_split_before_lines() {
        check("one two\nthree\n\nfour five six", 20, &["one two\nthree", "four five six"]);
        check("aa\n\nbb cc dd\nee", 12, &["aa", "bb cc dd\nee"]);
    }

    #[test]
    fn lines_split_before_words() {
        check("one two three\nfour five", 16, &["one two three", "four five"]);
    }

    #[test]
    fn words_split_before_chars() {
        check("one two three four", 9, &["one two", "three", "four"]);
    }

    #[test]
    fn a_long_word_splits_at_a_char() {
        check("abcdefghij", 4, &["abcd", "efgh", "ij"]);
        check("你好世界你好", 4, &["你好世界", "你好"]);
    }

    #[test]
    fn utf16_never_splits_a_surrogate_pair() {
        let three = "😀😀😀";
        assert_eq!(chunk(three, 3, UTF16), ["😀", "😀", "😀"]);
        assert_eq!(chunk(three, 4, UTF16), ["😀😀", "😀"]);
        assert_eq!(chunk(three, 2, CHARS), ["😀😀", "😀"]);
    }

    #[test]
    fn a_line_keeps_its_indentation_after_a_split() {
        check("- item one\n  - nested\n  - nested", 22, &["- item one\n  - nested", "  - nested"]);
    }

    #[test]
    fn a_split_in_a_code_block_closes_and_reopens_the_fence() {
        let input = "Intro:\n```rust\nlet a = 1;\n    let b = 2;\n```\n\nDone.";
        check(
            input,
            30,
            &["Intro:\n```rust\nlet a = 1;\n```", "```rust\n    let b = 2;\n```", "Done."],
        );
    }

    #[test]
    fn the_added_fence_lines_count_toward_max() {
        let input = "```\naaaa\nbbbb\ncccc\n```";
        check(input, 17, &["```\naaaa\nbbbb\n```", "```\ncccc\n```"]);
        check(input, 16, &["```\naaaa\n```", "```\nbbbb\n```", "```\ncccc\n```"]);
    }

    #[test]
    fn tilde_and_long_fences_reopen_as_written() {
        check("~~~ py\nx = 1\ny = 2\n~~~", 16, &["~~~ py\nx = 1\n~~~", "~~~ py\ny = 2\n~~~"]);
        check("````\n```\ninner\n````", 16, &["````\n```\n````", "````\ninner\n````"]);
    }

    #[test]
    fn a_code_block_longer_than_several_chunks_stays_fenced() {
        let lines: Vec<String> = (0..40).map(|i| format!("line {i:02}")).collect();
        let input = format!("```sh\n{}\n```", lines.join("\n"));
        let chunks = chunk(&input, 50, CHARS);
        assert!(chunks.len() >= 8, "{chunks:?}");
        for piece in &chunks {
            assert!(piece.starts_with("```sh\n") && piece.ends_with("\n```"), "{piece:?}");
            assert!(piece.chars().count() <= 50);
        }
        let inner: Vec<&str> =
            chunks.iter().flat_map(|c| c.lines()).filter(|l| !l.starts_with("```")).collect();
        assert_eq!(inner, lines);
    }

    #[test]
    fn a_chunk_never_holds_an_empty_block() {
        // The line break after the opener would fit, but would leave "```js\n```".
        check("text\n```js\nsome code here\n```", 24, &["text", "```js\nsome code here\n```"]);
    }

    #[test]
    fn a_long_code_line_splits_inside_the_fence() {
        let input = format!("```\n{}\n```", "x".repeat(20));
        check(
            &input,
            12,
            &[
                "```\nxxxx\n```",
                "```\nxxxx\n```",
                "```\nxxxx\n```",
                "```\nxxxx\n```",
                "```\nxxxx\n```",
            ],
        );
    }

    #[test]
    fn an_unclosed_block_is_repaired_but_left_open_at_the_end() {
        check("```\naaaa\nbbbb", 12, &["```\naaaa\n```", "```\nbbbb"]);
    }

    #[test]
    fn a_max_too_small_for_fence_lines_splits_without_repair() {
        // "```rust\n" and "\n```" take 12 of 10: the block is split as plain text.
        check("```rust\nfn main() {}\n```", 10, &["```rust", "fn main()", "{}\n```"]);
    }

    #[test]
    fn a_max_below_one_char_still_terminates() {
        assert_eq!(chunk("a😀 b", 1, UTF16), ["a", "😀", "b"]);
        assert_eq!(chunk("ab", 0, CHARS), ["a", "b"]);
    }

    #[test]
    fn a_no_break_space_holds_words_together() {
        check("10\u{a0}km away", 8, &["10\u{a0}km", "away"]);
    }

    #[test]
    fn a_5000_char_reply_with_code_fits_telegram() {
        let prose = "Here is what I found about the problem, explained step by step. ".repeat(30);
        let code = (0..60)
            .map(|i| format!("    let value_{i} = compute(\"😀 {i}\");"))
            .collect::<Vec<_>>();
        let reply = format!("{prose}\n\n```rust\n{}\n```\n\n{prose}", code.join("\n"));
        assert!(reply.chars().count() >= 5000);
        let chunks = chunk(&reply, 4096, UTF16);
        assert!(chunks.len() >= 2, "{}", chunks.len());
        for piece in &chunks {
            assert!(UTF16.len(piece) <= 4096);
            assert!(balanced(piece), "{piece}");
        }
    }

    #[test]
    fn a_100_kb_text_chunks_in_milliseconds() {
        let reply = "Some prose, then code.\n\n```rust\nfn f() {}\n```\n\n".repeat(2_000);
        let shapes = [
            reply,
            "x".repeat(100_000),
            format!("a{}b", " ".repeat(100_000)),
            "a\n".repeat(50_000),
            "😀".repeat(25_000),
            format!("```\n{}```", "code line\n".repeat(10_000)),
        ];
        for text in &shapes {
            for max in [4096, 64] {
                let start = Instant::now();
                let chunks = chunk(text, max, UTF16);
                let took = start.elapsed();
                assert!(took < Duration::from_millis(500), "{max}: took {took:?}");
                assert!(chunks.iter().all(|c| UTF16.len(c) <= max));
            }
        }
    }

    fn arbitrary_text() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            "[a-z]{1,8}",
            Just(" ".to_string()),
            Just("\n".to_string()),
            Just("\n\n".to_string()),
            Just("\n```rust\n".to_string()),
            Just("\n~~~\n".to_string()),
            Just("```".to_string()),
            Just("😀".to_string()),
            Just("👨‍👩‍👧".to_string()),
            Just("中文".to_string()),
            Just("\u{a0}".to_string()),
            Just("\r\n".to_string()),
            "[a-z]{30,90}",
        ];
        prop::collection::vec(atom, 0..120).prop_map(|atoms| atoms.concat())
    }

    fn line() -> impl Strategy<Value = String> + Clone {
        let word = prop_oneof![
            "[a-z]{1,10}",
            Just("😀".to_string()),
            Just("漢字かな".to_string()),
            "[a-z]{40,70}",
        ];
        (prop::collection::vec(word, 1..10), "( {0,4})")
            .prop_map(|(words, indent)| format!("{indent}{}", words.join(" ")))
    }

    fn markdown() -> impl Strategy<Value = String> {
        let lines = prop::collection::vec(line(), 1..12);
        let block = prop_oneof![
            lines.clone().prop_map(|l| l.join("\n")),
            (lines.clone(), "(rust|py|)")
                .prop_map(|(l, info)| format!("```{info}\n{}\n```", l.join("\n"))),
            lines.prop_map(|l| format!("~~~~\n```\n{}\n~~~~", l.join("\n"))),
        ];
        prop::collection::vec(block, 1..10).prop_map(|blocks| blocks.join("\n\n"))
    }

    fn unit() -> impl Strategy<Value = LengthUnit> {
        prop_oneof![Just(UTF16), Just(CHARS)]
    }

    proptest! {
        #[test]
        fn every_chunk_fits_and_holds_text(text in arbitrary_text(), max in 2usize..120, unit in unit()) {
            for piece in chunk(&text, max, unit) {
                prop_assert!(unit.len(&piece) <= max, "{piece:?} is longer than {max}");
                prop_assert!(!piece.trim().is_empty());
            }
        }

        #[test]
        fn only_whitespace_and_fence_lines_change(text in arbitrary_text(), max in 2usize..120, unit in unit()) {
            let pieces = plan(&text, max, unit);
            let mut seen = 0;
            for piece in &pieces {
                let gap = &text[seen..piece.body.start];
                prop_assert!(gap.chars().all(char::is_whitespace), "dropped {gap:?}");
                prop_assert!(piece.reopen.is_empty() || Marker::parse(piece.reopen.trim_end()).is_some());
                prop_assert!(piece.close.is_empty() || Marker::parse(piece.close.trim_start()).is_some());
                seen = piece.body.end;
            }
            prop_assert!(text[seen..].chars().all(char::is_whitespace));
            if !text.contains(['`', '~']) {
                let solid = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
                prop_assert_eq!(solid(&chunk(&text, max, unit).concat()), solid(&text));
            }
        }

        #[test]
        fn every_chunk_balances_its_fences(text in markdown(), max in 24usize..600, unit in unit()) {
            for piece in chunk(&text, max, unit) {
                prop_assert!(unit.len(&piece) <= max);
                prop_assert!(balanced(&piece), "unbalanced chunk {piece:?}");
            }
        }

    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn a_long_reply_becomes_telegram_messages(
            text in markdown(),
            code in prop::collection::vec(line(), 1..80),
        ) {
            let mut reply = format!("```rust\n{}\n```", code.join("\n"));
            while reply.chars().count() < 5000 {
                reply = format!("{text}\n\n{reply}\n\n{text}");
            }
            let chunks = chunk(&reply, 4096, UTF16);
            prop_assert!(chunks.len() >= 2);
            for piece in &chunks {
                prop_assert!(UTF16.len(piece) <= 4096);
                prop_assert!(balanced(piece), "unbalanced chunk {piece:?}");
            }
        }
    }
}

//! The model's markdown as Slack mrkdwn, the markup every reply is posted in.
//!
//! Slack reads `*bold*`, `_italic_`, `~strike~`, `` `code` ``, fenced blocks, `> ` quotes and
//! `<url|text>` links, and nothing else: headings become bold lines, lists "• " and "1. "
//! lines, tables " | " lines, images links. Slack gives `&`, `<` and `>` a meaning of their
//! own (`<!channel>` notifies everyone), so every one of them in the model's text is escaped,
//! code included; the only `<` left is a link this module writes, and only for a scheme that
//! is safe to open. `@channel`, `@here` and `@everyone` typed as text get a word joiner after
//! the `@`, so no client setting can turn them into a notification either.

use pulldown_cmark::{Event, LinkType, Options, Parser, Tag, TagEnd};

/// Converts the model's markdown to Slack mrkdwn.
pub fn to_mrkdwn(markdown: &str) -> String {
    let mut out = Mrkdwn::default();
    for event in Parser::new_ext(markdown, Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES) {
        out.event(event);
    }
    out.finish()
}

/// Escapes `&`, `<` and `>` so that Slack shows `text` as written.
fn push_escaped(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            c => out.push(c),
        }
    }
}

/// Written after the `@` of a broadcast word, so Slack never reads it as one.
const WORD_JOINER: char = '\u{2060}';

/// `text` escaped, with `@channel`, `@here` and `@everyone` broken up (an `@` inside a word,
/// as in an address, is left alone).
fn push_text(out: &mut String, text: &str) {
    let mut rest = text;
    let mut word_before = false;
    while let Some(at) = rest.find('@') {
        let before = &rest[..at];
        word_before = before.chars().next_back().map_or(word_before, char::is_alphanumeric);
        push_escaped(out, &rest[..=at]);
        rest = &rest[at + 1..];
        let head: String = rest.chars().take(8).collect::<String>().to_lowercase();
        let broadcast = ["channel", "here", "everyone"].iter().any(|w| head.starts_with(w));
        if broadcast && !word_before {
            out.push(WORD_JOINER);
        }
        word_before = false;
    }
    push_escaped(out, rest);
}

/// Schemes a link may keep: what a Slack client opens without running anything.
const SAFE_SCHEMES: [&str; 3] = ["http", "https", "mailto"];

fn is_safe(href: &str) -> bool {
    href.split_once(':').is_some_and(|(scheme, _)| {
        SAFE_SCHEMES.iter().any(|safe| scheme.eq_ignore_ascii_case(safe))
    })
}

/// A link target inside `<…|…>`: the characters that would end it percent-encoded.
fn push_href(out: &mut String, href: &str) {
    for c in href.chars() {
        match c {
            '<' => out.push_str("%3C"),
            '>' => out.push_str("%3E"),
            '|' => out.push_str("%7C"),
            ' ' => out.push_str("%20"),
            '&' => out.push_str("&amp;"),
            c => out.push(c),
        }
    }
}

/// The styles mrkdwn has, each with its one marker.
#[derive(Debug, Clone, Copy)]
enum Style {
    Bold,
    Italic,
    Strike,
}

impl Style {
    fn marker(self) -> &'static str {
        match self {
            Style::Bold => "*",
            Style::Italic => "_",
            Style::Strike => "~",
        }
    }
}

#[derive(Debug, Default)]
struct Mrkdwn {
    out: String,
    /// Line breaks owed before the next text; written only when text follows, so none trail.
    pending: usize,
    /// Whether `out` ends by opening a container (a list marker): no break is owed.
    fresh: bool,
    /// How deeply each [`Style`] is open; only the outermost writes a marker, as a marker
    /// inside the same marker would end it.
    depth: [usize; 3],
    /// The open lists, each with its next number, `None` for bullets.
    lists: Vec<Option<u64>>,
    /// How deeply quotes are open; every line inside starts with `> `.
    quotes: usize,
    /// The open links: for each that wrote `<href|`, where its text starts.
    links: Vec<Option<usize>>,
    /// The open code block's text: escaped and written whole when it ends.
    code: Option<String>,
    /// Cells written so far in the table row.
    cells: usize,
}

impl Mrkdwn {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some(code) => code.push_str(&text),
                None => self.text(&text),
            },
            Event::Code(code) if self.in_link() => self.text(&code),
            Event::Code(code) => {
                self.flush();
                self.out.push('`');
                push_escaped(&mut self.out, &code);
                self.out.push('`');
            }
            Event::Html(html) | Event::InlineHtml(html) => self.text(&html),
            Event::SoftBreak | Event::HardBreak => self.pending = self.pending.max(1),
            Event::Rule => {
                self.block();
                self.text("———");
            }
            // Math, footnotes and task lists are not enabled.
            _ => {}
        }
    }

    fn start(&mut self, tag: Tag<'_>) {
        match tag {
            Tag::Paragraph | Tag::HtmlBlock | Tag::Table(_) => self.block(),
            Tag::Heading { .. } => {
                self.block();
                self.open(Style::Bold);
            }
            Tag::BlockQuote(_) => {
                self.block();
                self.quotes += 1;
            }
            // The language is dropped: Slack would show an info string as code.
            Tag::CodeBlock(_) => {
                self.block();
                self.code = Some(String::new());
            }
            Tag::List(first) => {
                self.block();
                self.lists.push(first);
            }
            Tag::Item => self.item(),
            Tag::TableHead => {
                self.cells = 0;
                self.open(Style::Bold);
            }
            Tag::TableRow => self.cells = 0,
            Tag::TableCell => {
                if self.cells > 0 {
                    self.text(" | ");
                }
                self.cells += 1;
            }
            Tag::Emphasis => self.open(Style::Italic),
            Tag::Strong => self.open(Style::Bold),
            Tag::Strikethrough => self.open(Style::Strike),
            Tag::Link { link_type, dest_url, .. } | Tag::Image { link_type, dest_url, .. } => {
                self.link(link_type, &dest_url);
            }
            _ => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::Heading(_) | TagEnd::Strong => self.close(Style::Bold),
            TagEnd::Emphasis => self.close(Style::Italic),
            TagEnd::Strikethrough => self.close(Style::Strike),
            TagEnd::BlockQuote(_) => {
                self.quotes = self.quotes.saturating_sub(1);
                self.pending = self.pending.max(1);
            }
            TagEnd::CodeBlock => self.code_block(),
            TagEnd::List(_) => {
                self.lists.pop();
            }
            TagEnd::TableHead => {
                self.close(Style::Bold);
                self.pending = self.pending.max(1);
            }
            TagEnd::TableRow => self.pending = self.pending.max(1),
            TagEnd::Link | TagEnd::Image => {
                if let Some(Some(text_at)) = self.links.pop() {
                    // `<href|>` shows nothing: a link without text is the bare address.
                    if self.out.len() == text_at {
                        self.out.pop();
                    }
                    self.out.push('>');
                }
            }
            _ => {}
        }
    }

    /// Owes the break that starts a block: a blank line, or one line break inside a list or
    /// a quote.
    fn block(&mut self) {
        if !self.fresh && !self.out.is_empty() {
            let tight = !self.lists.is_empty() || self.quotes > 0;
            self.pending = self.pending.max(if tight { 1 } else { 2 });
        }
    }

    fn item(&mut self) {
        self.block();
        let marker = match self.lists.last_mut() {
            Some(Some(number)) => {
                *number += 1;
                format!("{}. ", *number - 1)
            }
            _ => "• ".to_owned(),
        };
        self.flush_indented(self.lists.len().saturating_sub(1));
        self.out.push_str(&marker);
        self.fresh = true;
    }

    fn link(&mut self, link_type: LinkType, dest: &str) {
        let href = match link_type {
            LinkType::Email => format!("mailto:{dest}"),
            _ => dest.to_owned(),
        };
        if self.in_link() || !is_safe(&href) {
            self.links.push(None);
            return;
        }
        self.flush();
        self.out.push('<');
        push_href(&mut self.out, &href);
        self.out.push('|');
        self.links.push(Some(self.out.len()));
    }

    fn in_link(&self) -> bool {
        self.links.iter().any(Option::is_some)
    }

    fn code_block(&mut self) {
        let Some(code) = self.code.take() else { return };
        let code = code.trim_end_matches('\n');
        if code.is_empty() {
            return;
        }
        self.flush();
        self.out.push_str("```\n");
        push_escaped(&mut self.out, code);
        self.out.push_str("\n```");
    }

    fn open(&mut self, style: Style) {
        self.depth[style as usize] += 1;
        if self.depth[style as usize] == 1 {
            self.flush();
            self.out.push_str(style.marker());
        }
    }

    fn close(&mut self, style: Style) {
        let depth = &mut self.depth[style as usize];
        if *depth == 1 {
            self.out.push_str(style.marker());
        }
        *depth = depth.saturating_sub(1);
    }

    /// Writes `text` escaped, its line breaks indented like the list item it is in.
    fn text(&mut self, text: &str) {
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.pending = self.pending.max(1);
            }
            if !line.is_empty() {
                self.flush();
                push_text(&mut self.out, line);
            }
        }
    }

    fn flush(&mut self) {
        self.flush_indented(self.lists.len());
    }

    /// Writes the breaks owed, then the quote markers and `indent` levels of list indentation.
    fn flush_indented(&mut self, indent: usize) {
        if self.pending > 0 {
            for _ in 0..self.pending {
                self.out.push('\n');
                if self.quotes > 0 {
                    self.out.push_str("> ");
                }
            }
            self.out.extend(std::iter::repeat_n("    ", indent));
            self.pending = 0;
        } else if self.out.is_empty() && self.quotes > 0 {
            self.out.push_str("> ");
        }
        self.fresh = false;
    }

    fn finish(mut self) -> String {
        self.out.truncate(self.out.trim_end().len());
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(markdown: &str, expected: &str) {
        assert_eq!(to_mrkdwn(markdown), expected, "converting {markdown:?}");
    }

    #[test]
    fn markdown_becomes_mrkdwn() {
        // Escapes: Slack's three, everywhere.
        check("a < b & c > d", "a &lt; b &amp; c &gt; d");
        check("run `a<b && c>d`", "run `a&lt;b &amp;&amp; c&gt;d`");
        // Inline styles, nested ones written once.
        check("**b** __b__ *i* _i_ ~~s~~", "*b* *b* _i_ _i_ ~s~");
        check("**bold *and italic* too**", "*bold _and italic_ too*");
        check("**a __b__ c**", "*a b c*");
        check("`**not bold**`", "`**not bold**`");
        // Paragraphs and breaks.
        check("one\n\ntwo", "one\n\ntwo");
        check("one\ntwo", "one\ntwo");
        check("text\n\n\n", "text");
        // Code blocks, language dropped, content escaped.
        check("```rust\nif a < b {\n    x();\n}\n```", "```\nif a &lt; b {\n    x();\n}\n```");
        check("text\n\n```\n```", "text");
        // Headings as bold lines.
        check("# Title\n\nText", "*Title*\n\nText");
        check("## A *b*", "*A _b_*");
        // Lists.
        check("- a\n- b", "• a\n• b");
        check("3. a\n1. b", "3. a\n4. b");
        check("- a\n  - b\n- c", "• a\n    • b\n• c");
        check("Intro:\n\n- a\n\nAfter.", "Intro:\n\n• a\n\nAfter.");
        // Quotes.
        check("> quoted\n> more\n\nafter", "> quoted\n> more\n\nafter");
        // Links: `<url|text>`, safe schemes only, the address's delimiters encoded.
        check("[site](https://example.com)", "<https://example.com|site>");
        check("[q](https://x.io/?a=1&b=2)", "<https://x.io/?a=1&amp;b=2|q>");
        check("[a|b](https://x.io/a|b>c)", "<https://x.io/a%7Cb%3Ec|a|b>");
        check("<https://x.io>", "<https://x.io|https://x.io>");
        check("<me@x.io>", "<mailto:me@x.io|me@x.io>");
        check("[](https://x.io)", "<https://x.io>");
        check("[**bold** link](https://x.io)", "<https://x.io|*bold* link>");
        check("[click](javascript:alert(1))", "click");
        check("[here](!here)", "here");
        check("![logo](https://x.io/a.png)", "<https://x.io/a.png|logo>");
        // Tables and rules.
        check("| a | b |\n|---|---|\n| 1 | 2 |", "*a | b*\n1 | 2");
        check("a\n\n---\n\nb", "a\n\n———\n\nb");
    }

    #[test]
    fn broadcasts_in_model_output_never_notify() {
        let j = WORD_JOINER;
        check("<!channel> hi", "&lt;!channel&gt; hi");
        check("<!here|here> and <!everyone>", "&lt;!here|here&gt; and &lt;!everyone&gt;");
        check("ping <@U123>", "ping &lt;@U123&gt;");
        check("hey @channel and @Here", &format!("hey @{j}channel and @{j}Here"));
        check("`<!here>` @everyone", &format!("`&lt;!here&gt;` @{j}everyone"));
        check("```\n<!channel>\n```", "```\n&lt;!channel&gt;\n```");
        check("mail me@here.io", "mail me@here.io");
        for sample in ["<!here>", "[x](<!here>)", "<<!here>>", "&lt;!here&gt;", "<!sub\nteam>"] {
            let out = to_mrkdwn(sample);
            assert!(!out.contains("<!"), "{sample:?} gave {out:?}");
        }
    }
}

//! The model's markdown as Telegram HTML, the parse mode every reply is sent in.
//!
//! Telegram renders only `<b>`, `<i>`, `<u>`, `<s>`, `<tg-spoiler>`, `<code>`, `<pre>`,
//! `<a href>` and `<blockquote>`, and refuses some nestings of them. Everything else becomes
//! text: headings turn into bold lines, lists into "• " and "1. " lines, tables into " | " lines,
//! images into links. Raw HTML in the markdown is escaped like any other text, so the model
//! cannot inject a tag, and a link keeps its `<a>` only with a scheme that is safe to open.

use pulldown_cmark::{CodeBlockKind, Event, LinkType, Options, Parser, Tag, TagEnd};

/// Converts the model's markdown to Telegram's HTML subset.
pub fn to_telegram_html(markdown: &str) -> String {
    let mut html = Html::default();
    for event in Parser::new_ext(markdown, Options::ENABLE_STRIKETHROUGH | Options::ENABLE_TABLES) {
        html.event(event);
    }
    html.finish()
}

/// Escapes `&`, `<` and `>` so that Telegram shows `text` as written.
pub fn escape_html(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    push_escaped(&mut out, text, false);
    out
}

fn push_escaped(out: &mut String, text: &str, in_attribute: bool) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' if in_attribute => out.push_str("&quot;"),
            c => out.push(c),
        }
    }
}

/// Schemes a link may keep: what Telegram opens without running anything.
const SAFE_SCHEMES: [&str; 4] = ["http", "https", "mailto", "tg"];

fn is_safe(href: &str) -> bool {
    href.split_once(':').is_some_and(|(scheme, _)| {
        SAFE_SCHEMES.iter().any(|safe| scheme.eq_ignore_ascii_case(safe))
    })
}

/// The styles Telegram lets nest in anything but code.
#[derive(Debug, Clone, Copy)]
enum Style {
    Bold,
    Italic,
    Strike,
}

impl Style {
    fn tags(self) -> (&'static str, &'static str) {
        match self {
            Style::Bold => ("<b>", "</b>"),
            Style::Italic => ("<i>", "</i>"),
            Style::Strike => ("<s>", "</s>"),
        }
    }
}

#[derive(Debug, Default)]
struct Html {
    out: String,
    /// Line breaks owed before the next text; written only when text follows, so none trail.
    pending: usize,
    /// Whether `out` ends by opening a container (a list marker, a quote): no break is owed.
    fresh: bool,
    /// How deeply each [`Style`] is open; only the outermost writes a tag, so none nests in itself.
    depth: [usize; 3],
    /// The open lists, each with its next number, `None` for bullets.
    lists: Vec<Option<u64>>,
    /// How deeply quotes are open: Telegram refuses a blockquote inside another.
    quotes: usize,
    /// The open links and images: for each that wrote an `<a>`, the length of `out` after it and
    /// its address, to fill in a link without text.
    links: Vec<Option<(usize, String)>>,
    /// The open code block's language and text: escaped and written whole when it ends.
    code: Option<(String, String)>,
    /// Cells written so far in the table row.
    cells: usize,
}

impl Html {
    fn event(&mut self, event: Event<'_>) {
        match event {
            Event::Start(tag) => self.start(tag),
            Event::End(tag) => self.end(tag),
            Event::Text(text) => match &mut self.code {
                Some((_, code)) => code.push_str(&text),
                None => self.text(&text),
            },
            Event::Code(code) if self.in_link() => self.text(&code),
            Event::Code(code) => {
                self.tag("<code>");
                push_escaped(&mut self.out, &code, false);
                self.out.push_str("</code>");
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
                if self.quotes == 0 {
                    self.tag("<blockquote>");
                    self.fresh = true;
                }
                self.quotes += 1;
            }
            Tag::CodeBlock(kind) => {
                self.block();
                self.code = Some((language(&kind), String::new()));
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
                self.quotes -= 1;
                if self.quotes == 0 {
                    match self.out.strip_suffix("<blockquote>") {
                        Some(before) => self.out.truncate(before.len()),
                        None => self.out.push_str("</blockquote>"),
                    }
                    self.fresh = false;
                }
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
                if let Some(Some((empty_len, href))) = self.links.pop() {
                    if self.out.len() == empty_len {
                        push_escaped(&mut self.out, &href, false);
                    }
                    self.out.push_str("</a>");
                }
            }
            _ => {}
        }
    }

    /// Owes the break that starts a block: a blank line, or one line break inside a list.
    fn block(&mut self) {
        if !self.fresh && !self.out.is_empty() {
            self.pending = self.pending.max(if self.lists.is_empty() { 2 } else { 1 });
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
        self.flush(self.lists.len().saturating_sub(1));
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
        self.tag("<a href=\"");
        push_escaped(&mut self.out, &href, true);
        self.out.push_str("\">");
        self.links.push(Some((self.out.len(), href)));
    }

    fn in_link(&self) -> bool {
        self.links.iter().any(Option::is_some)
    }

    fn code_block(&mut self) {
        let Some((language, code)) = self.code.take() else { return };
        let code = code.trim_end_matches('\n');
        if code.is_empty() {
            return;
        }
        if language.is_empty() {
            self.tag("<pre>");
        } else {
            self.tag(&format!("<pre><code class=\"language-{language}\">"));
        }
        push_escaped(&mut self.out, code, false);
        self.out.push_str(if language.is_empty() { "</pre>" } else { "</code></pre>" });
    }

    fn open(&mut self, style: Style) {
        self.depth[style as usize] += 1;
        if self.depth[style as usize] == 1 {
            self.tag(style.tags().0);
        }
    }

    fn close(&mut self, style: Style) {
        let depth = &mut self.depth[style as usize];
        if *depth == 1 {
            self.out.push_str(style.tags().1);
        }
        *depth = depth.saturating_sub(1);
    }

    /// Writes an opening tag after the breaks owed.
    fn tag(&mut self, tag: &str) {
        self.flush(self.lists.len());
        self.out.push_str(tag);
    }

    /// Writes `text` escaped, its line breaks indented like the list item it is in.
    fn text(&mut self, text: &str) {
        for (i, line) in text.split('\n').enumerate() {
            if i > 0 {
                self.pending = self.pending.max(1);
            }
            if !line.is_empty() {
                self.flush(self.lists.len());
                push_escaped(&mut self.out, line, false);
            }
        }
    }

    /// Writes the breaks owed, then `indent` levels of list indentation.
    fn flush(&mut self, indent: usize) {
        if self.pending > 0 {
            self.out.extend(std::iter::repeat_n('\n', self.pending));
            self.out.extend(std::iter::repeat_n("  ", indent));
            self.pending = 0;
        }
        self.fresh = false;
    }

    fn finish(mut self) -> String {
        self.out.truncate(self.out.trim_end().len());
        self.out
    }
}

/// The language of a fenced block, as far as it is a plain name (`rust` of "rust,ignore").
fn language(kind: &CodeBlockKind<'_>) -> String {
    match kind {
        CodeBlockKind::Fenced(info) => info
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '_' | '.' | '#'))
            .collect(),
        CodeBlockKind::Indented => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[track_caller]
    fn check(markdown: &str, expected: &str) {
        assert_eq!(to_telegram_html(markdown), expected, "converting {markdown:?}");
    }

    /// Panics unless `html` is text with escapes and balanced tags Telegram accepts.
    fn assert_telegram_html(html: &str) {
        const ALLOWED: [&str; 9] =
            ["b", "i", "u", "s", "tg-spoiler", "code", "pre", "a", "blockquote"];
        let mut open: Vec<&str> = Vec::new();
        let mut rest = html;
        while let Some(at) = rest.find(['<', '>', '&']) {
            let here = &rest[at..];
            if here.starts_with('>') {
                panic!("stray > in {html:?}");
            }
            if let Some(after) = here.strip_prefix('&') {
                let entity =
                    ["&amp;", "&lt;", "&gt;", "&quot;"].iter().find(|e| here.starts_with(**e));
                assert!(entity.is_some(), "bare & in {html:?}");
                rest = after;
                continue;
            }
            let end = here.find('>').unwrap_or_else(|| panic!("unclosed tag in {html:?}"));
            let tag = &here[1..end];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(open.pop(), Some(name), "misnested </{name}> in {html:?}");
            } else {
                let name = tag.split(' ').next().unwrap_or_default();
                assert!(ALLOWED.contains(&name), "<{name}> in {html:?}");
                assert!(!open.contains(&name), "<{name}> nested in itself in {html:?}");
                assert!(!open.contains(&"code"), "<{name}> inside code in {html:?}");
                if open.contains(&"pre") {
                    assert!(name == "code" && open.last() == Some(&"pre"), "<{name}> in pre");
                }
                match name {
                    "a" => assert!(
                        tag.starts_with("a href=\"")
                            && tag.ends_with('"')
                            && !tag[8..tag.len() - 1].contains('"'),
                        "bad link {tag:?}",
                    ),
                    "code" if tag != "code" => assert!(tag.starts_with("code class=\"language-")),
                    _ => assert_eq!(tag, name, "attribute on <{name}>"),
                }
                open.push(name);
            }
            rest = &here[end + 1..];
        }
        assert!(open.is_empty(), "unclosed {open:?} in {html:?}");
    }

    #[test]
    fn text_is_escaped() {
        check("a < b & c > d", "a &lt; b &amp; c &gt; d");
        check("&amp; &copy; &lt;", "&amp; © &lt;");
        assert_eq!(escape_html("<a href=\"x\">&</a>"), "&lt;a href=\"x\"&gt;&amp;&lt;/a&gt;");
    }

    #[test]
    fn paragraphs_and_breaks() {
        check("one\n\ntwo", "one\n\ntwo");
        check("one\ntwo", "one\ntwo");
        check("one  \ntwo\\\nthree", "one\ntwo\nthree");
        check("text\n\n\n", "text");
    }

    #[test]
    fn inline_styles() {
        check("*i* _i_ **b** __b__ ~~s~~", "<i>i</i> <i>i</i> <b>b</b> <b>b</b> <s>s</s>");
        check("**bold *and italic* too**", "<b>bold <i>and italic</i> too</b>");
        check("***both***", "<i><b>both</b></i>");
        check("**a __b__ c**", "<b>a b c</b>");
    }

    #[test]
    fn inline_code_is_escaped_verbatim() {
        check("run `a<b && c>d`", "run <code>a&lt;b &amp;&amp; c&gt;d</code>");
        check("`**not bold**`", "<code>**not bold**</code>");
    }

    #[test]
    fn code_blocks_keep_their_language() {
        check(
            "```rust\nif a < b && c {\n    x();\n}\n```",
            "<pre><code class=\"language-rust\">if a &lt; b &amp;&amp; c {\n    x();\n}</code></pre>",
        );
        check("```\n<plain>\n```", "<pre>&lt;plain&gt;</pre>");
        check("~~~rust,ignore\nx\n~~~", "<pre><code class=\"language-rust\">x</code></pre>");
        check("```\"><b>\nx\n```", "<pre>x</pre>");
        check("    indented <code>", "<pre>indented &lt;code&gt;</pre>");
        check("text\n\n```\n```", "text");
    }

    #[test]
    fn headings_become_bold_lines() {
        check("# Title\n\nText", "<b>Title</b>\n\nText");
        check("## A *b* **c**", "<b>A <i>b</i> c</b>");
        check("Title\n===\nnext", "<b>Title</b>\n\nnext");
    }

    #[test]
    fn lists_become_lines() {
        check("- a\n- b", "• a\n• b");
        check("1. a\n2. b", "1. a\n2. b");
        check("3. a\n1. b", "3. a\n4. b");
        check("- a\n  - b\n    1. c\n- d", "• a\n  • b\n    1. c\n• d");
        check("- a\n\n- b", "• a\n• b");
        check("Intro:\n\n- a\n\nAfter.", "Intro:\n\n• a\n\nAfter.");
        check("- one\n  more", "• one\n  more");
        check(
            "1. Run:\n\n   ```sh\n   cargo test\n   ```",
            "1. Run:\n  <pre><code class=\"language-sh\">cargo test</code></pre>",
        );
    }

    #[test]
    fn quotes_become_blockquotes() {
        check("> quoted\n> more\n\nafter", "<blockquote>quoted\nmore</blockquote>\n\nafter");
        check("> a\n>\n> > b", "<blockquote>a\n\nb</blockquote>");
        check("> # Head\n> - item", "<blockquote><b>Head</b>\n\n• item</blockquote>");
        check("text\n\n>", "text");
    }

    #[test]
    fn links_keep_safe_schemes() {
        check("[site](https://example.com)", "<a href=\"https://example.com\">site</a>");
        check(
            "[q](https://x.io/?a=1&b=\"2\")",
            "<a href=\"https://x.io/?a=1&amp;b=&quot;2&quot;\">q</a>",
        );
        check("[**bold** link](tg://user?id=1)", "<a href=\"tg://user?id=1\"><b>bold</b> link</a>");
        check("<https://x.io>", "<a href=\"https://x.io\">https://x.io</a>");
        check("<me@x.io>", "<a href=\"mailto:me@x.io\">me@x.io</a>");
        check("[](https://x.io)", "<a href=\"https://x.io\">https://x.io</a>");
        check("[`code`](https://x.io)", "<a href=\"https://x.io\">code</a>");
    }

    #[test]
    fn unsafe_links_become_text() {
        check("[click](javascript:alert(1))", "click");
        check("[click](JavaScript:alert(1))", "click");
        check("[data](data:text/html,x)", "data");
        check("[relative](docs/intro.md)", "relative");
    }

    #[test]
    fn images_become_links() {
        check("![logo](https://x.io/a.png)", "<a href=\"https://x.io/a.png\">logo</a>");
        check("![](https://x.io/a.png)", "<a href=\"https://x.io/a.png\">https://x.io/a.png</a>");
        check("[![alt](https://x.io/a.png)](https://x.io)", "<a href=\"https://x.io\">alt</a>");
    }

    #[test]
    fn raw_html_is_escaped_as_text() {
        check(
            "<b>hi</b> <script>alert(1)</script>",
            "&lt;b&gt;hi&lt;/b&gt; &lt;script&gt;alert(1)&lt;/script&gt;",
        );
        check(
            "<div>\n<a href=\"x\">y</a>\n</div>\n\nafter",
            "&lt;div&gt;\n&lt;a href=\"x\"&gt;y&lt;/a&gt;\n&lt;/div&gt;\n\nafter",
        );
    }

    #[test]
    fn tables_become_lines() {
        check("| a | *b* |\n|---|---|\n| 1 | 2 |\n| 3 | |", "<b>a | <i>b</i></b>\n1 | 2\n3 |");
    }

    #[test]
    fn rules_become_a_line() {
        check("a\n\n---\n\nb", "a\n\n———\n\nb");
    }

    #[test]
    fn the_checker_rejects_what_telegram_would() {
        for bad in
            ["<b>x", "<b><i>x</b></i>", "<div>x</div>", "a > b", "a & b", "<pre><b>x</b></pre>"]
        {
            assert!(std::panic::catch_unwind(|| assert_telegram_html(bad)).is_err(), "{bad}");
        }
    }

    fn markdownish() -> impl Strategy<Value = String> {
        let atom = prop_oneof![
            "[a-z]{1,6}",
            "[ \n]{1,3}",
            "[*_~`#>\\-+.|!\\[\\]()<>&\"\\\\:]{1,3}",
            Just("```rust\n".to_string()),
            Just("\n```\n".to_string()),
            Just("<b>".to_string()),
            Just("](https://x.io/\"a\"&b)".to_string()),
            Just("](javascript:alert(1))".to_string()),
            Just("1. ".to_string()),
            Just("\n    ".to_string()),
            Just("| a | b |\n|---|---|\n".to_string()),
            Just("😀".to_string()),
        ];
        prop::collection::vec(atom, 0..60).prop_map(|atoms| atoms.concat())
    }

    proptest! {
        #[test]
        fn output_is_always_valid_telegram_html(markdown in markdownish()) {
            let html = to_telegram_html(&markdown);
            assert_telegram_html(&html);
            prop_assert_eq!(html.trim_end(), html.as_str());
        }

        #[test]
        fn any_text_converts_to_valid_telegram_html(markdown in "\\PC{0,200}") {
            assert_telegram_html(&to_telegram_html(&markdown));
        }
    }
}

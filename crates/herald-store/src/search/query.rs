//! The sanitizer: what a person typed, split into phrases and operators, and written back as an
//! FTS5 query that cannot be a syntax error (or as literal substring tests).

use super::FILTER_MARK;

/// An operator between two terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    And,
    Or,
    Not,
}

/// A piece of typed text: a phrase to look up (its last word a prefix or not), or an operator.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Item {
    Phrase { text: String, prefix: bool },
    Op(Op),
}

/// Turns what a person typed into an FTS5 query that cannot be a syntax error, or `None`
/// when nothing in it is searchable.
///
/// Every word becomes a quoted phrase, so `TODO:`, `chat-send` and `v2.1` are looked up as
/// the words they contain, in order; `"quoted text"` stays a phrase; a trailing `*` asks for a
/// prefix. `AND`, `OR` and `NOT` (upper case, as FTS5 spells them) keep their meaning between
/// two terms and are dropped at the ends; parentheses and other punctuation only separate.
pub fn sanitize_query(input: &str) -> Option<String> {
    render_fts(&items(input))
}

/// Joins phrases with their operators, dropping operators that have no term on either side.
pub(crate) fn join(
    items: &[Item],
    mut term: impl FnMut(&str, bool) -> String,
    op: fn(Op) -> &'static str,
) -> String {
    let mut out = String::new();
    let mut pending: Option<Op> = None;
    for item in items {
        match item {
            Item::Op(o) if !out.is_empty() => pending = Some(*o),
            Item::Op(_) => {}
            Item::Phrase { text, prefix } => {
                if !out.is_empty() {
                    out.push_str(op(pending.take().unwrap_or(Op::And)));
                }
                out.push_str(&term(text, *prefix));
            }
        }
    }
    out
}

pub(super) fn render_fts(items: &[Item]) -> Option<String> {
    let out = join(items, phrase, fts_op);
    (!out.is_empty()).then_some(out)
}

/// A quoted FTS5 phrase, `*` after it for a prefix.
pub(super) fn phrase(text: &str, prefix: bool) -> String {
    let star = if prefix { "*" } else { "" };
    format!("\"{}\"{star}", text.replace('"', "\"\""))
}

pub(super) fn fts_op(op: Op) -> &'static str {
    match op {
        Op::And => " AND ",
        Op::Or => " OR ",
        Op::Not => " NOT ",
    }
}

/// The same boolean shape as [`render_fts`] over literal substring tests, and the words to
/// bind to them (from ?9 on). SQL's NOT, AND, OR precedence is the same as FTS5's.
pub(super) fn literal_condition(items: &[Item]) -> (String, Vec<String>) {
    let mut words = Vec::new();
    let condition = join(
        items,
        |text, _| {
            words.push(text.to_owned());
            format!("instr(m.content, ?{}) > 0", 8 + words.len())
        },
        |op| match op {
            Op::And => " AND ",
            Op::Or => " OR ",
            Op::Not => " AND NOT ",
        },
    );
    (condition, words)
}

/// Splits typed text into phrases and operators.
pub(crate) fn items(input: &str) -> Vec<Item> {
    let mut items = Vec::new();
    let mut chars = input.chars().map(|c| if c == FILTER_MARK { ' ' } else { c }).peekable();
    while let Some(&c) = chars.peek() {
        if c.is_whitespace() || c == '(' || c == ')' {
            chars.next();
        } else if c == '"' {
            chars.next();
            let text: String = chars.by_ref().take_while(|&c| c != '"').collect();
            let prefix = chars.next_if_eq(&'*').is_some();
            push_phrase(&mut items, text, prefix);
        } else {
            let mut word = String::new();
            while let Some(c) = chars.next_if(|&c| !(c.is_whitespace() || "\"()".contains(c))) {
                word.push(c);
            }
            match word.as_str() {
                "AND" => items.push(Item::Op(Op::And)),
                "OR" => items.push(Item::Op(Op::Or)),
                "NOT" => items.push(Item::Op(Op::Not)),
                _ => {
                    let prefix = word.ends_with('*');
                    let text = word.trim_end_matches('*').to_owned();
                    push_phrase(&mut items, text, prefix);
                }
            }
        }
    }
    items
}

/// Keeps a phrase only if the tokenizer will find a word in it: a phrase of punctuation or
/// emoji alone would match nothing and only confuse the operators around it.
fn push_phrase(items: &mut Vec<Item>, text: String, prefix: bool) {
    if text.chars().any(char::is_alphanumeric) {
        items.push(Item::Phrase { text, prefix });
    }
}

#[cfg(test)]
mod tests {
    use super::sanitize_query;

    #[track_caller]
    fn check(input: &str, expected: Option<&str>) {
        assert_eq!(sanitize_query(input).as_deref(), expected, "input: {input:?}");
    }

    #[test]
    fn words_become_phrases() {
        check("hello world", Some(r#""hello" AND "world""#));
        check("TODO: fix", Some(r#""TODO:" AND "fix""#));
        check("chat-send", Some(r#""chat-send""#));
        check("v2.1", Some(r#""v2.1""#));
        check(r#""exact phrase" here"#, Some(r#""exact phrase" AND "here""#));
        check("deploy*", Some(r#""deploy"*"#));
        check(r#""open quote"#, Some(r#""open quote""#));
    }

    #[test]
    fn operators_only_between_terms() {
        check("cats OR dogs", Some(r#""cats" OR "dogs""#));
        check("cats NOT dogs", Some(r#""cats" NOT "dogs""#));
        check("OR cats AND", Some(r#""cats""#));
        check("NOT", None);
        check("cats AND OR dogs", Some(r#""cats" OR "dogs""#));
        check("cats or dogs", Some(r#""cats" AND "or" AND "dogs""#));
    }

    #[test]
    fn nothing_searchable_is_none() {
        for input in ["", "   ", "😀", "((", "\"\"", "***", ": - .", "AND OR NOT"] {
            check(input, None);
        }
        check("(unbalanced", Some(r#""unbalanced""#));
        check("say \"hi\"\"", Some(r#""say" AND "hi""#));
    }
}

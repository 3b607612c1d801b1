//! Where keys sit in the file: a span tree of the document, so that an error's byte span
//! can be named by its dotted key and a key by its line.
//!
//! toml's typed errors carry a span but no key path; this tree (values with spans, keys
//! without, since toml only spans plain keys) fills that gap. Documents it cannot map
//! (dotted keys, for one) just give no key, and the error still names the line.

use std::fmt;
use std::ops::Range;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use toml::Spanned;

/// A TOML value with the spans of everything inside it.
#[derive(Debug)]
enum Node {
    Table(Vec<(String, Spanned<Node>)>),
    Array(Vec<Spanned<Node>>),
    Leaf,
}

/// The dotted key (`store.busy_timeout_ms`, `telegram.allowed_users[1]`) of the key or value
/// that `span` points at, if the document can be mapped.
pub(crate) fn key_at(source: &str, span: &Range<usize>) -> Option<String> {
    let root: Spanned<Node> = toml::from_str(source).ok()?;
    let mut path = String::new();
    walk(source, root.get_ref(), span, &mut path);
    (!path.is_empty()).then_some(path)
}

/// Descends into the innermost value holding `span`, naming each step; stops where no
/// child holds it (the span is then that value's own header or key).
fn walk(source: &str, node: &Node, span: &Range<usize>, path: &mut String) {
    let (step, child) = match node {
        Node::Table(entries) => {
            let inside = entries.iter().find(|(_, v)| contains(&v.span(), span));
            let Some((name, child)) =
                inside.or_else(|| entries.iter().find(|(_, v)| is_key_of(source, span, v)))
            else {
                return;
            };
            if !path.is_empty() {
                path.push('.');
            }
            (name.clone(), child)
        }
        Node::Array(items) => {
            let Some((index, child)) =
                items.iter().enumerate().find(|(_, v)| contains(&v.span(), span))
            else {
                return;
            };
            (format!("[{index}]"), child)
        }
        Node::Leaf => return,
    };
    path.push_str(&step);
    if contains(&child.span(), span) && child.span() != *span {
        walk(source, child.get_ref(), span, path);
    }
}

/// The span of the value at a dotted key (`model.base_url`), if the document can be mapped.
pub(crate) fn value_span(source: &str, key: &str) -> Option<Range<usize>> {
    let root: Spanned<Node> = toml::from_str(source).ok()?;
    let mut span = root.span();
    let mut node = root.into_inner();
    for part in key.split('.') {
        let Node::Table(entries) = node else { return None };
        let value = entries.into_iter().find(|(name, _)| name == part)?.1;
        span = value.span();
        node = value.into_inner();
    }
    Some(span)
}

/// The 1-based line and column of a byte offset.
pub(crate) fn line_col(source: &str, offset: usize) -> (usize, usize) {
    let before = source.get(..offset.min(source.len())).unwrap_or(source);
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

fn contains(outer: &Range<usize>, inner: &Range<usize>) -> bool {
    outer.start <= inner.start && inner.end <= outer.end && outer.start < outer.end
}

/// Whether `span` is the key written just before `value` (`key = value`): toml points at
/// the key itself for an unknown field.
fn is_key_of(source: &str, span: &Range<usize>, value: &Spanned<Node>) -> bool {
    let between = source.get(span.end..value.span().start).unwrap_or("");
    span.end <= value.span().start && between.trim_matches(|c| c == ' ' || c == '\t') == "="
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any TOML value")
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_str<E: de::Error>(self, _: &str) -> Result<Node, E> {
        Ok(Node::Leaf)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut entries = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            // toml hands a datetime over as a one-entry map under this private key.
            if key == "$__toml_private_datetime" {
                map.next_value::<IgnoredAny>()?;
                return Ok(Node::Leaf);
            }
            entries.push((key, map.next_value()?));
        }
        Ok(Node::Table(entries))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[track_caller]
    fn check(source: &str, expected: Option<&str>) {
        let err = toml::from_str::<crate::config::Config>(source).unwrap_err();
        let span = err.span().unwrap();
        assert_eq!(key_at(source, &span).as_deref(), expected, "{source:?}: {err}");
    }

    #[test]
    fn errors_are_named_by_their_key() {
        check("[store]\nbusy_timout_ms = 5\n", Some("store.busy_timout_ms"));
        check("[store]\nbusy_timeout_ms = \"fast\"\n", Some("store.busy_timeout_ms"));
        check("[stor]\nx = 1\n", Some("stor"));
        check("[gateway]\nbusy_input = \"fifo\"\n", Some("gateway.busy_input"));
        check("[telegram]\nallowed_users = [\"1\", 2]\n", Some("telegram.allowed_users[1]"));
        check("store = { busy_timeout_ms = true }\n", Some("store.busy_timeout_ms"));
        check("[store]\npath = 1979-05-27\n", Some("store.path"));
        check("store.busy_timeout_ms = -1\n", None);
    }

    #[test]
    fn keys_have_lines() {
        let source = "# c\n[model]\nmodel = \"m\"\nbase_url = \"ftp://x\"\n";
        let span = value_span(source, "model.base_url").unwrap();
        assert_eq!(line_col(source, span.start), (4, 12));
        assert_eq!(value_span(source, "model.nope"), None);
        assert_eq!(line_col("", 0), (1, 1));
    }
}

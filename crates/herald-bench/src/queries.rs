//! The fixed queries of `search`: what people type into a session search, by kind.

use herald_core::{Platform, Role};
use herald_store::SearchQuery;

use crate::vocab::Vocabulary;

/// One query of the fixed set.
#[derive(Debug, Clone)]
pub struct Query {
    /// Its kind, for the per-kind breakdown.
    pub kind: &'static str,
    /// The query with its filters.
    pub search: SearchQuery,
}

fn plain(kind: &'static str, text: impl Into<String>) -> Query {
    Query { kind, search: SearchQuery::new(text) }
}

fn filtered(text: &str, source: Option<Platform>, role: Option<Role>, user: Option<&str>) -> Query {
    let mut search = SearchQuery::new(text);
    search.source = source;
    search.role = role;
    search.user_id = user.map(str::to_owned);
    Query { kind: "filtered", search }
}

/// The fixed set: common and rare words, phrases, prefixes, `OR`, hostile input, filters.
pub fn fixed() -> Vec<Query> {
    let vocab = Vocabulary::global();
    let rare = |offset: usize| vocab.word(vocab.tail_start() + offset).to_owned();
    let mut queries = vec![
        plain("common", "error"),
        plain("common", "session"),
        plain("common", "deploy"),
        plain("common", "database"),
        plain("rare", rare(4_000)),
        plain("rare", rare(20_000)),
        plain("rare", rare(39_000)),
        plain("phrase", "\"database is locked\""),
        plain("phrase", "\"memory leak in the router\""),
        plain("phrase", "\"restart the server\""),
        plain("prefix", "deploy*"),
        plain("prefix", "conf*"),
        plain("prefix", "mig*"),
        plain("or", "timeout OR deadlock"),
        plain("or", "kafka OR postgres OR redis"),
        plain("or", format!("{} OR {}", rare(1_000), rare(30_000))),
        plain("hostile", "TODO: fix"),
        plain("hostile", "chat-send"),
        plain("hostile", "v2.1"),
        plain("hostile", "config.toml"),
        plain("hostile", "(unbalanced \"quote"),
        plain("hostile", "C++ AND OR NOT"),
        plain("hostile", "-- DROP TABLE messages; *"),
    ];
    queries.extend([
        filtered("deploy", Some(Platform::Discord), None, None),
        filtered("error", None, Some(Role::Tool), None),
        filtered("timeout", None, None, Some("u7")),
        filtered("restart", Some(Platform::Slack), Some(Role::User), None),
        filtered("locked", Some(Platform::Telegram), Some(Role::Assistant), Some("u42")),
    ]);
    queries
}

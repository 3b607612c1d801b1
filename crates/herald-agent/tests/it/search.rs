use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use herald_agent::tools::{HistorySearch, PastMessage, SessionSearch};
use herald_agent::{Agent, Message, ToolRegistry};
use herald_core::{Platform, Role};
use herald_fakes::{FakeModel, Reply};
use tokio_util::sync::CancellationToken;

use crate::{context, provider};

/// Remembers who it was asked for.
#[derive(Default)]
struct Recording {
    asked: Mutex<Vec<(Platform, String, String)>>,
}

impl HistorySearch for Recording {
    fn search<'a>(
        &'a self,
        platform: Platform,
        user_id: &'a str,
        query: &'a str,
        _limit: u32,
    ) -> BoxFuture<'a, Result<Vec<PastMessage>, String>> {
        self.asked.lock().unwrap().push((platform, user_id.to_owned(), query.to_owned()));
        let found = PastMessage {
            session_id: "old".into(),
            title: None,
            role: Role::User,
            created_at: 0,
            snippet: "the **wifi** password is hunter2".into(),
        };
        async move { Ok(vec![found]) }.boxed()
    }
}

#[tokio::test]
async fn session_search_asks_for_the_person_in_the_context_only() {
    let fake = FakeModel::start().await;
    // The model tries to search someone else's history.
    fake.push_reply(Reply::ToolCalls(vec![(
        "session_search".into(),
        r#"{"query":"wifi","user_id":"999","platform":"slack"}"#.into(),
    )]));
    let history = Arc::new(Recording::default());
    let mut tools = ToolRegistry::new();
    tools.register(SessionSearch::new(history.clone()));
    let provider = provider(&fake, Duration::from_secs(10));
    let agent = Agent {
        provider: &provider,
        tools: &tools,
        model: "m",
        system_prompt: "p",
        max_iterations: 4,
    };
    let out = agent
        .run(
            &[Message::user("what was the wifi password?")],
            &context("42"),
            &CancellationToken::new(),
        )
        .await
        .unwrap();
    assert_eq!(
        *history.asked.lock().unwrap(),
        [(Platform::Telegram, "42".to_owned(), "wifi".to_owned())]
    );
    assert!(out.messages[1].content.contains("hunter2"));
}

//! `herald chat` compressing a conversation three times: the chain it leaves, and the
//! commands that walk it, search it and continue it.

use herald_fakes::{FakeModel, Reply};
use herald_store::SessionFilter;

use crate::common::World;

#[test]
fn a_chain_of_three_compressions_is_walked_searched_and_continued() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let fake = runtime.block_on(FakeModel::start());
    let config = format!(
        "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n[compression]\nkeep_recent_tokens = 10\n",
        fake.base_url()
    );
    let world = World::with_config(&config);
    let chat = |args: &[&str], input: &str| {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        world.env_for("ada").herald_input(&all, input)
    };
    let first =
        chat(&[], "/title trip\nthe harbour at Hội An opens at 6\nand the old town?\n").ok();
    assert!(first.contains("echo: and the old town?"), "{first}");
    for (n, next) in [(1, "where do boats leave?"), (2, "and the ferry?"), (3, "thanks")] {
        fake.push_reply(Reply::text(format!("Summary {n}: the harbour opens at 6.")));
        let run = chat(&["-c"], &format!("/compress\n{next}\n"));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("compressed:"), "{run:?}");
        assert!(run.stdout.contains(&format!("echo: {next}")), "{run:?}");
    }

    let sessions = world.with_store(async |store| {
        let mut all = store.list_sessions(&SessionFilter::default()).await.unwrap();
        all.sort_by_key(|s| s.started_at);
        all
    });
    assert_eq!(sessions.len(), 4, "{sessions:?}");
    for pair in sessions.windows(2) {
        assert_eq!(pair[1].parent_session_id.as_deref(), Some(pair[0].id.as_str()));
        assert_eq!(pair[0].end_reason.as_deref(), Some("compressed"));
    }
    let titles: Vec<_> = sessions.iter().map(|s| s.title.clone().unwrap_or_default()).collect();
    assert_eq!(titles, ["trip", "trip #2", "trip #3", "trip #4"]);

    // --lineage walks all four from any of them.
    let lineage = world.herald(&["sessions", "show", &sessions[1].id, "--lineage"]).ok();
    for session in &sessions {
        assert!(lineage.contains(&session.id[..8]), "{lineage}");
    }
    // Search finds the first session's words and says where they are.
    let found = world.herald(&["sessions", "search", "Hội An"]).ok();
    assert!(found.contains(&sessions[0].id[..8]), "{found}");
    // Resuming the oldest by title or id goes on in the newest, and says so.
    let resumed = chat(&["-r", &sessions[0].id], "where are we?\n");
    assert_eq!(resumed.code, 0, "{resumed:?}");
    assert!(resumed.stdout.contains("echo: where are we?"), "{resumed:?}");
    let newest = world.with_store(async |store| store.history(&sessions[3].id).await.unwrap());
    assert!(newest.iter().any(|m| m.content == "where are we?"), "went on in the newest");
}

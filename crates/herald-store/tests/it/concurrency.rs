use herald_core::Platform;
use herald_store::{NewMessage, SessionFilter};

use crate::{fresh, session_for, turn};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sixty_four_tasks_write_turns_at_once() {
    let (store, _dir) = fresh().await;
    const TASKS: usize = 64;
    const TURNS: usize = 20;
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..TASKS {
        let store = store.clone();
        tasks.spawn(async move {
            let session = store
                .create_session(&session_for(Platform::Telegram, &format!("user-{t}")))
                .await?;
            for n in 0..TURNS {
                let msg_id = format!("{t}-{n}");
                let user = NewMessage::user(format!("task {t} turn {n}"));
                store.append_inbound(&session.id, Platform::Telegram, &msg_id, user).await?;
                store.append_messages(&session.id, turn(n)[1..].to_vec()).await?;
            }
            Ok::<_, herald_store::StoreError>((t, session.id))
        });
    }
    let mut sessions = Vec::new();
    while let Some(done) = tasks.join_next().await {
        sessions.push(done.unwrap().expect("no write may fail"));
    }
    assert_eq!(sessions.len(), TASKS);
    for (t, id) in sessions {
        let history = store.history(&id).await.unwrap();
        assert_eq!(history.len(), TURNS * 4, "session of task {t}");
        for (n, chunk) in history.chunks(4).enumerate() {
            assert_eq!(chunk[0].content, format!("task {t} turn {n}"), "order in task {t}");
            assert_eq!(chunk[3].content, format!("answer number {n}"));
        }
        let session = store.session(&id).await.unwrap().unwrap();
        assert_eq!(session.message_count, (TURNS * 4) as i64);
        assert_eq!(session.tool_call_count, TURNS as i64);
    }
    let listed = store.list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(listed.len(), TASKS);
    assert_eq!(store.stats().await.unwrap().messages, (TASKS * TURNS * 4) as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_wal_is_copied_back_while_writes_keep_coming() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let store = crate::open(&path).await;
    let session = store.create_session(&session_for(Platform::Cli, "me")).await.unwrap();
    let size = || std::fs::metadata(&path).unwrap().len();
    // The database file itself grows only when a checkpoint copies pages into it. Writes never
    // pause here, so the background indexer (which waits for a quiet moment) never runs: only
    // the checkpoints that follow commits can make it grow, again and again.
    let mut sizes = vec![size()];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut n = 0;
    while sizes.len() < 4 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint while writing: {sizes:?}");
        store.append_messages(&session.id, turn(n)).await.unwrap();
        n += 1;
        if size() > *sizes.last().unwrap() {
            sizes.push(size());
        }
    }
    assert_eq!(store.history(&session.id).await.unwrap().len(), n * 4);
}

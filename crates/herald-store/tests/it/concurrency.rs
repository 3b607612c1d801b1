use herald_core::Platform;
use herald_store::{Appended, NewMessage, NewSession, SessionFilter, StoreError};

use crate::{reopen, session_for, turn};

both! {
async fn sixty_four_tasks_write_turns_at_once(store, scratch) {
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

both! {
/// Several stores on one database, as replicas are: each writes its own sessions while all race
/// to route the same chats and to record the same inbound messages. Nothing fails, each chat
/// gets one session, and each inbound message is stored once.
async fn replicas_race_for_routes_and_inbound_ids(store, scratch) {
    const REPLICAS: usize = 4;
    const KEYS: usize = 8;
    let mut replicas = vec![store];
    for _ in 1..REPLICAS {
        replicas.push(reopen(&scratch).await);
    }
    let key = |k: usize| format!("telegram:dm:{k}");
    let mut tasks = tokio::task::JoinSet::new();
    for (r, replica) in replicas.iter().enumerate() {
        for k in 0..KEYS {
            // Two racers per replica and key.
            for _ in 0..2 {
                let (replica, key) = (replica.clone(), key(k));
                tasks.spawn(async move {
                    let new = NewSession {
                        session_key: Some(key.clone()),
                        ..session_for(Platform::Telegram, &k.to_string())
                    };
                    let (session, created) = replica.route_or_create(&key, &new).await?;
                    let message = NewMessage::user(format!("hello {k}"));
                    let stored = replica
                        .append_inbound(&session.id, Platform::Telegram, &format!("m{k}"), message)
                        .await?;
                    let fresh = replica.record_inbound(Platform::Slack, &format!("m{k}")).await?;
                    Ok::<_, StoreError>(Outcome { key, session: session.id, created, stored, fresh })
                });
            }
        }
        // Meanwhile, sessions of its own.
        let replica = replica.clone();
        tasks.spawn(async move {
            let own = replica.create_session(&session_for(Platform::Cli, &format!("r{r}"))).await?;
            for n in 0..10 {
                replica.append_messages(&own.id, turn(n)).await?;
            }
            let stored = replica.history(&own.id).await?.len();
            assert_eq!(stored, 40);
            Ok(Outcome {
                key: String::new(),
                session: own.id,
                created: true,
                stored: Appended::Stored(Vec::new()),
                fresh: false,
            })
        });
    }
    let mut outcomes = Vec::new();
    while let Some(done) = tasks.join_next().await {
        outcomes.push(done.unwrap().expect("no replica's write may fail"));
    }
    for k in 0..KEYS {
        let racers: Vec<&Outcome> = outcomes.iter().filter(|o| o.key == key(k)).collect();
        assert_eq!(racers.len(), REPLICAS * 2);
        let routed = replicas[0].routed_session(&key(k)).await.unwrap().unwrap();
        assert!(racers.iter().all(|o| o.session == routed.id), "key {k}: one session for all");
        assert_eq!(racers.iter().filter(|o| o.created).count(), 1, "key {k}: created once");
        let stored = racers.iter().filter(|o| matches!(o.stored, Appended::Stored(_))).count();
        assert_eq!(stored, 1, "key {k}: the inbound message stored once");
        assert_eq!(racers.iter().filter(|o| o.fresh).count(), 1, "key {k}: recorded once");
        assert_eq!(replicas[1].history(&routed.id).await.unwrap().len(), 1);
        assert_eq!(replicas[2].session(&routed.id).await.unwrap().unwrap().message_count, 1);
    }
    let all = replicas[3].list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(all.len(), KEYS + REPLICAS, "no session left over from a lost race");
    assert_eq!(replicas[0].stats().await.unwrap().messages, (KEYS + REPLICAS * 40) as i64);
}
}

#[derive(Debug)]
struct Outcome {
    key: String,
    session: String,
    created: bool,
    stored: Appended,
    fresh: bool,
}

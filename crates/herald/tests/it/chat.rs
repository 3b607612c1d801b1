//! `herald chat` as a child process with piped stdin, against the fake model.

use herald_core::{Platform, Role};
use herald_fakes::{FakeModel, Fault};
use herald_store::{NewMessage, SessionFilter};

use crate::common::World;

/// A running fake model and a world whose config points at it.
struct Trial {
    // Declared first so the fake stops before its runtime does.
    fake: FakeModel,
    world: World,
    _runtime: tokio::runtime::Runtime,
}

impl Trial {
    fn new(persona: &str) -> Trial {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        let fake = runtime.block_on(FakeModel::start());
        let world = World::with_config(&config(&fake, persona));
        Trial { fake, world, _runtime: runtime }
    }

    fn set_persona(&self, persona: &str) {
        let text = format!(
            "[store]\npath = \"{}\"\n{}",
            self.world.db.display(),
            config(&self.fake, persona)
        );
        std::fs::write(&self.world.config, text).unwrap();
    }

    fn chat(&self, args: &[&str], user: &str, input: &str) -> String {
        let mut all = vec!["chat"];
        all.extend_from_slice(args);
        let mut world_env = self.world.env_for(user);
        world_env.herald_input(&all, input).ok()
    }

    /// The system prompt of the n-th request the model received.
    fn system_prompt(&self, n: usize) -> String {
        self.fake.requests()[n]["messages"][0]["content"].as_str().unwrap().to_owned()
    }
}

fn config(fake: &FakeModel, persona: &str) -> String {
    format!(
        "[model]\nbase_url = \"{}\"\nmodel = \"fake-model\"\n[agent]\npersona = \"{persona}\"\n",
        fake.base_url()
    )
}

#[test]
fn continue_resumes_across_processes_and_stores_each_message_once() {
    let trial = Trial::new("You are Herald.");
    let first = trial.chat(&[], "ada", "my name is Ada\n/exit\n");
    assert!(first.contains("echo: my name is Ada"), "{first}");
    let second = trial.chat(&["--continue"], "ada", "what is my name?\n");
    assert!(second.contains("resumed, 2 messages"), "{second}");

    let last = trial.fake.requests().last().unwrap().clone();
    let contents: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(&contents[1..], ["my name is Ada", "echo: my name is Ada", "what is my name?"]);

    let sessions = trial.world.with_store(async |store| {
        let sessions = store.list_sessions(&SessionFilter::default()).await.unwrap();
        let history = store.history(&sessions[0].id).await.unwrap();
        (sessions, history)
    });
    let (sessions, history) = sessions;
    assert_eq!(sessions.len(), 1, "--continue made no new session");
    assert_eq!(sessions[0].source, Platform::Cli);
    assert_eq!(sessions[0].user_id.as_deref(), Some("ada"));
    let texts: Vec<&str> = history.iter().map(|m| m.content.as_str()).collect();
    assert_eq!(
        texts,
        ["my name is Ada", "echo: my name is Ada", "what is my name?", "echo: what is my name?"]
    );
    assert!(sessions[0].input_tokens > 0, "usage was recorded");
}

#[test]
fn a_session_keeps_its_system_prompt_when_the_persona_changes() {
    let trial = Trial::new("You are Herald the First.");
    trial.chat(&[], "ada", "one\n");
    trial.set_persona("You are Herald the Second.");
    trial.chat(&["-c"], "ada", "two\n");
    trial.chat(&[], "ada", "three\n");
    let (first, second, fresh) =
        (trial.system_prompt(0), trial.system_prompt(1), trial.system_prompt(2));
    assert_eq!(first.as_bytes(), second.as_bytes(), "the same bytes on the second turn");
    assert!(first.starts_with("You are Herald the First."));
    assert!(fresh.starts_with("You are Herald the Second."), "a new session gets the new persona");
}

#[test]
fn session_search_finds_only_the_askers_own_history() {
    let trial = Trial::new("You are Herald.");
    trial.chat(&[], "ada", "the wifi password is hunter2\n");
    trial.chat(&[], "bob", "the wifi password is swordfish\n");
    let answer = trial.chat(&[], "ada", "search for wifi password\n");
    assert!(answer.contains("hunter2"), "{answer}");
    assert!(!answer.contains("swordfish"), "another user's history leaked: {answer}");
    let tool_result = trial.fake.requests().last().unwrap()["messages"]
        .as_array()
        .unwrap()
        .last()
        .unwrap()
        .clone();
    assert_eq!(tool_result["role"], "tool");
}

#[test]
fn titles_and_resume_by_title() {
    let trial = Trial::new("You are Herald.");
    let out = trial.chat(&[], "ada", "plan the trip\n/title trip\n/new\nsomething else\n");
    assert!(out.contains("titled \"trip\""), "{out}");
    let resumed = trial.chat(&["-r", "trip"], "ada", "where were we?\n");
    assert!(resumed.contains("\"trip\" (resumed, 2 messages"), "{resumed}");
    let sessions = trial
        .world
        .with_store(async |store| store.list_sessions(&SessionFilter::default()).await.unwrap());
    assert_eq!(sessions.len(), 2);
    let old = sessions.iter().find(|s| s.title.as_deref() == Some("trip")).unwrap();
    assert_eq!(old.message_count, 4);
}

#[test]
fn a_model_failure_is_one_line_and_keeps_the_message() {
    let trial = Trial::new("You are Herald.");
    trial.fake.push_fault(Fault::Status { code: 401, retry_after: None, body: None });
    let run = trial.world.env_for("ada").herald_input(&["chat"], "first try\nsecond try\n");
    assert_eq!(run.code, 0, "{run:?}");
    let errors: Vec<&str> = run.stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{run:?}");
    assert!(errors[0].contains("api_key_env"), "{}", errors[0]);
    assert!(errors[0].contains("your message is saved"), "{}", errors[0]);
    assert!(run.stdout.contains("echo: second try"));
    let history = trial.world.with_store(async |store| {
        let s = store.list_sessions(&SessionFilter::default()).await.unwrap();
        store.history(&s[0].id).await.unwrap()
    });
    let said: Vec<(Role, &str)> = history.iter().map(|m| (m.role, m.content.as_str())).collect();
    assert_eq!(
        said,
        [
            (Role::User, "first try"),
            (Role::User, "second try"),
            (Role::Assistant, "echo: second try")
        ],
        "the failed turn kept what was typed, as the gateway does"
    );
}

#[test]
fn without_a_model_it_says_what_to_configure() {
    let world = World::new();
    let line = world.herald_input(&["chat"], "hello\n").fails(2);
    assert!(line.contains("HERALD_API_KEY") && line.contains("base_url"), "{line}");
}

#[test]
fn lines_in_any_script_are_answered_and_stored() {
    let trial = Trial::new("You are Herald.");
    let lines = ["привет", "你好，世界", "مرحبا بالعالم", "🎉 it works", "é", "/привет", "/你好/x"];
    let input = format!("{}\n/exit\n", lines.join("\n"));
    let run = trial.world.env_for("ada").herald_input(&["chat"], &input);
    assert_eq!(run.code, 0, "{run:?}");
    for line in ["привет", "你好，世界", "مرحبا بالعالم", "🎉 it works", "é", "/你好/x"]
    {
        assert!(run.stdout.contains(&format!("echo: {line}")), "{line}: {run:?}");
    }
    assert!(run.stdout.contains("unknown command /привет; /help lists them"), "{run:?}");

    let history = trial.world.with_store(async |store| {
        let s = store.list_sessions(&SessionFilter::default()).await.unwrap();
        store.history(&s[0].id).await.unwrap()
    });
    let said: Vec<&str> =
        history.iter().filter(|m| m.role == Role::User).map(|m| m.content.as_str()).collect();
    assert_eq!(said, ["привет", "你好，世界", "مرحبا بالعالم", "🎉 it works", "é", "/你好/x"]);
}

#[test]
fn resuming_a_compressed_session_resumes_the_newest_of_its_chain() {
    let trial = Trial::new("You are Herald.");
    trial.chat(&[], "ada", "plan the trip\n/title trip\n");
    let (first, second) = trial.world.with_store(async |store| {
        let first = store.resolve_session("trip").await.unwrap();
        // Compressed mid-chat, as it would be while the session is open.
        store.reopen_session(&first.id).await.unwrap();
        let summary = vec![NewMessage::user("Summary of the conversation so far: a trip")];
        let second = store.compress_session(&first.id, summary, 50).await.unwrap();
        (first.id, second.id)
    });

    let out = trial.chat(&["-r", &first], "ada", "where were we?\n");
    let notice = out.lines().next().unwrap();
    let (asked, newest) = notice
        .strip_prefix("session ")
        .and_then(|rest| rest.strip_suffix(" (compressed); resuming that"))
        .and_then(|rest| rest.split_once(" was continued by "))
        .unwrap_or_else(|| panic!("no notice: {out}"));
    assert!(first.starts_with(asked.trim_end_matches('…')), "{notice}");
    assert!(second.starts_with(newest.trim_end_matches('…')), "{notice}");
    assert!(out.contains(&format!("session {second} \"trip #2\" (resumed, 1 messages")), "{out}");
    // The model saw the summary, not the parent's history.
    let last = trial.fake.requests().last().unwrap().clone();
    let contents: Vec<&str> = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["content"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(&contents[1..], ["Summary of the conversation so far: a trip", "where were we?"]);

    // -c and the chain's name reach it too, with nothing to explain.
    let out = trial.chat(&["-c"], "ada", "and now?\n");
    assert!(out.starts_with(&format!("herald chat: session {second} ")), "{out}");
    let out = trial.chat(&["-r", "trip"], "ada", "still there?\n");
    assert!(out.starts_with(&format!("herald chat: session {second} ")), "{out}");

    let (parent, child) = trial.world.with_store(async |store| {
        let parent = store.session(&first).await.unwrap().unwrap();
        let child = store.history(&second).await.unwrap();
        (parent, child)
    });
    assert_eq!(parent.end_reason.as_deref(), Some("compressed"), "the parent stays ended");
    assert_eq!(parent.message_count, 2);
    assert_eq!(child.len(), 7);
}

use std::time::{Duration, Instant};

use herald_agent::{ChatRequest, Message, Provider, ProviderError};
use herald_fakes::{FakeModel, Fault};

use crate::provider;

async fn ask(
    fake: &FakeModel,
    timeout: Duration,
) -> Result<herald_agent::Completion, ProviderError> {
    let messages = [Message::user("hi")];
    let request =
        ChatRequest { model: "fake-model", system_prompt: "p", messages: &messages, tools: &[] };
    provider(fake, timeout).complete(request).await
}

#[tokio::test]
async fn a_429_with_retry_after_is_waited_out() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Status { code: 429, retry_after: Some(1), body: None });
    let started = Instant::now();
    let completion = ask(&fake, Duration::from_secs(10)).await.unwrap();
    assert_eq!(completion.message.content, "echo: hi");
    assert!(started.elapsed() >= Duration::from_millis(950), "Retry-After was not honoured");
    assert_eq!(fake.request_count(), 2);
    assert!(completion.usage.is_some(), "usage is passed on");
}

#[tokio::test]
async fn a_500_is_retried() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Status { code: 500, retry_after: None, body: None });
    let completion = ask(&fake, Duration::from_secs(10)).await.unwrap();
    assert_eq!(completion.message.content, "echo: hi");
    assert_eq!(fake.request_count(), 2);
}

#[tokio::test]
async fn persistent_500s_give_up_after_the_attempts() {
    let fake = FakeModel::start().await;
    for _ in 0..5 {
        fake.push_fault(Fault::Status { code: 503, retry_after: None, body: None });
    }
    let err = ask(&fake, Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Server { status: 503, attempts: 3, .. }), "{err:?}");
    assert_eq!(fake.request_count(), 3);
}

#[tokio::test]
async fn a_timeout_is_a_clear_error() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Delay(Duration::from_secs(3)));
    let err = ask(&fake, Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("request_timeout_s"), "{err}");
}

#[tokio::test]
async fn a_401_names_the_key_setting() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Status { code: 401, retry_after: None, body: None });
    let err = ask(&fake, Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unauthorized { status: 401, .. }), "{err:?}");
    assert!(err.to_string().contains("api_key_env"), "{err}");
    assert_eq!(fake.request_count(), 1, "a bad key is not retried");
    assert_eq!(fake.authorizations()[0].as_deref(), Some("Bearer sk-test"));
}

#[tokio::test]
async fn a_malformed_body_is_a_clear_error() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::Malformed);
    let err = ask(&fake, Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Malformed { .. }), "{err:?}");
    assert!(!err.to_string().contains('\n'));
}

#[tokio::test]
async fn an_endpoint_that_is_down_is_named() {
    let fake = FakeModel::start().await;
    let url = fake.base_url();
    drop(fake);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let retry = herald_agent::RetryPolicy {
        attempts: 2,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_secs(1),
    };
    let provider =
        herald_agent::OpenAiProvider::new(&url, None, Duration::from_secs(2), retry).unwrap();
    let messages = [Message::user("hi")];
    let request = ChatRequest { model: "m", system_prompt: "p", messages: &messages, tools: &[] };
    let err = provider.complete(request).await.unwrap_err();
    assert!(matches!(err, ProviderError::Unreachable { .. }), "{err:?}");
    assert!(err.to_string().contains("base_url"), "{err}");
}

#[tokio::test]
async fn a_prompt_over_the_context_window_is_context_too_long_and_not_retried() {
    let fake = FakeModel::start().await;
    fake.set_context_window(Some(3));
    let err = ask(&fake, Duration::from_secs(10)).await.unwrap_err();
    let ProviderError::ContextTooLong { detail } = &err else {
        panic!("expected ContextTooLong, got {err:?}");
    };
    assert!(detail.contains("maximum context length is 3 tokens"), "{detail}");
    assert!(err.to_string().starts_with("the conversation is too long"), "{err}");
    assert_eq!(fake.request_count(), 1, "the same request would be refused again");

    fake.set_context_window(None);
    assert_eq!(ask(&fake, Duration::from_secs(10)).await.unwrap().message.content, "echo: hi");
}

#[tokio::test]
async fn another_400_is_still_rejected() {
    let fake = FakeModel::start().await;
    fake.push_fault(Fault::status(400));
    let err = ask(&fake, Duration::from_secs(10)).await.unwrap_err();
    assert!(matches!(err, ProviderError::Rejected { status: 400, .. }), "{err:?}");
}

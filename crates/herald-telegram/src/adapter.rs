//! The adapter's run loop: a polling task next to a loop that serves the outbound channel.

use std::sync::Arc;
use std::time::Duration;

use herald_core::{AdapterContext, AdapterError};
use teloxide::Bot;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::{AbortOnDropHandle, TaskTracker};
use tracing::{Instrument, debug, info};

use crate::TelegramSettings;
use crate::poll::Poller;
use crate::send::Sender;

/// How many outbound requests run at once: enough for many chats, few enough to stay polite.
const MAX_CONCURRENT_SENDS: usize = 32;

/// Extra time the poll client waits beyond the long poll before it calls a request dead.
const POLL_GRACE: Duration = Duration::from_secs(10);

/// Runs until `shutdown` is cancelled and every outbound sender is dropped.
#[tracing::instrument(name = "telegram", skip_all)]
pub(crate) async fn run(
    settings: TelegramSettings,
    ctx: AdapterContext,
    shutdown: CancellationToken,
) -> Result<(), AdapterError> {
    let AdapterContext { events, mut outbound, cursor, .. } = ctx;
    // Two clients: a long poll must never hold up a send, and sends keep teloxide's shorter
    // timeout while polls need one longer than the poll itself.
    let poll_bot = bot(&settings, Some(settings.poll_timeout + POLL_GRACE))?;
    let send_bot = bot(&settings, None)?;

    let poller = Poller::new(poll_bot, &settings, events, shutdown);
    // Aborted if `run` itself is dropped, so a poller never outlives its adapter.
    let mut polling = AbortOnDropHandle::new(tokio::spawn(poller.run(cursor).in_current_span()));
    let sender = Arc::new(Sender::new(send_bot, &settings));
    let permits = Arc::new(Semaphore::new(MAX_CONCURRENT_SENDS));
    let tracker = TaskTracker::new();

    let mut poll_running = true;
    let mut outbound_open = true;
    while poll_running || outbound_open {
        tokio::select! {
            result = &mut polling, if poll_running => {
                poll_running = false;
                match result {
                    Ok(Ok(())) => {}
                    // In-flight sends finish on their own; the refusal is what the caller needs.
                    Ok(Err(err)) => return Err(err),
                    Err(join) => {
                        return Err(AdapterError::Other(format!("telegram polling failed: {join}")));
                    }
                }
            }
            request = outbound.recv(), if outbound_open => {
                let Some(request) = request else {
                    outbound_open = false;
                    continue;
                };
                // Waiting for a permit here is the backpressure: the gateway's channel fills up.
                let permit = permits
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the send semaphore is never closed");
                let sender = sender.clone();
                tracker.spawn(
                    async move {
                        sender.handle(request).await;
                        drop(permit);
                    }
                    .in_current_span(),
                );
            }
        }
    }
    tracker.close();
    if !tracker.is_empty() {
        debug!(in_flight = tracker.len(), "waiting for outbound requests to finish");
    }
    tracker.wait().await;
    info!("telegram adapter stopped");
    Ok(())
}

/// A teloxide bot whose client times out after `timeout` (teloxide's default when `None`).
fn bot(settings: &TelegramSettings, timeout: Option<Duration>) -> Result<Bot, AdapterError> {
    let mut client = teloxide::net::default_reqwest_settings();
    if let Some(timeout) = timeout {
        client = client.timeout(timeout);
    }
    let client = client.build().map_err(|e| {
        AdapterError::Other(format!("could not build the telegram http client: {e}"))
    })?;
    let url = reqwest::Url::parse(&settings.api_url).map_err(|e| {
        AdapterError::Other(format!(
            "telegram api url `{}` is not a valid url ({e}): check telegram.api_url",
            settings.api_url
        ))
    })?;
    Ok(Bot::with_client(settings.token.clone(), client).set_api_url(url))
}

//! The adapter's run loop: a receiving task (polling, or the webhook listener) next to a loop
//! that serves the outbound channel. Sending works on every replica, polling or not.

use std::sync::Arc;
use std::time::Duration;

use herald_core::{AdapterContext, AdapterError, serve_outbound};
use teloxide::Bot;
use tokio_util::sync::CancellationToken;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, info};

use crate::TelegramSettings;
use crate::link::Link;
use crate::poll::Poller;
use crate::send::Sender;
use crate::webhook;

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
    let AdapterContext { events, outbound, cursor, claims, .. } = ctx;
    // Two clients: a long poll must never hold up a send, and sends keep teloxide's shorter
    // timeout while polls need one longer than the poll itself.
    let poll_bot = bot(&settings, Some(settings.poll_timeout + POLL_GRACE))?;
    let send_bot = bot(&settings, None)?;

    let link = Link::new(poll_bot, &settings, events, shutdown);
    // A webhook needs no claim: Telegram posts to every replica through the load balancer.
    let receiving = match settings.webhook.clone() {
        Some(hook) => tokio::spawn(webhook::run(link, hook).in_current_span()),
        None => {
            let poller = Poller::new(link, settings.poll_timeout);
            tokio::spawn(poller.run(cursor, claims).in_current_span())
        }
    };
    // Aborted if `run` itself is dropped, so a receiver never outlives its adapter.
    let receiving = AbortOnDropHandle::new(receiving);
    let receiving = async {
        receiving.await.unwrap_or_else(|join| {
            Err(AdapterError::Other(format!("telegram receiving failed: {join}")))
        })
    };
    let sender = Arc::new(Sender::new(send_bot, &settings));
    let serving = serve_outbound(outbound, MAX_CONCURRENT_SENDS, move |request| {
        let sender = sender.clone();
        async move { sender.handle(request).await }
    });
    // A refusal returns at once (in-flight sends finish on their own); otherwise the sends go
    // on until the gateway drops its last sender.
    tokio::try_join!(receiving, async {
        serving.await;
        Ok(())
    })?;
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

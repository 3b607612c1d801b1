//! The adapter's run loop: both tokens checked (`auth.test`, `apps.connections.open`), the
//! Socket Mode listener started (slack-morphism keeps its connections and reconnects them),
//! and the senders serving the outbound channel until the gateway drops it.

use std::sync::Arc;
use std::time::Duration;

use herald_core::{AdapterContext, AdapterError, AdapterEvent, Platform, backoff, serve_outbound};
use hyper_rustls::HttpsConnectorBuilder;
use slack_morphism::api::SlackApiAppsConnectionOpenRequest;
use slack_morphism::events::SlackPushEventCallback;
use slack_morphism::hyper_tokio::{SlackClientHyperConnector, SlackHyperClient};
use slack_morphism::listener::{
    HttpStatusCode, SlackClientEventsListenerEnvironment, SlackClientEventsUserState,
};
use slack_morphism::prelude::ValueStruct;
use slack_morphism::{
    SlackApiToken, SlackApiTokenValue, SlackClient, SlackClientSocketModeConfig,
    SlackClientSocketModeListener, SlackSocketModeListenerCallbacks, UserCallbackResult,
};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::SlackSettings;
use crate::error::{Failure, Secrets, classify};
use crate::intake::{Bot, Intake, Unsettled};
use crate::send::Sender;

/// How many outbound requests run at once.
const MAX_CONCURRENT_SENDS: usize = 32;
/// How often a Socket Mode connection is pinged; three unanswered pings give it up.
const PING_EVERY_S: u64 = 5;
/// The longest slack-morphism waits between two attempts to open a lost connection.
const RECONNECT_CAP_S: u64 = 5;

/// Errors Slack answers for a token that no retry will mend.
const REFUSED_TOKEN: [&str; 6] = [
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

/// Slack opens at most this many Socket Mode connections for one app.
const MAX_CONNECTIONS: u32 = 10;

/// Runs until `shutdown` is cancelled and every outbound sender is dropped.
#[tracing::instrument(name = "slack", skip_all)]
pub(crate) async fn run(
    settings: SlackSettings,
    ctx: AdapterContext,
    shutdown: CancellationToken,
) -> Result<(), AdapterError> {
    let AdapterContext { events, outbound, .. } = ctx;
    let secrets = Secrets(vec![settings.bot_token.clone(), settings.app_token.clone()]);
    let client = Arc::new(SlackClient::new(connector(&settings)?));
    let bot_token = token(&settings.bot_token);
    let app_token = token(&settings.app_token);
    let checks =
        Checks { client: &client, settings: &settings, secrets: &secrets, events: &events };
    let Some(bot) = checks.bot(&bot_token, &shutdown).await? else { return Ok(()) };
    if !checks.app(&app_token, &shutdown).await? {
        return Ok(());
    }
    info!(bot = %bot.name, user = %bot.user, "slack tokens accepted");

    let intake = Arc::new(Intake::new(&settings, bot, events, shutdown.clone()));
    let environment = SlackClientEventsListenerEnvironment::new(client.clone())
        .with_error_handler(on_error)
        .with_user_state(intake.clone());
    let callbacks = SlackSocketModeListenerCallbacks::new()
        .with_hello_events(on_hello)
        .with_push_events(on_push);
    let reconnect = settings.max_backoff.as_secs().clamp(1, RECONNECT_CAP_S);
    let config = SlackClientSocketModeConfig::new()
        .with_max_connections_count(settings.socket_connections.clamp(1, MAX_CONNECTIONS))
        .with_initial_backoff_in_seconds(1)
        .with_reconnect_timeout_in_seconds(reconnect)
        .with_ping_interval_in_seconds(PING_EVERY_S)
        .with_ping_failure_threshold_times(3);
    let listener = SlackClientSocketModeListener::new(&config, Arc::new(environment), callbacks);
    listener
        .listen_for(&app_token)
        .await
        .map_err(|e| AdapterError::Other(secrets.scrub(&format!("socket mode: {e}"))))?;
    listener.start().await;

    let sender = Sender {
        client,
        token: bot_token,
        intake: intake.clone(),
        settings: Arc::new(settings),
        secrets,
    };
    let closed = CancellationToken::new();
    let listening = async {
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = closed.cancelled() => {}
        }
        // Stop taking events; what is unacknowledged comes again at the next start.
        listener.shutdown().await;
    };
    let serving = async {
        let serving = serve_outbound(outbound, MAX_CONCURRENT_SENDS, move |request| {
            let sender = sender.clone();
            async move { sender.handle(request).await }
        });
        serving.await;
        closed.cancel();
    };
    tokio::join!(listening, serving);
    info!("slack adapter stopped");
    Ok(())
}

/// A Web API client for the configured URL: https only for Slack, plain http allowed for a
/// local URL (a fake in tests), with the OS's certificates either way.
fn connector(
    settings: &SlackSettings,
) -> Result<
    SlackClientHyperConnector<slack_morphism::hyper_tokio::SlackHyperHttpsConnector>,
    AdapterError,
> {
    let roots = HttpsConnectorBuilder::new().with_native_roots().map_err(|e| {
        AdapterError::Other(format!("could not read the system's certificates: {e}"))
    })?;
    let connector = match &settings.api_url {
        None => {
            SlackClientHyperConnector::with_connector(roots.https_only().enable_http1().build())
        }
        Some(url) => {
            SlackClientHyperConnector::with_connector(roots.https_or_http().enable_http1().build())
                .with_slack_api_url(url.trim_end_matches('/'))
        }
    };
    Ok(connector)
}

fn token(value: &str) -> SlackApiToken {
    SlackApiToken::new(SlackApiTokenValue::new(value.to_owned()))
}

/// The start's checks of both tokens, retried while Slack cannot be reached.
struct Checks<'a> {
    client: &'a SlackHyperClient,
    settings: &'a SlackSettings,
    secrets: &'a Secrets,
    events: &'a tokio::sync::mpsc::Sender<AdapterEvent>,
}

impl Checks<'_> {
    /// The bot behind the bot token; `None` when stopped before Slack answered.
    async fn bot(
        &self,
        token: &SlackApiToken,
        shutdown: &CancellationToken,
    ) -> Result<Option<Bot>, AdapterError> {
        let env = &self.settings.bot_token_env;
        self.until_answered("auth.test", env, shutdown, || async {
            let found = self.client.open_session(token).auth_test().await?;
            let name = found.user.clone().unwrap_or_else(|| found.user_id.value().clone());
            Ok(Bot { user: found.user_id.value().clone(), name })
        })
        .await
    }

    /// Whether the app token opens Socket Mode; `false` when stopped before Slack answered.
    async fn app(
        &self,
        token: &SlackApiToken,
        shutdown: &CancellationToken,
    ) -> Result<bool, AdapterError> {
        let env = &self.settings.app_token_env;
        let request = SlackApiAppsConnectionOpenRequest::new();
        let opened = self
            .until_answered("apps.connections.open", env, shutdown, || async {
                self.client.open_session(token).apps_connections_open(&request).await.map(drop)
            })
            .await?;
        Ok(opened.is_some())
    }

    async fn until_answered<T, F, Fut>(
        &self,
        method: &str,
        env: &str,
        shutdown: &CancellationToken,
        call: F,
    ) -> Result<Option<T>, AdapterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<T, slack_morphism::errors::SlackClientError>>,
    {
        let mut attempt = 0;
        loop {
            let failure = match call().await {
                Ok(value) => return Ok(Some(value)),
                Err(e) => classify(&e, method, self.secrets),
            };
            let (error, after) = match failure {
                Failure::Refused { code, .. } if REFUSED_TOKEN.contains(&code.as_str()) => {
                    return Err(AdapterError::Unauthorized {
                        platform: Platform::Slack,
                        detail: format!("{method} answered {code}"),
                        hint: env.to_owned(),
                    });
                }
                Failure::Refused { error, .. } => return Err(AdapterError::Other(error)),
                Failure::Retry { error, after } => (error, after),
            };
            let retry_in = backoff(attempt, after, self.settings.max_backoff);
            attempt += 1;
            let _ = self.events.send(AdapterEvent::Retrying { error, retry_in }).await;
            tokio::select! {
                () = tokio::time::sleep(retry_in) => {}
                () = shutdown.cancelled() => return Ok(None),
            }
        }
    }
}

/// The intake kept in the listener's user state.
async fn intake_of(states: &SlackClientEventsUserState) -> Option<Arc<Intake>> {
    states.read().await.get_user_state::<Arc<Intake>>().cloned()
}

async fn on_push(
    event: SlackPushEventCallback,
    _client: Arc<SlackHyperClient>,
    states: SlackClientEventsUserState,
) -> UserCallbackResult<()> {
    let Some(intake) = intake_of(&states).await else { return Ok(()) };
    intake.handle(event).await.map_err(|e| Box::new(e) as _)
}

/// Slack's `hello` on a new connection. Generic because slack-morphism does not export the
/// event's type by a path that resolves; its JSON form says how many connections are open.
async fn on_hello<E: serde::Serialize>(
    hello: E,
    _client: Arc<SlackHyperClient>,
    states: SlackClientEventsUserState,
) {
    let Some(intake) = intake_of(&states).await else { return };
    let connections = serde_json::to_value(&hello).ok().and_then(|h| h["num_connections"].as_u64());
    info!(connections, "socket mode connection opened");
    let connected = AdapterEvent::Connected { bot: intake.bot.name.clone() };
    let _ = intake.events.send(connected).await;
}

/// slack-morphism's error handler, for two things: an envelope whose message was not settled
/// in time (answered "not acknowledged", so Slack delivers it again) and a connection that
/// failed (reported; slack-morphism opens a new one).
fn on_error(
    error: Box<dyn std::error::Error + Send + Sync>,
    _client: Arc<SlackHyperClient>,
    states: SlackClientEventsUserState,
) -> HttpStatusCode {
    let unsettled = error.downcast_ref::<Unsettled>().is_some();
    let Ok(state) = states.try_read() else { return HttpStatusCode::SERVICE_UNAVAILABLE };
    let Some(intake) = state.get_user_state::<Arc<Intake>>() else {
        return HttpStatusCode::SERVICE_UNAVAILABLE;
    };
    if unsettled {
        warn!(%error, "an event was left unacknowledged");
    } else if !intake.shutdown.is_cancelled() {
        let error = format!("socket mode: {}", error.to_string().lines().next().unwrap_or(""));
        warn!(%error, "a socket mode connection failed; reconnecting");
        let retry_in = Duration::from_secs(1);
        let _ = intake.events.try_send(AdapterEvent::Retrying { error, retry_in });
    }
    HttpStatusCode::SERVICE_UNAVAILABLE
}

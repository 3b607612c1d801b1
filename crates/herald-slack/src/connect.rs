//! The adapter's run loop: both tokens checked (`auth.test`, `apps.connections.open`), the
//! Socket Mode connections kept (see `socket.rs`), and the senders serving the outbound
//! channel until the gateway drops it.

use std::sync::Arc;

use herald_core::{AdapterContext, AdapterError, AdapterEvent, Platform, backoff, serve_outbound};
use hyper_rustls::HttpsConnectorBuilder;
use slack_morphism::api::SlackApiAppsConnectionOpenRequest;
use slack_morphism::hyper_tokio::{SlackClientHyperConnector, SlackHyperClient};
use slack_morphism::prelude::ValueStruct;
use slack_morphism::{SlackApiToken, SlackApiTokenValue, SlackClient};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::SlackSettings;
use crate::error::{Failure, Secrets, timed};
use crate::intake::{Bot, Intake};
use crate::send::Sender;
use crate::socket::Sockets;

/// How many outbound requests run at once.
const MAX_CONCURRENT_SENDS: usize = 32;

/// Errors Slack answers for a token that no retry will mend.
const REFUSED_TOKEN: [&str; 6] = [
    "invalid_auth",
    "not_authed",
    "account_inactive",
    "token_revoked",
    "token_expired",
    "not_allowed_token_type",
];

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
    let sockets = Arc::new(Sockets::new(
        client.clone(),
        app_token,
        intake.clone(),
        secrets.clone(),
        &settings,
    ));
    let connections = settings.socket_connections;

    let sender = Sender {
        client,
        token: bot_token,
        intake: intake.clone(),
        settings: Arc::new(settings),
        secrets,
    };
    // Events stop at the stop, or once the gateway is gone; what is unacknowledged comes
    // again at the next start.
    let closed = shutdown.child_token();
    let listening = sockets.run(connections, closed.clone());
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
            let id = found.bot_id.as_ref().map(|id| id.value().clone());
            Ok(Bot { user: found.user_id.value().clone(), name, id })
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
            let within = self.settings.api_timeout;
            let failure = match timed(within, method, self.secrets, call()).await {
                Ok(value) => return Ok(Some(value)),
                Err(failed) => failed.failure,
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

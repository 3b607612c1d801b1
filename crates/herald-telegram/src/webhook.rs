//! Webhook mode: Telegram POSTs each update to a public URL (a load balancer in front of the
//! replicas), and this replica's listener answers 200 only once the update is settled.
//!
//! The answer is the adapter's only promise, as the offset is when polling: an update answered
//! with an error, or not at all (a replica that died), is posted again by Telegram, possibly to
//! another replica. The same update arriving twice on one replica is handed to the gateway once;
//! across replicas the store's dedupe absorbs it.
//!
//! Every replica sets the same webhook at start, with a secret token derived from the bot token
//! (or given), so they agree without talking. None removes it at shutdown: the others still
//! serve it. Only a replica started in polling mode deletes it.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use herald_core::{Ack, AdapterError, AdapterEvent, backoff};
use sha2::{Digest, Sha256};
use teloxide::payloads::SetWebhookSetters;
use teloxide::requests::Requester;
use teloxide::types::{AllowedUpdate, UpdateKind};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::error::Failure;
use crate::inbound::{self, BotIdentity};
use crate::link::{Link, unauthorized};
use crate::salvage;

/// The header Telegram sends the secret token in.
const SECRET_HEADER: &str = "x-telegram-bot-api-secret-token";

/// How many settled update ids are remembered, to answer a second copy without a second
/// message: far more than Telegram has in flight for one bot.
const REMEMBERED: usize = 4096;

/// How herald receives updates through a webhook.
#[derive(Clone, PartialEq, Eq)]
pub struct WebhookSettings {
    /// The public https URL Telegram posts to.
    pub url: String,
    /// Where this replica's listener binds.
    pub listen: SocketAddr,
    /// The secret token Telegram sends with each update (a secret).
    pub secret: String,
    /// How many connections Telegram may open at once (1 to 100).
    pub max_connections: u8,
}

impl WebhookSettings {
    /// Settings with the secret derived from `token`, and the most connections Telegram
    /// allows: each post waits until herald has stored its update, so Telegram's default of 40
    /// caps a bot at 40 updates per storing time (Telegram still posts one chat's updates one
    /// at a time).
    pub fn new(url: impl Into<String>, listen: SocketAddr, token: &str) -> WebhookSettings {
        WebhookSettings {
            url: url.into(),
            listen,
            secret: derived_secret(token),
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// The most webhook connections Telegram opens at once for one bot.
pub const MAX_CONNECTIONS: u8 = 100;

// Hand-written so that the secret never reaches a log through `{:?}`.
impl std::fmt::Debug for WebhookSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookSettings")
            .field("url", &self.url)
            .field("listen", &self.listen)
            .field("secret", &"<redacted>")
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

/// The secret token every replica derives from the same bot token: the hex SHA-256 of
/// `herald-webhook:` and the token, 64 characters Telegram accepts.
pub fn derived_secret(token: &str) -> String {
    let digest = Sha256::digest(format!("herald-webhook:{token}").as_bytes());
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// Whether Telegram accepts `secret` as a `secret_token`: 1 to 256 of `A-Z a-z 0-9 _ -`.
pub fn is_valid_secret(secret: &str) -> bool {
    (1..=256).contains(&secret.len())
        && secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// Serves the webhook until shutdown; fails on a refused token, a listener that cannot bind or a
/// webhook URL Telegram refuses.
pub(crate) async fn run(link: Link, settings: WebhookSettings) -> Result<(), AdapterError> {
    let url = reqwest::Url::parse(&settings.url).map_err(|e| {
        AdapterError::Other(format!(
            "telegram webhook url `{}` is not a valid url ({e}): check telegram.webhook_url",
            settings.url
        ))
    })?;
    let listener = TcpListener::bind(settings.listen).await.map_err(|e| {
        AdapterError::Other(format!(
            "could not listen for telegram webhooks on {} ({e}): check telegram.webhook_listen",
            settings.listen
        ))
    })?;
    let Some(me) = link.connect(false).await? else {
        return Ok(());
    };
    info!(listen = %settings.listen, url = %url, "serving the telegram webhook");
    let hook_name = me.username.clone();
    let hook = Arc::new(Hook {
        me,
        path: url.path().to_owned(),
        secret: settings.secret.clone(),
        events: link.events.clone(),
        shutdown: link.shutdown.clone(),
        warned: AtomicBool::new(false),
        seen: Mutex::new(Seen::default()),
    });
    let router = Router::new().fallback(receive).with_state(hook);
    let shutdown = link.shutdown.clone();
    // Served before the webhook is set, so the first update finds the listener up.
    let serving = async {
        axum::serve(listener, router)
            .with_graceful_shutdown(async move { shutdown.cancelled().await })
            .await
            .map_err(|e| AdapterError::Other(format!("the telegram webhook listener failed: {e}")))
    };
    tokio::try_join!(serving, set_webhook(&link, url, &settings, &hook_name))?;
    info!("telegram webhook stopped; the webhook stays set for the other replicas");
    Ok(())
}

/// Calls `setWebhook` until Telegram takes it.
async fn set_webhook(
    link: &Link,
    url: reqwest::Url,
    settings: &WebhookSettings,
    bot: &str,
) -> Result<(), AdapterError> {
    let mut attempt = 0u32;
    loop {
        let request = link
            .bot
            .set_webhook(url.clone())
            .secret_token(settings.secret.clone())
            .allowed_updates([AllowedUpdate::Message])
            .max_connections(settings.max_connections);
        let result = tokio::select! {
            _ = link.shutdown.cancelled() => return Ok(()),
            result = request => result,
        };
        let failure = match result {
            Ok(_) => {
                info!(url = %url, "telegram webhook set");
                if attempt > 0 {
                    let connected = AdapterEvent::Connected { bot: bot.to_owned() };
                    let _ = link.emit(connected).await;
                }
                return Ok(());
            }
            Err(err) => Failure::classify(&err, &link.token),
        };
        match failure {
            Failure::Unauthorized(detail) => return Err(unauthorized(detail)),
            Failure::Rejected(reason) => {
                return Err(AdapterError::Other(format!(
                    "telegram refused the webhook `{url}`: {reason}; check telegram.webhook_url"
                )));
            }
            failure => {
                let delay = backoff(attempt, failure.retry_after(), link.max_backoff);
                attempt = attempt.saturating_add(1);
                let error = format!("could not set the webhook: {}", failure.reason());
                if !link.retry(&error, delay).await {
                    return Ok(());
                }
            }
        }
    }
}

/// What the listener's requests share.
struct Hook {
    me: BotIdentity,
    path: String,
    secret: String,
    events: tokio::sync::mpsc::Sender<AdapterEvent>,
    shutdown: tokio_util::sync::CancellationToken,
    /// Whether a refused request was logged: one is worth a warning, a flood is not.
    warned: AtomicBool,
    seen: Mutex<Seen>,
}

/// The updates in flight on this replica and those settled lately.
#[derive(Default)]
struct Seen {
    /// Each update being handled, with where its outcome (settled or not) is announced.
    in_flight: HashMap<u32, watch::Receiver<Option<bool>>>,
    settled: HashSet<u32>,
    order: VecDeque<u32>,
}

/// What a request for one update id does.
enum Turn {
    /// Settled before: answer 200.
    Done,
    /// Another request handles it: wait for its outcome.
    Follow(watch::Receiver<Option<bool>>),
    /// This request handles it and announces the outcome here.
    Lead(watch::Sender<Option<bool>>),
}

impl Seen {
    fn turn(&mut self, id: u32) -> Turn {
        if self.settled.contains(&id) {
            return Turn::Done;
        }
        if let Some(outcome) = self.in_flight.get(&id) {
            return Turn::Follow(outcome.clone());
        }
        let (lead, follow) = watch::channel(None);
        self.in_flight.insert(id, follow);
        Turn::Lead(lead)
    }

    fn finish(&mut self, id: u32, settled: bool) {
        self.in_flight.remove(&id);
        if settled && self.settled.insert(id) {
            self.order.push_back(id);
            if self.order.len() > REMEMBERED
                && let Some(old) = self.order.pop_front()
            {
                self.settled.remove(&old);
            }
        }
    }
}

/// Every request: the path, the method, the secret, then the update.
async fn receive(
    State(hook): State<Arc<Hook>>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if uri.path() != hook.path {
        return StatusCode::NOT_FOUND.into_response();
    }
    if method != Method::POST {
        return (StatusCode::METHOD_NOT_ALLOWED, [(header::ALLOW, "POST")]).into_response();
    }
    let given = headers.get(SECRET_HEADER).map(|v| v.as_bytes()).unwrap_or_default();
    if !same(given, hook.secret.as_bytes()) {
        // The secret itself is never logged, given or expected.
        if !hook.warned.swap(true, Ordering::Relaxed) {
            warn!("refused a webhook request without the right secret token (not logged again)");
        } else {
            debug!("refused a webhook request without the right secret token");
        }
        return StatusCode::UNAUTHORIZED.into_response();
    }
    let Some(update) = std::str::from_utf8(&body).ok().and_then(salvage::update) else {
        return (StatusCode::BAD_REQUEST, "not a telegram update").into_response();
    };
    let id = update.id.0;
    let turn = hook.seen.lock().unwrap_or_else(PoisonError::into_inner).turn(id);
    let lead = match turn {
        Turn::Done => return StatusCode::OK.into_response(),
        Turn::Follow(mut outcome) => {
            debug!(update = id, "the same update again while the first copy is handled");
            let settled = tokio::select! {
                _ = hook.shutdown.cancelled() => false,
                outcome = outcome.wait_for(Option::is_some) => outcome.is_ok_and(|o| *o == Some(true)),
            };
            return answer(settled);
        }
        Turn::Lead(lead) => lead,
    };
    let settled = settle(&hook, &update).await;
    hook.seen.lock().unwrap_or_else(PoisonError::into_inner).finish(id, settled);
    lead.send_replace(Some(settled));
    answer(settled)
}

/// Hands the update to the gateway and waits until it is settled; `false` when it was not.
async fn settle(hook: &Hook, update: &teloxide::types::Update) -> bool {
    let id = update.id.0;
    if matches!(update.kind, UpdateKind::Error(_)) {
        // Only the id: the body is the user's and may hold anything. Posting it again cannot help.
        warn!(update = id, "telegram update skipped: it could not be read");
        return true;
    }
    let Some(mut message) = inbound::inbound(update, &hook.me) else {
        debug!(update = id, "update skipped: not a message for the bot");
        return true;
    };
    let (ack, settled) = Ack::new();
    message.ack = ack;
    debug!(update = id, chat = %message.chat.id, text = %message.text, "message received");
    tokio::select! {
        biased;
        sent = hook.events.send(AdapterEvent::Inbound(message)) => {
            if sent.is_err() {
                return false;
            }
        }
        _ = hook.shutdown.cancelled() => return false,
    }
    let kept = tokio::select! {
        _ = hook.shutdown.cancelled() => false,
        result = settled => result.is_ok(),
    };
    if !kept {
        warn!(update = id, "the gateway could not keep a message; telegram will post it again");
    }
    kept
}

/// 200 for a settled update; otherwise 503, so that Telegram posts it again (to any replica).
fn answer(settled: bool) -> Response {
    match settled {
        true => StatusCode::OK.into_response(),
        false => StatusCode::SERVICE_UNAVAILABLE.into_response(),
    }
}

/// Compares without stopping at the first difference, so timing tells nothing of the secret.
fn same(given: &[u8], expected: &[u8]) -> bool {
    given.len() == expected.len()
        && given.iter().zip(expected).fold(0u8, |diff, (a, b)| diff | (a ^ b)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_derived_secret_is_one_telegram_accepts_and_the_same_everywhere() {
        let secret = derived_secret("123456:ABC");
        assert_eq!(secret.len(), 64);
        assert!(is_valid_secret(&secret));
        assert_eq!(secret, derived_secret("123456:ABC"));
        assert_ne!(secret, derived_secret("123456:ABD"));
        assert!(!secret.contains("ABC"));
    }

    #[test]
    fn secrets_telegram_refuses() {
        for bad in ["", "has space", "semi;colon", "ünï", &"a".repeat(257)] {
            assert!(!is_valid_secret(bad), "{bad}");
        }
        for good in ["a", "A-z_0", &"x".repeat(256)] {
            assert!(is_valid_secret(good), "{good}");
        }
    }

    #[test]
    fn a_settled_update_is_remembered_and_one_in_flight_is_followed() {
        let mut seen = Seen::default();
        let Turn::Lead(lead) = seen.turn(7) else { panic!("the first copy leads") };
        assert!(matches!(seen.turn(7), Turn::Follow(_)));
        seen.finish(7, true);
        lead.send_replace(Some(true));
        assert!(matches!(seen.turn(7), Turn::Done));
        let Turn::Lead(_) = seen.turn(8) else { panic!("another update leads") };
        seen.finish(8, false);
        assert!(matches!(seen.turn(8), Turn::Lead(_)), "an unsettled update is handled again");
    }

    #[test]
    fn secrets_compare_whole() {
        assert!(same(b"abc", b"abc"));
        assert!(!same(b"abd", b"abc") && !same(b"ab", b"abc") && !same(b"", b"abc"));
    }
}

//! Webhooks: `setWebhook` checked as Telegram checks it, and the task that posts queued updates
//! to the webhook.
//!
//! Like Telegram, the fake posts one update at a time per chat (the next only after the previous
//! got a 2xx), several chats at once up to `max_connections`, and posts an update again after a
//! non-2xx answer or a connection error, after a short backoff. Telegram insists on https; the
//! fake also takes `http://` on loopback, where tests listen, and posts nowhere else: a test never
//! reaches the internet.

use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::faults::ApiError;
use super::params::Params;
use super::state::{Lane, Shared, State, Webhook};
use super::wire;

/// How long a post may take before it counts as failed, as Telegram gives up on a slow webhook.
const POST_TIMEOUT: Duration = Duration::from_secs(60);
/// The first wait before an update is posted again, doubled up to [`MAX_RETRY`].
const FIRST_RETRY: Duration = Duration::from_millis(50);
const MAX_RETRY: Duration = Duration::from_secs(1);
/// The header the secret token goes in.
const SECRET_HEADER: &str = "X-Telegram-Bot-Api-Secret-Token";

/// One post to make.
struct Post {
    id: i64,
    url: String,
    secret: Option<String>,
    body: String,
}

impl State {
    /// `setWebhook`: an empty `url` removes the webhook, as with Telegram.
    pub(crate) fn set_webhook(&mut self, params: &Params) -> Result<Value, ApiError> {
        let Some(url) = params.string("url") else {
            return Err(ApiError::bad_request("parameter \"url\" is required"));
        };
        if url.is_empty() {
            self.webhook = None;
            return Ok(Value::Bool(true));
        }
        check_url(&url)?;
        let secret = params.string("secret_token").filter(|s| !s.is_empty());
        if let Some(secret) = &secret {
            if secret.len() > 256 {
                return Err(ApiError::bad_request("secret token is too long"));
            }
            if !secret.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
                return Err(ApiError::bad_request("secret token contains unallowed characters"));
            }
        }
        let max_connections = params.int("max_connections")?.unwrap_or(40);
        if !(1..=100).contains(&max_connections) {
            return Err(ApiError::bad_request("bad webhook: max_connections must be 1 to 100"));
        }
        if params.string("drop_pending_updates").as_deref() == Some("true") {
            self.drop_pending();
        }
        self.webhook = Some(Webhook {
            url,
            secret,
            max_connections: usize::try_from(max_connections).unwrap_or(40),
            allowed_updates: params.list("allowed_updates"),
        });
        self.webhook_error = None;
        Ok(Value::Bool(true))
    }

    /// The posts to start now (marked in flight), and when the next waiting one is due.
    fn due_posts(&mut self, now: Instant) -> (Vec<Post>, Option<Instant>) {
        let Some(webhook) = self.webhook.clone() else {
            return (Vec::new(), None);
        };
        let mut posts = Vec::new();
        let mut next = None;
        let mut lanes = std::collections::HashSet::<Lane>::new();
        for queued in &self.queue {
            // Only the first update of each chat may go: the rest wait for its 2xx.
            if !lanes.insert(queued.lane) || self.in_flight.contains(&queued.id) {
                continue;
            }
            if self.in_flight.len() >= webhook.max_connections {
                break;
            }
            if let Some((at, _)) = self.retry.get(&queued.id)
                && *at > now
            {
                next = Some(next.map_or(*at, |n: Instant| n.min(*at)));
                continue;
            }
            self.in_flight.insert(queued.id);
            posts.push(Post {
                id: queued.id,
                url: webhook.url.clone(),
                secret: webhook.secret.clone(),
                body: queued.text.clone(),
            });
        }
        (posts, next)
    }

    /// Records the end of a post: a 2xx takes the update off the queue, anything else makes it
    /// wait for another post.
    fn posted(&mut self, id: i64, status: Option<u16>, error: Option<String>) {
        self.in_flight.remove(&id);
        self.posts.push((id, status));
        if status.is_some_and(|s| (200..300).contains(&s)) {
            self.retry.remove(&id);
            self.queue.retain(|q| q.id != id);
            self.delivered.push(id);
            return;
        }
        let failures = self.retry.get(&id).map_or(0, |(_, n)| *n);
        let wait = FIRST_RETRY.saturating_mul(1 << failures.min(8)).min(MAX_RETRY);
        self.retry.insert(id, (Instant::now() + wait, failures + 1));
        let message = error.unwrap_or_else(|| match status {
            Some(status) => format!("Wrong response from the webhook: {status}"),
            None => "Connection refused".to_owned(),
        });
        self.webhook_error = Some((wire::now(), message));
    }
}

/// Telegram's checks of a webhook URL, and the fake's own loopback exception.
fn check_url(url: &str) -> Result<(), ApiError> {
    let https = || ApiError::bad_request("bad webhook: An HTTPS URL must be provided for webhook");
    let parsed = Url::parse(url).map_err(|_| https())?;
    match parsed.scheme() {
        "https" => match parsed.port_or_known_default() {
            Some(80 | 88 | 443 | 8443) => Ok(()),
            _ => Err(ApiError::bad_request(
                "bad webhook: Webhook can be set up only on ports 80, 88, 443 or 8443",
            )),
        },
        "http" if is_loopback(&parsed) => Ok(()),
        _ => Err(https()),
    }
}

fn is_loopback(url: &Url) -> bool {
    matches!(url.host_str(), Some("127.0.0.1" | "localhost" | "[::1]"))
}

/// Posts queued updates to the webhook while one is set, until `shutdown`.
pub(crate) async fn deliver(shared: Arc<Shared>, shutdown: CancellationToken) {
    let client = match reqwest::Client::builder().timeout(POST_TIMEOUT).no_proxy().build() {
        Ok(client) => client,
        // Without a client no webhook can work; polling still does.
        Err(_) => return,
    };
    loop {
        // Subscribed before the look, so a change after it still wakes us.
        let mut changed = shared.updates.subscribe();
        changed.borrow_and_update();
        let (posts, next) = shared.lock().due_posts(Instant::now());
        for post in posts {
            let (shared, client, shutdown) = (shared.clone(), client.clone(), shutdown.clone());
            tokio::spawn(async move {
                let (status, error) = tokio::select! {
                    () = shutdown.cancelled() => return,
                    result = send(&client, &post) => result,
                };
                shared.lock().posted(post.id, status, error);
                shared.updates.send_modify(|n| *n += 1);
            });
        }
        let due = async {
            match next {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = changed.changed() => {}
            () = due => {}
        }
    }
}

/// Makes one post: the status, or `None` and why there was none.
async fn send(client: &reqwest::Client, post: &Post) -> (Option<u16>, Option<String>) {
    match Url::parse(&post.url) {
        Ok(url) if is_loopback(&url) => {}
        _ => return (None, Some("the fake telegram posts to loopback only".to_owned())),
    }
    let mut request = client
        .post(&post.url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(post.body.clone());
    if let Some(secret) = &post.secret {
        request = request.header(SECRET_HEADER, secret);
    }
    match request.send().await {
        Ok(response) => (Some(response.status().as_u16()), None),
        Err(err) if err.is_timeout() => (None, Some("Read timeout expired".to_owned())),
        Err(_) => (None, Some("Connection refused".to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn webhook_urls_are_https_on_telegram_ports_or_loopback() {
        for good in [
            "https://bot.example.com/telegram",
            "https://bot.example.com:8443/t",
            "http://127.0.0.1:9000/hook",
            "http://localhost:1/x",
        ] {
            assert_eq!(check_url(good), Ok(()), "{good}");
        }
        for bad in ["http://bot.example.com/t", "https://bot.example.com:9000/t", "ftp://x", "x"] {
            assert!(check_url(bad).is_err(), "{bad}");
        }
    }
}

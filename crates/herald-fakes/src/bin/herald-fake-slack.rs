//! `herald-fake-slack`: the fake Slack of herald-fakes (the Web API and Socket Mode) as a
//! program, for trying herald offline. Point the `[slack]` `api_url` at the URL it prints, use
//! its tokens, and talk to the bot over `/_fake/*` with curl.

use std::process::ExitCode;

use herald_fakes::program;
use herald_fakes::slack::{FakeSlack, Tokens};

const USAGE: &str = "usage: herald-fake-slack [--listen ADDR]   (default 127.0.0.1:8083; port 0 picks one)

Serves Slack's Web API at /api/{method} (auth.test, apps.connections.open, chat.postMessage,
chat.update, reactions.add, reactions.remove, conversations.info, conversations.history,
conversations.replies, assistant.threads.setStatus)
and Socket Mode at the URL apps.connections.open returns, for the bot token
xoxb-fake-slack-token and the app token xapp-fake-slack-token (set others with
HERALD_FAKE_SLACK_BOT_TOKEN and HERALD_FAKE_SLACK_APP_TOKEN; the bot is herald_test_bot,
user U0FAKEBOT), and
  POST /_fake/posts     {\"user\":\"U1\",\"text\":\"hi\"}   (a DM; optional: channel, thread_ts, mention,
                        mention_first, bot_id) -> {\"channel\":\"D1\",\"ts\":\"...\",\"event_ids\":[...]}
  POST /_fake/edits     {\"channel\":\"C1\",\"ts\":\"...\",\"text\":\"new\"}, /_fake/deletions {\"channel\":\"C1\",\"ts\":\"...\"}
  GET  /_fake/posted[?channel=C1], /_fake/updates, /_fake/reactions, /_fake/calls[?method=M],
       /_fake/deliveries (envelopes and their acknowledgements), /_fake/connections
  POST /_fake/ack_timeout {\"ms\":3000}   (redelivery after that long without an acknowledgement)
  POST /_fake/fault     {\"method\":\"chat.postMessage\",\"fault\":{\"kind\":\"rate_limited\",\"retry_after\":1},\"times\":1}
                        (kinds: rate_limited, status or status_after with status, error with error)
  POST /_fake/disconnect {\"reason\":\"refresh_requested\"}   (or warning, link_disabled)
  POST /_fake/drop, /_fake/silence, /_fake/down {\"seconds\":5}, /_fake/invalid_auth {\"invalid\":true}
  POST /_fake/held      {\"count\":9}   (connections other processes hold; Slack keeps 10 per app)
until SIGINT or SIGTERM.";

/// The tokens from the environment, the defaults where unset; `Err` for one of the wrong kind.
fn tokens() -> Result<Tokens, String> {
    let mut tokens = Tokens::default();
    for (variable, prefix, token) in [
        ("HERALD_FAKE_SLACK_BOT_TOKEN", "xoxb-", &mut tokens.bot),
        ("HERALD_FAKE_SLACK_APP_TOKEN", "xapp-", &mut tokens.app),
    ] {
        if let Ok(value) = std::env::var(variable) {
            if !value.starts_with(prefix) {
                return Err(format!("{variable} should start with {prefix}"));
            }
            *token = value;
        }
    }
    Ok(tokens)
}

#[tokio::main]
async fn main() -> ExitCode {
    let arguments = program::listen_address(std::env::args().skip(1), "127.0.0.1:8083");
    let (addr, tokens) = match arguments.and_then(|addr| Ok((addr, tokens()?))) {
        Ok((Some(addr), tokens)) => (addr, tokens),
        Ok((None, _)) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("herald-fake-slack: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeSlack::start_with(addr, tokens).await {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!(
                "herald-fake-slack: could not listen on {addr}: {err}; choose another --listen"
            );
            return ExitCode::FAILURE;
        }
    };
    let stop = program::stopped();
    if !program::announce(&format!("fake slack listening on {}", fake.api_url())) {
        // Whoever started us is gone: nobody can use the URL.
        return ExitCode::FAILURE;
    }
    stop.await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}

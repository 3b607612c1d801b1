//! `herald-fake-telegram`: the fake Telegram Bot API of herald-fakes as a program, for trying
//! herald offline. Point the Telegram API URL at the URL it prints, use its token, and talk to the
//! bot over `/_fake/*` with curl.

use std::process::ExitCode;

use herald_fakes::FakeTelegram;
use herald_fakes::program;

const USAGE: &str = "usage: herald-fake-telegram [--listen ADDR]   (default 127.0.0.1:8081; port 0 picks one)

Serves the Telegram Bot API at POST /bot<TOKEN>/<Method> for the token 123456:fake-telegram-token
(the bot is @herald_test_bot, id 1000), and
  POST /_fake/messages  {\"user_id\":1,\"text\":\"hi\"}   (optional: chat_id, chat_kind, thread_id, username,
                        first_name, mention, reply_to_bot) -> {\"update_id\":N}
  POST /_fake/redeliver {\"update_id\":N}
  GET  /_fake/sent[?chat_id=N], /_fake/edits, /_fake/chat_actions, /_fake/requests, /_fake/offsets,
       /_fake/pending
  POST /_fake/fault     {\"method\":\"sendMessage\",\"fault\":{\"kind\":\"too_many_requests\",\"retry_after\":2}}
                        (kinds: too_many_requests, status with code, conflict, drop)
  POST /_fake/offline {\"offline\":true}, /_fake/reject_markup {\"reject\":true},
       /_fake/webhook {\"url\":null}, /_fake/repeat {\"update_id\":N}, /_fake/reset
  GET  /_fake/webhook   the webhook set with setWebhook, pending and delivered updates
While a webhook is set (setWebhook, https or http on loopback), updates are POSTed to it.
until SIGINT or SIGTERM.";

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match program::listen_address(std::env::args().skip(1), "127.0.0.1:8081") {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("herald-fake-telegram: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeTelegram::start_on(addr).await {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!(
                "herald-fake-telegram: could not listen on {addr}: {err}; choose another --listen"
            );
            return ExitCode::FAILURE;
        }
    };
    let stop = program::stopped();
    if !program::announce(&format!("fake telegram listening on {}", fake.api_url())) {
        // Whoever started us is gone: nobody can use the URL.
        return ExitCode::FAILURE;
    }
    stop.await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}

//! `herald-fake-telegram`: the fake Telegram Bot API of herald-fakes as a program, for trying
//! herald offline. Point the Telegram API URL at the URL it prints, use its token, and talk to the
//! bot over `/_fake/*` with curl.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use herald_fakes::FakeTelegram;

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
       /_fake/webhook {\"url\":null}, /_fake/reset
until SIGINT or SIGTERM.";

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match parse_args(std::env::args().skip(1)) {
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
    let stop = stopped();
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "fake telegram listening on {}", fake.api_url())
        .and_then(|()| stdout.flush())
        .is_err()
    {
        // Whoever started us is gone: nobody can use the URL.
        return ExitCode::FAILURE;
    }
    drop(stdout);
    stop.await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}

/// The address to listen on, or `None` when help was asked for.
fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Option<SocketAddr>, String> {
    let mut listen = "127.0.0.1:8081".to_owned();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                listen = args.next().ok_or("--listen needs an address, like 127.0.0.1:8081")?
            }
            other => match other.strip_prefix("--listen=") {
                Some(value) => listen = value.to_owned(),
                None => return Err(format!("unexpected argument {other:?}")),
            },
        }
    }
    listen
        .parse()
        .map(Some)
        .map_err(|_| format!("--listen wants IP:PORT, like 127.0.0.1:8081, not {listen:?}"))
}

/// Installs the SIGTERM handler now, so that a SIGTERM sent as soon as the URL is read is not
/// lost, and resolves on SIGINT or SIGTERM.
fn stopped() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    async move {
        #[cfg(unix)]
        if let Some(mut terminate) = terminate {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = terminate.recv() => {}
            }
            return;
        }
        // Without a SIGTERM handler, SIGINT alone; if even that fails, stop rather than hang.
        let _ = tokio::signal::ctrl_c().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<SocketAddr>, String> {
        parse_args(args.iter().map(|a| (*a).to_owned()))
    }

    #[test]
    fn arguments() {
        assert_eq!(parse(&[]), Ok(Some("127.0.0.1:8081".parse().unwrap())));
        assert_eq!(parse(&["--listen", "127.0.0.1:0"]), Ok(Some("127.0.0.1:0".parse().unwrap())));
        assert_eq!(parse(&["--listen=[::1]:9000"]), Ok(Some("[::1]:9000".parse().unwrap())));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--listen"]).unwrap_err().contains("needs an address"));
        assert!(parse(&["--listen", "localhost"]).unwrap_err().contains("IP:PORT"));
        assert!(parse(&["--port", "1"]).unwrap_err().contains("unexpected argument"));
    }
}

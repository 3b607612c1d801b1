//! `herald-fake-model`: the scripted model server of herald-fakes as a program, for trying herald
//! offline. Point `base_url` at the URL it prints; script it over `/_fake/*` with curl.

use std::io::Write;
use std::net::SocketAddr;
use std::process::ExitCode;

use herald_fakes::FakeModel;

const USAGE: &str = "usage: herald-fake-model [--listen ADDR]   (default 127.0.0.1:8089; port 0 picks one)

Serves POST /v1/chat/completions and GET /v1/models like an OpenAI-compatible provider, and
  POST /_fake/reply   {\"text\":\"hi\"} | {\"tool_calls\":[{\"name\":\"current_time\",\"arguments\":{}}]} | {\"raw\":{...}}
  POST /_fake/fault   {\"status\":{\"code\":429,\"retry_after\":2}} | {\"delay_ms\":1500} | \"malformed\" | \"drop\"
  POST /_fake/usage   {\"prompt_tokens\":7000,\"completion_tokens\":50}   (reported by the next answer)
  POST /_fake/context_window   {\"tokens\":8192} | {\"tokens\":null}   (longer prompts get OpenAI's 400 context_length_exceeded)
  GET  /_fake/requests, GET /_fake/authorizations, POST /_fake/reset
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
            eprintln!("herald-fake-model: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeModel::start_on(addr).await {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!(
                "herald-fake-model: could not listen on {addr}: {err}; choose another --listen"
            );
            return ExitCode::FAILURE;
        }
    };
    let stop = stopped();
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "fake model listening on {}", fake.base_url())
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
    let mut listen = "127.0.0.1:8089".to_owned();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                listen = args.next().ok_or("--listen needs an address, like 127.0.0.1:8089")?
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
        .map_err(|_| format!("--listen wants IP:PORT, like 127.0.0.1:8089, not {listen:?}"))
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
        assert_eq!(parse(&[]), Ok(Some("127.0.0.1:8089".parse().unwrap())));
        assert_eq!(parse(&["--listen", "127.0.0.1:0"]), Ok(Some("127.0.0.1:0".parse().unwrap())));
        assert_eq!(parse(&["--listen=[::1]:9000"]), Ok(Some("[::1]:9000".parse().unwrap())));
        assert_eq!(parse(&["--help"]), Ok(None));
        assert!(parse(&["--listen"]).unwrap_err().contains("needs an address"));
        assert!(parse(&["--listen", "localhost"]).unwrap_err().contains("IP:PORT"));
        assert!(parse(&["--port", "1"]).unwrap_err().contains("unexpected argument"));
    }
}

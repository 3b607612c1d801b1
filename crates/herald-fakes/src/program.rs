//! What the fakes' binaries share: the `--listen` argument, the stop signals, and printing the
//! URL a test or a person reads.

use std::io::Write;
use std::net::SocketAddr;

/// The address to listen on from the arguments, `default` without `--listen`; `None` when help
/// was asked for.
pub fn listen_address(
    mut args: impl Iterator<Item = String>,
    default: &str,
) -> Result<Option<SocketAddr>, String> {
    let mut listen = default.to_owned();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "-h" | "--help" => return Ok(None),
            "--listen" => {
                listen = args.next().ok_or(format!("--listen needs an address, like {default}"))?
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
        .map_err(|_| format!("--listen wants IP:PORT, like {default}, not {listen:?}"))
}

/// Installs the SIGTERM handler now, so that a SIGTERM sent as soon as the URL is read is not
/// lost, and resolves on SIGINT or SIGTERM.
pub fn stopped() -> impl std::future::Future<Output = ()> {
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

/// Prints `line` on stdout and flushes it; false when whoever started us is gone (nobody can
/// use the URL).
pub fn announce(line: &str) -> bool {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").and_then(|()| stdout.flush()).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<SocketAddr>, String> {
        listen_address(args.iter().map(|a| (*a).to_owned()), "127.0.0.1:8089")
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

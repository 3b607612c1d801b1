//! `herald-fake-balancer`: the tiny load balancer of herald-fakes as a program, to put one URL in
//! front of several herald replicas (the fake Telegram's webhook posts to it).

use std::process::ExitCode;

use herald_fakes::balancer::Balancer;
use herald_fakes::program;

const USAGE: &str =
    "usage: herald-fake-balancer [--listen ADDR] BACKEND_URL...   (default 127.0.0.1:8090)

Forwards each request to the next backend in turn (like http://127.0.0.1:8443), and to the one
after when a backend refuses the connection, until SIGINT or SIGTERM.";

#[tokio::main]
async fn main() -> ExitCode {
    let (flags, backends): (Vec<String>, Vec<String>) = split(std::env::args().skip(1).collect());
    let addr = match program::listen_address(flags.into_iter(), "127.0.0.1:8090") {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("herald-fake-balancer: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if backends.is_empty() {
        eprintln!("herald-fake-balancer: name at least one backend URL\n\n{USAGE}");
        return ExitCode::from(2);
    }
    let balancer = match Balancer::start_on(addr, backends).await {
        Ok(balancer) => balancer,
        Err(err) => {
            eprintln!("herald-fake-balancer: could not listen on {addr}: {err}");
            return ExitCode::FAILURE;
        }
    };
    let stop = program::stopped();
    if !program::announce(&format!("fake balancer listening on {}", balancer.url())) {
        return ExitCode::FAILURE;
    }
    stop.await;
    ExitCode::SUCCESS
}

/// The flags (`--listen` and its value, `--help`) and the backend URLs.
fn split(args: Vec<String>) -> (Vec<String>, Vec<String>) {
    let (mut flags, mut backends) = (Vec::new(), Vec::new());
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        if arg == "--listen" {
            flags.push(arg);
            flags.extend(args.next());
        } else if arg.starts_with('-') {
            flags.push(arg);
        } else {
            backends.push(arg);
        }
    }
    (flags, backends)
}

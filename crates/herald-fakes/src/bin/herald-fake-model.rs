//! `herald-fake-model`: the scripted model server of herald-fakes as a program, for trying herald
//! offline. Point `base_url` at the URL it prints; script it over `/_fake/*` with curl.

use std::process::ExitCode;

use herald_fakes::FakeModel;
use herald_fakes::program;

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
    let addr = match program::listen_address(std::env::args().skip(1), "127.0.0.1:8089") {
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
    let stop = program::stopped();
    if !program::announce(&format!("fake model listening on {}", fake.base_url())) {
        // Whoever started us is gone: nobody can use the URL.
        return ExitCode::FAILURE;
    }
    stop.await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}

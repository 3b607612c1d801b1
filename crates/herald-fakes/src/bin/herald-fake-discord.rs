//! `herald-fake-discord`: the fake Discord of herald-fakes (REST v10 and the Gateway WebSocket)
//! as a program, for trying herald offline. Point serenity's HTTP proxy at the URL it prints, use
//! its token, and talk to the bot over `/_fake/*` with curl.

use std::process::ExitCode;

use herald_fakes::FakeDiscord;
use herald_fakes::program;

const USAGE: &str =
    "usage: herald-fake-discord [--listen ADDR]   (default 127.0.0.1:8082; port 0 picks one)

Serves Discord's REST v10 under /api/v10 (gateway, gateway/bot, users/@me, channels/{id},
GET and POST channels/{id}/messages, POST channels/{id}/typing and .../messages/{id}/threads,
applications/{id}/commands, interactions/{id}/{token}/callback)
and the Gateway WebSocket at / for the token fake-discord-token.herald.test (the bot is
herald_test_bot, id 100000000000000001), and
  POST /_fake/messages  {\"author_id\":1,\"content\":\"hi\"}   (optional: channel_id, guild_id,
                        mention_bot, author_is_bot, reply_to) -> {\"id\":\"...\",\"seq\":N}
  POST /_fake/threads   {\"guild_id\":7,\"parent_id\":8,\"name\":\"t\"} -> {\"id\":\"...\"}
  POST /_fake/forum_posts {\"guild_id\":7,\"forum_id\":9,\"name\":\"t\",\"author_id\":1,\"content\":\"hi\"}
                        -> {\"id\":\"...\"}   (the thread's id, also its starter message's)
  GET  /_fake/sent[?channel_id=N], /_fake/identifies, /_fake/typing
  GET  /_fake/connections   -> [{\"shard\":[0,2]},...]   (open gateway connections)
  POST /_fake/shards    {\"recommended\":2,\"required\":2}   (GET /gateway/bot's shards; fewer
                        shards on IDENTIFY close 4011; either field optional)
  POST /_fake/close     {\"code\":4014}   (closes every gateway connection with that code)
  POST /_fake/reconnect (op 7), /_fake/invalid_session {\"resumable\":false} (op 9)
  POST /_fake/send_fault {\"kind\":\"too_many_requests\",\"retry_after\":1.5,\"global\":false}
                        or {\"kind\":\"status\",\"status\":502}   (the next post gets it; add
                        \"route\":\"list_messages\", typing, ... for another route)
  POST /_fake/message_content {\"denied\":true}   (IDENTIFY with that intent closes 4014)
  POST /_fake/history {\"held\":true}   (message history waits until released with false)
  POST /_fake/drop   (gateway sockets dropped without a close frame)
  POST /_fake/heartbeat {\"interval_ms\":500,\"withhold_acks\":true}   (either field optional)
  POST /_fake/commands  {\"user_id\":1,\"name\":\"new\"}   (optional: options, channel_id, guild_id)
                        -> {\"id\":\"...\",\"token\":\"...\"}   (an INTERACTION_CREATE)
  GET  /_fake/commands, /_fake/interaction_responses, /_fake/followups
until SIGINT or SIGTERM.";

#[tokio::main]
async fn main() -> ExitCode {
    let addr = match program::listen_address(std::env::args().skip(1), "127.0.0.1:8082") {
        Ok(Some(addr)) => addr,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(message) => {
            eprintln!("herald-fake-discord: {message}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let fake = match FakeDiscord::start_on(addr).await {
        Ok(fake) => fake,
        Err(err) => {
            eprintln!(
                "herald-fake-discord: could not listen on {addr}: {err}; choose another --listen"
            );
            return ExitCode::FAILURE;
        }
    };
    let stop = program::stopped();
    if !program::announce(&format!(
        "fake discord listening on {} (gateway {})",
        fake.api_url(),
        fake.gateway_url()
    )) {
        // Whoever started us is gone: nobody can use the URL.
        return ExitCode::FAILURE;
    }
    stop.await;
    fake.shutdown().await;
    ExitCode::SUCCESS
}

//! Shards, each held by one replica: a task per shard waits for the claim
//! `discord:shard:{id}`, runs that shard's Gateway connection while it holds it, closes it at
//! once when the claim is lost, and waits again. Sending needs no shard, so a replica holding
//! none still serves the outbound channel, and its health says so (connected, once Discord
//! accepted the token over REST).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, PoisonError};

use herald_core::{AdapterError, AdapterEvent, Claim, Claims, Platform, Positions, backoff};
use serenity::all::Channel;
use serenity::all::ChannelId;
use serenity::http::HttpError;
use tokio::task::JoinSet;
use tracing::{Instrument, info, warn};

use crate::connect::connect;
use crate::error::classify;
use crate::intake::{Bot, Inner, lock};

/// Runs every shard's task (and, when no shard was held at once, the REST identity check)
/// until `shutdown`; an error only when Discord refused the token or the intents.
pub(crate) async fn run(
    inner: Arc<Inner>,
    claims: Claims,
    positions: Positions,
) -> Result<(), AdapterError> {
    let total = inner.settings.shards.max(1);
    let mut tasks = JoinSet::new();
    let mut held_at_once = false;
    for id in 0..total {
        let mut hold = hold(claims.clone(), id);
        // Polled once here: a claim granted at once (alone, every claim is) counts as held
        // before anything reports health, so a replica that is about to connect never says
        // "connected" before its shard does.
        let first = tokio::select! {
            biased;
            claim = &mut hold => Some(claim),
            () = std::future::ready(()) => None,
        };
        if first.is_some() {
            held_at_once = true;
            inner.shard_held(id);
        }
        let positions = positions.clone();
        tasks.spawn(shard(inner.clone(), claims.clone(), positions, id, first).in_current_span());
    }
    if !held_at_once {
        tasks.spawn(identify(inner.clone()).in_current_span());
    }
    while let Some(done) = tasks.join_next().await {
        match done {
            Ok(Ok(())) => {}
            Ok(Err(refused)) => return Err(refused),
            Err(join) => {
                return Err(AdapterError::Other(format!("the discord connection failed: {join}")));
            }
        }
    }
    Ok(())
}

fn hold(claims: Claims, id: u32) -> Pin<Box<dyn Future<Output = Claim> + Send>> {
    Box::pin(async move { claims.hold(format!("discord:shard:{id}")).await })
}

/// One shard: its connection while this replica holds its claim, again and again.
async fn shard(
    inner: Arc<Inner>,
    claims: Claims,
    positions: Positions,
    id: u32,
    mut first: Option<Claim>,
) -> Result<(), AdapterError> {
    loop {
        let claim = match first.take() {
            Some(claim) => claim,
            None => {
                let claim = tokio::select! {
                    claim = hold(claims.clone(), id) => claim,
                    () = inner.shutdown.cancelled() => return Ok(()),
                };
                // Taken over: the previous holder moved the channels' positions on, and knew
                // channels this replica never saw; the backfill after READY starts from there.
                inner.catch_up(positions.channel_cursors().await);
                claim
            }
        };
        if inner.shutdown.is_cancelled() {
            return Ok(());
        }
        inner.shard_held(id);
        info!(shard = id, "holding the shard; connecting");
        let result = connect(inner.clone(), id, &claim).await;
        inner.shard_released(id).await;
        result?;
        if inner.shutdown.is_cancelled() {
            return Ok(());
        }
        info!(shard = id, "gave the shard up: another replica may hold it now");
        // Dropped before waiting again, so the name is free for whoever takes it over.
        drop(claim);
    }
}

/// Asks Discord who the bot is, for a replica that holds no shard: the token works, sends
/// work, and `/healthz` says connected.
async fn identify(inner: Arc<Inner>) -> Result<(), AdapterError> {
    let mut attempt = 0;
    loop {
        let asked = tokio::select! {
            asked = inner.http.get_current_user() => asked,
            () = inner.shutdown.cancelled() => return Ok(()),
        };
        let error = match asked {
            Ok(user) => {
                let bot = Bot { id: user.id, name: user.name.clone() };
                inner.bot.write().unwrap_or_else(PoisonError::into_inner).get_or_insert(bot);
                info!(bot = %user.name, "Discord accepted the token; no shard held here yet");
                inner.report_health().await;
                return Ok(());
            }
            Err(serenity::Error::Http(HttpError::UnsuccessfulRequest(response)))
                if response.status_code.as_u16() == 401 =>
            {
                return Err(AdapterError::Unauthorized {
                    platform: Platform::Discord,
                    detail: "GET /users/@me answered 401 (unauthorized)".into(),
                    hint: inner.settings.token_env.clone(),
                });
            }
            Err(e) => classify(&e, &inner.settings.token).text().to_owned(),
        };
        let retry_in = backoff(attempt, None, inner.settings.max_backoff);
        attempt = attempt.saturating_add(1);
        let _ = inner.events.send(AdapterEvent::Retrying { error, retry_in }).await;
        tokio::select! {
            () = tokio::time::sleep(retry_in) => {}
            () = inner.shutdown.cancelled() => return Ok(()),
        }
    }
}

/// The shard Discord sends a server's events on (a DM's: shard 0).
pub(crate) fn shard_of(guild: Option<u64>, total: u32) -> u32 {
    guild.map_or(0, |guild| ((guild >> 22) % u64::from(total.max(1))) as u32)
}

impl Inner {
    /// Marks `shard` held and not connected yet.
    pub(crate) fn shard_held(&self, shard: u32) {
        lock(&self.shards_up).insert(shard, false);
    }

    /// Marks `shard` connected; health says connected unless another held shard is down.
    pub(crate) async fn shard_up(&self, shard: u32) {
        lock(&self.shards_up).insert(shard, true);
        self.report_health().await;
    }

    /// Marks `shard` down and reports it: its messages are not heard meanwhile.
    pub(crate) async fn shard_down(&self, shard: u32, error: String) {
        lock(&self.shards_up).insert(shard, false);
        let retry_in = std::time::Duration::from_secs(1);
        let _ = self.events.send(AdapterEvent::Retrying { error, retry_in }).await;
    }

    /// Forgets `shard` (given up, or stopped): its outage is no longer this replica's.
    async fn shard_released(&self, shard: u32) {
        lock(&self.shards_up).remove(&shard);
        if !self.shutdown.is_cancelled() {
            self.report_health().await;
        }
    }

    /// Connected, as the bot, when every shard held here is connected (or none is held).
    async fn report_health(&self) {
        if lock(&self.shards_up).values().any(|up| !up) {
            return;
        }
        if let Some(bot) = self.bot() {
            let _ = self.events.send(AdapterEvent::Connected { bot: bot.name }).await;
        }
    }

    /// Whether `channel`'s messages come on `shard`: its server's shard, a DM's shard 0.
    /// Asked of Discord once per channel not seen yet; `false` when that fails.
    pub(crate) async fn on_shard(&self, channel: u64, shard: u32) -> bool {
        let total = self.settings.shards.max(1);
        if total == 1 {
            return true;
        }
        let known = lock(&self.guilds).get(&channel).copied();
        let guild = match known {
            Some(guild) => guild,
            None => match self.http.get_channel(ChannelId::new(channel)).await {
                Ok(Channel::Guild(found)) => Some(found.guild_id.get()),
                Ok(_) => None,
                Err(e) => {
                    let error = classify(&e, &self.settings.token);
                    warn!(
                        channel,
                        error = error.text(),
                        "could not look up the server of a channel; its gap is not fetched"
                    );
                    return false;
                }
            },
        };
        lock(&self.guilds).insert(channel, guild);
        shard_of(guild, total) == shard
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn servers_spread_over_shards_by_their_snowflake_and_dms_go_to_shard_0() {
        assert_eq!(shard_of(None, 4), 0);
        assert_eq!(shard_of(Some(5 << 22), 4), 1);
        assert_eq!(shard_of(Some((7 << 22) | 12345), 4), 3);
        assert_eq!(shard_of(Some(u64::MAX), 1), 0);
        assert_eq!(shard_of(Some(3 << 22), 0), 0);
    }
}

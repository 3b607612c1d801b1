//! The adapter's run loop: the shards' Gateway connections (one serenity client per shard
//! held, started again after anything but a refusal), the intake task, and the senders
//! serving the outbound channel.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError, Weak};
use std::time::Duration;

use herald_core::{
    AdapterContext, AdapterError, AdapterEvent, Claim, Platform, backoff, serve_outbound,
};
use serenity::all::ShardId;
use serenity::all::{
    Context, EventHandler, GatewayIntents, GuildChannel, Interaction, Message, Ready, ResumedEvent,
};
use serenity::async_trait;
use serenity::client::ClientBuilder;
use serenity::gateway::{
    CollectorCallback, ConnectionStage, GatewayError, ShardRunnerInfo, ShardStageUpdateEvent,
};
use serenity::http::{Http, HttpBuilder};
use serenity::model::event::Event;
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;
use tokio_util::sync::CancellationToken as Stop;
use tokio_util::task::AbortOnDropHandle;
use tracing::{Instrument, debug, info, warn};

use crate::DiscordSettings;
use crate::commands;
use crate::error::scrub;
use crate::intake::{Bot, Incoming, Inner, lock};
use crate::send::Sender;

/// How many outbound requests run at once.
const MAX_CONCURRENT_SENDS: usize = 32;

/// What herald asks Discord for: messages in servers and DMs with their text, and the
/// servers' channels and threads (to tell a thread from a channel).
fn intents() -> GatewayIntents {
    GatewayIntents::GUILDS
        | GatewayIntents::GUILD_MESSAGES
        | GatewayIntents::DIRECT_MESSAGES
        | GatewayIntents::MESSAGE_CONTENT
}

/// Runs until `shutdown` is cancelled and every outbound sender is dropped.
#[tracing::instrument(name = "discord", skip_all)]
pub(crate) async fn run(
    settings: DiscordSettings,
    ctx: AdapterContext,
    shutdown: CancellationToken,
) -> Result<(), AdapterError> {
    let AdapterContext { events, outbound, channel_cursors, kept, claims, positions, .. } = ctx;
    let http = Arc::new(http(&settings));
    let (inner, queue) =
        Inner::new(settings, http, events, &channel_cursors, kept, shutdown.clone());
    let _intake = AbortOnDropHandle::new(tokio::spawn(inner.clone().take(queue).in_current_span()));
    let gateway = AbortOnDropHandle::new(tokio::spawn(
        crate::shards::run(inner.clone(), claims, positions).in_current_span(),
    ));
    let gateway = async {
        gateway.await.unwrap_or_else(|join| {
            Err(AdapterError::Other(format!("the discord connection failed: {join}")))
        })
    };
    let sender = Sender::new(inner.clone());
    let serving = serve_outbound(outbound, MAX_CONCURRENT_SENDS, move |request| {
        let sender = sender.clone();
        async move { sender.handle(request).await }
    });
    // A refusal returns at once (in-flight sends finish on their own); otherwise the sends go
    // on until the gateway drops its last sender.
    tokio::try_join!(gateway, async {
        serving.await;
        Ok(())
    })?;
    info!("discord adapter stopped");
    Ok(())
}

/// A REST client: Discord's, with serenity's rate limiter, or the configured URL's without it
/// (a proxy or a fake answers for the limits; the senders back off from a 429 themselves).
fn http(settings: &DiscordSettings) -> Http {
    match &settings.api_url {
        None => HttpBuilder::new(&settings.token).build(),
        Some(url) => HttpBuilder::new(&settings.token)
            .proxy(url.trim_end_matches('/'))
            .ratelimiter_disabled(true)
            .build(),
    }
}

/// Keeps shard `shard`'s Gateway connection until `shutdown` or until `claim` is lost (then
/// closed at once); returns an error only when Discord refused the token or the intents,
/// which no retry can mend.
pub(crate) async fn connect(
    inner: Arc<Inner>,
    shard: u32,
    claim: &Claim,
) -> Result<(), AdapterError> {
    let settings = inner.settings.clone();
    let total = settings.shards.max(1);
    // Cancelled with the adapter or the claim: what the shard's handler and collector still
    // hear after that is dropped, as it is another replica's now.
    let stop = inner.shutdown.child_token();
    let _stopping = stop.clone().drop_guard();
    let mut attempt = 0;
    while !inner.shutdown.is_cancelled() && !claim.is_lost() {
        // Before the connection can hear anything: a message heard live ahead of READY (or of
        // the channel's fetch) must not move a cursor past what was sent while nobody heard.
        inner.gap_opened(shard);
        let handler = Handler { inner: Arc::downgrade(&inner), shard, stop: stop.clone() };
        let built =
            ClientBuilder::new_with_http(http(&settings), intents()).event_handler(handler).await;
        let error = match built {
            Ok(mut client) => {
                let manager = client.shard_manager.clone();
                let _watching = AbortOnDropHandle::new(tokio::spawn(
                    watch(Arc::downgrade(&inner), shard, manager.runners.clone()).in_current_span(),
                ));
                tokio::select! {
                    result = client.start_shard(shard, total) => match result {
                        Ok(()) => return Ok(()),
                        Err(serenity::Error::Gateway(GatewayError::InvalidAuthentication)) => {
                            return Err(AdapterError::Unauthorized {
                                platform: Platform::Discord,
                                detail: "the gateway closed with 4004 (authentication failed)".into(),
                                hint: settings.token_env.clone(),
                            });
                        }
                        Err(serenity::Error::Gateway(GatewayError::DisallowedGatewayIntents)) => {
                            return Err(AdapterError::Other(
                                "Discord closed the gateway with 4014 (disallowed intents): enable the Message Content intent for this bot in the developer portal (Bot, Privileged Gateway Intents), then restart herald".into(),
                            ));
                        }
                        Err(e) => scrub(&e.to_string(), &settings.token),
                    },
                    () = inner.shutdown.cancelled() => {
                        // Stop taking messages; what arrives meanwhile is fetched at the next start.
                        manager.shutdown_all().await;
                        return Ok(());
                    }
                    () = claim.lost() => {
                        // Another replica may connect this shard now: two connections would
                        // hear every message twice.
                        stop.cancel();
                        manager.shutdown_all().await;
                        inner.gap_abandoned(shard);
                        return Ok(());
                    }
                }
            }
            Err(e) => scrub(&e.to_string(), &settings.token),
        };
        let retry_in = backoff(attempt, None, settings.max_backoff);
        attempt = attempt.saturating_add(1);
        // Down until its next READY, whatever another shard reports meanwhile.
        inner.shard_held(shard);
        let _ = inner.events.send(AdapterEvent::Retrying { error, retry_in }).await;
        tokio::select! {
            () = tokio::time::sleep(retry_in) => {}
            () = inner.shutdown.cancelled() => {}
            () = claim.lost() => {}
        }
    }
    if claim.is_lost() {
        inner.gap_abandoned(shard);
    }
    Ok(())
}

/// How often the shard's stage is looked at, and how many looks in a row without a
/// connection make it an outage worth reporting (a resume takes well under that).
const WATCH_EVERY: Duration = Duration::from_secs(1);
const DOWN_AFTER: u32 = 3;

/// Reports an outage the event handler never hears of: when a resume fails serenity starts
/// the shard over without a stage update, and `/healthz` must not say "connected" meanwhile.
async fn watch(
    inner: Weak<Inner>,
    shard: u32,
    runners: Arc<Mutex<HashMap<ShardId, ShardRunnerInfo>>>,
) {
    let mut down = 0;
    loop {
        tokio::time::sleep(WATCH_EVERY).await;
        let Some(inner) = inner.upgrade() else { return };
        let stage = runners.lock().await.values().map(|runner| runner.stage).next();
        if stage == Some(ConnectionStage::Connected) {
            down = 0;
            continue;
        }
        down += 1;
        if down == DOWN_AFTER {
            let stage = stage.map_or_else(|| "no shard running".to_owned(), |s| s.to_string());
            let error = format!("the gateway connection is down ({stage}); reconnecting");
            inner.shard_down(shard, error).await;
        }
    }
}

/// serenity's events, handed to the intake. It holds the adapter's state weakly: serenity's
/// shard queuer outlives a client whose start failed, and a strong reference there would keep
/// the adapter's event channel open, so the gateway would never learn the adapter stopped.
struct Handler {
    inner: Weak<Inner>,
    shard: u32,
    stop: Stop,
}

impl Handler {
    /// The adapter, while this shard's connection is still wanted.
    fn live(&self) -> Option<Arc<Inner>> {
        if self.stop.is_cancelled() { None } else { self.inner.upgrade() }
    }
}

#[async_trait]
impl EventHandler for Handler {
    async fn ready(&self, ctx: Context, ready: Ready) {
        let Some(inner) = self.live() else { return };
        // A new session: what was sent before it is fetched, and no message of it may move a
        // cursor past that gap meanwhile.
        inner.gap_opened(self.shard);
        let bot = Bot { id: ready.user.id, name: ready.user.name.clone() };
        *inner.bot.write().unwrap_or_else(PoisonError::into_inner) = Some(bot);
        lock(&inner.caches).insert(self.shard, ctx.cache.clone());
        inner.http.set_application_id(ready.application.id);
        // Read in dispatch order by the shard itself, where the handler's tasks may swap two
        // messages; every new session (a fresh runner) needs it again.
        let collecting = Arc::downgrade(&inner);
        let stop = self.stop.clone();
        ctx.shard.add_collector(CollectorCallback(Box::new(move |event| {
            let Some(inner) = collecting.upgrade() else { return false };
            if stop.is_cancelled() {
                return false;
            }
            collect(&inner, event);
            true
        })));
        info!(bot = %ready.user.name, shard = self.shard, "connected to Discord");
        inner.shard_up(self.shard).await;
        tokio::spawn(inner.clone().backfill(self.shard).in_current_span());
        // Once per process: the set is the same whichever shard connects.
        if inner.settings.register_commands && !inner.registering.swap(true, Ordering::Relaxed) {
            tokio::spawn(register(inner.clone()).in_current_span());
        }
    }

    async fn resume(&self, _ctx: Context, _event: ResumedEvent) {
        debug!(shard = self.shard, "the Discord session was resumed");
        if let Some(inner) = self.live() {
            inner.shard_up(self.shard).await;
        }
    }

    async fn message(&self, _ctx: Context, message: Message) {
        // A copy the collector took first is dropped as seen.
        if let Some(inner) = self.live() {
            inner.offer(Incoming::Message(Box::new(message)));
        }
    }

    async fn interaction_create(&self, _ctx: Context, interaction: Interaction) {
        if let (Interaction::Command(command), Some(inner)) = (interaction, self.live()) {
            inner.offer(Incoming::Interaction(Box::new(command)));
        }
    }

    async fn thread_create(&self, _ctx: Context, thread: GuildChannel) {
        if let (Some(parent), Some(inner)) = (thread.parent_id, self.live()) {
            inner.thread_seen(thread.id.get(), parent.get());
        }
    }

    async fn shard_stage_update(&self, _ctx: Context, event: ShardStageUpdateEvent) {
        if event.old == ConnectionStage::Connected && event.new != ConnectionStage::Connected {
            let error = format!("the gateway connection was lost ({})", event.new);
            let Some(inner) = self.live() else { return };
            inner.shard_down(self.shard, error).await;
        }
    }
}

/// What the shard's collector takes, in dispatch order.
fn collect(inner: &Inner, event: &Event) {
    match event {
        Event::MessageCreate(created) => {
            inner.offer(Incoming::Message(Box::new(created.message.clone())));
        }
        Event::InteractionCreate(created) => {
            if let Interaction::Command(command) = &created.interaction {
                inner.offer(Incoming::Interaction(Box::new(command.clone())));
            }
        }
        Event::ThreadCreate(created) => {
            if let Some(parent) = created.thread.parent_id {
                inner.thread_seen(created.thread.id.get(), parent.get());
            }
        }
        _ => {}
    }
}

/// Registers the slash commands when the set changed since the last registration.
async fn register(inner: Arc<Inner>) {
    let kept =
        inner.kept.lock().unwrap_or_else(PoisonError::into_inner).get(commands::KEPT_AS).cloned();
    match commands::register(&inner.http, kept.as_deref(), &inner.settings.token).await {
        Ok(None) => debug!("the slash commands are registered already"),
        Ok(Some(print)) => {
            info!("slash commands registered with Discord");
            inner
                .kept
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .insert(commands::KEPT_AS.to_owned(), print.clone());
            let keep = AdapterEvent::Keep { name: commands::KEPT_AS.to_owned(), value: print };
            let _ = inner.events.send(keep).await;
        }
        Err(failure) => {
            // The next connection tries again.
            inner.registering.store(false, Ordering::Relaxed);
            warn!(
                error = failure.text(),
                "could not register the slash commands; typed commands still work"
            )
        }
    }
}

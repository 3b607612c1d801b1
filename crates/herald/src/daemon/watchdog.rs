//! The supervisor task: `READY=1` once the gateway runs, a `STATUS=` line while it does,
//! `WATCHDOG=1` only while its event loop answers, and `STOPPING=1` when shutdown begins.

use std::time::Duration;

use herald_core::Platform;
use herald_gateway::{Heartbeat, Metrics, PlatformState, PlatformStates, Started};
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::notify::Notifier;

/// How often the status line is refreshed when no watchdog asks for more.
const STATUS_EVERY: Duration = Duration::from_secs(5);

/// What the supervisor watches: handles on the gateway, taken before it runs.
#[derive(Debug, Clone)]
pub struct Probe {
    /// Resolves when the gateway's loop starts.
    pub started: Started,
    /// Answered by the gateway's event loop.
    pub heartbeat: Heartbeat,
    /// Each platform's connection.
    pub states: PlatformStates,
    /// Sessions and runs.
    pub metrics: Metrics,
}

/// The phases of the daemon the supervisor follows.
#[derive(Debug, Clone)]
pub struct Phases {
    /// Cancelled when shutdown begins (SIGTERM, SIGINT).
    pub stopping: CancellationToken,
    /// Cancelled once the gateway has stopped.
    pub stopped: CancellationToken,
}

/// Runs until the gateway has stopped. `watchdog` is the ping interval (half of
/// `WATCHDOG_USEC`), `None` when systemd set no watchdog for this process.
pub async fn supervise(
    notifier: Notifier,
    probe: Probe,
    watchdog: Option<Duration>,
    phases: Phases,
) {
    tokio::select! {
        biased;
        () = phases.stopped.cancelled() => return,
        () = probe.started.wait() => notifier.ready(),
    }
    if let Some(every) = watchdog {
        info!(every_ms = every.as_millis() as u64, "the systemd watchdog is on");
    }
    let every = watchdog.unwrap_or(STATUS_EVERY);
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let mut status = String::new();
    let mut stopping = false;
    let mut stalled = false;
    loop {
        tokio::select! {
            biased;
            () = phases.stopped.cancelled() => break,
            () = phases.stopping.cancelled(), if !stopping => {
                stopping = true;
                notifier.stopping();
            }
            _ = ticks.tick() => {
                if watchdog.is_some() {
                    // Half the interval: a ping after a slow answer still comes well within
                    // WATCHDOG_USEC.
                    let answered = tokio::time::timeout(every / 2, probe.heartbeat.beat()).await;
                    match answered {
                        Ok(true) => {
                            if stalled {
                                info!("the gateway's event loop answers again; pinging the watchdog");
                            }
                            stalled = false;
                            notifier.watchdog();
                        }
                        Ok(false) => debug!("the gateway has stopped; no more watchdog pings"),
                        Err(_) => {
                            if !stalled {
                                warn!(waited_ms = (every / 2).as_millis() as u64, "the gateway's event loop did not answer; not pinging the watchdog");
                            }
                            stalled = true;
                        }
                    }
                }
            }
        }
        let line = status_line(
            &probe.states.snapshot(),
            probe.metrics.active_sessions(),
            probe.metrics.running_turns(),
            stopping,
        );
        if line != status {
            notifier.status(&line);
            status = line;
        }
    }
}

/// The `STATUS=` text: each platform's state, then sessions and runs.
pub fn status_line(
    platforms: &[(Platform, PlatformState)],
    active_sessions: u64,
    running_turns: u64,
    stopping: bool,
) -> String {
    let plural = |n: u64, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let turns = plural(running_turns, "turn running", "turns running");
    if stopping {
        return format!("stopping: {turns}");
    }
    let mut parts: Vec<String> = platforms
        .iter()
        .map(|(platform, state)| match state {
            PlatformState::Starting => format!("{platform} starting"),
            PlatformState::Connected { .. } => format!("{platform} connected"),
            PlatformState::Retrying { error } => format!("{platform} retrying ({error})"),
            PlatformState::Failed { error } => format!("{platform} failed ({error})"),
        })
        .collect();
    parts.push(plural(active_sessions, "active session", "active sessions"));
    parts.push(turns);
    parts.join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_status_line_says_what_the_daemon_does() {
        let check = |state, sessions, turns, stopping, expected: &str| {
            let platforms = [(Platform::Telegram, state)];
            assert_eq!(status_line(&platforms, sessions, turns, stopping), expected);
        };
        let connected = || PlatformState::Connected { bot: "herald_bot".into() };
        let retrying = PlatformState::Retrying { error: "timed out".into() };
        check(connected(), 3, 1, false, "telegram connected; 3 active sessions; 1 turn running");
        check(connected(), 1, 0, true, "stopping: 0 turns running");
        check(
            retrying,
            1,
            0,
            false,
            "telegram retrying (timed out); 1 active session; 0 turns running",
        );
        check(
            PlatformState::Starting,
            0,
            2,
            false,
            "telegram starting; 0 active sessions; 2 turns running",
        );
    }
}

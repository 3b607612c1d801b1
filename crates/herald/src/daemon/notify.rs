//! The service manager's notification protocol (`sd_notify`), through the `sd-notify` crate:
//! one datagram per message to the socket `$NOTIFY_SOCKET` names.
//!
//! Notifying is best effort: without `$NOTIFY_SOCKET` (not run by systemd, or not
//! `Type=notify`) every call does nothing, and a failure is logged, never returned, so the
//! daemon keeps serving whatever the service manager does.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;
use tracing::{debug, warn};

/// Sends state changes to the service manager.
#[derive(Debug, Default)]
pub struct Notifier {
    /// Whether a failure was already logged at WARN; later ones go to DEBUG.
    warned: AtomicBool,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for; it does nothing when the variable is unset.
    pub fn from_env() -> Notifier {
        Notifier::default()
    }

    /// `READY=1`: startup finished.
    pub fn ready(&self) {
        self.send(NotifyState::Ready);
    }

    /// `STATUS=`: one line saying what the daemon is doing.
    pub fn status(&self, text: &str) {
        // The protocol is line based: a newline would start another assignment.
        let line = text.replace('\n', " ");
        self.send(NotifyState::Status(&line));
    }

    /// `WATCHDOG=1`: still alive.
    pub fn watchdog(&self) {
        self.send(NotifyState::Watchdog);
    }

    /// `STOPPING=1`: shutting down.
    pub fn stopping(&self) {
        self.send(NotifyState::Stopping);
    }

    fn send(&self, state: NotifyState<'_>) {
        let Err(e) = sd_notify::notify(std::slice::from_ref(&state)) else { return };
        let socket = std::env::var_os("NOTIFY_SOCKET").unwrap_or_default();
        let socket = socket.to_string_lossy();
        if self.warned.swap(true, Ordering::Relaxed) {
            debug!(%socket, error = %e, message = %state, "could not notify the service manager");
        } else {
            warn!(%socket, error = %e, message = %state, "could not notify the service manager (later failures are logged at debug level)");
        }
    }
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when the watchdog is on and meant
/// for this process (`WATCHDOG_PID` unset or equal to ours).
pub fn watchdog_from_env() -> Option<Duration> {
    ping_every(sd_notify::watchdog_enabled())
}

/// Half the watchdog's timeout, so a ping after a slow tick still comes in time; none for a
/// zero timeout, which would mean pinging without pause.
fn ping_every(timeout: Option<Duration>) -> Option<Duration> {
    timeout.filter(|t| !t.is_zero()).map(|t| t / 2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_timeout() {
        let check = |timeout: Option<u64>, expected: Option<u64>| {
            let got = ping_every(timeout.map(Duration::from_millis));
            assert_eq!(got, expected.map(Duration::from_millis), "{timeout:?}");
        };
        check(None, None);
        check(Some(400), Some(200));
        check(Some(0), None);
    }
}

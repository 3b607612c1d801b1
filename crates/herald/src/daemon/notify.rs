//! The service manager's notification protocol (`sd_notify`): one datagram per message to the
//! socket `$NOTIFY_SOCKET` names, a path or, starting with `@`, a Linux abstract name.
//!
//! Notifying is best effort: without `$NOTIFY_SOCKET` (not run by systemd, or not
//! `Type=notify`) every call does nothing, and a failure is logged, never returned, so the
//! daemon keeps serving whatever the service manager does.

use std::ffi::OsStr;
use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tracing::{debug, warn};

/// Sends state changes to the service manager.
#[derive(Debug)]
pub struct Notifier {
    target: Option<Target>,
    /// Whether a failure was already logged at WARN; later ones go to DEBUG.
    warned: AtomicBool,
}

#[derive(Debug)]
struct Target {
    socket: UnixDatagram,
    addr: SocketAddr,
    name: String,
}

impl Notifier {
    /// The notifier `$NOTIFY_SOCKET` asks for; it does nothing when the variable is unset.
    pub fn from_env() -> Notifier {
        Notifier::new(std::env::var_os("NOTIFY_SOCKET").as_deref())
    }

    /// A notifier for this socket name (`None` or empty: one that does nothing).
    pub fn new(socket: Option<&OsStr>) -> Notifier {
        let warned = AtomicBool::new(false);
        let Some(name) = socket.filter(|s| !s.is_empty()) else {
            return Notifier { target: None, warned };
        };
        match connect(name) {
            Ok(target) => Notifier { target: Some(target), warned },
            Err(e) => {
                warn!(socket = %name.to_string_lossy(), error = %e, "cannot use NOTIFY_SOCKET; the service manager will not hear from herald");
                Notifier { target: None, warned }
            }
        }
    }

    /// Whether messages go anywhere.
    pub fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// `READY=1`: startup finished.
    pub fn ready(&self) {
        self.send("READY=1");
    }

    /// `STATUS=`: one line saying what the daemon is doing.
    pub fn status(&self, text: &str) {
        // The protocol is line based: a newline would start another assignment.
        let line = text.replace('\n', " ");
        self.send(&format!("STATUS={line}"));
    }

    /// `WATCHDOG=1`: still alive.
    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }

    /// `STOPPING=1`: shutting down.
    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    fn send(&self, message: &str) {
        let Some(target) = &self.target else { return };
        let Err(e) = target.socket.send_to_addr(message.as_bytes(), &target.addr) else {
            return;
        };
        if self.warned.swap(true, Ordering::Relaxed) {
            debug!(socket = %target.name, error = %e, message, "could not notify the service manager");
        } else {
            warn!(socket = %target.name, error = %e, message, "could not notify the service manager (later failures are logged at debug level)");
        }
    }
}

/// An unbound, non-blocking datagram socket and the manager's address: a full socket buffer
/// must drop a notification rather than stall the runtime.
fn connect(name: &OsStr) -> io::Result<Target> {
    let bytes = name.as_bytes();
    let addr = match bytes.strip_prefix(b"@") {
        Some(abstract_name) => SocketAddr::from_abstract_name(abstract_name)?,
        None if bytes.starts_with(b"/") => SocketAddr::from_pathname(name)?,
        None => {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "expected an absolute path or an abstract name starting with @",
            ));
        }
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    Ok(Target { socket, addr, name: name.to_string_lossy().into_owned() })
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC`, when the watchdog is on and meant
/// for this process (`WATCHDOG_PID` unset or equal to `pid`).
pub fn watchdog_interval(
    usec: Option<&str>,
    watchdog_pid: Option<&str>,
    pid: u32,
) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|us| *us > 0)?;
    if let Some(target) = watchdog_pid.map(str::trim).filter(|p| !p.is_empty())
        && target.parse::<u32>().ok() != Some(pid)
    {
        return None;
    }
    Some(Duration::from_micros(usec / 2))
}

/// [`watchdog_interval`] from this process's environment.
pub fn watchdog_from_env() -> Option<Duration> {
    let var = |name| std::env::var(name).ok();
    watchdog_interval(
        var("WATCHDOG_USEC").as_deref(),
        var("WATCHDOG_PID").as_deref(),
        std::process::id(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_watchdog_pings_at_half_its_timeout_when_it_is_ours() {
        let check = |usec, pid, expected: Option<u64>| {
            let got = watchdog_interval(usec, pid, 42);
            assert_eq!(got, expected.map(Duration::from_millis), "{usec:?} {pid:?}");
        };
        check(None, None, None);
        check(Some("400000"), None, Some(200));
        check(Some("400000"), Some("42"), Some(200));
        check(Some("400000"), Some("41"), None);
        check(Some("400000"), Some(""), Some(200));
        check(Some("0"), None, None);
        check(Some("soon"), None, None);
    }

    fn receive(socket: &UnixDatagram) -> String {
        let mut buffer = [0u8; 512];
        let n = socket.recv(&mut buffer).expect("a datagram");
        String::from_utf8_lossy(&buffer[..n]).into_owned()
    }

    #[test]
    fn messages_reach_a_socket_at_a_path() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let path = dir.path().join("notify.sock");
        let manager = UnixDatagram::bind(&path).expect("binding the socket");
        manager.set_read_timeout(Some(Duration::from_secs(5))).expect("a timeout");
        let notifier = Notifier::new(Some(path.as_os_str()));
        assert!(notifier.is_enabled());
        notifier.ready();
        notifier.status("telegram connected;\n2 active sessions");
        notifier.watchdog();
        notifier.stopping();
        assert_eq!(receive(&manager), "READY=1");
        assert_eq!(receive(&manager), "STATUS=telegram connected; 2 active sessions");
        assert_eq!(receive(&manager), "WATCHDOG=1");
        assert_eq!(receive(&manager), "STOPPING=1");
    }

    #[test]
    fn messages_reach_an_abstract_socket() {
        let name = format!("herald-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("an abstract name");
        let manager = UnixDatagram::bind_addr(&addr).expect("binding the socket");
        manager.set_read_timeout(Some(Duration::from_secs(5))).expect("a timeout");
        let notifier = Notifier::new(Some(OsStr::new(&format!("@{name}"))));
        notifier.ready();
        assert_eq!(receive(&manager), "READY=1");
    }

    #[test]
    fn without_a_socket_nothing_happens_and_nothing_fails() {
        for socket in [None, Some(""), Some("relative/path"), Some("vsock:2:1234")] {
            let notifier = Notifier::new(socket.map(OsStr::new));
            assert!(!notifier.is_enabled(), "{socket:?}");
            notifier.ready();
        }
        // a socket nobody listens on: logged, not returned
        let dir = tempfile::tempdir().expect("a temporary directory");
        let gone = dir.path().join("gone.sock");
        let notifier = Notifier::new(Some(gone.as_os_str()));
        notifier.ready();
        notifier.watchdog();
    }
}

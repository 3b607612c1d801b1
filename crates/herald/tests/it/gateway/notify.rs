//! The systemd notification protocol, with the test as the service manager: a datagram socket
//! named by NOTIFY_SOCKET, and WATCHDOG_USEC asking for pings.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::UnixDatagram;

use super::Daemon;

/// A fake service manager: every datagram's lines, in arrival order.
struct Manager {
    lines: Arc<Mutex<Vec<String>>>,
    _dir: tempfile::TempDir,
    socket: String,
}

impl Manager {
    fn start() -> Manager {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify.sock");
        let socket = UnixDatagram::bind(&path).unwrap();
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        tokio::spawn(async move {
            let mut buffer = vec![0u8; 4096];
            while let Ok(n) = socket.recv(&mut buffer).await {
                let text = String::from_utf8_lossy(&buffer[..n]).into_owned();
                sink.lock().unwrap().extend(text.lines().map(str::to_owned));
            }
        });
        Manager { lines, _dir: dir, socket: path.display().to_string() }
    }

    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    fn count(&self, line: &str) -> usize {
        self.lines().iter().filter(|l| *l == line).count()
    }

    /// Waits until `line` arrived at least `n` times.
    async fn wait_for(&self, line: &str, n: usize, d: &Daemon) {
        let started = Instant::now();
        while self.count(line) < n {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{line} arrived {} of {n} times: {:?}\n{}",
                self.count(line),
                self.lines(),
                d.logs()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_service_manager_hears_ready_status_watchdog_and_stopping() {
    let manager = Manager::start();
    let env = [("NOTIFY_SOCKET", manager.socket.as_str()), ("WATCHDOG_USEC", "400000")];
    let mut d = Daemon::start_with_env("", &env).await;
    manager.wait_for("READY=1", 1, &d).await;
    // every 200 ms; a noisy machine may skip some, so only ask for a few
    manager.wait_for("WATCHDOG=1", 5, &d).await;
    let status = manager.lines().into_iter().find(|l| l.starts_with("STATUS="));
    let status = status.expect("a STATUS= line");
    assert!(status.contains("telegram"), "{status}");
    assert_eq!(manager.count("READY=1"), 1, "{:?}", manager.lines());
    assert_eq!(manager.count("STOPPING=1"), 0);

    assert_eq!(d.stop().await, 0, "{}", d.logs());
    manager.wait_for("STOPPING=1", 1, &d).await;
    let lines = manager.lines();
    let ready = lines.iter().position(|l| l == "READY=1");
    let stopping = lines.iter().position(|l| l == "STOPPING=1");
    assert!(ready < stopping, "{lines:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_watchdog_meant_for_another_process_is_not_pinged() {
    let manager = Manager::start();
    let env = [
        ("NOTIFY_SOCKET", manager.socket.as_str()),
        ("WATCHDOG_USEC", "200000"),
        ("WATCHDOG_PID", "1"),
    ];
    let mut d = Daemon::start_with_env("", &env).await;
    manager.wait_for("READY=1", 1, &d).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(manager.count("WATCHDOG=1"), 0, "{:?}", manager.lines());
    assert_eq!(d.stop().await, 0, "{}", d.logs());
}

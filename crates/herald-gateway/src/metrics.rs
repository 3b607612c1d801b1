//! The gateway's counters and gauges, kept in `prometheus-client` metrics and rendered as
//! Prometheus text.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use herald_core::Platform;
use prometheus_client::encoding::prometheus_text;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The upper bounds of the agent run latency buckets, in seconds.
pub const RUN_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// The content type of what [`Metrics::render_prometheus`] returns.
pub const PROMETHEUS_TEXT: &str = prometheus_text::CONTENT_TYPE;

/// What the gateway counts, for `/metrics` and the service status line. Cheap to clone:
/// every clone counts into the same values.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Inner>);

/// The store's own counts, read by the caller at scrape time.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreFigures {
    /// Write transactions retried because another writer held the database.
    pub write_retries: u64,
    /// Writes that failed after their patience ran out.
    pub write_failures: u64,
}

/// The `platform` label of the per-platform counters.
type PlatformLabel = [(&'static str, &'static str); 1];

#[derive(Debug)]
struct Inner {
    received: Family<PlatformLabel, Counter>,
    sent: Family<PlatformLabel, Counter>,
    runs: Counter,
    run_seconds: Histogram,
    run_failures: Counter,
    active_sessions: Gauge,
    running_turns: Gauge,
    outbox_pending: Gauge,
    outbox_oldest_seconds: Gauge<f64, AtomicU64>,
}

impl Default for Inner {
    fn default() -> Inner {
        Inner {
            received: Family::default(),
            sent: Family::default(),
            runs: Counter::default(),
            run_seconds: Histogram::new(RUN_BUCKETS),
            run_failures: Counter::default(),
            active_sessions: Gauge::default(),
            running_turns: Gauge::default(),
            outbox_pending: Gauge::default(),
            outbox_oldest_seconds: Gauge::default(),
        }
    }
}

/// Marks an agent run as running until it is dropped.
#[derive(Debug)]
pub(crate) struct RunningTurn(Metrics);

impl Drop for RunningTurn {
    fn drop(&mut self) {
        self.0.0.running_turns.dec();
    }
}

/// Counts a session this replica runs (holds the lock of) until it is dropped.
#[derive(Debug)]
pub(crate) struct HeldSession(Metrics);

impl Drop for HeldSession {
    fn drop(&mut self) {
        self.0.0.active_sessions.dec();
    }
}

impl Metrics {
    /// A platform the gateway started; it is rendered from now on, at zero at first.
    pub(crate) fn add_platform(&self, platform: Platform) {
        // A family renders only the series created in it.
        let _ = self.0.received.get_or_create(&label(platform));
        let _ = self.0.sent.get_or_create(&label(platform));
    }

    /// A message from the platform reached the router.
    pub(crate) fn received(&self, platform: Platform) {
        self.0.received.get_or_create(&label(platform)).inc();
    }

    /// A message was handed to the platform.
    pub(crate) fn sent(&self, platform: Platform) {
        self.0.sent.get_or_create(&label(platform)).inc();
    }

    /// An agent run ended with an answer (or, with `failed`, a model or store failure).
    pub(crate) fn run_ended(&self, took: Duration, failed: bool) {
        self.0.runs.inc();
        self.0.run_seconds.observe(took.as_secs_f64());
        if failed {
            self.0.run_failures.inc();
        }
    }

    /// An agent run holds a run permit until the returned guard is dropped.
    pub(crate) fn turn_running(&self) -> RunningTurn {
        self.0.running_turns.inc();
        RunningTurn(self.clone())
    }

    /// A session worker runs here (holding the session's lock) until the guard is dropped.
    pub(crate) fn session_held(&self) -> HeldSession {
        self.0.active_sessions.inc();
        HeldSession(self.clone())
    }

    /// Replies stored but not yet taken by their platform, and how long the oldest has waited.
    pub fn set_outbox(&self, pending: u64, oldest: Option<Duration>) {
        self.0.outbox_pending.set(i64::try_from(pending).unwrap_or(i64::MAX));
        self.0.outbox_oldest_seconds.set(oldest.unwrap_or_default().as_secs_f64());
    }

    /// Messages received from `platform` so far.
    pub fn messages_received(&self, platform: Platform) -> u64 {
        self.0.received.get(&label(platform)).map_or(0, |c| c.get())
    }

    /// Messages handed to `platform` so far.
    pub fn messages_sent(&self, platform: Platform) -> u64 {
        self.0.sent.get(&label(platform)).map_or(0, |c| c.get())
    }

    /// Sessions with a live worker now.
    pub fn active_sessions(&self) -> u64 {
        u64::try_from(self.0.active_sessions.get()).unwrap_or(0)
    }

    /// Agent runs holding a run permit now.
    pub fn running_turns(&self) -> u64 {
        u64::try_from(self.0.running_turns.get()).unwrap_or(0)
    }

    /// Everything in the Prometheus text exposition format ([`PROMETHEUS_TEXT`]), with the
    /// store's figures read by the caller.
    pub fn render_prometheus(&self, store: StoreFigures) -> String {
        let mut out = String::with_capacity(4096);
        // Writing into a String cannot fail.
        let _ = prometheus_text::encode(&mut out, &self.registry(store));
        out
    }

    /// A registry of this moment: the live metrics plus the counts read at scrape time.
    /// `prometheus-client` adds the `_total` suffix to counters itself.
    fn registry(&self, store: StoreFigures) -> Registry {
        let m = &self.0;
        let mut r = Registry::default();
        r.register(
            "herald_messages_received",
            "Messages the platforms delivered to the gateway",
            m.received.clone(),
        );
        r.register(
            "herald_messages_sent",
            "Messages handed to the platforms: replies they accepted, notices queued for them",
            m.sent.clone(),
        );
        r.register(
            "herald_agent_runs",
            "Agent runs that ended with an answer or a failure (stopped runs are not counted)",
            m.runs.clone(),
        );
        r.register(
            "herald_agent_run_seconds",
            "How long agent runs took: model calls, tools and storing the turn",
            m.run_seconds.clone(),
        );
        r.register(
            "herald_model_errors",
            "Agent runs that failed (the model or the store); the user was told",
            m.run_failures.clone(),
        );
        r.register(
            "herald_store_write_retries",
            "Store write transactions retried because another writer held the database",
            ConstCounter::new(store.write_retries),
        );
        r.register(
            "herald_store_write_failures",
            "Store writes that failed after their patience ran out",
            ConstCounter::new(store.write_failures),
        );
        r.register(
            "herald_active_sessions",
            "Sessions with a live worker",
            m.active_sessions.clone(),
        );
        r.register("herald_running_turns", "Agent runs in progress", m.running_turns.clone());
        r.register(
            "herald_outbox_pending",
            "Replies stored but not yet taken by their platform",
            m.outbox_pending.clone(),
        );
        r.register(
            "herald_outbox_oldest_seconds",
            "How long the oldest reply not yet taken by its platform has waited (0 when none)",
            m.outbox_oldest_seconds.clone(),
        );
        r
    }
}

fn label(platform: Platform) -> PlatformLabel {
    [("platform", platform.as_str())]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line starting with `series` followed by a space.
    fn sample(text: &str, series: &str) -> Option<String> {
        text.lines()
            .find_map(|l| l.strip_prefix(series).and_then(|rest| rest.strip_prefix(' ')))
            .map(str::to_owned)
    }

    fn check(metrics: &Metrics, store: StoreFigures, expected: &[(&str, &str)]) {
        let text = metrics.render_prometheus(store);
        for (series, value) in expected {
            assert_eq!(sample(&text, series).as_deref(), Some(*value), "{series} in\n{text}");
        }
    }

    #[test]
    fn a_fresh_gateway_renders_zeros_for_its_platforms_only() {
        let metrics = Metrics::default();
        metrics.add_platform(Platform::Telegram);
        check(
            &metrics,
            StoreFigures::default(),
            &[
                ("herald_messages_received_total{platform=\"telegram\"}", "0"),
                ("herald_messages_sent_total{platform=\"telegram\"}", "0"),
                ("herald_agent_runs_total", "0"),
                ("herald_agent_run_seconds_bucket{le=\"+Inf\"}", "0"),
                ("herald_agent_run_seconds_sum", "0.0"),
                ("herald_agent_run_seconds_count", "0"),
                ("herald_model_errors_total", "0"),
                ("herald_store_write_retries_total", "0"),
                ("herald_store_write_failures_total", "0"),
                ("herald_active_sessions", "0"),
                ("herald_running_turns", "0"),
                ("herald_outbox_pending", "0"),
                ("herald_outbox_oldest_seconds", "0.0"),
            ],
        );
        let text = metrics.render_prometheus(StoreFigures::default());
        assert!(!text.contains("discord") && !text.contains("slack"), "{text}");
    }

    #[test]
    fn counts_are_rendered_per_platform() {
        let metrics = Metrics::default();
        metrics.add_platform(Platform::Telegram);
        metrics.add_platform(Platform::Slack);
        for _ in 0..3 {
            metrics.received(Platform::Telegram);
        }
        metrics.sent(Platform::Telegram);
        metrics.sent(Platform::Slack);
        let held = [metrics.session_held(), metrics.session_held()];
        let running = metrics.turn_running();
        let store = StoreFigures { write_retries: 7, write_failures: 2 };
        check(
            &metrics,
            store,
            &[
                ("herald_messages_received_total{platform=\"telegram\"}", "3"),
                ("herald_messages_received_total{platform=\"slack\"}", "0"),
                ("herald_messages_sent_total{platform=\"telegram\"}", "1"),
                ("herald_messages_sent_total{platform=\"slack\"}", "1"),
                ("herald_store_write_retries_total", "7"),
                ("herald_store_write_failures_total", "2"),
                ("herald_active_sessions", "2"),
                ("herald_running_turns", "1"),
            ],
        );
        drop((running, held));
        check(&metrics, store, &[("herald_running_turns", "0"), ("herald_active_sessions", "0")]);
        assert_eq!(metrics.messages_received(Platform::Telegram), 3);
        assert_eq!(metrics.messages_sent(Platform::Slack), 1);
        assert_eq!(metrics.messages_sent(Platform::Discord), 0);
    }

    #[test]
    fn the_outbox_reports_its_backlog_and_the_oldest_wait() {
        let metrics = Metrics::default();
        metrics.set_outbox(4, Some(Duration::from_millis(2500)));
        let empty = StoreFigures::default();
        check(
            &metrics,
            empty,
            &[("herald_outbox_pending", "4"), ("herald_outbox_oldest_seconds", "2.5")],
        );
        metrics.set_outbox(0, None);
        check(
            &metrics,
            empty,
            &[("herald_outbox_pending", "0"), ("herald_outbox_oldest_seconds", "0.0")],
        );
    }

    #[test]
    fn run_latencies_fill_cumulative_buckets() {
        let metrics = Metrics::default();
        metrics.run_ended(Duration::from_millis(30), false);
        metrics.run_ended(Duration::from_millis(100), false);
        metrics.run_ended(Duration::from_secs(3), true);
        metrics.run_ended(Duration::from_secs(90), false);
        check(
            &metrics,
            StoreFigures::default(),
            &[
                ("herald_agent_runs_total", "4"),
                ("herald_agent_run_seconds_bucket{le=\"0.05\"}", "1"),
                // a bound is inclusive
                ("herald_agent_run_seconds_bucket{le=\"0.1\"}", "2"),
                ("herald_agent_run_seconds_bucket{le=\"2.5\"}", "2"),
                ("herald_agent_run_seconds_bucket{le=\"5\"}", "3"),
                ("herald_agent_run_seconds_bucket{le=\"60\"}", "3"),
                ("herald_agent_run_seconds_bucket{le=\"+Inf\"}", "4"),
                ("herald_agent_run_seconds_count", "4"),
                ("herald_model_errors_total", "1"),
            ],
        );
        let text = metrics.render_prometheus(StoreFigures::default());
        let sum = sample(&text, "herald_agent_run_seconds_sum").expect("a sum");
        let sum: f64 = sum.parse().expect("a number");
        assert!((sum - 93.13).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let metrics = Metrics::default();
        metrics.add_platform(Platform::Telegram);
        let text = metrics.render_prometheus(StoreFigures::default());
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("a TYPE line names a kind");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                if kind == "counter" {
                    assert!(name.ends_with("_total"), "{line}");
                }
                declared.push(name.to_owned());
            } else if let Some(rest) = line.strip_prefix("# HELP ") {
                assert!(!rest.ends_with(".."), "{line}");
            } else {
                let series = line.split([' ', '{']).next().unwrap_or_default();
                let family = declared.last().expect("a sample after a TYPE line");
                assert!(series.starts_with(family.as_str()), "{series} outside {family}");
                let value = line.rsplit(' ').next().unwrap_or_default();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert_eq!(declared.len(), 11, "{text}");
        assert!(text.ends_with('\n'));
    }
}

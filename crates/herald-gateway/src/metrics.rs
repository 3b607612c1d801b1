//! The gateway's counters and gauges, kept in atomics and rendered as Prometheus text.

use std::fmt::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use herald_core::Platform;

/// The upper bounds of the agent run latency buckets, in seconds.
pub const RUN_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0];

/// What the gateway counts, for `/metrics` and the service status line. Cheap to clone:
/// every clone counts into the same values.
#[derive(Debug, Clone, Default)]
pub struct Metrics(Arc<Inner>);

#[derive(Debug, Default)]
struct Inner {
    platforms: [PlatformCounters; Platform::ALL.len()],
    runs: Histogram,
    run_failures: AtomicU64,
    active_sessions: AtomicU64,
    running_turns: AtomicU64,
}

#[derive(Debug, Default)]
struct PlatformCounters {
    /// Whether the platform was started: only those are rendered.
    present: AtomicBool,
    received: AtomicU64,
    sent: AtomicU64,
}

/// Run latencies: one count per bucket (not cumulative), the last past every bound, so the
/// total count is always the buckets' sum even while runs are being recorded.
#[derive(Debug, Default)]
struct Histogram {
    buckets: [AtomicU64; RUN_BUCKETS.len() + 1],
    sum_micros: AtomicU64,
}

/// Marks an agent run as running until it is dropped.
#[derive(Debug)]
pub(crate) struct RunningTurn(Metrics);

impl Drop for RunningTurn {
    fn drop(&mut self) {
        self.0.0.running_turns.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Metrics {
    /// A platform the gateway started; it is rendered from now on, at zero at first.
    pub(crate) fn add_platform(&self, platform: Platform) {
        self.platform(platform).present.store(true, Ordering::Relaxed);
    }

    /// A message from the platform reached the router.
    pub(crate) fn received(&self, platform: Platform) {
        self.platform(platform).received.fetch_add(1, Ordering::Relaxed);
    }

    /// A message was handed to the platform.
    pub(crate) fn sent(&self, platform: Platform) {
        self.platform(platform).sent.fetch_add(1, Ordering::Relaxed);
    }

    /// An agent run ended with an answer (or, with `failed`, a model or store failure).
    pub(crate) fn run_ended(&self, took: Duration, failed: bool) {
        let seconds = took.as_secs_f64();
        let bucket = RUN_BUCKETS.iter().position(|le| seconds <= *le).unwrap_or(RUN_BUCKETS.len());
        let runs = &self.0.runs;
        runs.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        runs.sum_micros.fetch_add(micros, Ordering::Relaxed);
        if failed {
            self.0.run_failures.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// An agent run holds a run permit until the returned guard is dropped.
    pub(crate) fn turn_running(&self) -> RunningTurn {
        self.0.running_turns.fetch_add(1, Ordering::Relaxed);
        RunningTurn(self.clone())
    }

    /// How many session workers the router keeps now.
    pub(crate) fn set_active_sessions(&self, n: usize) {
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.0.active_sessions.store(n, Ordering::Relaxed);
    }

    /// Messages received from `platform` so far.
    pub fn messages_received(&self, platform: Platform) -> u64 {
        self.platform(platform).received.load(Ordering::Relaxed)
    }

    /// Messages handed to `platform` so far.
    pub fn messages_sent(&self, platform: Platform) -> u64 {
        self.platform(platform).sent.load(Ordering::Relaxed)
    }

    /// Sessions with a live worker now.
    pub fn active_sessions(&self) -> u64 {
        self.0.active_sessions.load(Ordering::Relaxed)
    }

    /// Agent runs holding a run permit now.
    pub fn running_turns(&self) -> u64 {
        self.0.running_turns.load(Ordering::Relaxed)
    }

    /// Everything in the Prometheus text exposition format (version 0.0.4), with the store's
    /// write retries (`Store::busy_retries`) read by the caller.
    pub fn render_prometheus(&self, store_write_retries: u64) -> String {
        let mut out = String::with_capacity(2048);
        let present: Vec<(Platform, &PlatformCounters)> = Platform::ALL
            .into_iter()
            .map(|p| (p, self.platform(p)))
            .filter(|(_, c)| c.present.load(Ordering::Relaxed))
            .collect();

        family(
            &mut out,
            "herald_messages_received_total",
            "counter",
            "Messages the platforms delivered to the gateway.",
        );
        for (platform, counters) in &present {
            let n = counters.received.load(Ordering::Relaxed);
            let _ = writeln!(out, "herald_messages_received_total{{platform=\"{platform}\"}} {n}");
        }
        family(
            &mut out,
            "herald_messages_sent_total",
            "counter",
            "Messages handed to the platforms: replies they accepted, notices queued for them.",
        );
        for (platform, counters) in &present {
            let n = counters.sent.load(Ordering::Relaxed);
            let _ = writeln!(out, "herald_messages_sent_total{{platform=\"{platform}\"}} {n}");
        }

        let runs = &self.0.runs;
        let counts: Vec<u64> = runs.buckets.iter().map(|b| b.load(Ordering::Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        family(
            &mut out,
            "herald_agent_runs_total",
            "counter",
            "Agent runs that ended with an answer or a failure (stopped runs are not counted).",
        );
        let _ = writeln!(out, "herald_agent_runs_total {total}");
        family(
            &mut out,
            "herald_agent_run_seconds",
            "histogram",
            "How long agent runs took: model calls, tools and storing the turn.",
        );
        let mut cumulative = 0;
        for (le, count) in RUN_BUCKETS.iter().zip(&counts) {
            cumulative += count;
            let _ = writeln!(out, "herald_agent_run_seconds_bucket{{le=\"{le}\"}} {cumulative}");
        }
        let _ = writeln!(out, "herald_agent_run_seconds_bucket{{le=\"+Inf\"}} {total}");
        let sum = runs.sum_micros.load(Ordering::Relaxed) as f64 / 1e6;
        let _ = writeln!(out, "herald_agent_run_seconds_sum {sum}");
        let _ = writeln!(out, "herald_agent_run_seconds_count {total}");

        let gauges = [
            (
                "herald_model_errors_total",
                "counter",
                "Agent runs that failed (the model or the store); the user was told.",
                self.0.run_failures.load(Ordering::Relaxed),
            ),
            (
                "herald_store_write_retries_total",
                "counter",
                "Store write transactions retried because another writer held the database.",
                store_write_retries,
            ),
            (
                "herald_active_sessions",
                "gauge",
                "Sessions with a live worker.",
                self.active_sessions(),
            ),
            ("herald_running_turns", "gauge", "Agent runs in progress.", self.running_turns()),
        ];
        for (name, kind, help, value) in gauges {
            family(&mut out, name, kind, help);
            let _ = writeln!(out, "{name} {value}");
        }
        out
    }

    fn platform(&self, platform: Platform) -> &PlatformCounters {
        let index = match platform {
            Platform::Cli => 0,
            Platform::Telegram => 1,
            Platform::Discord => 2,
            Platform::Slack => 3,
        };
        &self.0.platforms[index]
    }
}

/// The `# HELP` and `# TYPE` lines that open a metric family.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
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

    fn check(metrics: &Metrics, retries: u64, expected: &[(&str, &str)]) {
        let text = metrics.render_prometheus(retries);
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
            0,
            &[
                ("herald_messages_received_total{platform=\"telegram\"}", "0"),
                ("herald_messages_sent_total{platform=\"telegram\"}", "0"),
                ("herald_agent_runs_total", "0"),
                ("herald_agent_run_seconds_bucket{le=\"+Inf\"}", "0"),
                ("herald_agent_run_seconds_sum", "0"),
                ("herald_agent_run_seconds_count", "0"),
                ("herald_model_errors_total", "0"),
                ("herald_store_write_retries_total", "0"),
                ("herald_active_sessions", "0"),
                ("herald_running_turns", "0"),
            ],
        );
        let text = metrics.render_prometheus(0);
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
        metrics.set_active_sessions(2);
        let running = metrics.turn_running();
        check(
            &metrics,
            7,
            &[
                ("herald_messages_received_total{platform=\"telegram\"}", "3"),
                ("herald_messages_received_total{platform=\"slack\"}", "0"),
                ("herald_messages_sent_total{platform=\"telegram\"}", "1"),
                ("herald_messages_sent_total{platform=\"slack\"}", "1"),
                ("herald_store_write_retries_total", "7"),
                ("herald_active_sessions", "2"),
                ("herald_running_turns", "1"),
            ],
        );
        drop(running);
        check(&metrics, 7, &[("herald_running_turns", "0")]);
        assert_eq!(metrics.messages_received(Platform::Telegram), 3);
        assert_eq!(metrics.messages_sent(Platform::Slack), 1);
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
            0,
            &[
                ("herald_agent_runs_total", "4"),
                ("herald_agent_run_seconds_bucket{le=\"0.05\"}", "1"),
                // a bound is inclusive
                ("herald_agent_run_seconds_bucket{le=\"0.1\"}", "2"),
                ("herald_agent_run_seconds_bucket{le=\"2.5\"}", "2"),
                ("herald_agent_run_seconds_bucket{le=\"5\"}", "3"),
                ("herald_agent_run_seconds_bucket{le=\"60\"}", "3"),
                ("herald_agent_run_seconds_bucket{le=\"+Inf\"}", "4"),
                ("herald_agent_run_seconds_sum", "93.13"),
                ("herald_agent_run_seconds_count", "4"),
                ("herald_model_errors_total", "1"),
            ],
        );
    }

    #[test]
    fn every_family_has_help_and_type_before_its_samples() {
        let metrics = Metrics::default();
        metrics.add_platform(Platform::Telegram);
        let text = metrics.render_prometheus(0);
        let mut declared = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("a TYPE line names a kind");
                assert!(["counter", "gauge", "histogram"].contains(&kind), "{line}");
                declared.push(name.to_owned());
            } else if !line.starts_with("# HELP ") {
                let series = line.split([' ', '{']).next().unwrap_or_default();
                let family = declared.last().expect("a sample after a TYPE line");
                assert!(series.starts_with(family.as_str()), "{series} outside {family}");
                let value = line.rsplit(' ').next().unwrap_or_default();
                assert!(value.parse::<f64>().is_ok(), "{line}");
            }
        }
        assert_eq!(declared.len(), 8, "{text}");
        assert!(text.ends_with('\n'));
    }
}

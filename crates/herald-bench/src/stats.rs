//! Latency percentiles and the rounding of reported numbers.

/// Latency samples in milliseconds, sorted.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    sorted_ms: Vec<f64>,
}

impl Latencies {
    /// Samples given in microseconds.
    pub fn from_micros(micros: impl IntoIterator<Item = u64>) -> Self {
        Latencies::from_ms(micros.into_iter().map(|us| us as f64 / 1000.0).collect())
    }

    /// Samples given in milliseconds.
    pub fn from_ms(mut ms: Vec<f64>) -> Self {
        ms.sort_by(f64::total_cmp);
        Latencies { sorted_ms: ms }
    }

    /// How many samples there are.
    pub fn count(&self) -> usize {
        self.sorted_ms.len()
    }

    /// The nearest-rank `p`th percentile (0 < p <= 100) in milliseconds, rounded to
    /// microseconds; 0 without samples.
    pub fn percentile(&self, p: f64) -> f64 {
        let n = self.sorted_ms.len();
        if n == 0 {
            return 0.0;
        }
        let rank = ((p / 100.0) * n as f64).ceil() as usize;
        round(self.sorted_ms[rank.clamp(1, n) - 1], 3)
    }
}

/// `x` rounded to `digits` decimals, for JSON that people read.
pub fn round(x: f64, digits: i32) -> f64 {
    let scale = 10f64.powi(digits);
    (x * scale).round() / scale
}

/// `count` per second over `seconds`, rounded to one decimal; 0 for an empty interval.
pub fn rate(count: u64, seconds: f64) -> f64 {
    if seconds > 0.0 { round(count as f64 / seconds, 1) } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let l = Latencies::from_ms((1..=100).rev().map(f64::from).collect());
        assert_eq!(l.percentile(50.0), 50.0);
        assert_eq!(l.percentile(99.0), 99.0);
        assert_eq!(l.percentile(100.0), 100.0);
        assert_eq!(l.percentile(0.1), 1.0);
        let one = Latencies::from_micros([2500]);
        assert_eq!((one.percentile(50.0), one.percentile(99.0)), (2.5, 2.5));
        assert_eq!(Latencies::default().percentile(99.0), 0.0);
    }

    #[test]
    fn rates_and_rounding() {
        assert_eq!(rate(10, 4.0), 2.5);
        assert_eq!(rate(10, 0.0), 0.0);
        assert_eq!(round(1.23456, 2), 1.23);
    }
}

use std::time::{SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch: the unit of every timestamp in the store.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

//! herald's Telegram adapter (work in progress).

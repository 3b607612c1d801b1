//! herald gateway (work in progress).

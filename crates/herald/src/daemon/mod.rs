//! What `herald gateway` adds around the gateway to run as a service: the systemd
//! notification protocol and its watchdog, the health and metrics endpoint, and reloading the
//! configuration on SIGHUP.

pub mod health;
pub mod notify;
pub mod reload;
pub mod watchdog;

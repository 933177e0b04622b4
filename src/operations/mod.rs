//! Running the operator: its Prometheus metrics ([`metrics`]), the metrics and probe servers
//! ([`server`]), what readiness and liveness judge ([`health`]), and memory given back after a burst
//! ([`memory`]).

pub mod health;
pub mod memory;
pub mod metrics;
pub mod server;

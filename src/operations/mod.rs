//! Running the operator: its Prometheus metrics ([`metrics`]), the metrics and probe servers
//! ([`server`]), what readiness and liveness judge ([`health`]), memory given back after a burst
//! ([`memory`]), the operator's own trouble told as Events and a `Degraded` condition ([`trouble`]
//! counts it, [`explain`] decides what to say when, [`reporter`] says it), and what the binary was
//! built from ([`build`]).

pub mod build;
pub mod explain;
pub mod health;
pub mod memory;
pub mod metrics;
pub mod reporter;
pub mod server;
pub mod trouble;

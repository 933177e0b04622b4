//! event-series: the events.k8s.io series lifecycle, server-side, for a whole cluster.
//!
//! The pure core ([`key`], [`engine`], [`mapping`], [`recovery`], [`settings`]) turns raw Events into
//! write intents with no I/O; the shell (watch, writer, leader election, metrics server) performs them.

pub mod cli;
pub mod controller;
pub mod engine;
pub mod key;
pub mod leader;
pub mod mapping;
pub mod memory;
pub mod metrics;
pub mod policies;
pub mod policy;
pub mod recovery;
pub mod retry;
pub mod server;
pub mod settings;
pub mod watch;
pub mod writer;

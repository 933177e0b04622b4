//! event-series: the events.k8s.io series lifecycle, server-side, for a whole cluster.
//!
//! The pure core turns raw Events into write intents with no I/O: [`key`] reads a raw Event as an
//! observation of its isomorphic key, [`engine`] folds observations and clock ticks into [`intent`]s,
//! [`object`] turns a series into the events.k8s.io object the API accepts and back, and
//! [`config::settings`] says what each namespace's policy is. The shell performs it: [`watch`] lists
//! and watches raw Events, [`restart`] rebuilds the engine from the API server, [`writer`] writes
//! intents, [`config::policy_watch`] keeps policies live, [`leader`] elects one writer and fences it,
//! [`server`] serves metrics and probes, [`reading`] prints the series for `event-series get` ([`health`] says whether it is ready), [`client`] gives every
//! request to the API server a deadline, and [`controller`] ties them together. `docs/ARCHITECTURE.md` draws the flow.

pub mod alerts;
pub mod cli;
pub mod client;
pub mod config;
pub mod controller;
pub mod currency;
pub mod feed;
pub mod handoff;
pub mod health;
pub mod leader;
pub mod memory;
pub mod metrics;
pub mod object;
pub mod paging;
pub mod reading;
pub mod restart;
pub mod retry;
pub mod server;
pub mod visible;
pub mod watch;
pub mod writer;

/// The pure core, a crate of its own ([`event_series_core`]), re-exported under the paths the shell uses.
pub use event_series_core::{alert, engine, intent, key};

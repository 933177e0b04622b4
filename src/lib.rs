//! event-series: the events.k8s.io series lifecycle, server-side, for a whole cluster.
//!
//! The pure core is a crate of its own, [`event_series_core`]: the isomorphic key, the series engine
//! (occurrences and clock ticks in, write intents out) and the settings a policy resolves to. This
//! crate is the shell around it, one module per stage of the flow:
//!
//! - [`input`]: the raw Events in (list and watch, pages bounded by bytes, how far the input is
//!   known complete, the rebuild at start);
//! - [`controller`]: the central loop that feeds the engine and hands its intents on;
//! - [`writer`]: the intents out to the API server (pending writes, fairness, retries, fencing);
//! - [`object`]: the stored series object, encoded and checked when read back;
//! - [`config`]: the EventSeriesPolicy resource and its live watch;
//! - [`leader`]: one writer at a time (the Lease, and the fence every write checks);
//! - [`alerting`]: loops as Alertmanager alerts;
//! - [`operations`]: metrics, the HTTP servers, readiness and memory upkeep;
//! - [`api`]: what every request to the API server gets (deadlines, retry delays);
//! - [`reading`]: `event-series get`, the series as a table;
//! - [`cli`]: the flags.
//!
//! `docs/ARCHITECTURE.md` draws the flow and maps each module to the tests that prove it.

pub mod alerting;
pub mod api;
pub mod cli;
pub mod config;
pub mod controller;
pub mod input;
pub mod leader;
pub mod object;
pub mod operations;
pub mod reading;
pub mod writer;

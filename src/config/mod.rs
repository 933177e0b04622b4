//! Configuration: the EventSeriesPolicy custom resource ([`crd`]), how policies in the cluster become
//! the engine's settings ([`resolve`], into [`event_series_core::settings`]),
//! the status each policy reports ([`status`]), and the watch that keeps it all live ([`policy_watch`]).
//!
//! Dependencies point one way: `policy_watch` -> `resolve`, `status` -> `crd`, `settings`, `duration`.

pub mod crd;
pub mod policy_watch;
pub mod resolve;
pub mod status;

pub use crd::{EventSeriesPolicy, EventSeriesPolicySpec, EventSeriesPolicyStatus};

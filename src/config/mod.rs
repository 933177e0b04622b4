//! Configuration: the EventSeriesPolicy custom resource ([`crd`]), its durations ([`duration`]), the
//! engine's view of it ([`settings`]), how policies in the cluster become that view ([`resolve`]),
//! the status each policy reports ([`status`]), and the watch that keeps it all live ([`policy_watch`]).
//!
//! Dependencies point one way: `policy_watch` -> `resolve`, `status` -> `crd`, `settings`, `duration`.

pub mod crd;
pub mod policy_watch;
pub mod resolve;
pub mod status;

/// The settings and durations live in the pure core ([`event_series_core`]); re-exported here, where
/// the rest of the configuration is.
pub use event_series_core::{duration, settings};

pub use crd::{EventSeriesPolicy, EventSeriesPolicySpec, EventSeriesPolicyStatus};
pub use settings::{PolicySet, Settings, SettingsError, SlotIdx};

//! The pure core of event-series: raw Events read as observations of an isomorphic [`key`], the
//! series [`engine`] that folds observations and clock ticks into write [`intent`]s, and the
//! [`settings`] (with their [`duration`]s) each namespace's policy resolves to.
//!
//! No I/O, no async runtime, no API client, no clock of its own: every input carries `now`. It is a
//! crate of its own so that the compiler, not a convention, keeps it that way (`just lint` checks
//! its dependency tree).

pub mod alert;
pub mod duration;
pub mod engine;
pub mod filter;
pub mod intent;
pub mod key;
pub mod settings;

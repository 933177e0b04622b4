//! What this binary was built from, as `build.rs` found it: named by `--version` and by the
//! `event_series_build_info` metric, so that a bug report, a scrape or a benchmark's result file
//! can tell one build from another.

use crate::operations::metrics::labels::BuildLabels;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

/// The crate's version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The commit (from git, or `EVENT_SERIES_COMMIT` where the source has no repository).
pub const COMMIT: &str = env!("EVENT_SERIES_COMMIT");
/// The compiler's version.
pub const RUSTC: &str = env!("EVENT_SERIES_RUSTC");

/// `--version`: the version, then the commit, the compiler and cargo's profile (`release` or
/// `debug`).
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("EVENT_SERIES_COMMIT"),
    ", rustc ",
    env!("EVENT_SERIES_RUSTC"),
    ", ",
    env!("EVENT_SERIES_PROFILE"),
    ")"
);

/// `event_series_build_info`: 1, labelled with the version, the commit and the compiler.
pub fn info() -> Family<BuildLabels, Gauge> {
    let info = Family::<BuildLabels, Gauge>::default();
    info.get_or_create(&BuildLabels {
        version: VERSION,
        commit: COMMIT,
        rustc: RUSTC,
    })
    .set(1);
    info
}

//! What the event-series test suites, benchmarks and fuzz targets share, each written once:
//!
//! - [`sim`]: a simulated cluster for engine tests (injected clock, no API server);
//! - [`check`]: the invariants the fuzz targets check, with the events.k8s.io/v1 rules restated.
//!
//! Not published: it exists for this repository's own targets.

pub mod check;
pub mod sim;

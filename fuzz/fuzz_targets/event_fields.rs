//! A raw core/v1 Event built field by field (`arbitrary`), with fuzzed policy timings: normalisation,
//! the engine and the mapping keep the invariants of `event_series_fuzz::check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: event_series_fuzz::Input| {
    event_series_fuzz::check::check_event(&input.event(), input.timings());
});

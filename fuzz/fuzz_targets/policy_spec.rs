//! An EventSeriesPolicy spec as a user might write it (any strings in the duration fields, any
//! integers in the bounds): converting it to the engine's settings never panics, and a spec it
//! accepts has settings within the documented ranges.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|input: event_series_fuzz::PolicyInput| {
    event_series_fuzz::check_policy(&input);
});

//! A raw core/v1 Event as JSON (seeded with real events from client-go recorders, fuzz/seeds/event):
//! normalisation, the engine and the mapping keep the invariants of `event_series_fuzz::check`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    event_series_fuzz::check::check_json(data);
});

//! A 24-hour crash loop at one occurrence per second, on the injected clock, with the default settings.

// A scenario reads as one story from top to bottom: the function-length lint is for the product.
#![allow(clippy::too_many_lines)]

use chrono::TimeDelta;
use event_series_core::intent::{FinishCause, WriteKind};
use event_series_core::settings::Settings;
use event_series_test_support::sim::*;
use std::time::Instant;

fn run(new_style_event: bool) {
    let started = Instant::now();
    let mut sim = Sim::new(Settings::default());
    let day = 24 * 3600;
    for _ in 0..day {
        sim.occur("prod", "crash", "api-7f9c", "BackOff", new_style_event);
        sim.advance(TimeDelta::seconds(1), TimeDelta::seconds(1));
    }
    sim.advance(TimeDelta::minutes(10), TimeDelta::seconds(1));
    let (creates, rewrites, finishes) = sim.count_kinds();
    let refreshes = sim
        .intents
        .iter()
        .filter(|i| i.kind == WriteKind::Refresh)
        .count();
    let heartbeats = rewrites - refreshes;
    assert_eq!(creates, 1);
    assert_eq!(refreshes, 5, "early refreshes at 1, 2, 4, 8 and 16 minutes");
    assert!(
        (47..=48).contains(&heartbeats),
        "{heartbeats} heartbeats in 24h at a 30m interval"
    );
    assert_eq!(finishes, 1);
    let last = sim.intents.last().unwrap();
    assert_eq!(last.kind, WriteKind::Finish(FinishCause::Quiet));
    assert_eq!(last.series.count, day as u64);
    assert_eq!(sim.store.objects.len(), 1);
    assert_eq!(sim.store.counts_by_key().values().sum::<u64>(), day as u64);
    // Reported, not asserted: timing belongs to benchmarks. Printed with --nocapture.
    println!(
        "24h crash loop ({}) simulated in {:?}",
        if new_style_event {
            "new-style"
        } else {
            "legacy"
        },
        started.elapsed()
    );
}

#[test]
fn legacy_crash_loop_for_24_hours() {
    run(false);
}

#[test]
fn new_style_crash_loop_for_24_hours() {
    run(true);
}

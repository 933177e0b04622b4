//! Bytes of heap per active series, measured with a counting allocator: total heap growth while
//! 100,000 series are created, minus the string bytes those series carry (key fields and note); and
//! the peak heap of a restart's replay of stored raw events at two restart buffer sizes. Prints one
//! line per figure; `just bench` runs it.

mod common;

use common::{kubelet_backoff, t0};
use event_series_core::engine::Engine;
use event_series_core::key;
use event_series_core::settings::Settings;
use k8s_openapi::api::core::v1::Event;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);
/// The most `LIVE` has been since it was last reset.
static PEAK: AtomicIsize = AtomicIsize::new(0);

fn grew(by: isize) {
    let now = LIVE.fetch_add(by, Ordering::Relaxed) + by;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size() as isize);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        grew(new_size as isize - layout.size() as isize);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn main() {
    let now = t0();
    for n in [10_000usize, 100_000] {
        let events: Vec<Event> = (0..n).map(|i| kubelet_backoff(i, 2, now)).collect();
        let mut engine = Engine::with_settings(Settings {
            max_active_series: 1_000_000,
            ..Default::default()
        });
        let before = LIVE.load(Ordering::Relaxed);
        for e in &events {
            if let Ok(o) = key::normalise(e) {
                engine.observe(now, &o);
            }
        }
        let intents = engine.take_intents();
        let strings: usize = intents.iter().map(|i| i.series.key.text_len()).sum();
        drop(intents);
        let after = LIVE.load(Ordering::Relaxed);
        let total = (after - before) as f64;
        println!(
            "memory/{n} active series: {:.0} bytes heap per series in total, {:.0} beyond the strings it carries ({:.1} MiB for all)",
            total / n as f64,
            (total - strings as f64) / n as f64,
            total / (1024.0 * 1024.0)
        );
        assert_eq!(engine.active_series(), n);
    }
    // The old default, then today's (`--restart-buffer-bytes`).
    for mib in [64, 8] {
        replay_peak(mib << 20);
    }
}

/// Peak heap of a restart, as a standby goes through it: an empty engine restores 100,000 series
/// from their objects (decoded one at a time, as from the pages of a list), then PARTS parts of the
/// first list (each what `--restart-buffer-bytes` holds) of raw events of loops that ended 150
/// minutes ago are buffered, sorted and replayed as `Restart` does, and the recovery ends. Prints the
/// heap once the series are restored, the peak, and what is left after the recovery.
fn replay_peak(budget: usize) {
    use event_series::input::restart::Restart;
    use event_series::object;
    use event_series::operations::metrics::Metrics;
    let now = t0();
    let old = now - chrono::TimeDelta::minutes(150);
    let metrics = Metrics::default();
    let settings = Settings {
        series_window: chrono::TimeDelta::hours(2),
        finish_after: chrono::TimeDelta::hours(2),
        ..Default::default()
    };
    // The leader's objects, as the standby lists them.
    let objects: Vec<_> = {
        let mut leader = Engine::with_settings(settings.clone());
        for i in 0..100_000 {
            if let Ok(o) = key::normalise(&kubelet_backoff(i, 2, now)) {
                leader.observe(now, &o);
            }
        }
        let intents = leader.take_intents();
        intents
            .iter()
            .map(|i| object::to_event(&i.series))
            .collect()
    };
    let check = object::Check {
        now,
        tolerance: chrono::TimeDelta::minutes(10),
    };
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    let mut engine = Engine::with_settings(settings);
    engine.begin_recovery();
    for ev in &objects {
        if let Ok(stored) = object::decode(ev, check) {
            engine.restore(now, stored);
        }
    }
    let restored = LIVE.load(Ordering::Relaxed);
    let mut restart = Restart::new(budget);
    let mut listed = 0;
    for i in 1_000_000..1_500_000 {
        restart.buffer(&kubelet_backoff(i, 1 + (i % 3) as i32, old), &metrics);
        listed += 1;
        if restart.is_full() {
            restart.flush(&mut engine, &metrics, now);
        }
    }
    restart.finish(&mut engine, 1, now, now);
    let peak = PEAK.load(Ordering::Relaxed);
    drop(engine.take_intents());
    let after = LIVE.load(Ordering::Relaxed);
    // What the first tick and housekeeping then give back: the history's candidates (lone, their
    // window long past) and dormant keys (older than the retention), which a process that never
    // stopped no longer holds either.
    engine.tick(now);
    drop(engine.take_intents());
    engine.housekeep(now);
    let settled = LIVE.load(Ordering::Relaxed);
    let mib = |b: isize| (b - before) as f64 / (1024.0 * 1024.0);
    println!(
        "memory/restart of 100000 series and {listed} listed raw events, buffer {:.0} MiB: heap {:.1} MiB once the series are restored, peak {:.1} MiB, {:.1} MiB after the recovery, {:.1} MiB after a tick and housekeeping",
        budget as f64 / (1024.0 * 1024.0),
        mib(restored),
        mib(peak),
        mib(after),
        mib(settled)
    );
}

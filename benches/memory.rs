//! Bytes of heap, measured with a counting allocator: per active series (total heap growth while
//! 100,000 series are created, minus the string bytes those series carry: key fields and note), per
//! candidate and per pending write; the engine and the writer with every bound full at once, at
//! the default bounds and at the old ones; and the peak heap of a restart's replay of stored raw
//! events at two restart buffer sizes. Prints one line per figure; `just bench` runs it.

mod common;

use common::{kubelet_backoff, kubelet_backoff_in, t0};
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
    candidates(200_000);
    pending_writes(100_000);
    // The old defaults (maxActiveSeries, --max-key-bytes, --max-pending-writes), today's series
    // and pending bounds with the old key bytes, and today's defaults.
    for (m, key_mib, pending) in [
        (100_000, 64, 200_000),
        (50_000, 64, 50_000),
        (50_000, 32, 50_000),
    ] {
        every_bound_full(m, key_mib << 20, pending);
    }
    // The old default, then today's (`--restart-buffer-bytes`).
    for mib in [64, 8] {
        replay_peak(mib << 20);
    }
}

/// `n` kubelet BackOff events of `n` keys, each counting `count` occurrences now, and an engine
/// whose series bound holds them all.
fn events_and_engine(n: usize, count: i32) -> (Vec<Event>, Engine) {
    let events = (0..n).map(|i| kubelet_backoff(i, count, t0())).collect();
    let engine = Engine::with_settings(Settings {
        max_active_series: n,
        ..Default::default()
    });
    (events, engine)
}

/// Heap per candidate: `n` keys seen once each (kubelet BackOff events counting one occurrence),
/// which the engine keeps until their `seriesWindow` ends in case a second one follows. Counts the
/// candidate, its raw-count entry and its packed key.
fn candidates(n: usize) {
    let now = t0();
    let (events, mut engine) = events_and_engine(n, 1);
    let before = LIVE.load(Ordering::Relaxed);
    for e in &events {
        if let Ok(o) = key::normalise(e) {
            engine.observe(now, &o);
        }
    }
    let total = (LIVE.load(Ordering::Relaxed) - before) as f64;
    println!(
        "memory/{n} candidates: {:.0} bytes heap per candidate ({:.1} MiB for all)",
        total / n as f64,
        total / (1024.0 * 1024.0)
    );
    assert_eq!(engine.active_series(), 0);
}

/// Heap per pending write: the creates of `n` new series held in the writer's queue, as a storm
/// leaves them while the writer, at `--qps`, catches up (each intent's snapshot with its copy of the
/// key, the queue's entry, its place in the fair rotation). The intents are pushed as the engine
/// makes them, as the controller does; what the queue holds is the heap the engine and queue hold
/// minus what the engine holds alone once the queue is dropped. Also the peak of the two on the
/// way, which a table's growth (the old table and the new at once) sets.
fn pending_writes(n: usize) {
    use event_series::writer::queue::Queue;
    let now = t0();
    let (events, mut engine) = events_and_engine(n, 2);
    let mut queue = Queue::new(2 * n, n);
    let start = std::time::Instant::now();
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    for e in &events {
        if let Ok(o) = key::normalise(e) {
            engine.observe(now, &o);
        }
        for intent in engine.take_intents() {
            let _ = queue.push(start, intent);
        }
    }
    let (held, peak) = (LIVE.load(Ordering::Relaxed), PEAK.load(Ordering::Relaxed));
    assert_eq!(queue.len(), n);
    drop(queue);
    let engine_only = LIVE.load(Ordering::Relaxed);
    let mib = |b: isize| b as f64 / (1024.0 * 1024.0);
    println!(
        "memory/{n} pending writes: {:.0} bytes heap per pending write ({:.1} MiB for all); engine and queue {:.1} MiB, peak {:.1} MiB",
        (held - engine_only) as f64 / n as f64,
        mib(held - engine_only),
        mib(held - before),
        mib(peak - before)
    );
}

/// Heap with every bound of the engine and the writer full at once: `maxActiveSeries` at `m`,
/// `--max-key-bytes` and `--max-pending-writes` as given, the rest at their defaults, filled in the
/// order `just bench-bound` fills them on a real cluster: `2m` one-off keys (the candidates) in 10
/// namespaces, 15,000 one-off keys at every field limit in 5 namespaces (past `--max-key-bytes`),
/// then `m` new series over 100 namespaces whose creates all wait in the writer's queue (a storm
/// the writer, at `--qps`, takes many minutes to write). Alerts and the restart buffer are the
/// shell's, not counted here.
fn every_bound_full(m: usize, key_bytes: usize, max_pending: usize) {
    use event_series::writer::queue::Queue;
    use event_series_core::engine::EngineConfig;
    use event_series_core::settings::PolicySet;
    use event_series_test_support::raw::at_every_limit;
    let now = t0();
    let settings = Settings {
        max_active_series: m,
        ..Default::default()
    };
    let config = EngineConfig {
        key_bytes,
        ..Default::default()
    };
    let mut engine = Engine::new(PolicySet::uniform(settings), config);
    // --max-pending-writes-per-namespace at its default.
    let mut queue = Queue::new(max_pending, 50_000);
    let start = std::time::Instant::now();
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let observe = |engine: &mut Engine, e: &Event| {
        if let Ok(o) = key::normalise(e) {
            engine.observe(now, &o);
        }
    };
    for i in 0..2 * m {
        let ns = format!("lone-{}", i % 10);
        observe(&mut engine, &kubelet_backoff_in(&ns, 1_000_000 + i, 1, now));
    }
    let candidates = LIVE.load(Ordering::Relaxed);
    for i in 0..15_000 {
        let ns = format!("limit-{}", i % 5);
        observe(
            &mut engine,
            &at_every_limit(&ns, &format!("limit-{i}"), &format!("p{i}"), 1),
        );
    }
    let keys = LIVE.load(Ordering::Relaxed);
    for i in 0..m {
        let ns = format!("loops-{}", i % 100);
        observe(&mut engine, &kubelet_backoff_in(&ns, i, 2, now));
        for intent in engine.take_intents() {
            let _ = queue.push(start, intent);
        }
    }
    let (all, peak) = (LIVE.load(Ordering::Relaxed), PEAK.load(Ordering::Relaxed));
    let mib = |from: isize, to: isize| (to - from) as f64 / (1024.0 * 1024.0);
    println!(
        "memory/every bound full at {m} series, key bytes {} MiB: {:.1} MiB of candidates, {:.1} MiB more with keys at every limit, {:.1} MiB more with the series and their pending creates; {:.1} MiB in all, peak {:.1} MiB ({} series, {} pending, key bytes {:.1} MiB)",
        key_bytes >> 20,
        mib(base, candidates),
        mib(candidates, keys),
        mib(keys, all),
        mib(base, all),
        mib(base, peak),
        engine.active_series(),
        queue.len(),
        engine.key_bytes().0 as f64 / (1024.0 * 1024.0)
    );
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
        max_active_series: 100_000,
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

//! Bytes of heap per active series, measured with a counting allocator: total heap growth while
//! 100,000 series are created, minus the string bytes those series carry (key fields and note). Prints one line per figure; `just bench` runs it.

mod common;

use common::{kubelet_backoff, t0};
use event_series::config::settings::Settings;
use event_series::engine::Engine;
use event_series::key;
use k8s_openapi::api::core::v1::Event;
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
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
}

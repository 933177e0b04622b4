//! Giving memory back to the OS after a burst.
//!
//! A restart buffers the whole first list and a storm queues a write per new series; both are freed
//! once done, but glibc's malloc keeps freed memory inside its per-thread arenas, where the operator's
//! resident size would stay at its peak for good. `malloc_trim` returns every whole free page of every
//! arena. `docs/BENCHMARKS.md` (Memory, Allocators) weighs this against other allocators.
//!
//! Both calls apply to glibc's malloc only: they do nothing when the binary is built with another
//! global allocator (features `jemalloc`, `mimalloc`), or when `EVENT_SERIES_MALLOC_TUNING=off` is
//! set at start (to measure glibc untuned).

use std::sync::atomic::{AtomicBool, Ordering};

/// Name of the environment variable that turns the glibc tuning off (`off`), read at start.
pub const TUNING_ENV: &str = "EVENT_SERIES_MALLOC_TUNING";

static TUNED: AtomicBool = AtomicBool::new(GLIBC);

/// Whether this binary's global allocator is glibc's malloc (and so whether the tuning applies).
const GLIBC: bool = cfg!(all(
    target_os = "linux",
    target_env = "gnu",
    not(feature = "jemalloc"),
    not(feature = "mimalloc")
));

/// Fixes glibc's mmap threshold at its default starting value (128 KiB). Left to itself glibc raises
/// it (up to 32 MiB) each time a large block is freed, after which the engine's key chunks, its hash
/// tables and every list page come out of the heap, where they fragment it; fixed, each of them is
/// its own mapping, returned to the OS the moment it is freed. Called once at start, where it also reads
/// `EVENT_SERIES_MALLOC_TUNING` (`off` turns [`release_free_pages`] off too). A no-op off glibc.
pub fn tune_allocator() {
    let on = GLIBC && std::env::var(TUNING_ENV).map_or(true, |v| v != "off");
    TUNED.store(on, Ordering::Relaxed);
    if !on {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a tunable of the allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Returns free heap pages to the OS. Costs a walk of the allocator's free lists, so it is called
/// after a burst, never per event. A no-op off glibc or with the tuning turned off at start.
pub fn release_free_pages() {
    if !TUNED.load(Ordering::Relaxed) {
        return;
    }
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's own free memory; it has no preconditions
    // and is thread-safe (it locks each arena in turn).
    unsafe {
        libc::malloc_trim(0);
    }
}

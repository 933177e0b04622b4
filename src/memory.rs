//! Giving memory back to the OS after a burst.
//!
//! A restart buffers the whole first list and a storm queues a write per new series; both are freed
//! once done, but glibc's malloc keeps freed memory inside its per-thread arenas, where the operator's
//! resident size would stay at its peak for good. `malloc_trim` returns every whole free page of every
//! arena. `docs/BENCHMARKS.md` (Memory, Allocators) weighs this against other allocators.

/// Fixes glibc's mmap threshold at its default starting value (128 KiB). Left to itself glibc raises
/// it (up to 32 MiB) each time a large block is freed, after which the engine's key chunks, its hash
/// tables and every list page come out of the heap, where they fragment it; fixed, each of them is
/// its own mapping, returned to the OS the moment it is freed. Called once at start. A no-op off glibc.
pub fn tune_allocator() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes a tunable of the allocator; called before any other thread exists.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

/// Returns free heap pages to the OS. Costs a walk of the allocator's free lists, so it is called
/// after a burst, never per event. A no-op off glibc.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's own free memory; it has no preconditions
    // and is thread-safe (it locks each arena in turn).
    unsafe {
        libc::malloc_trim(0);
    }
}

//! Giving memory back to the OS after a burst.
//!
//! A restart buffers the whole first list (about 300 bytes per raw event) and a storm queues a write
//! per new series; both are freed once done, but glibc's malloc keeps freed memory inside its
//! per-thread arenas, where the operator's resident size would stay at its peak for good (measured in
//! docs/BENCHMARKS.md, Memory). `malloc_trim` returns every whole free page of every arena.

/// Returns free heap pages to the OS. Costs a walk of the allocator's free lists (milliseconds at
/// 100,000 series), so it is called after a burst, never per event. A no-op off glibc.
pub fn release_free_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only reorganises the allocator's own free memory; it has no preconditions
    // and is thread-safe (it locks each arena in turn).
    unsafe {
        libc::malloc_trim(0);
    }
}

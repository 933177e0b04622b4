//! Where the engine keeps the keys and notes of its series and candidates: packed ([`encode`]) back to
//! back in large chunks, addressed by a small [`Stored`] handle.
//!
//! Why not one `Arc<[u8]>` per key: every series' key would be a small long-lived allocation made on
//! the thread that also decodes every watch event, so glibc's heap ends up as live keys with freed
//! decode buffers between them, in pieces smaller than a page that no `malloc_trim` can return.
//! Chunks of [`CHUNK`] bytes are allocated on their own (above glibc's mmap threshold, see
//! `memory::tune_allocator`) and freed whole. `docs/BENCHMARKS.md` (Memory, Allocators) compares this
//! with one allocation per key under glibc, jemalloc and mimalloc.
//!
//! A removed key leaves a hole in its chunk; a chunk with no live key is freed at once, and when the
//! holes add up to more than the live keys the engine rewrites every live key into fresh chunks
//! ([`KeyStore::compact`]), so the store is never more than about twice its live content. A handle
//! used after its key was removed, or left out of a compaction, panics: it is an engine bug, and
//! reading on would put another key, or none, into a series object.

use super::SeriesKey;
use super::packed::{PackedKey, encode};

/// Size of a chunk. A key longer than this gets a chunk of its own.
pub const CHUNK: usize = 256 * 1024;

/// Compaction is not worth it below this many bytes of holes.
const MIN_COMPACT: usize = 4 * CHUNK;

/// A key in a [`KeyStore`]: the chunk, the offset of its length prefix, and the store's epoch when it
/// was made (a compaction starts a new epoch, so that a handle it did not update is recognised).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stored {
    chunk: u32,
    offset: u32,
    epoch: u32,
}

#[derive(Default)]
struct Chunk {
    buf: Vec<u8>,
    /// Bytes of live keys (length prefixes included).
    live: usize,
}

#[derive(Default)]
pub struct KeyStore {
    chunks: Vec<Chunk>,
    /// The chunk new keys are appended to.
    current: Option<u32>,
    /// Indices of freed chunks, for reuse.
    free: Vec<u32>,
    live: usize,
    /// Bytes held by chunks in use, holes included.
    held: usize,
    scratch: Vec<u8>,
    /// Bumped by every compaction.
    epoch: u32,
}

const PREFIX: usize = 4;

/// Set in a length prefix once its key is removed, so that a second use of the handle is caught.
const REMOVED: u32 = 1 << 31;

/// Longest key and note the store takes, so that a length never reaches [`REMOVED`].
const MAX_LEN: usize = (REMOVED - 1) as usize;

impl KeyStore {
    pub fn new() -> KeyStore {
        KeyStore::default()
    }

    /// Packs and stores a key and note.
    pub fn insert<S: AsRef<str>>(&mut self, key: &SeriesKey<S>, note: &str) -> Stored {
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        encode(key, note, &mut scratch);
        let stored = self.insert_packed(PackedKey(&scratch));
        if scratch.capacity() > CHUNK {
            scratch = Vec::new();
        }
        self.scratch = scratch;
        stored
    }

    /// Stores an already packed key (a copy).
    pub fn insert_packed(&mut self, key: PackedKey<'_>) -> Stored {
        let bytes = key.bytes();
        let len = bytes.len().min(MAX_LEN);
        let need = PREFIX + len;
        let fits = |c: &Chunk| c.buf.capacity() - c.buf.len() >= need;
        let chunk = match self.current {
            Some(i) if fits(&self.chunks[i as usize]) => i,
            _ => self.new_chunk(need.max(CHUNK)),
        };
        if need < CHUNK && self.current != Some(chunk) {
            // The chunk keys went to so far is full: free it now if its keys are all gone.
            if let Some(old) = self.current.replace(chunk) {
                self.free_if_empty(old);
            }
        }
        let c = &mut self.chunks[chunk as usize];
        let offset = u32::try_from(c.buf.len()).unwrap_or(u32::MAX);
        c.buf.extend_from_slice(&(len as u32).to_le_bytes());
        c.buf.extend_from_slice(&bytes[..len]);
        c.live += need;
        self.live += need;
        Stored {
            chunk,
            offset,
            epoch: self.epoch,
        }
    }

    fn new_chunk(&mut self, capacity: usize) -> u32 {
        let chunk = Chunk {
            buf: Vec::with_capacity(capacity),
            live: 0,
        };
        self.held += capacity;
        match self.free.pop() {
            Some(i) => {
                self.chunks[i as usize] = chunk;
                i
            }
            None => {
                self.chunks.push(chunk);
                u32::try_from(self.chunks.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }

    /// The key's bytes, if the handle is valid: of this epoch, in a live chunk, not removed.
    fn record(&self, k: Stored) -> Option<&[u8]> {
        if k.epoch != self.epoch {
            return None;
        }
        let buf = &self.chunks.get(k.chunk as usize)?.buf;
        let at = k.offset as usize;
        let prefix = u32::from_le_bytes(buf.get(at..at + PREFIX)?.try_into().ok()?);
        if prefix & REMOVED != 0 {
            return None;
        }
        buf.get(at + PREFIX..at + PREFIX + prefix as usize)
    }

    fn valid(&self, k: Stored) -> &[u8] {
        match self.record(k) {
            Some(bytes) => bytes,
            // A handle the engine kept past its key's removal or a compaction: an engine bug, never
            // bad input. Reading on would write another series' key, or none, into an object.
            None => panic!("stale key handle {k:?} (store epoch {})", self.epoch),
        }
    }

    /// The key. Panics on a stale handle: see [`KeyStore::remove`] and [`KeyStore::compact`].
    pub fn get(&self, k: Stored) -> PackedKey<'_> {
        PackedKey(self.valid(k))
    }

    /// Releases a key; its handle is stale from now on. Its chunk is freed once it holds no live key
    /// (unless new keys go there).
    pub fn remove(&mut self, k: Stored) {
        let len = self.valid(k).len();
        let need = PREFIX + len;
        self.live = self.live.saturating_sub(need);
        let Some(c) = self.chunks.get_mut(k.chunk as usize) else {
            return;
        };
        let at = k.offset as usize;
        if let Some(prefix) = c.buf.get_mut(at..at + PREFIX) {
            prefix.copy_from_slice(&(len as u32 | REMOVED).to_le_bytes());
        }
        c.live = c.live.saturating_sub(need);
        self.free_if_empty(k.chunk);
    }

    fn free_if_empty(&mut self, i: u32) {
        if self.current == Some(i) {
            return;
        }
        if let Some(c) = self.chunks.get_mut(i as usize)
            && c.live == 0
            && c.buf.capacity() > 0
        {
            self.held = self.held.saturating_sub(c.buf.capacity());
            *c = Chunk::default();
            self.free.push(i);
        }
    }

    /// Bytes of live keys, and bytes held by chunks (holes included).
    pub fn usage(&self) -> (usize, usize) {
        (self.live, self.held)
    }

    /// The holes outweigh the live keys: time to [`KeyStore::compact`].
    pub fn wants_compaction(&self) -> bool {
        let holes = self.held.saturating_sub(self.live);
        holes > self.live && holes > MIN_COMPACT
    }

    /// Rewrites every live key, in the order given, into fresh chunks, updating each handle. Handles
    /// not passed here become stale (a new epoch): the caller passes every handle it holds.
    pub fn compact<'a>(&mut self, handles: impl Iterator<Item = &'a mut Stored>) {
        let mut fresh = KeyStore {
            scratch: std::mem::take(&mut self.scratch),
            epoch: self.epoch.wrapping_add(1),
            ..KeyStore::default()
        };
        for h in handles {
            *h = fresh.insert_packed(self.get(*h));
        }
        *self = fresh;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key::{KeyRef, ObjectRef};

    fn key(name: &str) -> KeyRef<'_> {
        SeriesKey {
            namespace: "default",
            regarding: ObjectRef {
                api_version: "v1",
                kind: "Pod",
                namespace: "default",
                name,
                uid: "u",
                field_path: "",
            },
            related: None,
            action: "",
            reason: "BackOff",
            reporting_controller: "kubelet",
            reporting_instance: "node-1",
            type_: "Warning",
        }
    }

    #[test]
    fn keys_read_back_as_stored_until_removed() {
        let mut s = KeyStore::new();
        let names: Vec<String> = (0..5_000).map(|i| format!("pod-{i}")).collect();
        let handles: Vec<Stored> = names.iter().map(|n| s.insert(&key(n), n)).collect();
        for (n, h) in names.iter().zip(&handles) {
            assert_eq!(s.get(*h).view(), key(n));
            assert_eq!(s.get(*h).note(), n);
        }
        let (live, held) = s.usage();
        assert!(live > 0 && held >= live);
        for h in &handles {
            s.remove(*h);
        }
        assert_eq!(s.usage().0, 0);
        // Only the chunk new keys go to is still held.
        assert_eq!(s.usage().1, CHUNK);
    }

    #[test]
    fn a_key_larger_than_a_chunk_gets_its_own() {
        let mut s = KeyStore::new();
        let small = s.insert(&key("a"), "small");
        let note = "n".repeat(CHUNK * 2);
        let big = s.insert(&key("b"), &note);
        let after = s.insert(&key("c"), "after");
        assert_eq!(s.get(big).note(), note);
        assert_eq!(s.get(small).note(), "small");
        assert_eq!(s.get(after).note(), "after");
        assert_eq!(small.chunk, after.chunk);
        s.remove(big);
        assert_eq!(s.usage().1, CHUNK);
    }

    #[test]
    fn compaction_keeps_the_live_keys_and_drops_the_holes() {
        let mut s = KeyStore::new();
        let names: Vec<String> = (0..40_000).map(|i| format!("pod-{i:06}")).collect();
        let mut handles: Vec<Stored> = names.iter().map(|n| s.insert(&key(n), "x")).collect();
        // Remove 9 keys in 10: holes everywhere, no chunk empty.
        for (i, h) in handles.iter().enumerate() {
            if i % 10 != 0 {
                s.remove(*h);
            }
        }
        assert!(s.wants_compaction());
        let held = s.usage().1;
        let mut kept: Vec<(usize, Stored)> = handles
            .iter()
            .copied()
            .enumerate()
            .filter(|(i, _)| i % 10 == 0)
            .collect();
        s.compact(kept.iter_mut().map(|(_, h)| h));
        assert!(!s.wants_compaction());
        assert!(s.usage().1 < held / 4);
        for (i, h) in &kept {
            assert_eq!(s.get(*h).view().regarding.name, names[*i]);
        }
        handles.clear();
    }

    #[test]
    #[should_panic(expected = "stale key handle")]
    fn a_handle_that_was_never_issued_fails_loudly() {
        let s = KeyStore::new();
        s.get(Stored {
            chunk: 7,
            offset: 9,
            epoch: 0,
        });
    }

    #[test]
    #[should_panic(expected = "stale key handle")]
    fn a_removed_key_fails_loudly() {
        let mut s = KeyStore::new();
        let h = s.insert(&key("a"), "note");
        let _kept = s.insert(&key("b"), "note");
        s.remove(h);
        s.get(h);
    }

    #[test]
    #[should_panic(expected = "stale key handle")]
    fn a_handle_left_out_of_a_compaction_fails_loudly() {
        let mut s = KeyStore::new();
        let mut kept = s.insert(&key("a"), "note");
        let forgotten = s.insert(&key("b"), "note");
        s.compact(std::iter::once(&mut kept));
        assert_eq!(s.get(kept).view().regarding.name, "a");
        s.remove(forgotten);
    }
}

//! The namespaces the engine has seen: each by index (series refer to theirs by index), with its
//! labels and the slot they resolve to; and what happens when one is deleted.

use super::Engine;
use crate::settings::SlotIdx;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

struct Namespace {
    name: Arc<str>,
    labels: BTreeMap<String, String>,
    slot: SlotIdx,
}

/// Every namespace seen, by index (series refer to theirs by index), with the slot its labels
/// resolve to. A namespace that went away is freed once nothing refers to it, and its index reused.
#[derive(Default)]
pub(super) struct Namespaces {
    list: Vec<Namespace>,
    index: HashMap<Arc<str>, u32>,
    /// Freed indices, for reuse.
    free: Vec<u32>,
    /// Namespaces that went away, to free once no series, candidate or dormant key refers to them.
    gone: BTreeSet<u32>,
}

impl Namespaces {
    /// A namespace's index and slot; one that went away and is seen again is kept.
    pub fn find(&mut self, ns: &str) -> Option<(u32, SlotIdx)> {
        let i = *self.index.get(ns)?;
        self.gone.remove(&i);
        Some((i, self.list[i as usize].slot))
    }

    /// A namespace's index and slot, changing nothing.
    pub fn lookup(&self, ns: &str) -> Option<(u32, SlotIdx)> {
        let i = *self.index.get(ns)?;
        Some((i, self.list[i as usize].slot))
    }

    pub fn add(&mut self, ns: &str, labels: BTreeMap<String, String>, slot: SlotIdx) -> u32 {
        let name: Arc<str> = Arc::from(ns);
        let entry = Namespace {
            name: name.clone(),
            labels,
            slot,
        };
        let i = match self.free.pop() {
            Some(i) => {
                self.list[i as usize] = entry;
                i
            }
            None => {
                self.list.push(entry);
                u32::try_from(self.list.len() - 1).unwrap_or(u32::MAX)
            }
        };
        self.index.insert(name, i);
        i
    }

    /// The namespace went away: it is freed by [`Namespaces::free_unused`] once unused.
    pub fn removed(&mut self, ns: &str) {
        if let Some(i) = self.index.get(ns) {
            self.gone.insert(*i);
        }
    }

    /// Frees the namespaces that went away and that `in_use` does not list.
    pub fn free_unused(&mut self, in_use: &BTreeSet<u32>) {
        let free: Vec<u32> = self.gone.difference(in_use).copied().collect();
        for i in free {
            self.gone.remove(&i);
            let n = &mut self.list[i as usize];
            self.index.remove(&n.name);
            *n = Namespace {
                name: Arc::from(""),
                labels: BTreeMap::new(),
                slot: 0,
            };
            self.free.push(i);
        }
    }

    pub fn has_gone(&self) -> bool {
        !self.gone.is_empty()
    }

    /// Namespaces known (for tests and inspection).
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Records new labels and slot; true when the slot changed.
    pub fn relabel(&mut self, i: u32, labels: BTreeMap<String, String>, slot: SlotIdx) -> bool {
        let n = &mut self.list[i as usize];
        let moved = n.slot != slot;
        n.labels = labels;
        n.slot = slot;
        moved
    }

    /// Resolves every namespace's slot again.
    pub fn resolve_all(&mut self, resolve: impl Fn(&BTreeMap<String, String>) -> SlotIdx) {
        for n in &mut self.list {
            n.slot = resolve(&n.labels);
        }
    }

    pub fn slot_of(&self, ns: u32) -> SlotIdx {
        self.list.get(ns as usize).map_or(0, |n| n.slot)
    }

    pub fn name_ref(&self, ns: u32) -> &str {
        self.list.get(ns as usize).map_or("", |n| &n.name)
    }

    /// The slot a namespace resolves to, if the engine has seen it.
    pub fn slot_by_name(&self, ns: &str) -> Option<SlotIdx> {
        let i = *self.index.get(ns)?;
        self.list.get(i as usize).map(|n| n.slot)
    }

    pub fn name(&self, ns: u32) -> Arc<str> {
        self.list
            .get(ns as usize)
            .map_or_else(|| Arc::from(""), |n| n.name.clone())
    }
}

impl Engine {
    /// A namespace went away, and every object in it with it. Its series end at once and
    /// unwritten: a heartbeat or a Finish would find no object and no namespace to create one in,
    /// once per series and per heartbeat until `finishAfter`. Each is counted as evicted
    /// (`namespace_deleted`). Its index is freed once no key of it is left (at the next
    /// [`Engine::housekeep`] after its candidates and dormant keys expired).
    pub fn namespace_removed(&mut self, ns: &str) {
        if let Some((i, slot_idx)) = self.namespaces.find(ns)
            && let Some(slot) = self.slots.get_mut(slot_idx)
        {
            while let Some((_, s)) = slot.series.pop_oldest_of(i) {
                self.keys.remove(i, s.tally.key);
                self.stats.series_finished += 1;
                self.stats.evicted_namespace_deleted += 1;
            }
        }
        self.namespaces.removed(ns);
    }

    /// Namespaces the engine holds an entry for.
    pub fn namespaces_known(&self) -> usize {
        self.namespaces.len()
    }

    pub(super) fn free_namespaces(&mut self) {
        if !self.namespaces.has_gone() {
            return;
        }
        let mut in_use = BTreeSet::new();
        for slot in &self.slots {
            in_use.extend(slot.series.namespaces());
            in_use.extend(slot.candidates.namespaces());
            in_use.extend(slot.dormant.iter().map(|(_, d)| d.ns));
        }
        self.namespaces.free_unused(&in_use);
    }
}

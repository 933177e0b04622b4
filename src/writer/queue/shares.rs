//! The pending writes' bound, shared fairly: intake never waits for the writer, whatever the
//! number of namespaces flooding it.
//!
//! - Each namespace may hold its share of the bound: the bound divided by the number of namespaces
//!   with writes pending (this one included), and never more than `--max-pending-writes-per-namespace`.
//!   A new write of a namespace at its share is shed.
//! - A namespace under its share always finds room: when the bound is full, the newest pending write
//!   of the namespace holding the most is shed to make it (that namespace is over its share, since
//!   the bound is full and this one is under). So a tenant's flood, over however many namespaces,
//!   costs that tenant, and the controller never stops reading the watch to wait for the writer.
//!
//! What a shed write carried is not lost for good: the series' next write (a refresh, a heartbeat or
//! its finish) carries its whole state and creates a missing object.

use super::{Queue, Target};
use event_series_core::intent::WriteKind;
use std::collections::HashMap;
use std::sync::Arc;

/// A write not taken because its namespace holds its share of the pending writes. What it carried
/// is not lost for good: the series' next write (a refresh, a heartbeat or its finish) carries the
/// whole state and recreates a missing object; but a shed finish leaves the object Ongoing until
/// the event TTL removes it, unless the series is written again.
#[derive(Debug, PartialEq, Eq)]
pub struct Shed {
    pub kind: WriteKind,
    pub namespace: String,
    pub name: String,
}

/// The namespaces' pending writes, newest last: where the write to shed is found.
#[derive(Default)]
pub(super) struct Newest {
    /// Per namespace, each pending write's target with the `seq` its entry was made at. An entry
    /// whose write is over (or replaced) stays until it surfaces or the stack is compacted.
    stacks: HashMap<String, Vec<(u64, Arc<Target>)>>,
    /// (pending writes, namespace): the namespace holding the most is the last.
    by_size: std::collections::BTreeSet<(usize, String)>,
}

impl Queue {
    /// `namespace`'s share of the bound, counting it among the namespaces with writes pending.
    pub(super) fn share_of(&self, namespace: &str) -> usize {
        let namespaces =
            self.per_namespace.len() + usize::from(!self.per_namespace.contains_key(namespace));
        (self.capacity / namespaces.max(1)).clamp(1, self.share)
    }

    /// A new pending write of `target`, made at `seq`.
    pub(super) fn counted_in(&mut self, target: &Arc<Target>, seq: u64) {
        let ns = &target.namespace;
        let n = self.per_namespace.entry(ns.clone()).or_default();
        self.newest.by_size.remove(&(*n, ns.clone()));
        *n += 1;
        self.newest.by_size.insert((*n, ns.clone()));
        let stack = self.newest.stacks.entry(ns.clone()).or_default();
        stack.push((seq, target.clone()));
    }

    /// One pending write of `namespace` fewer.
    pub(super) fn counted_out(&mut self, namespace: &str) {
        let Some(n) = self.per_namespace.get_mut(namespace) else {
            return;
        };
        self.newest.by_size.remove(&(*n, namespace.to_owned()));
        *n -= 1;
        let left = *n;
        if left == 0 {
            self.per_namespace.remove(namespace);
            self.newest.stacks.remove(namespace);
            return;
        }
        self.newest.by_size.insert((left, namespace.to_owned()));
        // Entries of writes that are over are dropped once they are half of the stack.
        if let Some(stack) = self.newest.stacks.get_mut(namespace)
            && stack.len() > 2 * left + 32
        {
            let pending = &self.pending;
            stack.retain(|(seq, t)| pending.get(t).is_some_and(|p| p.born == *seq));
        }
    }

    /// Sheds the newest pending write, not in flight, of the namespace holding the most; `None` if
    /// there is none to shed (every write of that namespace is in flight).
    pub(super) fn make_room(&mut self) -> Option<Shed> {
        let (_, namespace) = self.newest.by_size.last()?.clone();
        let stack = self.newest.stacks.get_mut(&namespace)?;
        let pending = &self.pending;
        let mut found = None;
        // From the top: entries of writes that are over are dropped on the way; a write in flight
        // (at most the writer's concurrency) is passed over.
        let mut i = stack.len();
        while i > 0 {
            i -= 1;
            let (seq, target) = &stack[i];
            match pending.get(target) {
                Some(p) if p.born == *seq && p.in_flight => {}
                Some(p) if p.born == *seq => {
                    found = Some(stack.remove(i).1);
                    break;
                }
                _ => {
                    stack.remove(i);
                }
            }
        }
        let target = found?;
        let p = self.remove(&target)?;
        let lane = if p.deferred {
            &mut self.deferred
        } else {
            &mut self.waiting
        };
        lane.remove(&target.namespace, &target);
        Some(Shed {
            kind: p.intent.kind,
            namespace: target.namespace.clone(),
            name: target.name.clone(),
        })
    }
}

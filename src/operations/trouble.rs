//! The operator's own trouble, as it happens: each kind counted per namespace where the namespace
//! is known, in a small shared ledger that the writer, the alert delivery and the engine's counters
//! add to and the reporter ([`super::reporter`]) drains. Counting here never waits on I/O.

use std::collections::HashMap;
use std::sync::Mutex;

/// What went wrong, as the reason of the Event that reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// The API server refused a series write for good (a 4xx other than a conflict or a 404).
    WritesRejected,
    /// An Event the operator did not write held a series' name: the series took its next one.
    NameTaken,
    /// Pending writes were full for a namespace's share: writes were shed.
    WritesShed,
    /// Alerts were not delivered to Alertmanager (failed, refused or given up).
    AlertsUndelivered,
    /// The key budget was full: series were given up (written Finished early).
    KeysGivenUp,
}

impl Kind {
    pub const ALL: [Kind; 5] = [
        Kind::WritesRejected,
        Kind::NameTaken,
        Kind::WritesShed,
        Kind::AlertsUndelivered,
        Kind::KeysGivenUp,
    ];

    /// The Event's `reason` (and the `Degraded` condition's).
    pub fn reason(self) -> &'static str {
        match self {
            Kind::WritesRejected => "WritesRejected",
            Kind::NameTaken => "NameTaken",
            Kind::WritesShed => "WritesShed",
            Kind::AlertsUndelivered => "AlertsUndelivered",
            Kind::KeysGivenUp => "KeysGivenUp",
        }
    }

    /// What was counted, in words, for an Event's note.
    pub fn counted(self) -> &'static str {
        match self {
            Kind::WritesRejected => "series writes rejected by the API server",
            Kind::NameTaken => "series names found taken by an Event the operator did not write",
            Kind::WritesShed => {
                "series writes shed (pending writes full for the namespace's share)"
            }
            Kind::AlertsUndelivered => "alerts not delivered to Alertmanager",
            Kind::KeysGivenUp => "series given up for want of key bytes (--max-key-bytes)",
        }
    }
}

/// Most distinct (kind, namespace) entries held between two drains; beyond it a namespace's counts
/// go to the cluster-wide entry of their kind, so that a flood over many namespaces costs nothing.
const MAX_ENTRIES: usize = 1024;

/// Counts of trouble since the last drain, by kind and namespace (`None`: not attributed).
#[derive(Default)]
pub struct Trouble {
    counts: Mutex<HashMap<(Kind, Option<String>), u64>>,
}

impl Trouble {
    /// Counts `n` of `kind`, in `namespace` when it is known.
    pub fn note(&self, kind: Kind, namespace: Option<&str>, n: u64) {
        if n == 0 {
            return;
        }
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        let key = match namespace {
            Some(ns)
                if counts.len() < MAX_ENTRIES || counts.contains_key(&(kind, Some(ns.into()))) =>
            {
                (kind, Some(ns.to_owned()))
            }
            _ => (kind, None),
        };
        *counts.entry(key).or_insert(0) += n;
    }

    /// Everything counted since the last drain, sorted.
    pub fn drain(&self) -> Vec<(Kind, Option<String>, u64)> {
        let taken = std::mem::take(&mut *self.counts.lock().unwrap_or_else(|e| e.into_inner()));
        let mut out: Vec<_> = taken.into_iter().map(|((k, ns), n)| (k, ns, n)).collect();
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_add_up_by_kind_and_namespace_and_drain_empties_them() {
        let t = Trouble::default();
        t.note(Kind::NameTaken, Some("a"), 1);
        t.note(Kind::NameTaken, Some("a"), 2);
        t.note(Kind::KeysGivenUp, None, 4);
        t.note(Kind::WritesShed, Some("b"), 0);
        assert_eq!(
            t.drain(),
            vec![
                (Kind::NameTaken, Some("a".into()), 3),
                (Kind::KeysGivenUp, None, 4)
            ]
        );
        assert!(t.drain().is_empty());
    }

    #[test]
    fn beyond_its_bound_a_namespace_is_counted_cluster_wide() {
        let t = Trouble::default();
        for i in 0..MAX_ENTRIES + 10 {
            t.note(Kind::WritesShed, Some(&format!("ns-{i}")), 1);
        }
        let drained = t.drain();
        assert_eq!(drained.len(), MAX_ENTRIES + 1);
        let total: u64 = drained.iter().map(|(_, _, n)| n).sum();
        assert_eq!(total, (MAX_ENTRIES + 10) as u64);
        assert!(drained.contains(&(Kind::WritesShed, None, 10)));
    }
}

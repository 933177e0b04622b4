//! What the writer last knew of each series object: its resourceVersion, so that every update
//! carries it as a precondition. A write of a deposed leader that reaches the API server after
//! another leader wrote the object (held in a proxy, retried by an HA apiserver's peer) is then
//! refused with 409 Conflict, whatever the clocks say; the refused writer reads the object again
//! and reconciles ([`super::Queue::answered`]).
//!
//! Learned from every answer that carries the object (a create, an update, a read), from the
//! restore's list and, on a standby, from the own-object watch. Forgotten when the series' finish
//! is written or given up, or when its object vanishes or moves to another name. Kept per series by
//! a hash of its target, not the target itself: at 10^5 series that is a few MB, not tens. Two
//! series whose hashes collide can only be handed each other's version, which the API server
//! refuses (resourceVersions are unique to one write of one object): a read and a retry, never a
//! wrong write.

use super::Target;
use std::collections::HashMap;
use std::hash::{BuildHasher, RandomState};

/// A resourceVersion as the API server gave it: a decimal number on every etcd-backed server,
/// kept as text otherwise (the API says it is opaque).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Version {
    Number(u64),
    Text(Box<str>),
}

impl Version {
    /// `None` for an empty or absent resourceVersion.
    pub fn of(rv: Option<&str>) -> Option<Version> {
        let rv = rv.filter(|rv| !rv.is_empty())?;
        Some(match rv.parse::<u64>() {
            Ok(n) if n.to_string() == rv => Version::Number(n),
            _ => Version::Text(rv.into()),
        })
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Version::Number(n) => write!(f, "{n}"),
            Version::Text(t) => f.write_str(t),
        }
    }
}

/// Most versions kept. Each series leaves with its finish, so this is reached only if finishes
/// go unwritten for that many series (shed or rejected); then all are forgotten at once, which
/// costs one read before each series' next update.
pub const VERSIONS_KEPT: usize = 1 << 20;

#[derive(Default)]
pub struct Versions {
    by_series: HashMap<u64, Version>,
    hasher: RandomState,
}

impl Versions {
    fn slot(&self, target: &Target) -> u64 {
        self.hasher.hash_one(target)
    }

    pub fn get(&self, target: &Target) -> Option<&Version> {
        self.by_series.get(&self.slot(target))
    }

    /// The object of `target` is at `version` now (`None`: nothing learned, nothing changes).
    pub fn learn(&mut self, target: &Target, version: Option<Version>) {
        let Some(version) = version else {
            return;
        };
        if self.by_series.len() >= VERSIONS_KEPT {
            tracing::warn!(
                kept = VERSIONS_KEPT,
                "too many series objects' versions kept: all forgotten (each is read before its next update)"
            );
            self.by_series = HashMap::new();
        }
        let slot = self.slot(target);
        self.by_series.insert(slot, version);
    }

    pub fn forget(&mut self, target: &Target) {
        let slot = self.slot(target);
        self.by_series.remove(&slot);
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.by_series.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str) -> Target {
        Target {
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn a_version_is_kept_as_given() {
        assert_eq!(Version::of(Some("42")), Some(Version::Number(42)));
        // Not the decimal form of a number: kept as text, so that it is sent back unchanged.
        assert_eq!(Version::of(Some("042")), Some(Version::Text("042".into())));
        assert_eq!(Version::of(Some("a/b")).unwrap().to_string(), "a/b");
        assert_eq!(Version::of(Some("")), None);
        assert_eq!(Version::of(None), None);
    }

    #[test]
    fn versions_are_learned_replaced_and_forgotten() {
        let mut v = Versions::default();
        v.learn(&target("a"), Version::of(Some("1")));
        v.learn(&target("a"), None);
        assert_eq!(v.get(&target("a")), Some(&Version::Number(1)));
        v.learn(&target("a"), Version::of(Some("7")));
        assert_eq!(v.get(&target("a")), Some(&Version::Number(7)));
        assert_eq!(v.get(&target("b")), None);
        v.forget(&target("a"));
        assert_eq!(v.get(&target("a")), None);
        assert_eq!(v.len(), 0);
    }
}

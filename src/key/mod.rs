//! The isomorphic key of SPEC "Grouping": the fields two occurrences must share to belong to one
//! series, and its 128-bit id.
//!
//! - [`normalise`]: a raw core/v1 Event (legacy or new style) read as an [`Observation`] that borrows
//!   from it; nothing is allocated on the path of an occurrence.
//! - [`packed`]: an owned key and note in one allocation, for what lives longer than the event.
//! - [`store`]: where the engine keeps the packed keys of its series and candidates.

pub mod normalise;
pub mod packed;
pub mod store;

pub use normalise::{NormaliseError, Observation, OwnedObservation, normalise};
pub use packed::{KeyBuf, PackedKey};

use std::fmt;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The fields an object reference compares on (SPEC: apiVersion, kind, namespace, name, uid, fieldPath).
///
/// Generic over the string type so that the borrowed view of a raw event (`ObjectRef<&str>`) and the
/// owned copy a series keeps (`ObjectRef<String>`) share one definition and one hash.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ObjectRef<S> {
    pub api_version: S,
    pub kind: S,
    pub namespace: S,
    pub name: S,
    pub uid: S,
    pub field_path: S,
}

/// The isomorphic key of a series: two occurrences with equal keys belong to the same series.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SeriesKey<S = String> {
    pub regarding: ObjectRef<S>,
    pub related: Option<ObjectRef<S>>,
    pub action: S,
    pub reason: S,
    pub reporting_controller: S,
    pub reporting_instance: S,
    pub type_: S,
}

/// A borrowed key, as read from a raw event.
pub type KeyRef<'a> = SeriesKey<&'a str>;

/// A 128-bit hash of a [`SeriesKey`] (and the note, when the policy includes it). Stable across
/// processes and versions (xxh3), because it is persisted in the `eventseries.dev/key` label and used to
/// match series objects with raw events after a restart.
///
/// Held as two `u64` halves (high first, so the order is that of the `u128`): a `u128` is 16-byte
/// aligned, which would pad every engine table entry that holds one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct KeyId([u64; 2]);

impl KeyId {
    pub const fn new(v: u128) -> KeyId {
        KeyId([(v >> 64) as u64, v as u64])
    }

    pub const fn get(self) -> u128 {
        ((self.0[0] as u128) << 64) | self.0[1] as u128
    }
}

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.get())
    }
}

impl std::str::FromStr for KeyId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u128::from_str_radix(s, 16).map(KeyId::new)
    }
}

/// Identity of one raw Event object (a hash of its uid), for delta counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RawId(pub u64);

impl fmt::Display for RawId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0)
    }
}

impl std::str::FromStr for RawId {
    type Err = std::num::ParseIntError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        u64::from_str_radix(s, 16).map(RawId)
    }
}

impl RawId {
    /// The id of a raw event: its uid, or namespace/name when the uid is missing (never the case for
    /// objects read from an API server, but cheap to be safe about).
    pub fn of(namespace: &str, name: &str, uid: &str) -> RawId {
        if uid.is_empty() {
            let mut h = Xxh3::new();
            feed(&mut h, namespace);
            feed(&mut h, name);
            RawId(h.digest())
        } else {
            RawId(xxh3_64(uid.as_bytes()))
        }
    }
}

fn feed(h: &mut Xxh3, s: &str) {
    h.update(&(s.len() as u64).to_le_bytes());
    h.update(s.as_bytes());
}

impl<S: AsRef<str>> ObjectRef<S> {
    pub(crate) fn parts(&self) -> [&str; 6] {
        [
            self.api_version.as_ref(),
            self.kind.as_ref(),
            self.namespace.as_ref(),
            self.name.as_ref(),
            self.uid.as_ref(),
            self.field_path.as_ref(),
        ]
    }

    fn feed(&self, h: &mut Xxh3) {
        for s in self.parts() {
            feed(h, s);
        }
    }
}

impl<S: AsRef<str>> SeriesKey<S> {
    /// The key's id; `note` is `Some` only when the policy sets `isomorphism.includeNote`.
    pub fn id(&self, note: Option<&str>) -> KeyId {
        let mut h = Xxh3::new();
        self.regarding.feed(&mut h);
        match &self.related {
            Some(r) => {
                h.update(&[1]);
                r.feed(&mut h);
            }
            None => h.update(&[0]),
        }
        for s in [
            &self.action,
            &self.reason,
            &self.reporting_controller,
            &self.reporting_instance,
            &self.type_,
        ] {
            feed(&mut h, s.as_ref());
        }
        match note {
            Some(n) => {
                h.update(&[1]);
                feed(&mut h, n);
            }
            None => h.update(&[0]),
        }
        KeyId::new(h.digest128())
    }
}

//! The isomorphic key ("Grouping"): the fields two occurrences must share to belong to one
//! series, and its 128-bit id.
//!
//! - [`normalise()`]: a raw core/v1 Event (legacy or new style) read as an [`Observation`] that borrows
//!   from it; nothing is allocated on the path of an occurrence.
//! - [`packed`]: an owned key and note in one allocation, for what lives longer than the event.
//! - [`store`]: where the engine keeps the packed keys of its series and candidates.
//! - [`replay`]: observations held to be replayed in time order (a restart's first list).

pub mod fields;
pub mod normalise;
pub mod packed;
pub mod replay;
pub mod store;

pub use normalise::{NormaliseError, Observation, normalise};
pub use packed::{KeyBuf, PackedKey};
pub use replay::ReplayBuffer;

use std::fmt;
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

/// The fields an object reference compares on (apiVersion, kind, namespace, name, uid, fieldPath).
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
    /// The raw event's namespace, where the series object is written: a tenant's events never share a
    /// series (or an object) with another namespace's.
    pub namespace: S,
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
/// It hashes the values as the series object holds them (mapped by [`fields`]), never the raw ones, so
/// that it can be recomputed from a stored object: an object whose label does not match its own
/// namespace and fields is a copy or an edit, and is not adopted.
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
    /// The key's id; `note` is `Some` only when the policy sets `isomorphism.includeNote`. Two keys
    /// that map to the same series object fields have the same id.
    pub fn id(&self, note: Option<&str>) -> KeyId {
        let mut h = Xxh3::new();
        feed(&mut h, self.namespace.as_ref());
        self.regarding.feed(&mut h);
        match &self.related {
            Some(r) => {
                h.update(&[1]);
                r.feed(&mut h);
            }
            None => h.update(&[0]),
        }
        let m = self.mapped();
        for s in [
            m.action,
            m.reason,
            &m.reporting_controller,
            m.reporting_instance(),
            m.type_,
        ] {
            feed(&mut h, s);
        }
        match note {
            Some(n) => {
                h.update(&[1]);
                feed(&mut h, fields::note(n));
            }
            None => h.update(&[0]),
        }
        KeyId::new(h.digest128())
    }

    /// The scalar fields as the events.k8s.io API accepts them (see [`fields`]).
    pub fn mapped(&self) -> Mapped<'_> {
        let reason = fields::cut(
            fields::or_else(self.reason.as_ref(), "Unknown"),
            fields::LENGTH_LIMIT,
        );
        let reporting_controller =
            fields::reporting_controller_cow(self.reporting_controller.as_ref());
        let action = fields::cut(
            fields::or_else(self.action.as_ref(), reason),
            fields::LENGTH_LIMIT,
        );
        let instance = self.reporting_instance.as_ref();
        let reporting_instance = if instance.is_empty() {
            None
        } else {
            Some(fields::cut(instance, fields::LENGTH_LIMIT))
        };
        Mapped {
            action,
            reason,
            reporting_instance: reporting_instance.unwrap_or_default(),
            instance_from_controller: reporting_instance.is_none(),
            reporting_controller,
            type_: fields::event_type(self.type_.as_ref()),
        }
    }
}

/// The scalar fields of a key mapped to values the events.k8s.io API accepts.
pub struct Mapped<'a> {
    pub action: &'a str,
    pub reason: &'a str,
    pub reporting_controller: std::borrow::Cow<'a, str>,
    reporting_instance: &'a str,
    /// An empty reportingInstance becomes the (mapped) reportingController.
    instance_from_controller: bool,
    pub type_: &'static str,
}

impl Mapped<'_> {
    pub fn reporting_instance(&self) -> &str {
        if self.instance_from_controller {
            fields::cut(&self.reporting_controller, fields::LENGTH_LIMIT)
        } else {
            self.reporting_instance
        }
    }
}

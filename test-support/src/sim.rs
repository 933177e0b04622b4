//! A simulated cluster for engine tests: raw core/v1 Events written by emitters, an injected clock, and
//! a store that applies write intents the way the API server would. No API server, no I/O.

use crate::raw::{Occurrences, app_container, kubelet};
use chrono::{DateTime, TimeDelta, Utc};
use event_series::input::restart;
use event_series::object;
use event_series::object::to_event;
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::intent::{Intent, SeriesState, WriteKind};
use event_series_core::key;
use event_series_core::settings::{PolicySet, Settings};
use k8s_openapi::api::core::v1::{Event, EventSeries, ObjectReference};
use k8s_openapi::api::events::v1 as events;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    FieldsV1, ManagedFieldsEntry, MicroTime, ObjectMeta, Time,
};
use k8s_openapi::jiff::Timestamp;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// The simulation's epoch: a fixed instant, so that runs are reproducible.
pub fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap()
}

pub fn jiff(t: DateTime<Utc>) -> Timestamp {
    Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32).unwrap()
}

pub fn pod(ns: &str, name: &str) -> ObjectReference {
    app_container(ns, name, format!("uid-{ns}-{name}"))
}

fn raw_uid(ns: &str, name: &str) -> Option<String> {
    Some(format!("raw-{ns}-{name}"))
}

fn message(reason: &str) -> String {
    format!("{reason} happened")
}

/// A legacy (tools/record style) event with `count` occurrences between `first` and `last`.
pub fn legacy(
    ns: &str,
    name: &str,
    regarding: ObjectReference,
    reason: &str,
    count: i32,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
) -> Event {
    let seen = Occurrences {
        count,
        first: jiff(first),
        last: jiff(last),
    };
    let mut ev = kubelet(ns, name, regarding, reason, message(reason), seen);
    ev.metadata.uid = raw_uid(ns, name);
    ev
}

/// A new-style (tools/events style) event; `count` 1 means no series yet.
pub fn new_style(
    ns: &str,
    name: &str,
    regarding: ObjectReference,
    reason: &str,
    count: i32,
    first: DateTime<Utc>,
    last: DateTime<Utc>,
) -> Event {
    Event {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid: raw_uid(ns, name),
            ..Default::default()
        },
        involved_object: regarding,
        reason: Some(reason.into()),
        message: Some(message(reason)),
        action: Some("Restart".into()),
        type_: Some("Normal".into()),
        reporting_component: Some("example.com/controller".into()),
        reporting_instance: Some("controller-0".into()),
        event_time: Some(MicroTime(jiff(first))),
        series: (count > 1).then(|| EventSeries {
            count: Some(count),
            last_observed_time: Some(MicroTime(jiff(last))),
        }),
        ..Default::default()
    }
}

pub fn fast_settings() -> Settings {
    Settings {
        heartbeat_interval: TimeDelta::seconds(60),
        finish_after: TimeDelta::seconds(20),
        series_window: TimeDelta::seconds(20),
        ..Default::default()
    }
}

/// The `managedFields` entry the API server sets on a write at `now` (its clock, to the second).
fn written_by(meta: &ObjectMeta, now: DateTime<Utc>) -> ManagedFieldsEntry {
    let manager = meta.name.as_deref().map_or("recorder", |_| "kubelet");
    let fields = serde_json::json!({"f:count": {}, "f:lastTimestamp": {}, "f:series": {}});
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Update".into()),
        time: Some(Time(Timestamp::new(now.timestamp(), 0).unwrap())),
        fields_type: Some("FieldsV1".into()),
        fields_v1: Some(FieldsV1(fields)),
        ..Default::default()
    }
}

/// One writer-visible object per series name, as the API server would hold it.
#[derive(Default)]
pub struct Store {
    pub objects: BTreeMap<(String, String), events::Event>,
    /// When each object was last written (its TTL runs from there).
    written: BTreeMap<(String, String), DateTime<Utc>>,
    /// Objects the event TTL deleted, as last written: their counts still count.
    pub expired: BTreeMap<(String, String), events::Event>,
}

impl Store {
    fn apply(&mut self, intents: &[Intent], now: DateTime<Utc>) {
        for i in intents {
            let ev = to_event(&i.series);
            let id = (
                ev.metadata.namespace.clone().unwrap(),
                ev.metadata.name.clone().unwrap(),
            );
            self.expired.remove(&id);
            self.written.insert(id.clone(), now);
            self.objects.insert(id, ev);
        }
    }

    /// Deletes the objects not written for `ttl`, as the API server does.
    fn expire(&mut self, now: DateTime<Utc>, ttl: TimeDelta) {
        for id in expired(&mut self.written, now, ttl) {
            if let Some(ev) = self.objects.remove(&id) {
                self.expired.insert(id, ev);
            }
        }
    }

    pub fn with_state(&self, state: SeriesState) -> Vec<&events::Event> {
        self.objects
            .values()
            .filter(|e| {
                e.metadata.labels.as_ref().unwrap()["eventseries.dev/state"] == state.as_str()
            })
            .collect()
    }

    /// Sum of series counts per key label, over every object ever written (expired ones too).
    pub fn counts_by_key(&self) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for e in self.objects.values().chain(self.expired.values()) {
            let key = e.metadata.labels.as_ref().unwrap()["eventseries.dev/key"].clone();
            *out.entry(key).or_default() += e.series.as_ref().unwrap().count as u64;
        }
        out
    }
}

/// Takes out of `written` (last write times) what was not written for `ttl`.
fn expired<K: Clone + Ord>(
    written: &mut BTreeMap<K, DateTime<Utc>>,
    now: DateTime<Utc>,
    ttl: TimeDelta,
) -> Vec<K> {
    let gone: Vec<K> = (written.iter())
        .filter(|(_, at)| **at + ttl <= now)
        .map(|(k, _)| k.clone())
        .collect();
    for k in &gone {
        written.remove(k);
    }
    gone
}

/// Raw events as the API server holds them, with resourceVersions, fed to an engine.
pub struct Sim {
    pub engine: Engine,
    pub store: Store,
    pub now: DateTime<Utc>,
    rv: u64,
    /// By `<namespace>/<name>`: the order of their keys in etcd, in which a list serves them.
    raws: BTreeMap<String, Event>,
    pub intents: Vec<Intent>,
    pub fed: u64,
    policies: PolicySet,
    config: EngineConfig,
    /// How far the emitters' clocks are off: added to every timestamp they write.
    pub skew: TimeDelta,
    /// The restart buffer's budget in bytes (`--restart-buffer-bytes`): a restart replays the
    /// raw events early whenever it is reached.
    pub restart_buffer: usize,
    /// The API server's event TTL, where the simulation models it (see [`Sim::with_event_ttl`]).
    event_ttl: Option<TimeDelta>,
    /// When each raw object was last written, by `<namespace>/<name>`.
    written: BTreeMap<String, DateTime<Utc>>,
    /// Raw objects the event TTL deleted, as last written: one written again under the same name
    /// is a new object, with a new uid.
    deleted: BTreeMap<String, Event>,
    /// The emitters remember what they wrote, as client-go's `tools/record` does in its cache: a
    /// legacy raw object written again after the TTL deleted it is created anew (a new uid) with
    /// the remembered count plus the new occurrences and the remembered first time.
    pub recorder_cache: bool,
    /// Keys (their `eventseries.dev/key` label) of which a restart listed a raw object that
    /// outlived every series object recording it: their counts may differ from an uninterrupted
    /// run's (the known exception, see `engine::restore`).
    pub outlived: BTreeSet<String>,
}

impl Sim {
    pub fn new(settings: Settings) -> Sim {
        Sim::with_config(PolicySet::uniform(settings), EngineConfig::default())
    }

    pub fn with_config(policies: PolicySet, config: EngineConfig) -> Sim {
        Sim {
            engine: Engine::new(policies.clone(), config),
            store: Store::default(),
            now: t0(),
            rv: 1000,
            raws: BTreeMap::new(),
            intents: Vec::new(),
            fed: 0,
            policies,
            config,
            skew: TimeDelta::zero(),
            restart_buffer: usize::MAX,
            event_ttl: None,
            written: BTreeMap::new(),
            deleted: BTreeMap::new(),
            recorder_cache: false,
            outlived: BTreeSet::new(),
        }
    }

    /// A simulation that lives with the event TTL, as the operator does: the engine remembers
    /// dormant keys for `ttl` (its `dormant_retention`) and is housekept every 10 s; a raw event or
    /// series object not written for `ttl` is deleted (the engine hears of a raw one, as from the
    /// watch); heartbeats are put off no later than 3/4 of it.
    pub fn with_event_ttl(settings: Settings, ttl: TimeDelta, clock_tolerance: TimeDelta) -> Sim {
        let config = EngineConfig {
            dormant_retention: ttl,
            clock_tolerance,
            heartbeat_ceiling: ttl * 3 / 4,
            ..Default::default()
        };
        let mut sim = Sim::with_config(PolicySet::uniform(settings), config);
        sim.event_ttl = Some(ttl);
        sim
    }

    /// Applies new policies live; a restart keeps them.
    pub fn set_policies(&mut self, policies: PolicySet) {
        self.policies = policies.clone();
        self.engine.set_policies(self.now, policies);
        self.flush();
    }

    fn feed(&mut self, ev: &Event) {
        let obs = key::normalise(ev).expect("valid raw event");
        self.engine.observe(self.now, &obs);
        self.engine.checkpoint(self.rv);
        self.flush();
    }

    fn flush(&mut self) {
        let intents = self.engine.take_intents();
        self.store.apply(&intents, self.now);
        self.intents.extend(intents);
    }

    /// One more occurrence on raw object `raw` (created on first use) regarding `obj`.
    pub fn occur(&mut self, ns: &str, raw: &str, obj: &str, reason: &str, new_style_event: bool) {
        self.occur_n(ns, raw, obj, reason, new_style_event, 1);
    }

    pub fn occur_n(
        &mut self,
        ns: &str,
        raw: &str,
        obj: &str,
        reason: &str,
        new_style_event: bool,
        n: i32,
    ) {
        self.rv += 1;
        self.fed += n as u64;
        let now = self.now + self.skew;
        let at = format!("{ns}/{raw}");
        let ev = match self.raws.get_mut(&at) {
            Some(ev) => {
                // One raw object has one recorder, which writes its occurrences in order: a late
                // write never moves its latest time back.
                let latest = key::normalise(ev).expect("valid raw event").last;
                let now = now.max(latest);
                if let Some(s) = ev.series.as_mut() {
                    s.count = Some(s.count.unwrap() + n);
                    s.last_observed_time = Some(MicroTime(jiff(now)));
                } else if ev.event_time.is_some() {
                    ev.series = Some(EventSeries {
                        count: Some(1 + n),
                        last_observed_time: Some(MicroTime(jiff(now))),
                    });
                } else {
                    ev.count = Some(ev.count.unwrap() + n);
                    ev.last_timestamp = Some(Time(jiff(now)));
                }
                ev
            }
            None => {
                let regarding = pod(ns, obj);
                let mut ev = match self.deleted.get(&at) {
                    Some(gone) if self.recorder_cache && gone.count.is_some() => {
                        let mut ev = gone.clone();
                        ev.count = Some(gone.count.unwrap() + n);
                        ev.last_timestamp = Some(Time(jiff(now)));
                        ev
                    }
                    _ if new_style_event => new_style(ns, raw, regarding, reason, n, now, now),
                    _ => legacy(ns, raw, regarding, reason, n, now, now),
                };
                if self.deleted.contains_key(&at) {
                    ev.metadata.uid = Some(format!("raw-{ns}-{raw}-{}", self.rv));
                }
                ev.metadata.creation_timestamp = Some(Time(jiff(self.now)));
                self.raws.entry(at.clone()).or_insert(ev)
            }
        };
        ev.metadata.resource_version = Some(self.rv.to_string());
        ev.metadata.managed_fields = Some(vec![written_by(&ev.metadata, self.now)]);
        let ev = ev.clone();
        self.written.insert(at, self.now);
        self.feed(&ev);
    }

    /// Advances the clock in steps of `step`, ticking the engine at each.
    pub fn advance(&mut self, by: TimeDelta, step: TimeDelta) {
        let end = self.now + by;
        while self.now < end {
            self.now = (self.now + step).min(end);
            self.engine.tick(self.now);
            self.flush();
            if let Some(ttl) = self.event_ttl {
                self.expire(ttl);
            }
        }
    }

    /// The event TTL's deletions, and the controller's housekeeping every 10 s.
    fn expire(&mut self, ttl: TimeDelta) {
        let now = self.now;
        self.store.expire(now, ttl);
        for at in expired(&mut self.written, now, ttl) {
            if let Some(ev) = self.raws.remove(&at) {
                let m = &ev.metadata;
                let (ns, name) = (m.namespace.as_deref(), m.name.as_deref());
                let uid = m.uid.as_deref().unwrap_or_default();
                let raw = key::RawId::of(ns.unwrap_or_default(), name.unwrap_or_default(), uid);
                self.engine.forget_raw(raw);
                self.deleted.insert(at, ev);
            }
        }
        if (now - t0()).num_seconds() % 10 == 0 {
            self.engine.housekeep(now);
        }
    }

    /// Replays every raw object as a relist would (same resourceVersions).
    pub fn relist(&mut self) {
        self.engine.begin_relist();
        let raws: Vec<Event> = self.raws.values().cloned().collect();
        for ev in &raws {
            let obs = key::normalise(ev).unwrap();
            self.engine.observe(self.now, &obs);
        }
        self.engine.end_relist();
        self.flush();
    }

    /// Kills the engine and rebuilds a new one from the stored series objects and the raw events.
    pub fn restart(&mut self) {
        let mut engine = Engine::new(self.policies.clone(), self.config);
        engine.begin_recovery();
        let check = object::Check {
            now: self.now,
            tolerance: chrono::TimeDelta::minutes(10),
        };
        self.note_outlived(check);
        for obj in self.store.objects.values() {
            let p = object::decode(obj, check).expect("own objects pass the checks");
            engine.restore(self.now, p);
        }
        // The raw events as a list serves them (in key order: namespace, then name), through the
        // operator's own restart buffer.
        let metrics = event_series::operations::metrics::Metrics::default();
        let mut restart = restart::Restart::new(self.restart_buffer);
        for ev in self.raws.values() {
            restart.buffer(ev, &metrics);
            if restart.is_full() {
                restart.flush(&mut engine, &metrics, self.now);
            }
        }
        restart.finish(&mut engine, self.rv, self.now, self.now);
        self.engine = engine;
        self.flush();
    }

    /// Notes the keys of raw objects about to be listed that only expired series objects record.
    fn note_outlived(&mut self, check: object::Check) {
        let recorded = |objects: &BTreeMap<(String, String), events::Event>| {
            let mut by_raw = BTreeMap::new();
            for obj in objects.values() {
                let p = object::decode(obj, check).expect("own objects pass the checks");
                let label = obj.metadata.labels.as_ref().unwrap()["eventseries.dev/key"].clone();
                for src in p.sources {
                    by_raw.insert(src.raw, label.clone());
                }
            }
            by_raw
        };
        let (live, expired) = (recorded(&self.store.objects), recorded(&self.store.expired));
        for ev in self.raws.values() {
            let raw = key::normalise(ev).expect("valid raw event").raw;
            if let (None, Some(label)) = (live.get(&raw), expired.get(&raw)) {
                self.outlived.insert(label.clone());
            }
        }
    }

    /// Creates, heartbeats (early refreshes included) and finishes so far.
    pub fn count_kinds(&self) -> (usize, usize, usize) {
        let mut c = (0, 0, 0);
        for i in &self.intents {
            match i.kind {
                WriteKind::Create => c.0 += 1,
                WriteKind::Refresh | WriteKind::Heartbeat => c.1 += 1,
                WriteKind::Finish(_) => c.2 += 1,
            }
        }
        c
    }
}

#[derive(Clone, Debug)]
pub enum Op {
    /// `n` more occurrences on raw object `raw` of key `key`, written `lag` seconds after they
    /// happened (a recorder held up by a slow API server).
    Occur { key: u8, raw: u8, n: u8, lag: u8 },
    /// Let time pass, in seconds.
    Wait(u16),
    /// Replay every raw object (a relist after 410 Gone).
    Relist,
}

/// Random emitter activity: occurrences on a few keys and raw objects, waits, relists.
pub fn op_strategy() -> impl Strategy<Value = Op> {
    ops_lagging_up_to(0)
}

/// [`op_strategy`] with a quarter of the writes up to `max_lag` seconds late. (A restart replays
/// raw events in the order the API server wrote them, as the watch delivered them; but a write late
/// across a candidate's expiry or a series' finish was judged by the live engine before it came,
/// and a rebuilt engine, which reads the raw object whole, may group that occurrence otherwise.)
pub fn ops_lagging_up_to(max_lag: u8) -> impl Strategy<Value = Op> {
    let lag = prop_oneof![3 => Just(0u8), 1 => 0..=max_lag];
    prop_oneof![
        6 => (0u8..6, 0u8..3, 1u8..4, lag)
            .prop_map(|(key, raw, n, lag)| Op::Occur { key, raw, n, lag }),
        3 => (1u16..40).prop_map(Op::Wait),
        1 => Just(Op::Relist),
    ]
}

/// The namespaces of [`apply`]'s keys, so that a restart's list moves past namespaces (in etcd's
/// key order "ns-a/…" comes before "ns/…").
const NAMESPACES: [&str; 3] = ["ns", "ns-a", "ns-b"];

pub fn apply(sim: &mut Sim, op: &Op) {
    match *op {
        Op::Occur { key, raw, n, lag } => {
            let skew = sim.skew;
            sim.skew = skew - TimeDelta::seconds(lag.into());
            sim.occur_n(
                NAMESPACES[usize::from(key) % NAMESPACES.len()],
                &format!("k{key}-r{raw}"),
                &format!("pod-{key}"),
                "BackOff",
                key % 2 == 0,
                n as i32,
            );
            sim.skew = skew;
        }
        Op::Wait(s) => sim.advance(TimeDelta::seconds(s as i64), TimeDelta::seconds(1)),
        Op::Relist => sim.relist(),
    }
}

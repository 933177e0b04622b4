//! Engine throughput: occurrences per second into existing series and into new keys.
//! `just bench`; figures in docs/BENCHMARKS.md.

use chrono::{DateTime, TimeDelta, Utc};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use event_series::engine::Engine;
use event_series::key::{self, Observation};
use event_series::settings::Settings;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use std::hint::black_box;

fn t0() -> DateTime<Utc> {
    DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
}

/// A kubelet-style BackOff event for pod `i`.
fn event(i: usize, at: DateTime<Utc>) -> Event {
    let ts = Timestamp::new(at.timestamp(), 0).unwrap_or(Timestamp::UNIX_EPOCH);
    Event {
        metadata: ObjectMeta {
            name: Some(format!("web-{i}.1800000000{i:08}")),
            namespace: Some("prod".into()),
            uid: Some(format!("00000000-0000-0000-0000-{i:012}")),
            resource_version: Some((1000 + i).to_string()),
            ..Default::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            namespace: Some("prod".into()),
            name: Some(format!("web-{i}")),
            uid: Some(format!("11111111-0000-0000-0000-{i:012}")),
            field_path: Some("spec.containers{app}".into()),
            resource_version: None,
        },
        reason: Some("BackOff".into()),
        message: Some(format!(
            "Back-off restarting failed container app in pod web-{i}"
        )),
        type_: Some("Warning".into()),
        source: Some(EventSource {
            component: Some("kubelet".into()),
            host: Some("node-1".into()),
        }),
        count: Some(1),
        first_timestamp: Some(Time(ts)),
        last_timestamp: Some(Time(ts)),
        ..Default::default()
    }
}

fn settings() -> Settings {
    Settings {
        max_active_series: 1_000_000,
        ..Default::default()
    }
}

fn existing_series(c: &mut Criterion) {
    const KEYS: usize = 1_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| event(i, now)).collect();
    let mut observations: Vec<Observation> =
        events.iter().filter_map(|e| key::observe(e).ok()).collect();
    let mut engine = Engine::with_settings(settings());
    for o in &mut observations {
        o.count = 2;
        engine.observe(now, o);
    }
    engine.take_intents();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.bench_function("occurrences into 1,000 existing series", |b| {
        b.iter(|| {
            for o in observations.iter_mut() {
                o.count += 1;
                engine.observe(now, black_box(o));
            }
        })
    });
    group.finish();
    assert_eq!(engine.active_series(), KEYS);
}

fn new_keys(c: &mut Criterion) {
    const KEYS: usize = 10_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| event(i, now)).collect();
    let mut observations: Vec<Observation> =
        events.iter().filter_map(|e| key::observe(e).ok()).collect();
    for o in &mut observations {
        o.count = 2;
    }
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.bench_function("occurrences creating 10,000 new series", |b| {
        b.iter_batched(
            || Engine::with_settings(settings()),
            |mut engine| {
                for o in &observations {
                    engine.observe(now, o);
                }
                engine
            },
            BatchSize::LargeInput,
        )
    });
    group.bench_function("normalise a raw event (key::observe + key id)", |b| {
        let ev = &events[0];
        b.iter(|| {
            let o = key::observe(black_box(ev)).map(|o| o.key.id(None));
            black_box(o)
        })
    });
    group.finish();
}

fn ticks(c: &mut Criterion) {
    const KEYS: usize = 10_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| event(i, now)).collect();
    let mut engine = Engine::with_settings(settings());
    for e in &events {
        if let Ok(mut o) = key::observe(e) {
            o.count = 2;
            engine.observe(now, &o);
        }
    }
    engine.take_intents();
    let mut t = now;
    c.bench_function("engine/tick with 10,000 series, nothing due", |b| {
        b.iter(|| {
            t += TimeDelta::milliseconds(1);
            engine.tick(black_box(t));
        })
    });
}

criterion_group!(benches, existing_series, new_keys, ticks);
criterion_main!(benches);

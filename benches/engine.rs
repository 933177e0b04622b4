//! Engine throughput: occurrences per second into existing series and into new keys.
//! `just bench`; figures in docs/BENCHMARKS.md.

mod common;

use chrono::TimeDelta;
use common::{kubelet_backoff, t0};
use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::key::{self, Observation};
use event_series_core::settings::{PolicySet, Settings};
use k8s_openapi::api::core::v1::Event;
use std::hint::black_box;

fn settings() -> Settings {
    Settings {
        max_active_series: 1_000_000,
        ..Default::default()
    }
}

fn existing_series(c: &mut Criterion) {
    const KEYS: usize = 1_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| kubelet_backoff(i, 1, now)).collect();
    let mut observations: Vec<Observation> = events
        .iter()
        .filter_map(|e| key::normalise(e).ok())
        .collect();
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
    let events: Vec<Event> = (0..KEYS).map(|i| kubelet_backoff(i, 1, now)).collect();
    let mut observations: Vec<Observation> = events
        .iter()
        .filter_map(|e| key::normalise(e).ok())
        .collect();
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
    group.finish();
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(1));
    group.bench_function("normalise a raw event (key::normalise + key id)", |b| {
        let ev = &events[0];
        b.iter(|| {
            let o = key::normalise(black_box(ev)).map(|o| o.key.id(None));
            black_box(o)
        })
    });
    group.finish();
}

/// A full key budget: 10,000 new series in 100 namespaces where `--max-key-bytes` holds about
/// 1,000 of their keys, so that each new series past those gives up another (the namespace
/// holding the most, its least recently active).
fn full_key_budget(c: &mut Criterion) {
    const KEYS: usize = 10_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| kubelet_backoff(i, 2, now)).collect();
    let namespaces: Vec<String> = (0..100).map(|n| format!("ns-{n}")).collect();
    let observations: Vec<Observation> = events
        .iter()
        .zip(namespaces.iter().cycle())
        .filter_map(|(e, ns)| {
            let mut o = key::normalise(e).ok()?;
            (o.namespace, o.key.namespace, o.key.regarding.namespace) = (ns, ns, ns);
            Some(o)
        })
        .collect();
    let mut probe = Engine::with_settings(settings());
    for o in &observations[..1_000] {
        probe.observe(now, o);
    }
    let config = EngineConfig {
        key_bytes: probe.key_bytes().0,
        ..EngineConfig::default()
    };
    let mut group = c.benchmark_group("engine");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.bench_function(
        "occurrences creating 10,000 new series, the key budget holding 1,000",
        |b| {
            b.iter_batched(
                || Engine::new(PolicySet::uniform(settings()), config),
                |mut engine| {
                    for o in &observations {
                        engine.observe(now, o);
                    }
                    assert!(engine.stats().evicted_by_bytes >= 8_000);
                    engine
                },
                BatchSize::LargeInput,
            )
        },
    );
    group.finish();
}

fn ticks(c: &mut Criterion) {
    const KEYS: usize = 10_000;
    let now = t0();
    let events: Vec<Event> = (0..KEYS).map(|i| kubelet_backoff(i, 1, now)).collect();
    let mut engine = Engine::with_settings(settings());
    for e in &events {
        if let Ok(mut o) = key::normalise(e) {
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

criterion_group!(benches, existing_series, new_keys, full_key_budget, ticks);
criterion_main!(benches);

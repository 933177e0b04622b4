//! The operator's CPU cost per raw event change, without the apiserver: one watch event as the
//! apiserver sends it (a `MODIFIED` new-style core/v1 Event with `series` and `managedFields`, 1.1 KB of
//! JSON, copied from a `bench/ingest.sh` run) decoded with serde_json into kube's `WatchEvent<Event>`,
//! then normalised (`key::normalise`) and counted by the engine, as `controller.rs` does for each change.
//! Part of `just bench-engine` (`bench/engine.sh` keeps its estimates in the engine's result file);
//! docs/BENCHMARKS.md's Engine table shows it. TLS, HTTP chunking and the tokio channel hop are not included.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use event_series_core::engine::Engine;
use event_series_core::key;
use event_series_core::settings::Settings;
use k8s_openapi::api::core::v1::Event;
use kube::api::WatchEvent;
use std::hint::black_box;

const KEYS: usize = 1_000;

/// Watch event lines for `KEYS` objects, change number `change` of each.
fn lines(change: usize) -> Vec<Vec<u8>> {
    (0..KEYS)
        .map(|i| {
            format!(
                r#"{{"type":"MODIFIED","object":{{"kind":"Event","apiVersion":"v1","metadata":{{"name":"web-{i:07}.ingest","namespace":"ingest-1","uid":"71af1926-266a-4a50-a793-{i:012}","resourceVersion":"{rv}","creationTimestamp":"2026-11-21T16:25:25Z","managedFields":[{{"manager":"unknown","operation":"Update","apiVersion":"v1","time":"2026-11-21T16:25:56Z","fieldsType":"FieldsV1","fieldsV1":{{"f:action":{{}},"f:eventTime":{{}},"f:involvedObject":{{}},"f:message":{{}},"f:reason":{{}},"f:reportingComponent":{{}},"f:reportingInstance":{{}},"f:series":{{".":{{}},"f:count":{{}},"f:lastObservedTime":{{}}}},"f:type":{{}}}}}}]}},"involvedObject":{{"kind":"Pod","namespace":"ingest-1","name":"web-{i:07}","uid":"00000000-0000-4000-8000-{i:012}","apiVersion":"v1","fieldPath":"spec.containers{{app}}"}},"reason":"BackOff","message":"Back-off restarting failed container app in pod web-{i:07}_ingest-1","source":{{}},"firstTimestamp":null,"lastTimestamp":null,"type":"Warning","eventTime":"2026-11-21T16:25:25.005537Z","series":{{"count":{count},"lastObservedTime":"2026-11-21T16:25:56.145096Z"}},"action":"StartContainer","reportingComponent":"kubelet","reportingInstance":"node-1"}}}}"#,
                rv = 10_000 + change * KEYS + i,
                count = change + 2,
            )
            .into_bytes()
        })
        .collect()
}

fn decode(c: &mut Criterion) {
    let batch = lines(0);
    assert!(batch[0].len() > 1000, "a realistic watch event");
    let mut group = c.benchmark_group("ingest");
    group.throughput(Throughput::Elements(KEYS as u64));
    group.bench_function(
        "decode 1,000 watch events (serde_json, WatchEvent<Event>)",
        |b| {
            b.iter(|| {
                for line in &batch {
                    let ev: WatchEvent<Event> = serde_json::from_slice(black_box(line)).unwrap();
                    black_box(ev);
                }
            })
        },
    );
    // Decode + normalise + count, into 1,000 series (the counts cycle through 8 changes per object).
    let mut engine = Engine::with_settings(Settings {
        max_active_series: 1_000_000,
        ..Default::default()
    });
    let batches: Vec<Vec<Vec<u8>>> = (0..8).map(lines).collect();
    let mut next = 0usize;
    group.bench_function(
        "decode + key::normalise + engine.observe, 1,000 changes",
        |b| {
            b.iter(|| {
                // Just after the occurrences' lastObservedTime, so that none is stale.
                let now = chrono::DateTime::parse_from_rfc3339("2026-11-21T16:25:57Z")
                    .unwrap()
                    .to_utc();
                for line in &batches[next % batches.len()] {
                    if let Ok(WatchEvent::Modified(ev)) =
                        serde_json::from_slice::<WatchEvent<Event>>(line)
                        && let Ok(obs) = key::normalise(&ev)
                    {
                        engine.observe(now, &obs);
                    }
                }
                next += 1;
                engine.take_intents();
            })
        },
    );
    group.finish();
    assert_eq!(
        engine.active_series(),
        KEYS,
        "every change reached its series"
    );
}

criterion_group!(benches, decode);
criterion_main!(benches);

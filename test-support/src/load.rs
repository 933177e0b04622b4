//! Raw core/v1 Event load for the end-to-end benchmarks in `bench/` (`bench/loader.rs` is its command
//! line): legacy events that each become a series at once, events the operator's watch filters out,
//! and a paced rate of raw event changes.

use crate::cluster::ensure_namespace;
use crate::raw::{
    Occurrences, at_every_limit, backoff_message, kubelet, numbered_pod, occurrence, operators_own,
};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A legacy BackOff event of Pod `i` as the kubelet writes it, already counting 2 recent occurrences,
/// so that it is a series at once.
fn seeded(ns: &str, i: u64) -> Event {
    let pod = format!("app-{i:07}");
    let now = Timestamp::now();
    kubelet(
        ns,
        &format!("{pod}.bench"),
        numbered_pod(ns, &pod, i),
        "BackOff",
        backoff_message(ns, &pod),
        Occurrences {
            count: 2,
            first: now - Duration::from_secs(1),
            last: now,
        },
    )
}

/// A legacy event of Pod `i` from `age` ago: what most of a cluster's stored events are, a loop long
/// over (`count` occurrences, the last `age` ago), which a restart must list but not count again.
fn history(ns: &str, i: u64, age: Duration) -> Event {
    let pod = format!("old-{i:07}");
    let last = Timestamp::now() - age;
    let count = 1 + (i % 3) as i32;
    kubelet(
        ns,
        &format!("{pod}.history"),
        numbered_pod(ns, &pod, i),
        "BackOff",
        backoff_message(ns, &pod),
        Occurrences {
            count,
            first: last - Duration::from_secs(10 * (count as u64 - 1)),
            last,
        },
    )
}

/// A legacy event of Pod `i` seen once, now: a key that stays a candidate (its loop never comes), as a
/// cluster's one-off events are. With `at_limit`, every field of its key is at its API limit (the most
/// one key can cost the operator, about 4.6 KB with its note).
fn lone(ns: &str, i: u64, at_limit: bool) -> Event {
    let pod = format!("lone-{i:07}");
    if at_limit {
        return at_every_limit(ns, &format!("{pod}.lone"), &pod, 1);
    }
    kubelet(
        ns,
        &format!("{pod}.lone"),
        numbered_pod(ns, &pod, i),
        "BackOff",
        backoff_message(ns, &pod),
        Occurrences::at(1, Timestamp::now()),
    )
}

/// What each change of [`Load::rate`] is.
#[derive(Clone, Copy, Debug, Default)]
pub struct Changes {
    /// A new message of this many bytes with every change.
    pub message_bytes: Option<usize>,
    /// Kubelet-style events (`count`, `lastTimestamp`) instead of new-style ones (`series`).
    pub legacy: bool,
    /// Spread the keys over this many namespaces `<namespace>-0`, `<namespace>-1`, ... (key `i` in
    /// the `i % namespaces`th); 0 or 1: all in `<namespace>` itself.
    pub namespaces: u64,
}

impl Changes {
    /// The namespace of key `i` in a run whose namespace is `base`.
    fn namespace(&self, base: &str, i: u64) -> String {
        match self.namespaces {
            0 | 1 => base.to_owned(),
            n => format!("{base}-{}", i % n),
        }
    }
}

/// A legacy (kubelet-like) event of Pod `i`, first occurrence now, with the name of [`new_style`]'s.
fn legacy_style(ns: &str, i: u64) -> Event {
    let pod = format!("web-{i:07}");
    kubelet(
        ns,
        &format!("{pod}.ingest"),
        numbered_pod(ns, &pod, i),
        "BackOff",
        backoff_message(ns, &pod),
        Occurrences::at(1, Timestamp::now()),
    )
}

/// A new-style (tools/events-like) event of Pod `i`, first occurrence now.
fn new_style(ns: &str, i: u64) -> Event {
    let pod = format!("web-{i:07}");
    Event {
        metadata: ObjectMeta {
            name: Some(format!("{pod}.ingest")),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        involved_object: numbered_pod(ns, &pod, i),
        reason: Some("BackOff".into()),
        action: Some("StartContainer".into()),
        message: Some(backoff_message(ns, &pod)),
        type_: Some("Warning".into()),
        reporting_component: Some("kubelet".into()),
        reporting_instance: Some("node-1".into()),
        event_time: Some(MicroTime(Timestamp::now())),
        ..Default::default()
    }
}

/// One load run against one cluster: `concurrency` requests in flight, and the requests done and
/// failed so far.
pub struct Load {
    client: kube::Client,
    concurrency: usize,
    done: AtomicU64,
    failed: AtomicU64,
    /// Creates answered 409 AlreadyExists: the object is there (a create the client sent again
    /// after a timeout, whose first try had landed), neither a new object nor a failure.
    existed: AtomicU64,
    started: Instant,
}

impl Load {
    pub fn new(client: kube::Client, concurrency: usize) -> Load {
        Load {
            client,
            concurrency: concurrency.max(1),
            done: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            existed: AtomicU64::new(0),
            started: Instant::now(),
        }
    }

    /// Counts one answer; the first few failures are printed.
    fn note(&self, r: kube::Result<Event>, what: &str) {
        match r {
            Ok(_) => {
                self.done.fetch_add(1, Ordering::Relaxed);
            }
            Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                self.existed.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => {
                if self.failed.fetch_add(1, Ordering::Relaxed) < 5 {
                    eprintln!("bench-loader: {what}: {e}");
                }
            }
        }
    }

    /// Sends `requests`, `concurrency` at a time, counting their answers.
    async fn send<F>(&self, what: &str, requests: impl Stream<Item = F>)
    where
        F: Future<Output = kube::Result<Event>>,
    {
        requests
            .buffer_unordered(self.concurrency)
            .for_each(|r| {
                self.note(r, what);
                async {}
            })
            .await;
    }

    /// Creates the events `make(namespace, i)` for `i` in `first..first + count`, spread over
    /// namespaces `<prefix>-0` .. `<prefix>-<namespaces - 1>` (event `i` in the `i % namespaces`th).
    async fn spread(
        &self,
        what: &str,
        (count, first, namespaces): (u64, u64, u64),
        prefix: &str,
        make: impl Fn(&str, u64) -> Event,
    ) -> anyhow::Result<()> {
        let namespaces = namespaces.max(1);
        for n in 0..namespaces {
            ensure_namespace(&self.client, &format!("{prefix}-{n}")).await?;
        }
        let requests = futures::stream::iter(first..first + count).map(|i| {
            let ns = format!("{prefix}-{}", i % namespaces);
            let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
            let ev = make(&ns, i);
            async move { api.create(&PostParams::default(), &ev).await }
        });
        self.send(what, requests).await;
        Ok(())
    }

    /// `count` legacy events (Pods `first`..), each already a series, spread over namespaces
    /// `bench-0` .. `bench-<namespaces - 1>`.
    pub async fn seed(&self, count: u64, first: u64, namespaces: u64) -> anyhow::Result<()> {
        self.spread("seed", (count, first, namespaces), "bench", seeded)
            .await
    }

    /// `count` legacy events of finished loops (see `history`), Pods `first` onwards, the last
    /// occurrence `age` ago, spread over namespaces `history-0` .. `history-<namespaces - 1>`.
    pub async fn history(
        &self,
        count: u64,
        first: u64,
        namespaces: u64,
        age: Duration,
    ) -> anyhow::Result<()> {
        self.spread("history", (count, first, namespaces), "history", |ns, i| {
            history(ns, i, age)
        })
        .await
    }

    /// `count` one-off legacy events (see `lone`), Pods `first` onwards, spread over namespaces
    /// `<prefix>-0` .. `<prefix>-<namespaces - 1>`.
    pub async fn lone(
        &self,
        count: u64,
        first: u64,
        namespaces: u64,
        prefix: &str,
        at_limit: bool,
    ) -> anyhow::Result<()> {
        self.spread("lone", (count, first, namespaces), prefix, |ns, i| {
            lone(ns, i, at_limit)
        })
        .await
    }

    /// `count` events in namespace `filler` labelled as the operator's own, which its watch filters
    /// out, at `rate` per second (as fast as the apiserver answers without one).
    pub async fn filler(&self, count: u64, rate: Option<f64>) -> anyhow::Result<()> {
        ensure_namespace(&self.client, "filler").await?;
        let labels = operators_own();
        let api: Api<Event> = Api::namespaced(self.client.clone(), "filler");
        let t0 = tokio::time::Instant::now();
        let requests = futures::stream::iter(0..count).map(|i| {
            let (api, labels) = (api.clone(), labels.clone());
            async move {
                if let Some(rate) = rate.filter(|r| *r > 0.0) {
                    tokio::time::sleep_until(t0 + Duration::from_secs_f64(i as f64 / rate)).await;
                }
                let mut ev = seeded("filler", i);
                ev.metadata.labels = Some(labels);
                ev.metadata.name = Some(format!("filler-{i:08}"));
                api.create(&PostParams::default(), &ev).await
            }
        });
        self.send("filler", requests).await;
        Ok(())
    }

    /// `rate` raw event changes per second for `duration` seconds in `namespace` (or spread over
    /// `changes.namespaces` namespaces named after it), one object per key over `keys` keys:
    /// new-style events, each change a merge patch of `series.count` and
    /// `series.lastObservedTime = now`, or with `legacy` kubelet-style events, each change a patch
    /// of `count` and `lastTimestamp`. With `message_bytes` every change also carries a new message
    /// of that many bytes (the API server refuses a new-style event's beyond 1,024 bytes, not a
    /// legacy one's). Returns the figures of the run.
    pub async fn rate(
        &self,
        rate: f64,
        duration: f64,
        keys: u64,
        namespace: &str,
        changes: Changes,
    ) -> anyhow::Result<serde_json::Map<String, serde_json::Value>> {
        let Changes {
            message_bytes,
            legacy,
            ..
        } = changes;
        anyhow::ensure!(rate > 0.0 && keys > 0, "--rate and --keys must be positive");
        let apis: Vec<Api<Event>> = {
            let mut apis = Vec::new();
            for i in 0..keys.min(changes.namespaces.max(1)) {
                let ns = changes.namespace(namespace, i);
                ensure_namespace(&self.client, &ns).await?;
                apis.push(Api::namespaced(self.client.clone(), &ns));
            }
            apis
        };
        let api_of = |i: u64| apis[(i % apis.len() as u64) as usize].clone();
        // The objects first (not timed): one per key, a singleton occurrence each.
        futures::stream::iter(0..keys)
            .map(|i| {
                let api = api_of(i);
                let ns = changes.namespace(namespace, i);
                async move {
                    let ev = if legacy {
                        legacy_style(&ns, i)
                    } else {
                        new_style(&ns, i)
                    };
                    match api.create(&PostParams::default(), &ev).await {
                        Err(kube::Error::Api(e)) if e.code == 409 => {
                            api.get(&format!("web-{i:07}.ingest")).await
                        }
                        r => r,
                    }
                }
            })
            .buffer_unordered(self.concurrency)
            .for_each(|r| {
                if let Err(e) = r {
                    eprintln!("bench-loader: creating the keys: {e}");
                }
                async {}
            })
            .await;
        // Then the changes, paced: change n is due at n / rate seconds. A change that could not
        // start before the end of `duration` (the apiserver is slower than the rate) is skipped, so
        // that a step lasts `duration` whatever the apiserver does.
        let total = (rate * duration).round() as u64;
        let end = tokio::time::Instant::now() + Duration::from_secs_f64(duration);
        let skipped = Arc::new(AtomicU64::new(0));
        let counts: Arc<Vec<AtomicU64>> = Arc::new((0..keys).map(|_| AtomicU64::new(1)).collect());
        let t0 = tokio::time::Instant::now();
        let begun = Instant::now();
        futures::stream::iter(0..total)
            .map(|n| {
                let (api, counts, skipped) = (api_of(n % keys), counts.clone(), skipped.clone());
                async move {
                    tokio::time::sleep_until(t0 + Duration::from_secs_f64(n as f64 / rate)).await;
                    if tokio::time::Instant::now() >= end {
                        skipped.fetch_add(1, Ordering::Relaxed);
                        return None;
                    }
                    let i = n % keys;
                    let count = counts[i as usize].fetch_add(1, Ordering::Relaxed) + 1;
                    let mut patch = if legacy {
                        occurrence(count)
                    } else {
                        let series = EventSeries {
                            count: Some(count as i32),
                            last_observed_time: Some(MicroTime(Timestamp::now())),
                        };
                        serde_json::json!({ "series": series })
                    };
                    if let Some(bytes) = message_bytes {
                        // Different each time, as a tenant's generated messages are.
                        let head = format!("change {n} of key {i}: ");
                        let fill = bytes.saturating_sub(head.len());
                        patch["message"] = format!("{head}{}", "x".repeat(fill)).into();
                    }
                    Some(
                        api.patch(
                            &format!("web-{i:07}.ingest"),
                            &PatchParams::default(),
                            &Patch::Merge(&patch),
                        )
                        .await,
                    )
                }
            })
            .buffer_unordered(self.concurrency)
            .for_each(|r| {
                if let Some(r) = r {
                    self.note(r, "change");
                }
                async {}
            })
            .await;
        let secs = begun.elapsed().as_secs_f64();
        let mut figures = serde_json::Map::new();
        figures.insert("target_rate".into(), rate.into());
        figures.insert("skipped".into(), skipped.load(Ordering::Relaxed).into());
        figures.insert("changes_s".into(), secs.into());
        figures.insert(
            "achieved_rate".into(),
            (self.done.load(Ordering::Relaxed) as f64 / secs).into(),
        );
        Ok(figures)
    }

    /// The JSON summary of the run: `figures`, then requests done, failed and answered "already
    /// exists", and the wall time.
    pub fn summary(
        &self,
        mut figures: serde_json::Map<String, serde_json::Value>,
    ) -> serde_json::Value {
        figures.insert("done".into(), self.done.load(Ordering::Relaxed).into());
        figures.insert("failed".into(), self.failed.load(Ordering::Relaxed).into());
        figures.insert(
            "already_existed".into(),
            self.existed.load(Ordering::Relaxed).into(),
        );
        figures.insert("wall_s".into(), self.started.elapsed().as_secs_f64().into());
        serde_json::Value::Object(figures)
    }
}

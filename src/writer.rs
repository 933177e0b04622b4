//! The writer: performs the engine's intents against events.k8s.io/v1, in its own task, so that a
//! slow or throttled API server never holds up the watch.
//!
//! - Pending writes are keyed by object; a newer intent for the same series replaces the older one
//!   (latest state wins), so a backoff never loses counts and never multiplies writes.
//! - A client-side rate limit (QPS and burst, `governor`) paces every request.
//! - Heartbeats and finishes are JSON merge patches of the whole series object (RBAC verb `patch`).
//! - What to do after each answer is decided by [`next`], a pure function: 409 on create → patch
//!   (the object exists: a repeated create); 404 on patch → create (the object vanished: TTL or
//!   deleted); 429, 5xx and transport errors → retry after exponential backoff with jitter (`backon`),
//!   never sooner than the server's Retry-After; other 4xx → logged with the object, counted in
//!   `dropped_total{reason="rejected"}`, not retried.

use crate::intent::{Intent, WriteKind};
use crate::metrics::Metrics;
use crate::object::{self, to_event};
use futures::stream::{FuturesUnordered, StreamExt};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    Create,
    Patch,
}

impl Verb {
    pub fn as_str(self) -> &'static str {
        match self {
            Verb::Create => "create",
            Verb::Patch => "patch",
        }
    }
}

/// What to do after an answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Next {
    Done,
    Then(Verb),
    /// Retry the same verb, not before this (the server's Retry-After), or after the next backoff.
    Retry {
        at_least: Duration,
    },
    Reject(String),
}

/// Decides the next step after a write answered `code` (0: no HTTP answer at all).
pub fn next(verb: Verb, code: u16, retry_after: Option<Duration>, message: &str) -> Next {
    match (verb, code) {
        (_, 200..=299) => Next::Done,
        (Verb::Create, 409) => Next::Then(Verb::Patch),
        (Verb::Patch, 404) => Next::Then(Verb::Create),
        // An update conflict: write the latest state again.
        (Verb::Patch, 409) => Next::Retry {
            at_least: Duration::ZERO,
        },
        (_, 0 | 429 | 500..=599) => Next::Retry {
            at_least: retry_after.unwrap_or(Duration::ZERO),
        },
        (_, code) => Next::Reject(format!("HTTP {code}: {message}")),
    }
}

#[derive(Clone, Copy, Debug)]
pub struct WriterConfig {
    pub qps: f64,
    pub burst: u32,
    /// Writes in flight at once.
    pub concurrency: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            qps: 50.0,
            burst: 100,
            concurrency: 8,
        }
    }
}

type ObjectKey = (String, String);

struct Pending {
    intent: Intent,
    verb: Verb,
    seq: u64,
    not_before: Instant,
    delays: backon::ExponentialBackoff,
    in_flight: bool,
}

fn delays() -> backon::ExponentialBackoff {
    crate::retry::delays(Duration::from_millis(100), Duration::from_secs(60))
}

fn first_verb(kind: WriteKind) -> Verb {
    match kind {
        WriteKind::Create => Verb::Create,
        WriteKind::Heartbeat | WriteKind::Finish(_) => Verb::Patch,
    }
}

/// What one request answered.
struct Outcome {
    key: ObjectKey,
    seq: u64,
    verb: Verb,
    code: u16,
    retry_after: Option<Duration>,
    message: String,
}

pub struct Writer {
    client: Client,
    config: WriterConfig,
    metrics: Arc<Metrics>,
    limiter: Arc<DefaultDirectRateLimiter>,
    pending: HashMap<ObjectKey, Pending>,
    seq: u64,
    /// `pending` was shrunk after a burst that has not ended yet.
    after_burst: bool,
}

impl Writer {
    pub fn new(client: Client, config: WriterConfig, metrics: Arc<Metrics>) -> Writer {
        let per_second =
            NonZeroU32::new(config.qps.ceil().max(1.0) as u32).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(config.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let period = Duration::from_secs_f64(1.0 / config.qps.max(0.001));
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(per_second))
            .allow_burst(burst);
        Writer {
            client,
            config,
            metrics,
            limiter: Arc::new(RateLimiter::direct(quota)),
            pending: HashMap::new(),
            seq: 0,
            after_burst: false,
        }
    }

    fn enqueue(&mut self, intent: Intent) {
        self.seq += 1;
        let s = &intent.series;
        let key = (
            object::namespace(&s.namespace, &s.key.view().regarding).to_owned(),
            object::name_of(s),
        );
        let verb = first_verb(intent.kind);
        match self.pending.get_mut(&key) {
            Some(p) => {
                // Latest state wins; a create not yet done stays a create; the backoff stays.
                if p.verb != Verb::Create {
                    p.verb = verb;
                }
                p.intent = intent;
                p.seq = self.seq;
            }
            None => {
                self.pending.insert(
                    key,
                    Pending {
                        intent,
                        verb,
                        seq: self.seq,
                        not_before: Instant::now(),
                        delays: delays(),
                        in_flight: false,
                    },
                );
            }
        }
    }

    fn write(&self, key: &ObjectKey, p: &Pending) -> impl Future<Output = Outcome> + use<> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &key.0);
        let object = to_event(&p.intent.series);
        let (limiter, verb, seq, key) = (self.limiter.clone(), p.verb, p.seq, key.clone());
        async move {
            limiter.until_ready().await;
            let result = match verb {
                Verb::Create => api.create(&PostParams::default(), &object).await.map(drop),
                Verb::Patch => api
                    .patch(&key.1, &PatchParams::default(), &Patch::Merge(&object))
                    .await
                    .map(drop),
            };
            let (code, retry_after, message) = match result {
                Ok(()) => (
                    if verb == Verb::Create { 201 } else { 200 },
                    None,
                    String::new(),
                ),
                Err(kube::Error::Api(status)) => (
                    status.code,
                    status
                        .details
                        .as_ref()
                        .map(|d| Duration::from_secs(d.retry_after_seconds.into()))
                        .filter(|d| !d.is_zero()),
                    status.message.clone(),
                ),
                Err(e) => (0, None, e.to_string()),
            };
            Outcome {
                key,
                seq,
                verb,
                code,
                retry_after,
                message,
            }
        }
    }

    /// A burst (every series created at once after a restart or a storm) grows `pending` to its size;
    /// a hash map keeps that capacity forever, so it is given back once the burst has been written.
    fn settle(&mut self, key: &ObjectKey) {
        self.pending.remove(key);
        let (len, capacity) = (self.pending.len(), self.pending.capacity());
        if capacity > 1024 && len * 4 < capacity {
            self.pending.shrink_to(len * 2);
            self.after_burst = true;
        }
        // The intents and objects of the burst are freed too: hand their pages back once it is over.
        if len == 0 && std::mem::take(&mut self.after_burst) {
            crate::memory::release_free_pages();
        }
    }

    fn complete(&mut self, a: Outcome) {
        self.metrics.request(a.verb.as_str(), a.code);
        let Some(p) = self.pending.get_mut(&a.key) else {
            return;
        };
        p.in_flight = false;
        match next(a.verb, a.code, a.retry_after, &a.message) {
            Next::Done => {
                if p.seq == a.seq {
                    self.settle(&a.key);
                } else {
                    // A newer state arrived meanwhile: the object exists now, update it.
                    p.verb = Verb::Patch;
                }
            }
            Next::Then(verb) => p.verb = verb,
            Next::Retry { at_least } => {
                let backoff = p.delays.next().unwrap_or(Duration::from_secs(60));
                p.not_before = Instant::now() + backoff.max(at_least);
                tracing::debug!(namespace = %a.key.0, name = %a.key.1, code = a.code,
                    retry_in = ?backoff.max(at_least), "write will be retried");
            }
            Next::Reject(why) => {
                tracing::error!(namespace = %a.key.0, name = %a.key.1, verb = a.verb.as_str(),
                    object = ?to_event(&p.intent.series), error = %why, "series write rejected");
                self.metrics.dropped("rejected", 1);
                self.settle(&a.key);
            }
        }
    }

    /// Runs until `intents` is closed and every pending write is done, or `drain_deadline` (set once
    /// intents close) passes.
    pub async fn run(mut self, mut intents: UnboundedReceiver<Intent>, drain: Duration) {
        let mut in_flight = FuturesUnordered::new();
        let mut open = true;
        let mut deadline: Option<Instant> = None;
        loop {
            let now = Instant::now();
            let ready: Vec<ObjectKey> = self
                .pending
                .iter()
                .filter(|(_, p)| !p.in_flight && p.not_before <= now)
                .map(|(k, _)| k.clone())
                .take(self.config.concurrency.saturating_sub(in_flight.len()))
                .collect();
            for key in ready {
                if let Some(p) = self.pending.get_mut(&key) {
                    p.in_flight = true;
                }
                if let Some(p) = self.pending.get(&key) {
                    in_flight.push(self.write(&key, p));
                }
            }
            if !open && (self.pending.is_empty() || deadline.is_some_and(|d| now >= d)) {
                if !self.pending.is_empty() {
                    tracing::warn!(
                        pending = self.pending.len(),
                        "shutdown: writes left unwritten"
                    );
                }
                return;
            }
            // With every slot busy, only a finished write (or a new intent) can make progress: waking
            // for a pending write that is already due would spin.
            let idle = now + Duration::from_secs(3600);
            let wake = if in_flight.len() >= self.config.concurrency {
                idle
            } else {
                self.pending
                    .values()
                    .filter(|p| !p.in_flight)
                    .map(|p| p.not_before)
                    .min()
                    .unwrap_or(idle)
            };
            let wake = deadline.map_or(wake, |d| wake.min(d));
            tokio::select! {
                intent = intents.recv(), if open => match intent {
                    Some(intent) => {
                        // Take the whole backlog before scanning `pending` again: a burst of
                        // creates then costs one scan, not one per intent.
                        self.enqueue(intent);
                        while let Ok(intent) = intents.try_recv() {
                            self.enqueue(intent);
                        }
                    }
                    None => {
                        open = false;
                        deadline = Some(Instant::now() + drain);
                    }
                },
                Some(answer) = in_flight.next(), if !in_flight.is_empty() => self.complete(answer),
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_lead_to_the_spec_behaviour() {
        use Verb::*;
        assert_eq!(next(Create, 201, None, ""), Next::Done);
        assert_eq!(next(Patch, 200, None, ""), Next::Done);
        assert_eq!(next(Create, 409, None, "exists"), Next::Then(Patch));
        assert_eq!(next(Patch, 404, None, "gone"), Next::Then(Create));
        let s = Duration::from_secs(3);
        assert_eq!(
            next(Create, 429, Some(s), ""),
            Next::Retry { at_least: s },
            "429 honours Retry-After"
        );
        for code in [0, 500, 503, 504] {
            assert!(matches!(next(Patch, code, None, ""), Next::Retry { .. }));
        }
        assert!(matches!(next(Create, 422, None, "invalid"), Next::Reject(m) if m.contains("422")));
        assert!(matches!(
            next(Patch, 403, None, "forbidden"),
            Next::Reject(_)
        ));
    }
}

//! The writer: performs the engine's intents against events.k8s.io/v1, in its own task, so that a
//! slow or throttled API server never holds up the watch.
//!
//! - [`queue`] holds the pending writes (pure): one per series, latest state wins, bounded;
//!   [`fair`] hands out the due ones, namespaces in turn; this module performs them.
//! - A client-side rate limit (QPS and burst, `governor`) paces every request.
//! - Heartbeats and finishes are JSON patches (RBAC verb `patch`) of what an update may change
//!   (labels, annotations, `series`), guarded by tests of the series' own labels
//!   ([`crate::object::to_update`]) and conditional on the object's resourceVersion as this replica
//!   last knew it ([`queue::Versions`], [`crate::object::guarded`]): a deposed leader's update
//!   that reaches the API server after another leader wrote is refused there (fencing without
//!   clocks). Without a known version the object is read first.
//! - Each create or heartbeat that lands is reported back ([`Landed`]): the engine times the
//!   series' next heartbeat from then, not from when the write was asked for.
//! - What to do after each answer is decided by [`next`], a pure function:
//!   - 409 on create → read the object at that name: the series' own (a repeated create) → patch;
//!     someone else's (a namespace member created an Event there first) → create under the series'
//!     next deterministic name ([`crate::object::variant_name`]), never a write into another's;
//!   - 409 on patch → read the object (someone wrote it since this replica last knew it): if it
//!     already holds the state to write, done; else update it at the version read;
//!   - 404 on patch → create (the object vanished: TTL or deleted);
//!   - 429, 5xx, timeouts and transport errors → retry after exponential backoff with jitter
//!     (`backon`), never sooner than the server's Retry-After;
//!   - other 4xx → logged with the object, counted in `api_requests_total{verb,code}`, not retried.
//! - Before each request the writer asks the [`WriteFence`]: a replica that may no longer lead starts
//!   nothing, and every request must be over before another replica could take the Lease. A request
//!   given up without an answer is reported to the fence, so that the Lease is then left to expire
//!   rather than released at shutdown.

mod answer;
pub mod fair;
mod owed;
pub mod queue;

use crate::leader::WriteFence;
use crate::leader::elector::Fence;
use crate::object::{self, to_event, to_update};
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use crate::operations::trouble::Kind;
pub use answer::{Answer, Next, Verb, next};
use event_series_core::intent::{Intent, Landed, WriteKind};
use futures::stream::{FuturesUnordered, StreamExt};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::events::v1::Event;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use queue::{Job, Queue, Settled};
pub use queue::{Observed, Version};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc::error::TrySendError;
use tokio::sync::mpsc::{Receiver, Sender};
use tokio::time::Instant;

/// What the writer task takes from the controller: the intents to write, and, while this replica
/// stands by, the series objects the leader wrote ([`Queue::acknowledge`]).
pub struct Inputs {
    pub intents: Receiver<Intent>,
    pub seen: Receiver<Observed>,
}

#[derive(Clone, Copy, Debug)]
pub struct WriterConfig {
    pub qps: f64,
    pub burst: u32,
    /// Writes in flight at once.
    pub concurrency: usize,
    /// Most series with a write pending; when it is reached, the newest writes of the namespaces
    /// holding the most are shed (counted): the writer never holds up the controller.
    pub max_pending: usize,
    /// Most series of one namespace with a write pending, whatever its share of `max_pending`.
    pub max_pending_per_namespace: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            qps: 50.0,
            burst: 100,
            concurrency: 8,
            max_pending: 50_000,
            max_pending_per_namespace: 50_000,
        }
    }
}

/// Most intents taken in one pass, so that a flood of them cannot keep the writer from its answers.
const INTAKE_PASS: usize = 4096;

/// How often at most the writer logs that it shed writes.
const SHED_LOG_EVERY: Duration = Duration::from_secs(10);

/// What one request answered.
struct Outcome {
    job: Job,
    answer: Answer,
    /// The object's resourceVersion when the answer carried the series' own object.
    version: Option<Version>,
}

pub struct Writer {
    client: Client,
    config: WriterConfig,
    metrics: Arc<Metrics>,
    limiter: Arc<DefaultDirectRateLimiter>,
    fence: WriteFence,
    queue: Queue,
    /// The queue was shrunk after a burst that has not ended yet.
    after_burst: bool,
    /// Writes shed since the last log line about them, and when that was.
    shed: (u64, Option<std::time::Instant>),
    /// Where creates and heartbeats that landed are reported ([`Writer::reporting`]).
    landed: Option<Sender<Landed>>,
}

impl Writer {
    pub fn new(
        client: Client,
        config: WriterConfig,
        metrics: Arc<Metrics>,
        fence: WriteFence,
    ) -> Writer {
        let per_second =
            NonZeroU32::new(config.qps.ceil().max(1.0) as u32).unwrap_or(NonZeroU32::MIN);
        let burst = NonZeroU32::new(config.burst.max(1)).unwrap_or(NonZeroU32::MIN);
        let period = Duration::from_secs_f64(1.0 / config.qps.max(0.001));
        let quota = Quota::with_period(period)
            .unwrap_or_else(|| Quota::per_second(per_second))
            .allow_burst(burst);
        Writer {
            client,
            queue: Queue::new(config.max_pending, config.max_pending_per_namespace),
            config,
            metrics,
            limiter: Arc::new(RateLimiter::direct(quota)),
            fence,
            after_burst: false,
            shed: (0, None),
            landed: None,
        }
    }

    /// Reports each create or heartbeat that lands to `landed` (the controller hands it to
    /// [`event_series_core::engine::Engine::written`]). A report that finds the channel full is dropped: the
    /// series then keeps the heartbeat booked from when its write was asked for, which is earlier,
    /// never later, than the one the report would have set.
    pub fn reporting(mut self, landed: Sender<Landed>) -> Writer {
        self.landed = Some(landed);
        self
    }

    /// One request, over by `until` (the fence's limit) at the latest.
    fn write(&self, job: Job, until: Instant) -> impl Future<Output = Outcome> + use<> {
        let api: Api<Event> = Api::namespaced(self.client.clone(), &job.target.namespace);
        let name = object::variant_name(&job.target.name, job.variant);
        let mut object = to_event(&job.intent.series);
        object.metadata.name = Some(name.clone());
        // A create carries the whole object; a patch only what an update may change, only into the
        // series' own object, and only if the object is still as this replica last knew it.
        let update = (job.verb == Verb::Patch).then(|| {
            object::guarded(
                to_update(&job.intent.series),
                job.version.as_ref().map(ToString::to_string),
            )
        });
        let (limiter, fence) = (self.limiter.clone(), self.fence.clone());
        async move {
            let request = async {
                limiter.until_ready().await;
                // The rate limit may have held the request past the fence: check again.
                if !matches!(fence.check(std::time::Instant::now()), Fence::Open { .. }) {
                    return (Answer::NotSent, None);
                }
                match job.verb {
                    Verb::Create => {
                        answered(api.create(&PostParams::default(), &object).await, 201)
                    }
                    Verb::Patch => answered(
                        api.patch(
                            &name,
                            &PatchParams::default(),
                            &Patch::<()>::Json(update.unwrap_or_default()),
                        )
                        .await,
                        200,
                    ),
                    Verb::Verify => read(api.get(&name).await, &job.intent),
                }
            };
            let (answer, version) = tokio::time::timeout_at(until, request)
                .await
                .unwrap_or((Answer::Timeout, None));
            Outcome {
                job,
                answer,
                version,
            }
        }
    }

    fn complete(&mut self, outcome: Outcome) {
        let Outcome {
            job,
            answer,
            version,
        } = outcome;
        self.queue.learn(&job.target, version);
        if answer != Answer::NotSent {
            self.metrics.request_code(job.verb.as_str(), &answer.code());
        }
        if matches!(
            answer,
            Answer::Timeout | Answer::Transport(_) | Answer::Status { code: 500.., .. }
        ) {
            // Given up without an answer, or answered by a server error whose outcome is unknown
            // (a 504 of a proxy, "etcdserver: request timed out"): the write may still land.
            self.fence.abandoned();
        }
        if matches!(next(job.verb, &answer), Next::Done) {
            let now = chrono::Utc::now();
            for (kind, since) in job.owed.each() {
                self.metrics
                    .write_latency(kind, (now - since).as_seconds_f64());
            }
            if let Some(landed) = &self.landed
                && !job.uncertain
                && (job.owed.create.is_some() || job.owed.heartbeat.is_some())
            {
                let created = job.verb == Verb::Create;
                match landed.try_send(Landed::of(&job.intent, created, now)) {
                    Err(TrySendError::Full(_)) => {
                        self.metrics.landed_dropped.inc();
                    }
                    // The controller is gone (a graceful flush): nobody books heartbeats any more.
                    Err(TrySendError::Closed(_)) => self.landed = None,
                    Ok(()) => {}
                }
            }
        }
        let (namespace, name) = (&job.target.namespace, &job.target.name);
        match self
            .queue
            .answered(std::time::Instant::now(), &job, &answer)
        {
            Settled::Done => self.settle(),
            Settled::Renamed { variant } => {
                self.metrics.names_taken.inc();
                (self.metrics.trouble).note(Kind::NameTaken, Some(namespace), 1);
                tracing::warn!(%namespace, %name, variant,
                    "an Event that is not the series' own holds its name: the series takes its next name");
            }
            Settled::Rejected { why, intent } => {
                tracing::error!(%namespace, %name, verb = job.verb.as_str(),
                    object = ?to_event(&intent.series), error = %why, "series write rejected");
                (self.metrics.trouble).note(Kind::WritesRejected, Some(namespace), 1);
                self.settle();
            }
            Settled::Again { after } if !after.is_zero() => {
                tracing::debug!(%namespace, %name, answer = ?answer, retry_in = ?after,
                    "write will be retried");
            }
            Settled::Again { .. } | Settled::Unknown => {}
        }
    }

    /// Queues an intent, or counts and logs it shed (a log line at most every 10 s, so that a
    /// flood is not also a flood of logs).
    fn push(&mut self, now: std::time::Instant, intent: Intent) {
        let Err(shed) = self.queue.push(now, intent) else {
            return;
        };
        self.metrics.write_shed(shed.kind);
        (self.metrics.trouble).note(Kind::WritesShed, Some(&shed.namespace), 1);
        self.shed.0 += 1;
        if self
            .shed
            .1
            .is_none_or(|at| now.duration_since(at) >= SHED_LOG_EVERY)
        {
            tracing::warn!(namespace = %shed.namespace, name = %shed.name, kind = ?shed.kind,
                shed = self.shed.0, share = self.config.max_pending_per_namespace,
                "pending writes full for this namespace's share: writes shed (this one and the \
                 others counted since the last line); the series' next write carries its state");
            self.shed = (0, Some(now));
        }
    }

    /// A burst (every series created at once after a restart or a storm) grows the queue to its
    /// size; it is given back once the burst has been written, and its pages handed back.
    fn settle(&mut self) {
        if self.queue.shrink() {
            self.after_burst = true;
        }
        if self.queue.is_empty() && std::mem::take(&mut self.after_burst) {
            crate::operations::memory::release_free_pages();
        }
    }

    /// The end of the run, with `in_flight` requests unanswered.
    fn stopped(&self, in_flight: usize, wrote: bool) {
        if !self.queue.is_empty() && wrote {
            tracing::warn!(
                pending = self.queue.len(),
                in_flight,
                "shutdown: writes left unwritten"
            );
        }
        if in_flight > 0 {
            // Cut without an answer: they may still land.
            self.fence.abandoned();
        }
    }

    /// Runs until `intents` is closed or `stop` fires, and then until every pending write is done or
    /// `drain` has passed.
    /// Reports its progress to `health` for `/readyz`.
    pub async fn run(
        mut self,
        Inputs {
            mut intents,
            mut seen,
        }: Inputs,
        mut stop: tokio::sync::oneshot::Receiver<()>,
        drain: Duration,
        health: Arc<Health>,
    ) {
        let mut in_flight = FuturesUnordered::new();
        let mut open = true;
        let mut deadline: Option<Instant> = None;
        let mut was_open = false;
        loop {
            let now = std::time::Instant::now();
            let fence = self.fence.check(now);
            if let Fence::Open { until } = fence {
                if !std::mem::replace(&mut was_open, true) {
                    tracing::info!(
                        pending = self.queue.len(),
                        "writing: what is owed goes first"
                    );
                    self.queue.resume(now);
                }
                let free = self.config.concurrency.saturating_sub(in_flight.len());
                for job in self.queue.take_due(now, free) {
                    in_flight.push(self.write(job, until.into()));
                }
            }
            self.metrics.writes_pending.set(self.queue.len() as i64);
            // Standing by (or fenced), nothing may be written: nothing is stuck either.
            health.writes_stuck_since(was_open.then(|| self.queue.stuck_since(now)).flatten());
            let tnow = Instant::now();
            // Stopping: done once all is written, the drain time is over, or nothing may be written
            // (a standby, or a leader whose right to write lapsed) so that waiting is pointless.
            let over = deadline.is_some_and(|d| tnow >= d) || fence == Fence::Closed;
            if !open && (self.queue.is_empty() || over) {
                self.stopped(in_flight.len(), was_open);
                return;
            }
            // With every slot busy, only a finished write (or a new intent) can make progress: waking
            // for a pending write that is already due would spin. A closed fence is waited out by
            // the controller, which stops the writer.
            let idle = tnow + Duration::from_secs(3600);
            let wake = if in_flight.len() >= self.config.concurrency {
                idle
            } else if fence == Fence::Closed {
                // Fenced: nothing may start; the controller stops the writer at once.
                tnow + Duration::from_millis(100)
            } else {
                self.queue.next_due().map_or(idle, |at| {
                    Instant::from_std(at)
                        .max(tnow + Duration::from_millis(1))
                        .min(idle)
                })
            };
            let wake = deadline.map_or(wake, |d| wake.min(d));
            // Intake never waits: a full queue sheds by share instead.
            let accepting = open;
            tokio::select! {
                intent = intents.recv(), if accepting => match intent {
                    Some(intent) => {
                        // Take the backlog at once: a burst of creates costs one pass.
                        let now = std::time::Instant::now();
                        self.push(now, intent);
                        for _ in 0..INTAKE_PASS {
                            let Ok(intent) = intents.try_recv() else { break };
                            self.push(now, intent);
                        }
                    }
                    None => {
                        open = false;
                        deadline = Some(Instant::now() + drain);
                    }
                },
                _ = &mut stop, if open => {
                    open = false;
                    deadline = Some(Instant::now() + drain);
                    // What the controller handed over before it stopped is flushed too (at most
                    // the channel's capacity past the bound).
                    let now = std::time::Instant::now();
                    while let Ok(intent) = intents.try_recv() {
                        self.push(now, intent);
                    }
                }
                Some(outcome) = in_flight.next(), if !in_flight.is_empty() => self.complete(outcome),
                Some(observed) = seen.recv() => {
                    if self.queue.acknowledge(&observed) {
                        self.metrics.writes_pending.set(self.queue.len() as i64);
                    }
                }
                _ = tokio::time::sleep_until(wake) => {}
            }
        }
    }
}

/// The answer to a create or an update, with the version of the object it wrote.
fn answered(result: kube::Result<Event>, ok: u16) -> (Answer, Option<Version>) {
    match result {
        Ok(written) => {
            let version = Version::of(written.metadata.resource_version.as_deref());
            (Answer::of(Ok(()), ok), version)
        }
        Err(e) => (Answer::of(Err(e), ok), None),
    }
}

/// The answer to a read of the object at the series' name: someone else's ([`Answer::Taken`]), the
/// series' own already holding `intent`'s state ([`Answer::Holds`]: nothing to write), or the
/// series' own to update, at the version read. A heartbeat is never held: its point is to change
/// the object, so that the event TTL starts again.
fn read(result: kube::Result<Event>, intent: &Intent) -> (Answer, Option<Version>) {
    let found = match result {
        Ok(found) => found,
        Err(e) => return (Answer::of(Err(e), 200), None),
    };
    if !object::is_own_object(&found, &intent.series) {
        return (Answer::Taken, None);
    }
    let check = object::Check {
        now: chrono::Utc::now(),
        tolerance: chrono::TimeDelta::zero(),
    };
    let holds = intent.kind != WriteKind::Heartbeat
        && object::decode(&found, check)
            .ok()
            .and_then(|stored| Observed::of(&found, &stored))
            .is_some_and(|seen| seen.covers(intent));
    let version = Version::of(found.metadata.resource_version.as_deref());
    let answer = if holds {
        Answer::Holds
    } else {
        Answer::of(Ok(()), 200)
    };
    (answer, version)
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::engine::Engine;
    use event_series_core::settings::Settings;

    /// Create intents of `n` distinct series, as the engine makes them.
    fn creates(n: usize) -> Vec<Intent> {
        let now = chrono::Utc::now();
        let mut engine = Engine::with_settings(Settings::default());
        for i in 0..n {
            let raw: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("p{i}.1"), "namespace": "ns", "uid": format!("u{i}")},
                "involvedObject": {"kind": "Pod", "name": format!("p{i}"), "namespace": "ns"},
                "reason": "BackOff", "type": "Warning", "source": {"component": "kubelet"},
                "firstTimestamp": now, "lastTimestamp": now, "count": 2
            }))
            .unwrap();
            engine.observe(now, &event_series_core::key::normalise(&raw).unwrap());
        }
        engine.take_intents()
    }

    /// With its queue full and every write failing (nothing listens on the address), a stop
    /// still ends the writer within the drain time.
    #[tokio::test]
    async fn a_full_queue_still_hears_the_stop_and_drains_within_its_time() {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = Client::try_from(config).unwrap();
        let writer = Writer::new(
            client,
            WriterConfig {
                max_pending: 1,
                ..WriterConfig::default()
            },
            Arc::new(Metrics::default()),
            WriteFence::open(),
        );
        let (tx, rx) = tokio::sync::mpsc::channel(4);
        let (_seen, seen) = tokio::sync::mpsc::channel(1);
        let inputs = Inputs { intents: rx, seen };
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let health = Arc::new(Health::new(
            Duration::from_secs(60),
            Duration::from_secs(30),
        ));
        let task = tokio::spawn(writer.run(inputs, stopped, Duration::from_millis(500), health));
        for intent in creates(3) {
            tx.send(intent).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        // What the controller does when it stops.
        let _ = stop.send(());
        drop(tx);
        let ended = tokio::time::timeout(Duration::from_secs(5), task).await;
        assert!(ended.is_ok(), "the writer did not stop");
    }

    fn status(code: u16, retry_after: Option<Duration>) -> Answer {
        Answer::Status {
            code,
            retry_after,
            message: "m".into(),
        }
    }

    #[test]
    fn answers_lead_to_the_spec_behaviour() {
        use Verb::*;
        assert_eq!(next(Create, &status(201, None)), Next::Done);
        assert_eq!(next(Patch, &status(200, None)), Next::Done);
        // 409 on create: read the object at the name; write into it only if it is the series' own.
        assert_eq!(next(Create, &status(409, None)), Next::Then(Verify));
        assert_eq!(next(Verify, &status(200, None)), Next::Then(Patch));
        assert_eq!(next(Verify, &Answer::Taken), Next::Rename);
        assert_eq!(next(Verify, &Answer::Holds), Next::Done);
        // An update refused because the object changed since: read it, then reconcile.
        assert_eq!(next(Patch, &status(409, None)), Next::Then(Verify));
        assert_eq!(next(Verify, &status(404, None)), Next::Then(Create));
        assert_eq!(next(Patch, &status(404, None)), Next::Then(Create));
        let s = Duration::from_secs(3);
        assert_eq!(
            next(Create, &status(429, Some(s))),
            Next::Retry { at_least: s },
            "429 honours Retry-After"
        );
        for code in [500, 503, 504] {
            assert!(matches!(
                next(Patch, &status(code, None)),
                Next::Retry { .. }
            ));
        }
        assert!(matches!(next(Patch, &Answer::Timeout), Next::Retry { .. }));
        assert!(matches!(
            next(Create, &Answer::Transport("reset".into())),
            Next::Retry { .. }
        ));
        assert!(matches!(next(Create, &status(422, None)), Next::Reject(m) if m.contains("422")));
        assert!(matches!(next(Patch, &status(403, None)), Next::Reject(_)));
        assert_eq!(Answer::Timeout.code(), "timeout");
        assert_eq!(status(503, None).code(), "503");
    }
}

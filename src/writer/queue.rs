//! The writer's pending writes, with no I/O and the clock injected: what is pending per series
//! object, what an answer leads to, and whether the writer is making progress. Which due write goes
//! next, fairly across namespaces, is [`super::fair`]'s.
//!
//! - One entry per series object: a newer intent replaces the older one (latest state wins), so a
//!   backoff never loses counts and never multiplies writes, and the queue is bounded by the number
//!   of series with something left to write, at most `capacity`.
//! - That bound is shared fairly ([`shares`]): a namespace at its share has its new writes shed
//!   ([`Shed`]), one under it always finds room, if need be by shedding the newest write of the
//!   namespace holding the most; intake never waits for the writer. An intent for a series already
//!   pending always coalesces into its entry.
//! - An answer never discards a newer intent: a write rejected, or done, for an older state leaves
//!   the newer one pending.

use super::answer::may_hold_it_already;
use super::fair::Fair;
pub use super::owed::Owed;
use super::{Answer, Next, Verb, next};

mod acknowledge;
mod names;
mod shares;
mod urgent;
mod versions;
use crate::object;
pub use acknowledge::Observed;
use event_series_core::intent::{Intent, WriteKind};
pub use shares::Shed;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
pub use versions::{Version, Versions};

/// The series object a write is for.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub namespace: String,
    pub name: String,
}

impl Target {
    pub fn of(intent: &Intent) -> Target {
        let s = &intent.series;
        Target {
            namespace: s.key.view().namespace.to_owned(),
            // The first name: every write of one series meets in one pending entry, whatever
            // name its object turns out to have.
            name: object::base_name_of(s),
        }
    }
}

/// A write handed to the shell to perform.
#[derive(Clone, Debug)]
pub struct Job {
    pub target: Arc<Target>,
    pub verb: Verb,
    /// Which of the series' names the request goes to ([`object::variant_name`] of `target.name`).
    pub variant: u8,
    /// Which state of the series this write carries; its answer names it back.
    pub seq: u64,
    pub intent: Intent,
    /// The intents this write is the first to carry, each kind's oldest: a successful answer ends
    /// their wait.
    pub owed: Owed,
    /// An earlier attempt at this state may have landed unanswered ([`Pending::uncertain`]).
    pub uncertain: bool,
    /// For an update, the object's resourceVersion as last known: its precondition.
    pub version: Option<Version>,
}

/// What an answer led to, for the shell's logs and metrics.
#[derive(Debug, PartialEq, Eq)]
pub enum Settled {
    /// Written; nothing newer is pending for this series.
    Done,
    /// Not written and not retried (a 4xx other than 404/409, or every name of the series taken):
    /// the intent that was rejected.
    Rejected { why: String, intent: Box<Intent> },
    /// Another request follows: a different verb, a newer state, or a retry after `after`.
    Again { after: Duration },
    /// Someone else's object holds the series' name: a create under its `variant`-th name follows.
    Renamed { variant: u8 },
    /// The answer was for a write the queue no longer knows.
    Unknown,
}

struct Pending {
    intent: Intent,
    verb: Verb,
    /// Which intent this is ([`Queue::intents`] when it arrived); an answer names it back.
    seq: u64,
    /// The `seq` this entry was made with.
    born: u64,
    /// The intents no write has carried yet.
    owed: Owed,
    /// The retry delays, made at the first retry: most writes never need one, and a storm holds a
    /// pending write per new series.
    delays: Option<Box<backon::ExponentialBackoff>>,
    in_flight: bool,
    /// Waits in [`Queue::deferred`] rather than [`Queue::waiting`].
    deferred: bool,
    /// Which of the series' names its object has ([`object::variant_name`]).
    variant: u8,
    /// An attempt at this state went unanswered (a timeout, a broken connection, a 5xx) or met
    /// the object already there (409 on create): the object may hold this state since then, and a
    /// later write of the same content would change nothing, so its answer does not tell when the
    /// object was last written. Cleared by a newer state.
    uncertain: bool,
    /// The object cannot be read (a role without `get`): it is updated without knowing its version.
    unread: bool,
    /// Why the last update was refused (422), while the object is read to see whose it is.
    refused: Option<String>,
    /// When its heartbeat or finish, if it owes one, goes before the round-robin ([`urgent`]).
    urgent_at: Option<Instant>,
    /// When it is due, and which scheduling that was (stale entries of [`urgent`] are skipped).
    due_at: Instant,
    epoch: u64,
}

fn delays() -> backon::ExponentialBackoff {
    crate::api::retry::delays(Duration::from_millis(100), Duration::from_secs(60))
}

fn first_verb(kind: WriteKind) -> Verb {
    match kind {
        WriteKind::Create => Verb::Create,
        WriteKind::Refresh | WriteKind::Heartbeat | WriteKind::Finish(_) => Verb::Patch,
    }
}

pub struct Queue {
    /// Boxed: a storm fills the table with a write per new series, and a table of whole entries
    /// (over 400 bytes each) would double its largest allocation at every growth.
    pending: HashMap<Arc<Target>, Box<Pending>>,
    /// The pending writes waiting for their due time (not in flight).
    waiting: Fair<Arc<Target>>,
    /// The same for writes that only refresh a young series early: taken only when nothing in
    /// `waiting` is due, so that under back-pressure they wait (and coalesce) first, never a
    /// create, a heartbeat or a finish.
    deferred: Fair<Arc<Target>>,
    /// Intents taken so far: each pending write's `seq`.
    intents: u64,
    capacity: usize,
    /// Most pending writes of one namespace, whatever its share.
    share: usize,
    /// Pending writes per namespace.
    per_namespace: HashMap<String, usize>,
    /// Where a write to shed is found ([`shares`]).
    newest: shares::Newest,
    in_flight: usize,
    /// Since when the queue has had work and no answer has moved it on (see [`Queue::stuck_since`]).
    waiting_since: Option<Instant>,
    /// The series whose object has another than its first name, found by a create that met
    /// someone else's object. (The engine knows the name of a restored series only, from its
    /// object: see `Snapshot::name_variant`.) Kept after its finish is written, for the
    /// [`RENAMED_KEPT`] most recently finished, since an occurrence written late may reopen it.
    renamed: HashMap<Arc<Target>, u8>,
    /// The finished series in `renamed`, oldest first.
    renamed_finished: VecDeque<Arc<Target>>,
    /// Each series object's resourceVersion as last known.
    versions: Versions,
    /// Heartbeats and finishes that waited too long ([`urgent`]).
    urgent: urgent::Urgent,
    /// Schedulings so far: each pending write's `epoch`.
    epochs: u64,
}

/// How many finished series keep their other name in [`Queue`]: renames happen only where a
/// tenant took a series' name, and a reopening follows its finish within a window.
pub const RENAMED_KEPT: usize = 4096;

impl Queue {
    /// At most `capacity` pending writes, `share` of them in one namespace.
    pub fn new(capacity: usize, share: usize) -> Queue {
        Queue {
            pending: HashMap::new(),
            waiting: Fair::default(),
            deferred: Fair::default(),
            intents: 0,
            capacity: capacity.max(1),
            share: share.max(1),
            per_namespace: HashMap::new(),
            newest: shares::Newest::default(),
            in_flight: 0,
            waiting_since: None,
            renamed: HashMap::new(),
            renamed_finished: VecDeque::new(),
            versions: Versions::default(),
            urgent: urgent::Urgent::default(),
            epochs: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.pending.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    pub fn in_flight(&self) -> usize {
        self.in_flight
    }

    /// As many pending writes as the bound allows: a new one sheds another.
    pub fn is_full(&self) -> bool {
        self.pending.len() >= self.capacity
    }

    /// `target`'s pending write waits until `at`, in the lane its owed intents call for.
    fn schedule(&mut self, target: Arc<Target>, at: Instant) {
        let Some(p) = self.pending.get_mut(&target) else {
            return;
        };
        let deferred = p.verb != Verb::Create && p.owed.deferrable();
        let ns = target.namespace.clone();
        if deferred != p.deferred {
            let from = if p.deferred {
                &mut self.deferred
            } else {
                &mut self.waiting
            };
            from.remove(&ns, &target);
            p.deferred = deferred;
        }
        self.epochs += 1;
        (p.due_at, p.epoch) = (at, self.epochs);
        let lane = if deferred {
            &mut self.deferred
        } else {
            &mut self.waiting
        };
        lane.schedule(&ns, target.clone(), at);
        self.schedule_urgent(&target, at, self.epochs);
    }

    /// Pending writes of `namespace`.
    pub fn pending_in(&self, namespace: &str) -> usize {
        self.per_namespace.get(namespace).copied().unwrap_or(0)
    }

    /// Removes `target`'s pending write.
    fn remove(&mut self, target: &Arc<Target>) -> Option<Box<Pending>> {
        let p = self.pending.remove(target)?;
        self.counted_out(&target.namespace);
        Some(p)
    }

    /// Takes an intent: a new pending write due now, or the newer state of one already pending
    /// (which keeps its place, its verb if it is still a create, and its backoff). A new write in a
    /// namespace that holds its share is shed instead; one that finds the bound full sheds the
    /// newest write of the namespace holding the most ([`shares`]). `Err`: the write shed, this one
    /// or the other.
    pub fn push(&mut self, now: Instant, intent: Intent) -> Result<(), Shed> {
        let target = Arc::new(Target::of(&intent));
        let mut made_room = None;
        if !self.pending.contains_key(&target) {
            let this = || Shed {
                kind: intent.kind,
                namespace: target.namespace.clone(),
                name: target.name.clone(),
            };
            if self.pending_in(&target.namespace) >= self.share_of(&target.namespace) {
                return Err(this());
            }
            if self.is_full() {
                made_room = Some(self.make_room().ok_or_else(this)?);
            }
        }
        let variant = intent
            .series
            .name_variant
            .max(self.renamed.get(&target).copied().unwrap_or(0));
        self.intents += 1;
        let seq = self.intents;
        if self.pending.is_empty() {
            self.waiting_since = Some(now);
        }
        if let Some(p) = self.pending.get_mut(&target) {
            if p.verb != Verb::Create {
                p.verb = first_verb(intent.kind);
            }
            p.owed = p.owed.merge(Owed::of(&intent));
            let urgent = p.urgent_at.is_some();
            p.owes_urgently(intent.kind, now);
            if !urgent && !p.in_flight && p.urgent_at.is_some() {
                let (at, epoch) = (p.due_at, p.epoch);
                self.schedule_urgent(&target, at, epoch);
            }
            let Some(p) = self.pending.get_mut(&target) else {
                return Ok(());
            };
            p.intent = intent;
            p.seq = seq;
            p.uncertain = false;
            p.variant = p.variant.max(variant);
            if p.deferred && !p.owed.deferrable() && !p.in_flight {
                // A refresh waiting behind everything became a heartbeat or a finish: it is due now.
                self.schedule(target, now);
            }
            return Ok(());
        }
        self.counted_in(&target, seq);
        self.pending.insert(
            target.clone(),
            Box::new(Pending {
                verb: first_verb(intent.kind),
                owed: Owed::of(&intent),
                intent,
                seq,
                born: seq,
                delays: None,
                in_flight: false,
                deferred: false,
                variant,
                uncertain: false,
                unread: false,
                refused: None,
                urgent_at: None,
                due_at: now,
                epoch: 0,
            }),
        );
        if let Some(p) = self.pending.get_mut(&target) {
            p.owes_urgently(p.intent.kind, now);
        }
        self.schedule(target, now);
        made_room.map_or(Ok(()), Err)
    }

    /// When the next waiting write is due (`None`: none waits).
    pub fn next_due(&mut self) -> Option<Instant> {
        match (self.waiting.next_due(), self.deferred.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Up to `limit` writes due at `now`, marked in flight: one per namespace in turn, each
    /// namespace's earliest first; early refreshes only when nothing else is due.
    pub fn take_due(&mut self, now: Instant, limit: usize) -> Vec<Job> {
        let mut jobs = Vec::new();
        let mut targets = self.take_urgent(now, limit);
        targets.extend(self.waiting.take_due(now, limit - targets.len()));
        if targets.len() < limit {
            targets.extend(self.deferred.take_due(now, limit - targets.len()));
        }
        for target in targets {
            if let Some(p) = self.pending.get_mut(&target)
                && !p.in_flight
            {
                p.in_flight = true;
                self.in_flight += 1;
                let version = self.versions.get(&target).cloned();
                if p.verb == Verb::Patch && version.is_none() && !p.unread {
                    // An update needs its precondition: the object is read first.
                    p.verb = Verb::Verify;
                }
                jobs.push(Job {
                    verb: p.verb,
                    variant: p.variant,
                    seq: p.seq,
                    intent: p.intent.clone(),
                    owed: std::mem::take(&mut p.owed),
                    uncertain: p.uncertain,
                    version: version.filter(|_| p.verb == Verb::Patch),
                    target,
                });
            }
        }
        jobs
    }

    /// A write was not made after all (the fence closed before it started): it waits again.
    pub fn put_back(&mut self, now: Instant, job: Job) {
        if let Some(p) = self.pending.get_mut(&job.target)
            && p.in_flight
        {
            p.in_flight = false;
            self.in_flight -= 1;
            p.owed = p.owed.merge(job.owed);
            self.schedule(job.target, now);
        }
    }

    /// The answer to `job` arrived at `now`.
    pub fn answered(&mut self, now: Instant, job: &Job, answer: &Answer) -> Settled {
        let known = self.versions.get(&job.target).is_some();
        let Some(p) = self.pending.get_mut(&job.target) else {
            return Settled::Unknown;
        };
        if p.in_flight {
            p.in_flight = false;
            self.in_flight -= 1;
        }
        let newer = p.seq != job.seq;
        let step = names::step(p, job.verb, answer);
        let landed = matches!(step, Next::Done);
        p.uncertain |= !newer && may_hold_it_already(job.verb, answer);
        if !landed {
            // Not written: what the job carried is still owed, since as long as before.
            p.owed = p.owed.merge(job.owed);
        }
        let settled = match step.clone() {
            Next::Done if newer => {
                // A newer state arrived meanwhile: the object exists now, update it.
                p.verb = Verb::Patch;
                p.urgent_again(now);
                p.delays = None;
                Settled::Again {
                    after: Duration::ZERO,
                }
            }
            Next::Done => self.written(&job.target),
            Next::Rename => {
                self.versions.forget(&job.target);
                self.next_name(job)
            }
            Next::Then(verb) => {
                // A read that told no version (a role without `get`): update without one.
                p.unread |= job.verb == Verb::Verify && verb == Verb::Patch && !known;
                if verb == Verb::Create {
                    // The object is gone: what was known of it is moot.
                    self.versions.forget(&job.target);
                }
                p.verb = verb;
                Settled::Again {
                    after: Duration::ZERO,
                }
            }
            Next::Retry { at_least } => {
                let delays = p.delays.get_or_insert_with(|| Box::new(delays()));
                let backoff = delays.next().unwrap_or(Duration::from_secs(60));
                Settled::Again {
                    after: backoff.max(at_least),
                }
            }
            Next::Reject(why) if newer => {
                // The rejected state is gone; the newer one is still to be written.
                tracing::debug!(%why, "older state rejected; a newer one is pending");
                Settled::Again {
                    after: Duration::ZERO,
                }
            }
            Next::Reject(why) => {
                self.versions.forget(&job.target);
                let p = self.remove(&job.target);
                Settled::Rejected {
                    why,
                    intent: Box::new(p.map_or_else(|| job.intent.clone(), |p| p.intent)),
                }
            }
        };
        match settled {
            Settled::Again { after } => self.schedule(job.target.clone(), now + after),
            Settled::Renamed { .. } => self.schedule(job.target.clone(), now),
            _ => {}
        }
        let progress = !matches!(step, Next::Retry { .. } | Next::Reject(_))
            || matches!(settled, Settled::Rejected { .. });
        if self.pending.is_empty() {
            self.waiting_since = None;
        } else if progress {
            self.waiting_since = Some(now);
        }
        settled
    }

    /// Since when the queue has had work without any write going through, if it has work that is
    /// due or in flight at `now`: `/readyz` fails when that is longer ago than the request timeout.
    pub fn stuck_since(&mut self, now: Instant) -> Option<Instant> {
        let since = self.waiting_since?;
        let working = self.in_flight > 0 || self.next_due().is_some_and(|at| at <= now);
        working.then_some(since)
    }

    /// Gives back the memory of a burst once it has been written; whether it did.
    pub fn shrink(&mut self) -> bool {
        let (len, capacity) = (self.pending.len(), self.pending.capacity());
        let shrink = capacity > 1024 && len * 4 < capacity;
        if shrink {
            self.pending.shrink_to(len * 2);
            self.waiting.shrink();
            self.deferred.shrink();
            self.shrink_urgent();
        }
        shrink
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::engine::Engine;
    use event_series_core::intent::{FinishCause, SeriesState};
    use event_series_core::settings::Settings;

    /// Pushes an intent that must be queued.
    trait Put {
        fn put(&mut self, now: Instant, intent: Intent);
    }

    impl Put for Queue {
        fn put(&mut self, now: Instant, intent: Intent) {
            let shed = self.push(now, intent);
            assert_eq!(shed, Ok(()), "the intent was shed");
        }
    }

    /// An answer as the shell reports it: a 2xx that carries the series' own object tells its
    /// version too (here the write's `seq`, one version per state written).
    trait Answered {
        fn answer(&mut self, now: Instant, job: &Job, answer: &Answer) -> Settled;
    }

    impl Answered for Queue {
        fn answer(&mut self, now: Instant, job: &Job, answer: &Answer) -> Settled {
            if matches!(
                answer,
                Answer::Status {
                    code: 200..=299,
                    ..
                } | Answer::Holds
            ) {
                self.learn(&job.target, Some(Version::Number(job.seq)));
            }
            self.answered(now, job, answer)
        }
    }

    /// The create intent of a distinct series (one per pod), as the engine makes it, then given
    /// `kind` and `count`. At a fixed time: the series' name (its target) follows its start, and
    /// intents made on either side of a second's edge would belong to two series.
    fn intent(pod: &str, kind: WriteKind, count: u64) -> Intent {
        let now = chrono::DateTime::from_timestamp(1_750_000_000, 0).unwrap();
        let raw: k8s_openapi::api::core::v1::Event = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("{pod}.1"), "namespace": "ns", "uid": pod},
            "involvedObject": {"kind": "Pod", "name": pod, "namespace": "ns"},
            "reason": "BackOff", "message": "m", "type": "Warning",
            "source": {"component": "kubelet"},
            "firstTimestamp": now, "lastTimestamp": now, "count": 2
        }))
        .unwrap();
        let mut engine = Engine::with_settings(Settings::default());
        engine.observe(now, &event_series_core::key::normalise(&raw).unwrap());
        let mut intent = engine.take_intents().remove(0);
        intent.kind = kind;
        intent.series.count = count;
        intent
    }

    /// The object name of pod `pod`'s series.
    fn name(pod: &str) -> String {
        Target::of(&intent(pod, WriteKind::Create, 2)).name
    }

    fn status(code: u16) -> Answer {
        Answer::Status {
            code,
            retry_after: None,
            message: String::new(),
        }
    }

    /// A queue holding the create of pod `pod`'s series, due at the instant returned.
    fn one_create(pod: &str) -> (Instant, Queue) {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, intent(pod, WriteKind::Create, 2));
        (t0, q)
    }

    fn names(jobs: &[Job]) -> Vec<String> {
        jobs.iter().map(|j| j.target.name.clone()).collect()
    }

    #[test]
    fn every_update_carries_the_version_last_known_and_a_conflict_is_read_and_reconciled() {
        let (t0, mut q) = one_create("a");
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.version, None, "a create has no precondition");
        q.learn(&job.target, Version::of(Some("10")));
        assert_eq!(q.answered(t0, &job, &status(201)), Settled::Done);
        // The next update carries the version the create's answer told.
        q.put(t0, intent("a", WriteKind::Heartbeat, 5));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(
            (job.verb, job.version.clone()),
            (Verb::Patch, Version::of(Some("10")))
        );
        // Someone wrote the object since: refused; the object is read, then updated at the
        // version read, with the same state.
        assert!(matches!(
            q.answered(t0, &job, &status(409)),
            Settled::Again { .. }
        ));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        q.learn(&job.target, Version::of(Some("12")));
        q.answered(t0, &job, &status(200));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(
            (job.verb, job.version.clone()),
            (Verb::Patch, Version::of(Some("12")))
        );
        assert_eq!(job.intent.series.count, 5);
        q.learn(&job.target, Version::of(Some("13")));
        assert_eq!(q.answered(t0, &job, &status(200)), Settled::Done);
        // A read that finds the object already holding the state to write ends the write.
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 6));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.version, Version::of(Some("13")));
        q.answered(t0, &job, &status(409));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        assert_eq!(q.answered(t0, &job, &Answer::Holds), Settled::Done);
        assert!(q.is_empty());
        // With the finish written, its version is forgotten.
        assert_eq!(q.versions.len(), 0);
    }

    #[test]
    fn an_update_without_a_known_version_reads_the_object_first() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, intent("a", WriteKind::Heartbeat, 5));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        // A role without `get` (an older install): the update goes without a precondition rather
        // than never.
        q.answered(t0, &job, &status(403));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.version.clone()), (Verb::Patch, None));
        assert_eq!(q.answered(t0, &job, &status(200)), Settled::Done);
        // A vanished object's version is forgotten: it is created again.
        q.put(t0, intent("b", WriteKind::Heartbeat, 5));
        q.learn(
            &Target::of(&intent("b", WriteKind::Create, 2)),
            Version::of(Some("3")),
        );
        let job = q.take_due(t0, 1).remove(0);
        q.answered(t0, &job, &status(404));
        assert_eq!(q.versions.len(), 0);
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.version), (Verb::Create, None));
    }

    #[test]
    fn due_writes_come_earliest_first_and_backoff_reorders_them() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        for (i, pod) in ["a", "b", "c"].iter().enumerate() {
            q.put(
                t0 + Duration::from_millis(i as u64),
                intent(pod, WriteKind::Create, 2),
            );
        }
        let now = t0 + Duration::from_secs(1);
        let jobs = q.take_due(now, 2);
        assert_eq!(names(&jobs), [name("a"), name("b")]);
        assert_eq!(q.in_flight(), 2);
        // a fails (503) and backs off; b is done; c is next, then a once its backoff has passed.
        assert!(matches!(
            q.answer(now, &jobs[0], &status(503)),
            Settled::Again { after } if after > Duration::ZERO
        ));
        assert_eq!(q.answer(now, &jobs[1], &status(201)), Settled::Done);
        let jobs = q.take_due(now, 10);
        assert_eq!(names(&jobs), [name("c")]);
        let later = now + Duration::from_secs(120);
        assert_eq!(q.next_due().map(|at| at > now), Some(true));
        assert_eq!(names(&q.take_due(later, 10)), [name("a")]);
    }

    #[test]
    fn a_newer_intent_coalesces_and_survives_the_rejection_of_the_older() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, intent("a", WriteKind::Create, 2));
        let job = q.take_due(t0, 10).remove(0);
        // While the create is in flight, two newer states arrive: one entry, the latest state.
        q.put(t0, intent("a", WriteKind::Heartbeat, 5));
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 9));
        assert_eq!(q.len(), 1);
        let settled = q.answer(t0, &job, &status(422));
        assert_eq!(
            settled,
            Settled::Again {
                after: Duration::ZERO
            }
        );
        let retry = q.take_due(t0, 10).remove(0);
        assert_eq!(retry.intent.series.count, 9, "the newer state is written");
        assert_eq!(retry.verb, Verb::Create, "the object was never created");
        // Rejected again, now for the latest state: settled, reported with that state.
        let Settled::Rejected { intent, why } = q.answer(t0, &retry, &status(422)) else {
            panic!()
        };
        assert_eq!(intent.series.count, 9);
        assert!(why.contains("422"));
        assert!(q.is_empty());
    }

    #[test]
    fn a_write_done_for_an_older_state_is_followed_by_a_patch_with_the_newer() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, intent("a", WriteKind::Create, 2));
        let job = q.take_due(t0, 10).remove(0);
        q.put(t0, intent("a", WriteKind::Heartbeat, 7));
        assert!(matches!(
            q.answer(t0, &job, &status(201)),
            Settled::Again { .. }
        ));
        let job = q.take_due(t0, 10).remove(0);
        assert_eq!((job.verb, job.intent.series.count), (Verb::Patch, 7));
        assert_eq!(q.answer(t0, &job, &status(200)), Settled::Done);
    }

    #[test]
    fn a_write_after_an_attempt_that_may_have_landed_does_not_date_the_object() {
        let later = |t: Instant| t + Duration::from_secs(120);
        for unanswered in [Answer::Timeout, status(503), status(409)] {
            let (t0, mut q) = one_create("a");
            let job = q.take_due(t0, 1).remove(0);
            assert!(!job.uncertain, "a first attempt says when it landed");
            q.answer(t0, &job, &unanswered);
            let job = q.take_due(later(t0), 1).remove(0);
            assert!(
                job.uncertain,
                "after {unanswered:?}, {:?} may rewrite what landed",
                job.verb
            );
            // A newer state changes the object whenever it lands.
            q.put(later(t0), intent("a", WriteKind::Heartbeat, 3));
            q.answer(later(t0), &job, &status(201));
            let job = q.take_due(later(t0), 1).remove(0);
            assert!(!job.uncertain, "the newer state, after {unanswered:?}");
        }
        // Refused outright (429), nothing landed.
        let (t0, mut q) = one_create("b");
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(429));
        assert!(!q.take_due(later(t0), 1)[0].uncertain);
    }

    #[test]
    fn conflicts_and_vanished_objects_switch_the_verb() {
        let (t0, mut q) = one_create("a");
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(409));
        // Whose object holds the name? The series' own (a repeated create): patch it.
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        q.answer(t0, &job, &status(200));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Patch);
        q.answer(t0, &job, &status(404));
        assert_eq!(q.take_due(t0, 1)[0].verb, Verb::Create);
    }

    #[test]
    fn a_name_held_by_someone_elses_object_is_never_written_and_the_series_moves_on() {
        let (t0, mut q) = one_create("a");
        let mut seen = Vec::new();
        for variant in 0..=object::MAX_NAME_VARIANT {
            let job = q.take_due(t0, 1).remove(0);
            assert_eq!((job.verb, job.variant), (Verb::Create, variant));
            q.answer(t0, &job, &status(409));
            let job = q.take_due(t0, 1).remove(0);
            assert_eq!((job.verb, job.variant), (Verb::Verify, variant));
            seen.push(q.answer(t0, &job, &Answer::Taken));
        }
        // Renamed three times, then given up: every name is someone else's.
        assert_eq!(
            seen[..3],
            [1, 2, 3].map(|variant| Settled::Renamed { variant })
        );
        assert!(matches!(seen[3], Settled::Rejected { .. }));
        assert!(q.is_empty());
    }

    #[test]
    fn an_update_refused_at_a_name_a_tenant_took_moves_the_series_to_its_next_name() {
        let (t0, mut q) = one_create("a");
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(201));
        // The object vanished and a tenant's copy took its name: the update's test of the series'
        // labels is refused; the object is read, found someone else's, and the series moves on.
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 3));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Patch);
        assert!(matches!(
            q.answered(t0, &job, &status(422)),
            Settled::Again { .. }
        ));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Verify, 0));
        assert_eq!(
            q.answer(t0, &job, &Answer::Taken),
            Settled::Renamed { variant: 1 }
        );
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Create, 1));
        assert_eq!(q.answer(t0, &job, &status(201)), Settled::Done);
        // Refused in the series' own object (a value the API rejects): the refusal stands.
        let (t0, mut q) = one_create("b");
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(201));
        q.put(t0, intent("b", WriteKind::Heartbeat, 3));
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(422));
        // The read times out once: retried, and the refusal still stands after it.
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        q.answer(t0, &job, &Answer::Timeout);
        let later = t0 + Duration::from_secs(120);
        let job = q.take_due(later, 1).remove(0);
        assert_eq!(job.verb, Verb::Verify);
        let settled = q.answer(later, &job, &status(200));
        assert!(
            matches!(&settled, Settled::Rejected { why, .. } if why.contains("422")),
            "{settled:?}"
        );
        assert!(q.is_empty());
    }

    #[test]
    fn a_renamed_series_keeps_its_name_after_its_finish_for_a_reopening() {
        let (t0, mut q) = one_create("a");
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &status(409));
        let job = q.take_due(t0, 1).remove(0);
        q.answer(t0, &job, &Answer::Taken);
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(q.answer(t0, &job, &status(201)), Settled::Done);
        // A later heartbeat, and the finish, go to the name the create took.
        q.put(t0, intent("a", WriteKind::Heartbeat, 5));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Patch, 1));
        assert_eq!(q.answer(t0, &job, &status(200)), Settled::Done);
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 6));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!(job.variant, 1);
        assert_eq!(q.answer(t0, &job, &status(200)), Settled::Done);
        assert!(q.is_empty());
        // An occurrence written late reopens it: its next write still goes to its name, read first
        // (its version was forgotten with its finish).
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 7));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Verify, 1));
        q.answer(t0, &job, &status(200));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Patch, 1));
        assert_eq!(q.answer(t0, &job, &status(200)), Settled::Done);
        // Only the most recently finished are kept.
        for i in 0..RENAMED_KEPT {
            let name = format!("x{i}");
            q.renamed.insert(
                Arc::new(Target::of(&intent(&name, WriteKind::Create, 2))),
                1,
            );
            q.put(t0, intent(&name, WriteKind::Finish(FinishCause::Quiet), 2));
            q.learn(
                &Target::of(&intent(&name, WriteKind::Create, 2)),
                Version::of(Some("1")),
            );
            let job = q.take_due(t0, 1).remove(0);
            assert_eq!(q.answer(t0, &job, &status(200)), Settled::Done);
        }
        assert_eq!(q.renamed.len(), RENAMED_KEPT);
        assert!(
            !q.renamed
                .contains_key(&Target::of(&intent("a", WriteKind::Create, 2)))
        );
        // A restored series names its variant itself.
        let mut restored = intent("b", WriteKind::Heartbeat, 3);
        restored.series.name_variant = 2;
        q.put(t0, restored);
        assert_eq!(q.take_due(t0, 1)[0].variant, 2);
    }

    #[test]
    fn the_queue_is_bounded_and_reports_a_writer_that_gets_nothing_through() {
        let t0 = Instant::now();
        let mut q = Queue::new(2, 2);
        q.put(t0, intent("a", WriteKind::Create, 2));
        assert!(!q.is_full());
        q.put(t0, intent("b", WriteKind::Create, 2));
        assert!(q.is_full());
        // Timeouts: due work, no progress.
        let mut now = t0;
        for _ in 0..5 {
            now += Duration::from_secs(10);
            for job in q.take_due(now, 10) {
                q.answer(now, &job, &Answer::Timeout);
            }
            now += Duration::from_secs(70);
        }
        assert!(now - q.stuck_since(now).unwrap() > Duration::from_secs(300));
        // One write goes through: progress, the clock restarts.
        let job = q.take_due(now, 1).remove(0);
        q.answer(now, &job, &status(201));
        assert_eq!(q.stuck_since(now), Some(now));
        let job = q.take_due(now, 1).remove(0);
        q.answer(now, &job, &status(201));
        assert_eq!(q.stuck_since(now), None, "nothing left to write");
    }

    #[test]
    fn a_write_put_back_before_it_started_waits_again() {
        let t0 = Instant::now();
        let mut q = Queue::new(10, 10);
        q.put(t0, intent("a", WriteKind::Create, 2));
        let job = q.take_due(t0, 1).remove(0);
        q.put_back(t0, job);
        assert_eq!(q.in_flight(), 0);
        assert_eq!(names(&q.take_due(t0, 1)), [name("a")]);
    }

    #[test]
    fn many_writes_leave_no_stale_entries_behind() {
        let t0 = Instant::now();
        let mut q = Queue::new(100_000, 100_000);
        for i in 0..2_000 {
            q.put(t0, intent(&format!("p{i}"), WriteKind::Create, 2));
        }
        let mut written = 0;
        while let Some(at) = q.next_due() {
            for job in q.take_due(at, 64) {
                assert_eq!(q.answer(at, &job, &status(201)), Settled::Done);
                written += 1;
            }
        }
        assert_eq!(written, 2_000);
        assert!(q.is_empty());
        assert!(
            q.waiting.is_empty(),
            "a namespace with nothing pending leaves"
        );
        assert_eq!(q.next_due(), None);
    }

    /// The intent of pod `pod`'s series in namespace `ns`.
    fn in_ns(ns: &str, pod: &str) -> Intent {
        let mut i = intent(pod, WriteKind::Create, 2);
        let key = i.series.key.view();
        let moved = event_series_core::key::SeriesKey {
            namespace: ns,
            ..key
        };
        i.series.key = event_series_core::key::KeyBuf::new(&moved, "m");
        i.series.namespace = ns.into();
        i
    }

    fn namespaces(jobs: &[Job]) -> Vec<String> {
        jobs.iter().map(|j| j.target.namespace.clone()).collect()
    }

    #[test]
    fn one_namespaces_backlog_does_not_delay_another_namespaces_write() {
        let t0 = Instant::now();
        let mut q = Queue::new(100_000, 100_000);
        for i in 0..10_000 {
            q.put(t0, in_ns("flood", &format!("p{i}")));
        }
        // The flood's writes are all due; one write of a quiet namespace becomes due later.
        let t1 = t0 + Duration::from_millis(1);
        let first = q.take_due(t1, 8);
        assert_eq!(namespaces(&first), ["flood"; 8]);
        q.put(t1, in_ns("quiet", "q"));
        let next = q.take_due(t1, 2);
        assert!(
            namespaces(&next).contains(&"quiet".to_owned()),
            "the quiet write waited behind the flood: {:?}",
            namespaces(&next)
        );
    }

    #[test]
    fn a_full_queue_sheds_the_newest_writes_of_the_largest_namespace_never_a_quiet_ones() {
        let t0 = Instant::now();
        // Room for 100 writes, up to 100 in one namespace.
        let mut q = Queue::new(100, 100);
        let mut shed = Vec::new();
        let floods: Vec<Vec<Intent>> = (0..5)
            .map(|n| {
                (0..100)
                    .map(|i| in_ns(&format!("flood-{n}"), &format!("p{i}")))
                    .collect()
            })
            .collect();
        // Five namespaces flood in turn: each gets its share (a fifth), whatever came first.
        for i in 0..100 {
            for flood in &floods {
                if let Err(s) = q.push(t0, flood[i].clone()) {
                    shed.push(s);
                }
            }
        }
        assert_eq!(q.len(), 100);
        for n in 0..5 {
            assert_eq!(q.pending_in(&format!("flood-{n}")), 20, "{shed:?}");
        }
        assert_eq!(shed.len(), 400);
        // A quiet namespace's write is taken, at once: the newest write of a largest namespace
        // makes room for it.
        let quiet = in_ns("quiet", "q");
        let made_room = q.push(t0, quiet.clone()).unwrap_err();
        assert!(made_room.namespace.starts_with("flood-"), "{made_room:?}");
        let newest = floods
            .iter()
            .find(|f| f[0].series.namespace.as_ref() == made_room.namespace)
            .map(|f| Target::of(&f[19]).name);
        assert_eq!(Some(made_room.name), newest, "the newest of that namespace");
        assert_eq!(q.pending_in("quiet"), 1);
        assert_eq!(q.len(), 100);
        // Six namespaces now: a flood at its share (100 / 6) sheds its own new writes.
        let extra = in_ns("flood-0", "extra");
        assert!(q.pending_in("flood-0") >= q.share_of("flood-0"));
        assert_eq!(q.push(t0, extra).unwrap_err().namespace, "flood-0");
        // Writes in flight are not shed: with every write of the floods taken, the quiet
        // namespace's next write still finds room, or is shed itself, never anyone's in flight.
        let taken = q.take_due(t0, 200);
        assert_eq!(taken.len(), 100);
        let more = in_ns("quiet", "q2");
        assert_eq!(q.push(t0, more).unwrap_err().namespace, "quiet");
        assert_eq!(q.in_flight(), 100);
    }

    #[test]
    fn a_quiet_namespaces_heartbeats_go_first_once_they_waited_whatever_the_floods() {
        let t0 = Instant::now();
        let mut q = Queue::new(100_000, 100_000);
        // 50 namespaces with 100 creates each, and a quiet namespace's 100 heartbeats, all due now.
        for n in 0..50 {
            for i in 0..100 {
                q.put(t0, in_ns(&format!("flood-{n}"), &format!("p{i}")));
            }
        }
        for i in 0..100 {
            let mut heartbeat = in_ns("quiet", &format!("q{i}"));
            heartbeat.kind = WriteKind::Heartbeat;
            q.learn(&Target::of(&heartbeat), Version::of(Some("1")));
            q.put(t0, heartbeat);
        }
        // The writer takes 10 writes a second, each answered at once.
        let mut last_quiet = None;
        for s in 0..600 {
            let now = t0 + Duration::from_secs(s);
            for job in q.take_due(now, 10) {
                if job.target.namespace == "quiet" {
                    last_quiet = Some(s);
                }
                q.answer(now, &job, &status(200));
            }
            if q.pending_in("quiet") == 0 {
                break;
            }
        }
        // In turn alone, one write in 51 would be the quiet namespace's: 100 heartbeats in 510 s.
        // Urgent after 30 s, they all go by 30 s + 100 / 10 s.
        let done = last_quiet.unwrap_or(u64::MAX);
        assert!(
            done <= 40,
            "the quiet namespace's last heartbeat went at {done} s"
        );
        assert_eq!(q.pending_in("quiet"), 0);
    }

    #[test]
    fn a_tenant_with_many_namespaces_cannot_crowd_out_another() {
        let t0 = Instant::now();
        let mut q = Queue::new(1_000, 1_000);
        // 50 namespaces of one tenant, 100 writes each, arriving before anyone else's.
        for n in 0..50 {
            for i in 0..100 {
                let _ = q.push(t0, in_ns(&format!("tenant-{n}"), &format!("p{i}")));
            }
        }
        assert_eq!(q.len(), 1_000);
        // Another namespace still gets its share: 1,000 / 51.
        let mut taken = 0;
        for i in 0..100 {
            if q.push(t0, in_ns("kube-system", &format!("p{i}")))
                .is_err_and(|s| s.namespace == "kube-system")
            {
                break;
            }
            taken += 1;
        }
        assert_eq!(taken, 1_000 / 51);
        assert_eq!(q.len(), 1_000);
    }

    #[test]
    fn a_namespace_past_its_share_sheds_new_writes_and_never_fills_the_queue() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 40);
        // Made once: a series' name is derived from its start, the time its intent was made.
        let flood: Vec<Intent> = (0..1_000)
            .map(|i| in_ns("flood", &format!("p{i}")))
            .collect();
        let mut shed = Vec::new();
        for intent in &flood {
            if let Err(s) = q.push(t0, intent.clone()) {
                shed.push(s);
            }
        }
        assert_eq!((q.pending_in("flood"), shed.len()), (40, 960));
        assert_eq!(
            shed[0],
            Shed {
                kind: WriteKind::Create,
                namespace: "flood".into(),
                name: Target::of(&flood[40]).name,
            }
        );
        assert!(!q.is_full(), "one namespace filled the queue");
        // A series already pending still takes its newer state (it adds no entry)...
        let mut finish = flood[0].clone();
        finish.kind = WriteKind::Finish(FinishCause::Quiet);
        q.put(t0, finish);
        // ...and every other namespace still finds room, and is served in turn.
        q.put(t0, in_ns("quiet", "q"));
        let jobs = q.take_due(t0, 2);
        assert_eq!(namespaces(&jobs), ["flood", "quiet"]);
        // Once a write of the flood is answered, it has room for one more.
        for job in &jobs {
            assert_eq!(q.answer(t0, job, &status(201)), Settled::Done);
        }
        assert_eq!(q.pending_in("flood"), 39);
        assert_eq!(q.pending_in("quiet"), 0);
        q.put(t0, flood[40].clone());
        assert!(q.push(t0, flood[41].clone()).is_err());
    }

    #[test]
    fn namespaces_with_backlogs_are_served_in_turn_each_earliest_first() {
        let t0 = Instant::now();
        let mut q = Queue::new(1_000, 1_000);
        for i in 0..10 {
            for ns in ["a", "b", "c"] {
                let at = t0 + Duration::from_millis(10 - i);
                q.put(at, in_ns(ns, &format!("{ns}{i}")));
            }
        }
        let now = t0 + Duration::from_secs(1);
        let jobs = q.take_due(now, 9);
        let order = namespaces(&jobs);
        assert_eq!(order, ["a", "b", "c", "a", "b", "c", "a", "b", "c"]);
        // Within a namespace, the earliest due first: pushed last, due first.
        let a: Vec<String> = jobs
            .iter()
            .filter(|j| j.target.namespace == "a")
            .map(|j| j.intent.series.key.view().regarding.name.to_owned())
            .collect();
        assert_eq!(a, ["a9", "a8", "a7"]);
    }

    #[test]
    fn coalescing_and_rejection_keep_their_rules_across_namespaces() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, in_ns("x", "p"));
        q.put(t0, in_ns("y", "p"));
        let mut newer = in_ns("x", "p");
        newer.series.count = 9;
        q.put(t0, newer);
        assert_eq!(q.len(), 2, "one pending write per series object");
        let jobs = q.take_due(t0, 10);
        assert_eq!(jobs.len(), 2);
        let x = jobs.iter().find(|j| j.target.namespace == "x").cloned();
        let x = x.unwrap();
        assert_eq!(
            x.intent.series.count, 9,
            "the newer state is the one written"
        );
        let mut newest = in_ns("x", "p");
        newest.series.count = 12;
        q.put(t0, newest);
        assert!(matches!(
            q.answer(t0, &x, &status(422)),
            Settled::Again { .. }
        ));
        let again = q.take_due(t0, 10);
        assert_eq!(again.len(), 1);
        assert_eq!(
            again[0].intent.series.count, 12,
            "a rejection kept the newer state"
        );
    }

    /// `intent` owed since `secs` after the epoch of the test.
    fn owed_at(mut i: Intent, secs: i64) -> Intent {
        i.due = chrono::DateTime::UNIX_EPOCH + chrono::TimeDelta::seconds(secs);
        i
    }

    fn since(job: &Job) -> Vec<(WriteKind, i64)> {
        job.owed.each().map(|(k, t)| (k, t.timestamp())).collect()
    }

    #[test]
    fn a_write_ends_the_wait_of_every_intent_it_is_the_first_to_carry() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        // A create superseded before it was sent keeps its wait: the write that follows ends both.
        q.put(t0, owed_at(intent("a", WriteKind::Create, 2), 10));
        q.put(t0, owed_at(intent("a", WriteKind::Heartbeat, 3), 20));
        let job = q.take_due(t0, 10).remove(0);
        let (create, heartbeat, quiet) = (
            WriteKind::Create,
            WriteKind::Heartbeat,
            WriteKind::Finish(FinishCause::Quiet),
        );
        assert_eq!(since(&job), [(create, 10), (heartbeat, 20)]);
        // Not written (a 503): both still owed since as long as before, carried by the retry.
        q.answer(t0, &job, &status(503));
        q.put(t0, owed_at(intent("a", WriteKind::Heartbeat, 4), 30));
        let retry = q.take_due(t0 + Duration::from_secs(120), 10).remove(0);
        assert_eq!(since(&retry), [(create, 10), (heartbeat, 20)]);
        // Written while a newer state arrived: the patch that follows carries only the newer one.
        q.put(
            t0,
            owed_at(intent("a", WriteKind::Finish(FinishCause::Quiet), 5), 40),
        );
        assert_eq!(
            q.answer(t0, &retry, &status(201)),
            Settled::Again {
                after: Duration::ZERO
            }
        );
        let patch = q.take_due(t0 + Duration::from_secs(120), 10).remove(0);
        assert_eq!(since(&patch), [(quiet, 40)]);
        // A job put back before it started gives its wait back too.
        q.put_back(t0, patch);
        let again = q.take_due(t0 + Duration::from_secs(120), 10).remove(0);
        assert_eq!(since(&again), [(quiet, 40)]);
        assert_eq!(q.answer(t0, &again, &status(200)), Settled::Done);
        assert!(q.is_empty());
    }

    #[test]
    fn early_refreshes_wait_behind_every_other_write() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        // Objects that exist (their creates done), then refreshes for a, b and a heartbeat for c.
        for pod in ["a", "b", "c"] {
            q.put(t0, intent(pod, WriteKind::Create, 2));
        }
        for job in q.take_due(t0, 10) {
            assert_eq!(q.answer(t0, &job, &status(201)), Settled::Done);
        }
        q.put(t0, intent("a", WriteKind::Refresh, 3));
        q.put(t0, intent("b", WriteKind::Refresh, 3));
        let later = t0 + Duration::from_millis(5);
        q.put(later, intent("c", WriteKind::Heartbeat, 3));
        // c is due later than the refreshes, and still goes first.
        assert_eq!(names(&q.take_due(later, 1)), [name("c")]);
        // A refresh that becomes a finish before it is sent leaves the slow lane.
        q.put(later, intent("b", WriteKind::Finish(FinishCause::Quiet), 4));
        let next = q.take_due(later, 1);
        assert_eq!(names(&next), [name("b")]);
        assert_eq!(next[0].verb, Verb::Patch);
        assert_eq!(names(&q.take_due(later, 10)), [name("a")]);
        assert_eq!(q.next_due(), None);
    }

    /// What the own-object watch reports of pod `pod`'s series object.
    fn observed(pod: &str, count: u64, state: SeriesState, variant: u8) -> Observed {
        let s = intent(pod, WriteKind::Create, 2).series;
        Observed {
            target: Target::of(&intent(pod, WriteKind::Create, 2)),
            first: s.first,
            count,
            last: s.last,
            state,
            variant,
            version: Some(Version::Number(7)),
        }
    }

    #[test]
    fn a_write_the_leader_made_is_dropped_and_one_it_did_not_is_an_update_of_its_object() {
        let (t0, mut q) = one_create("a");
        // The leader's object holds an older count: the standby still owes the newer one, as an
        // update of that object at its name.
        assert!(!q.acknowledge(&observed("a", 1, SeriesState::Ongoing, 2)));
        let job = q.take_due(t0, 1).remove(0);
        assert_eq!((job.verb, job.variant), (Verb::Patch, 2));
        q.answer(t0, &job, &Answer::NotSent);
        // Then the leader writes what the standby holds: nothing is owed any more.
        assert!(q.acknowledge(&observed("a", 2, SeriesState::Ongoing, 2)));
        assert!(q.is_empty());
        assert!(q.take_due(t0 + Duration::from_secs(3600), 10).is_empty());
        assert_eq!(q.stuck_since(t0), None);
    }

    #[test]
    fn a_finish_is_owed_until_the_object_is_finished() {
        let t0 = Instant::now();
        let mut q = Queue::new(100, 100);
        q.put(t0, intent("a", WriteKind::Finish(FinishCause::Quiet), 2));
        assert!(!q.acknowledge(&observed("a", 2, SeriesState::Ongoing, 0)));
        assert_eq!(q.len(), 1);
        assert!(q.acknowledge(&observed("a", 2, SeriesState::Finished, 0)));
        assert!(q.is_empty());
    }

    #[test]
    fn an_object_of_another_series_or_a_write_in_flight_acknowledges_nothing() {
        let (t0, mut q) = one_create("a");
        let mut other = observed("a", 9, SeriesState::Finished, 0);
        other.first -= chrono::TimeDelta::hours(1);
        assert!(!q.acknowledge(&other));
        assert!(!q.acknowledge(&observed("b", 9, SeriesState::Ongoing, 0)));
        let _in_flight = q.take_due(t0, 1);
        assert!(!q.acknowledge(&observed("a", 9, SeriesState::Ongoing, 0)));
        assert_eq!(q.len(), 1);
    }
}

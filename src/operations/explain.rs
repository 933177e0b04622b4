//! What the operator says about its own trouble, and when (pure: counts and a clock in, reports
//! out). Counts drained from [`super::trouble`] are summed per object to report on (the policy that
//! governs the namespace, else the operator's Pod) and kind; each (object, kind) is reported at
//! most once per interval, with everything counted meanwhile in one note. However much trouble there
//! is, the operator's own Events stay at most one per kind, object and interval.
//!
//! The `Degraded` condition of a policy is True while some kind of trouble happened within the
//! quiet period in a namespace it governs, or anywhere for trouble that has no namespace (the alert
//! outbox and the key budget are shared by the whole cluster); its message names the kinds only,
//! so that it changes, and is written, only when the set of kinds does.

use super::trouble::Kind;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// The object an Event about the operator's trouble regards.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Target {
    /// The operator's own Pod: trouble without a namespace, or in one no policy governs.
    Pod,
    /// The EventSeriesPolicy (by name) that governs the namespace the trouble happened in.
    Policy(String),
}

/// One Event to publish.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub target: Target,
    pub kind: Kind,
    pub note: String,
}

/// What a policy's `Degraded` condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verdict {
    pub degraded: bool,
    pub reason: &'static str,
    pub message: String,
}

/// Most namespaces named in one note; the counts of the others are summed.
const NAMED: usize = 10;

/// Counts not reported yet for one object and kind.
#[derive(Debug, Default)]
struct Pending {
    namespaces: BTreeMap<String, u64>,
    /// In namespaces beyond [`NAMED`].
    elsewhere: u64,
    /// Not attributed to a namespace.
    unattributed: u64,
}

/// The reporting state: what is pending, when each (object, kind) was last reported, and when each
/// kind of trouble last happened.
#[derive(Debug)]
pub struct Explain {
    interval: Duration,
    quiet: Duration,
    pending: BTreeMap<(Target, Kind), Pending>,
    reported: HashMap<(Target, Kind), Instant>,
    /// Per policy: when each kind last happened in a namespace it governs.
    recent: HashMap<String, BTreeMap<Kind, Instant>>,
    /// When each kind without a namespace last happened.
    cluster: BTreeMap<Kind, Instant>,
}

impl Explain {
    /// Reports at most once per `interval` per object and kind; `Degraded` stays True for `quiet`
    /// after the last trouble.
    pub fn new(interval: Duration, quiet: Duration) -> Explain {
        Explain {
            interval,
            quiet,
            pending: BTreeMap::new(),
            reported: HashMap::new(),
            recent: HashMap::new(),
            cluster: BTreeMap::new(),
        }
    }

    /// Books `n` of `kind` at `now`, in `namespace` (when known), which `policy` governs (when one
    /// does).
    pub fn record(
        &mut self,
        now: Instant,
        kind: Kind,
        namespace: Option<&str>,
        policy: Option<&str>,
        n: u64,
    ) {
        if n == 0 {
            return;
        }
        let target = policy.map_or(Target::Pod, |p| Target::Policy(p.to_owned()));
        let pending = self.pending.entry((target, kind)).or_default();
        match namespace {
            None => pending.unattributed += n,
            Some(ns) if pending.namespaces.len() < NAMED || pending.namespaces.contains_key(ns) => {
                *pending.namespaces.entry(ns.to_owned()).or_insert(0) += n;
            }
            Some(_) => pending.elsewhere += n,
        }
        match (policy, namespace) {
            (Some(p), _) => {
                self.recent
                    .entry(p.to_owned())
                    .or_default()
                    .insert(kind, now);
            }
            (None, None) => {
                self.cluster.insert(kind, now);
            }
            // Trouble in a namespace no policy governs: no policy to call degraded.
            (None, Some(_)) => {}
        }
    }

    /// The Events due at `now`: one per (object, kind) with counts pending and not reported within
    /// the interval. What is not due yet stays pending.
    pub fn due(&mut self, now: Instant) -> Vec<Report> {
        let interval = self.interval;
        let reported = &mut self.reported;
        let mut out = Vec::new();
        self.pending.retain(|key, pending| {
            if reported
                .get(key)
                .is_some_and(|at| now.duration_since(*at) < interval)
            {
                return true;
            }
            reported.insert(key.clone(), now);
            out.push(Report {
                target: key.0.clone(),
                kind: key.1,
                note: note(key.1, pending),
            });
            false
        });
        self.reported
            .retain(|_, at| now.duration_since(*at) < interval);
        let quiet = self.quiet;
        let fresh = |at: &mut Instant| now.duration_since(*at) < quiet;
        self.cluster.retain(|_, at| fresh(at));
        for kinds in self.recent.values_mut() {
            kinds.retain(|_, at| fresh(at));
        }
        self.recent.retain(|_, kinds| !kinds.is_empty());
        out
    }

    /// The `Degraded` verdict on `policy` at `now`.
    pub fn verdict(&self, now: Instant, policy: &str) -> Verdict {
        let fresh = |at: &Instant| now.duration_since(*at) < self.quiet;
        let governed = self.recent.get(policy);
        let mut parts = Vec::new();
        let mut reason = None;
        for kind in Kind::ALL {
            let here = governed.and_then(|k| k.get(&kind)).is_some_and(fresh);
            let anywhere = self.cluster.get(&kind).is_some_and(fresh);
            if !(here || anywhere) {
                continue;
            }
            reason.get_or_insert(kind.reason());
            let scope = if here {
                "in namespaces it governs"
            } else {
                "cluster-wide"
            };
            parts.push(format!("{} ({scope})", kind.reason()));
        }
        let within = span(self.quiet);
        match reason {
            Some(reason) => Verdict {
                degraded: true,
                reason,
                message: format!(
                    "within the last {within}: {}; see the Events regarding this policy and the \
                     operator's Pod",
                    parts.join(", ")
                ),
            },
            None => Verdict {
                degraded: false,
                reason: "NoTrouble",
                message: format!("no trouble within the last {within}"),
            },
        }
    }
}

/// One note: how many of what, where.
fn note(kind: Kind, p: &Pending) -> String {
    let total = p.namespaces.values().sum::<u64>() + p.elsewhere + p.unattributed;
    let mut places: Vec<String> = p
        .namespaces
        .iter()
        .map(|(ns, n)| format!("namespace {ns} ({n})"))
        .collect();
    if p.elsewhere > 0 {
        places.push(format!("other namespaces ({})", p.elsewhere));
    }
    if p.unattributed > 0 {
        places.push(format!("cluster-wide ({})", p.unattributed));
    }
    let mut note = format!(
        "{total} {} since the last report: {}",
        kind.counted(),
        places.join(", ")
    );
    if note.len() > NOTE_BYTES {
        let mut end = NOTE_BYTES;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
    }
    note
}

/// The API server's limit on an events.k8s.io/v1 note, in bytes.
const NOTE_BYTES: usize = 1024;

/// A duration as people read it: whole minutes as "5m", else seconds.
fn span(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 && s.is_multiple_of(60) {
        format!("{}m", s / 60)
    } else {
        format!("{s}s")
    }
}

/// The `Degraded` condition for `verdict`; `previous` keeps `lastTransitionTime` while the status
/// stays.
pub fn condition(
    verdict: &Verdict,
    generation: Option<i64>,
    previous: Option<&Condition>,
    now: Time,
) -> Condition {
    let status = if verdict.degraded { "True" } else { "False" };
    let last_transition_time = previous
        .filter(|c| c.status == status)
        .map_or(now, |c| c.last_transition_time.clone());
    Condition {
        type_: "Degraded".into(),
        status: status.into(),
        reason: verdict.reason.into(),
        message: verdict.message.clone(),
        observed_generation: generation,
        last_transition_time,
    }
}

/// Whether a `Degraded: True` found on the object is kept although nothing here says so: a new
/// leader does not know what its predecessor saw, so it clears a `True` only once it has led for the
/// quiet period itself.
pub fn inherited(
    verdict: &Verdict,
    observed: Option<&Condition>,
    led_for: Duration,
    quiet: Duration,
) -> bool {
    !verdict.degraded && led_for < quiet && observed.is_some_and(|c| c.status == "True")
}

/// Whether `want` must be written: neither the object (`observed`) nor the last write (`sent`)
/// says it already. Times are left out: only a change of what the condition says is written.
pub fn needs_write(
    want: &Condition,
    sent: Option<&Condition>,
    observed: Option<&Condition>,
) -> bool {
    let same = |c: &Condition| {
        c.status == want.status
            && c.reason == want.reason
            && c.message == want.message
            && c.observed_generation == want.observed_generation
    };
    !(sent.is_some_and(same) || observed.is_some_and(same))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn explain() -> (Explain, Instant) {
        (Explain::new(MINUTE, 5 * MINUTE), Instant::now())
    }

    fn at(t0: Instant, secs: u64) -> Instant {
        t0 + Duration::from_secs(secs)
    }

    #[test]
    fn a_flood_is_one_event_per_object_and_kind_per_interval_with_the_counts_since_the_last() {
        let (mut e, t0) = explain();
        for _ in 0..1000 {
            e.record(t0, Kind::NameTaken, Some("team-a"), Some("p"), 1);
        }
        e.record(t0, Kind::NameTaken, Some("team-b"), Some("p"), 2);
        let first = e.due(t0);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].target, Target::Policy("p".into()));
        assert_eq!(first[0].kind, Kind::NameTaken);
        assert!(
            first[0].note.starts_with("1002 series names found taken"),
            "{}",
            first[0].note
        );
        assert!(
            first[0]
                .note
                .contains("namespace team-a (1000), namespace team-b (2)")
        );
        // More within the interval: held, then summed into the next report.
        for s in 1..60 {
            e.record(at(t0, s), Kind::NameTaken, Some("team-a"), Some("p"), 1);
            assert!(e.due(at(t0, s)).is_empty(), "reported again after {s}s");
        }
        let second = e.due(at(t0, 60));
        assert_eq!(second.len(), 1);
        assert!(second[0].note.starts_with("59 "), "{}", second[0].note);
        // Nothing more happened: nothing more is said.
        assert!(e.due(at(t0, 200)).is_empty());
    }

    #[test]
    fn kinds_and_objects_are_limited_separately_and_the_pod_takes_what_no_policy_governs() {
        let (mut e, t0) = explain();
        e.record(t0, Kind::WritesShed, Some("a"), Some("p"), 3);
        e.record(t0, Kind::WritesRejected, Some("a"), Some("p"), 1);
        e.record(t0, Kind::WritesShed, Some("b"), Some("q"), 1);
        e.record(t0, Kind::WritesShed, Some("free"), None, 1);
        e.record(t0, Kind::KeysGivenUp, None, None, 7);
        let mut due = e.due(t0);
        due.sort_by(|a, b| (&a.target, a.kind).cmp(&(&b.target, b.kind)));
        let got: Vec<_> = due.iter().map(|r| (r.target.clone(), r.kind)).collect();
        assert_eq!(
            got,
            vec![
                (Target::Pod, Kind::WritesShed),
                (Target::Pod, Kind::KeysGivenUp),
                (Target::Policy("p".into()), Kind::WritesRejected),
                (Target::Policy("p".into()), Kind::WritesShed),
                (Target::Policy("q".into()), Kind::WritesShed),
            ]
        );
        assert!(due[1].note.ends_with("cluster-wide (7)"), "{}", due[1].note);
        assert!(
            due[0].note.ends_with("namespace free (1)"),
            "{}",
            due[0].note
        );
    }

    #[test]
    fn a_note_names_at_most_ten_namespaces() {
        let (mut e, t0) = explain();
        for i in 0..25 {
            e.record(
                t0,
                Kind::WritesShed,
                Some(&format!("ns-{i:02}")),
                Some("p"),
                2,
            );
        }
        let due = e.due(t0);
        assert_eq!(due[0].note.matches("namespace ns-").count(), NAMED);
        assert!(due[0].note.starts_with("50 "));
        assert!(
            due[0].note.ends_with("other namespaces (30)"),
            "{}",
            due[0].note
        );
    }

    #[test]
    fn degraded_while_trouble_is_recent_then_not_after_the_quiet_period() {
        let (mut e, t0) = explain();
        assert!(!e.verdict(t0, "p").degraded);
        e.record(t0, Kind::NameTaken, Some("a"), Some("p"), 1);
        let _ = e.due(t0);
        let v = e.verdict(at(t0, 10), "p");
        assert!(v.degraded);
        assert_eq!(v.reason, "NameTaken");
        assert!(
            v.message.contains("NameTaken (in namespaces it governs)"),
            "{}",
            v.message
        );
        assert!(v.message.contains("within the last 5m"), "{}", v.message);
        // Another policy is not concerned by trouble in a namespace it does not govern.
        assert!(!e.verdict(at(t0, 10), "q").degraded);
        assert!(e.verdict(at(t0, 299), "p").degraded);
        let _ = e.due(at(t0, 300));
        let quiet = e.verdict(at(t0, 300), "p");
        assert!(!quiet.degraded);
        assert_eq!(quiet.reason, "NoTrouble");
    }

    #[test]
    fn trouble_without_a_namespace_degrades_every_policy_and_the_reason_is_stable() {
        let (mut e, t0) = explain();
        e.record(t0, Kind::KeysGivenUp, None, None, 1);
        e.record(at(t0, 1), Kind::WritesShed, Some("a"), Some("p"), 1);
        let p = e.verdict(at(t0, 2), "p");
        assert_eq!(p.reason, "WritesShed");
        assert!(
            p.message
                .contains("WritesShed (in namespaces it governs), KeysGivenUp (cluster-wide)"),
            "{}",
            p.message
        );
        let q = e.verdict(at(t0, 2), "q");
        assert_eq!(q.reason, "KeysGivenUp");
        // The same kinds again: the same words, so no new write.
        e.record(at(t0, 3), Kind::WritesShed, Some("b"), Some("p"), 5);
        assert_eq!(e.verdict(at(t0, 4), "p"), p);
    }

    #[test]
    fn a_new_leader_keeps_a_degraded_it_finds_for_the_quiet_period() {
        let (e, t0) = explain();
        let calm = e.verdict(t0, "p");
        let t = Time(k8s_openapi::jiff::Timestamp::from_second(1).unwrap());
        let found = condition(
            &Verdict {
                degraded: true,
                reason: "WritesShed",
                message: "m".into(),
            },
            Some(1),
            None,
            t.clone(),
        );
        assert!(inherited(
            &calm,
            Some(&found),
            Duration::from_secs(10),
            5 * MINUTE
        ));
        assert!(!inherited(&calm, Some(&found), 5 * MINUTE, 5 * MINUTE));
        let quiet = condition(&calm, Some(1), None, t);
        assert!(!inherited(&calm, Some(&quiet), Duration::ZERO, 5 * MINUTE));
        assert!(!inherited(&calm, None, Duration::ZERO, 5 * MINUTE));
    }

    #[test]
    fn the_condition_is_written_only_when_what_it_says_changes() {
        let t = |s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap());
        let (mut e, t0) = explain();
        let calm = condition(&e.verdict(t0, "p"), Some(1), None, t(100));
        assert_eq!(
            (calm.status.as_str(), calm.type_.as_str()),
            ("False", "Degraded")
        );
        assert!(needs_write(&calm, None, None));
        assert!(!needs_write(&calm, Some(&calm), None));
        assert!(!needs_write(&calm, None, Some(&calm)));
        // Rebuilt later from the object: same words, later time: not written.
        let again = condition(&e.verdict(t0, "p"), Some(1), Some(&calm), t(200));
        assert_eq!(again.last_transition_time, t(100));
        assert!(!needs_write(&again, None, Some(&calm)));
        e.record(t0, Kind::NameTaken, Some("a"), Some("p"), 1);
        let bad = condition(&e.verdict(t0, "p"), Some(1), Some(&calm), t(300));
        assert_eq!(bad.status, "True");
        assert_eq!(bad.last_transition_time, t(300));
        assert!(needs_write(&bad, Some(&calm), Some(&calm)));
    }
}

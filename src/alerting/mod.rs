//! Every loop an alert: the loops a policy's `spec.alert` selects, posted to Alertmanager's v2 API,
//! firing while Ongoing and resolved when Finished, evicted or gone.
//!
//! ```text
//!  engine (each scan) ──loops──▶ ┌─────────┐          ┌────────────────┐
//!  finish intents ─────────────▶ │ Planner │─alerts─▶ │ Outbox (bounded,│──POST /api/v2/alerts──▶ Alertmanager(s)
//!                                 └─────────┘          │ coalescing)    │   retried with backoff
//!                                                      └────────────────┘
//! ```
//!
//! An alert's labels are a function of the loop alone (the series' key and start, through its
//! derived name), so a re-post after a restart or a leader change is the same alert to
//! Alertmanager, which then sends no second notification. The planner re-posts every firing alert
//! before its `endsAt` runs out; a loop whose leader died stays firing through the failover.
//! Posting never waits on the series writes nor they on it: the planner hands alerts to an
//! [`outbox::Outbox`] without blocking, and a separate task delivers them.
//!
//! ## Through a hand-over
//!
//! Each post is valid for four resend intervals, and a new leader's first list of raw events can
//! take longer (minutes at 10^6 stored events). So the new leader posts as soon as its own series
//! objects are restored, before that list: every restored Ongoing loop its policy selects, by
//! the count and times its object holds, ranked and capped as below; it posts them again every
//! resend while the list runs. Nothing posted then is taken back later: the engine ignores its
//! clock until the list is replayed, so no loop finishes before (one that was already quiet is
//! resolved by its finish right after the list, as the previous leader would have resolved it).
//! A loop whose object holds fewer than `minCount` occurrences (or spans less than
//! `minDuration`) is not posted then, although the list may bring it over: the object is only a
//! lower bound of what the previous leader counted, and a page sent on a guess cannot be taken
//! back, while waiting costs at most a second notification, only for a loop that crossed its
//! threshold after its object was last written, and only when the list outlasts the validity.
//! Loops with no object yet wait for the list too. Where no replica led for longer than the
//! validity, Alertmanager has resolved the alerts already: a loop that ended meanwhile is posted
//! firing, then resolved after the list.
//!
//! ## Over the caps
//!
//! `--max-alerts` and `--max-alerts-per-namespace` bound the alerting loops. Every loop that may
//! alert is ranked oldest first, by its series' start, then by its key's hash (both go into its
//! name, the same on every replica), and taken in that order while both caps leave room. The set
//! is a function of the loops alone, so every leader picks the same one, whatever order it saw the
//! loops in. A firing loop that a higher-ranked one displaces is resolved (preempted), and fires
//! again when room comes back. Oldest first keeps preemption rare: a new loop ranks last and only
//! takes free room; a preemption needs a loop that started before a firing one but reached its
//! `minCount` or `minDuration` later, or a policy change. While no loop starts alerting or ends,
//! the set stays the same: it cannot flap. A loop ranks only once its start is a few seconds old
//! (`SETTLE` in the planner), so that loops started in the same second, which tie on a legacy
//! emitter's timestamps, are all there when the first of them ranks.

pub mod alertmanager;
mod delivery;
pub mod outbox;
mod planner;

pub use delivery::{AlertConfig, Delivery};
pub use planner::{Limits, Planner};

use crate::object::object_name;
use crate::reading::escape::{inert, visible};
use chrono::{DateTime, SecondsFormat, TimeDelta, Utc};
use event_series_core::alert::AlertRule;
use event_series_core::engine::LoopView;
use event_series_core::intent::Snapshot;
use event_series_core::key::{KeyId, KeyRef};
use serde::Serialize;
use std::collections::BTreeMap;

/// How much of its input the engine held when the planner looked at it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Input {
    /// The own series objects, restored; the first list of raw events still under way.
    Restored,
    /// Everything: the first list replayed, the watch feeding the engine.
    Complete,
}

/// Most characters of the note in an alert's annotations.
const NOTE_CHARS: usize = 256;

/// Most characters of one field (a name, a reason) in an alert's summary: enough for every field
/// the events.k8s.io API accepts (reasons of 128, names of 253), escapes included.
pub(super) const TEXT_CHARS: usize = 512;

/// One alert as Alertmanager's `POST /api/v2/alerts` takes it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Alert {
    pub labels: BTreeMap<&'static str, String>,
    pub annotations: BTreeMap<&'static str, String>,
    pub starts_at: DateTime<Utc>,
    /// In the future while firing (when Alertmanager resolves it by itself if no re-post comes),
    /// at or before now once resolved.
    pub ends_at: DateTime<Utc>,
}

impl Alert {
    /// The series' derived name: the alert's identity (see [`Loop::labels`]).
    pub fn series(&self) -> &str {
        self.labels.get("series").map_or("", String::as_str)
    }

    pub fn is_resolved(&self, now: DateTime<Utc>) -> bool {
        self.ends_at <= now
    }
}

/// What an alert says of one loop, taken from a live series or from its final snapshot.
pub struct Loop<'a> {
    pub id: KeyId,
    pub namespace: &'a str,
    pub key: &'a KeyRef<'a>,
    pub note: &'a str,
    pub count: u64,
    pub first: DateTime<Utc>,
    pub last: DateTime<Utc>,
}

impl<'a> Loop<'a> {
    pub fn of_view(v: &'a LoopView<'a>) -> Loop<'a> {
        Loop {
            id: v.id,
            namespace: v.namespace,
            key: &v.key,
            note: v.note,
            count: v.count,
            first: v.first,
            last: v.last,
        }
    }

    pub fn of_snapshot(s: &'a Snapshot, key: &'a KeyRef<'a>) -> Loop<'a> {
        Loop {
            id: s.id,
            namespace: &s.namespace,
            key,
            note: s.key.note(),
            count: s.count,
            first: s.first,
            last: s.last,
        }
    }

    /// The labels that identify the loop: the same on every replica and after every restart.
    /// `series` (the name derived from key and start) tells apart two loops of one object (two
    /// containers of a Pod) and a loop that resumed after it finished.
    /// Reason, type and reporting controller as the series object holds them (mapped to what the
    /// events.k8s.io API accepts), which is also what a restart reads back.
    fn labels(&self, rule: &AlertRule) -> BTreeMap<&'static str, String> {
        let k = self.key;
        let m = k.mapped();
        let mut labels = BTreeMap::new();
        labels.insert("alertname", rule.alertname.to_string());
        labels.insert("namespace", visible(self.namespace));
        labels.insert("kind", visible(k.regarding.kind));
        labels.insert("name", visible(k.regarding.name));
        labels.insert("reason", visible(m.reason));
        labels.insert("type", m.type_.to_owned());
        labels.insert("reporting_controller", visible(&m.reporting_controller));
        labels.insert("series", object_name(k, self.id, self.first));
        labels
    }

    /// What a human reads: every text a tenant wrote made inert for the receivers' markup
    /// ([`inert`]: no mention, link, emphasis or hidden character of theirs takes effect),
    /// unlike the labels, which identify the alert and keep the values.
    pub(super) fn annotations(&self) -> BTreeMap<&'static str, String> {
        let k = self.key;
        let m = k.mapped();
        let lasted = self.last - self.first;
        let mut a = BTreeMap::new();
        let text = |t: &str| inert(t, TEXT_CHARS);
        a.insert(
            "summary",
            format!(
                "{} {}/{}: {} {} times in {}",
                text(self.namespace),
                text(k.regarding.kind),
                text(k.regarding.name),
                text(m.reason),
                self.count,
                human(lasted)
            ),
        );
        a.insert("count", self.count.to_string());
        a.insert(
            "started",
            self.first.to_rfc3339_opts(SecondsFormat::Secs, true),
        );
        a.insert(
            "last_seen",
            self.last.to_rfc3339_opts(SecondsFormat::Secs, true),
        );
        if lasted >= TimeDelta::minutes(1) {
            let per_minute = self.count as f64 * 60.0 / lasted.num_seconds() as f64;
            a.insert("rate_per_minute", format!("{per_minute:.1}"));
        }
        a.insert("description", inert(self.note, NOTE_CHARS));
        a
    }

    /// Whether `rule` selects this loop.
    pub fn selected_by(&self, rule: &AlertRule) -> bool {
        rule.selects(self.key, self.count, self.first, self.last)
    }

    /// The alert firing until `until` unless posted again. It starts at the loop's first
    /// occurrence, but never after `now`: an emitter's clock ahead (within the clock tolerance)
    /// would otherwise make Alertmanager refuse it (endsAt before startsAt).
    pub fn firing(&self, rule: &AlertRule, until: DateTime<Utc>, now: DateTime<Utc>) -> Alert {
        Alert {
            labels: self.labels(rule),
            annotations: self.annotations(),
            starts_at: self.first.min(now),
            ends_at: until,
        }
    }

    /// The alert resolved at `at`.
    pub fn resolved(&self, rule: &AlertRule, at: DateTime<Utc>) -> Alert {
        let mut alert = self.firing(rule, at, at);
        alert.ends_at = at.max(alert.starts_at);
        alert
    }
}

/// `1h5m`, `4m10s`, `12s`: how long a loop has lasted, for a human.
fn human(d: TimeDelta) -> String {
    let s = d.num_seconds().max(0);
    match (s / 3600, s % 3600 / 60, s % 60) {
        (0, 0, s) => format!("{s}s"),
        (0, m, s) => format!("{m}m{s}s"),
        (h, m, _) => format!("{h}h{m}m"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::key::{ObjectRef, SeriesKey};

    fn key(reason: &str) -> KeyRef<'_> {
        SeriesKey {
            namespace: "shop",
            regarding: ObjectRef {
                api_version: "v1",
                kind: "Pod",
                namespace: "shop",
                name: "web-0",
                uid: "u1",
                field_path: "spec.containers{app}",
            },
            related: None,
            action: "",
            reason,
            reporting_controller: "kubelet",
            reporting_instance: "node-1",
            type_: "Warning",
        }
    }

    fn lp<'a>(k: &'a KeyRef<'a>, count: u64) -> Loop<'a> {
        let first = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_000);
        Loop {
            id: KeyId::new(7),
            namespace: "shop",
            key: k,
            note: "Back-off restarting\u{1b}[2J failed container",
            count,
            first,
            last: first + TimeDelta::seconds(330),
        }
    }

    #[test]
    fn an_alert_is_the_same_alert_whatever_its_count_and_annotations() {
        let k = key("BackOff");
        let rule = AlertRule::default();
        let now = DateTime::<Utc>::UNIX_EPOCH + TimeDelta::days(20_001);
        let a = lp(&k, 5).firing(&rule, now, now);
        let b = lp(&k, 50).firing(&rule, now + TimeDelta::minutes(1), now);
        assert_eq!(a.labels, b.labels);
        assert_ne!(a.annotations, b.annotations);
        assert_eq!(a.labels["alertname"], "KubernetesEventLoop");
        assert_eq!(a.labels["kind"], "Pod");
        assert_eq!(a.labels["name"], "web-0");
        assert!(a.series().starts_with("web-0."), "{}", a.series());
        assert_eq!(a.annotations["count"], "5");
        assert_eq!(
            a.annotations["summary"],
            "shop Pod/web-0: BackOff 5 times in 5m30s"
        );
        assert_eq!(a.annotations["rate_per_minute"], "0.9");
        assert!(!a.annotations["description"].contains('\u{1b}'));
        assert!(a.annotations["description"].contains("\\u{1b}［2J"));
        let r = lp(&k, 5).resolved(&rule, now);
        assert!(r.is_resolved(now) && !a.is_resolved(now - TimeDelta::seconds(1)));
        assert_eq!(r.labels, a.labels);
    }

    #[test]
    fn tenant_text_is_inert_in_annotations_and_exact_in_labels() {
        let k = key("<!channel>");
        let mut l = lp(&k, 5);
        l.note = "[Fix](https://x) <https://x|Fix> ok\u{e0041}";
        let a = l.firing(&AlertRule::default(), l.last, l.last);
        assert_eq!(a.labels["reason"], "<!channel>");
        assert_eq!(
            a.annotations["summary"],
            "shop Pod/web-0: ＜!channel＞ 5 times in 5m30s"
        );
        assert_eq!(
            a.annotations["description"],
            "［Fix］(https://x) ＜https://x｜Fix＞ ok\\u{e0041}"
        );
    }

    #[test]
    fn two_reasons_of_one_object_are_two_alerts() {
        let (k1, k2) = (key("BackOff"), key("Unhealthy"));
        let rule = AlertRule::default();
        let now = DateTime::<Utc>::UNIX_EPOCH;
        assert_ne!(
            lp(&k1, 5).firing(&rule, now, now).labels,
            lp(&k2, 5).firing(&rule, now, now).labels
        );
    }

    #[test]
    fn alerts_serialise_as_alertmanager_takes_them() {
        let k = key("BackOff");
        let a = lp(&k, 5).firing(
            &AlertRule::default(),
            DateTime::<Utc>::UNIX_EPOCH,
            DateTime::<Utc>::UNIX_EPOCH,
        );
        let json = serde_json::to_value([&a]).unwrap();
        assert!(json[0]["labels"]["alertname"].is_string());
        assert!(json[0]["startsAt"].as_str().unwrap().ends_with('Z'));
        assert!(json[0]["endsAt"].is_string());
        assert_eq!(json[0]["annotations"]["count"], "5");
    }
}

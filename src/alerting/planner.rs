//! Which alerts to post now: a pure function of the engine's loops, the series that ended and the
//! clock. No I/O: the [`super::outbox::Outbox`] delivers what it returns. How loops are ranked over
//! the caps, and what a new leader posts first, is in the module doc of [`super`].

use super::{Alert, Loop, TEXT_CHARS};
use crate::reading::escape::inert;
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::alert::AlertRule;
use event_series_core::engine::{Engine, LoopView};
use event_series_core::intent::Snapshot;
use event_series_core::key::KeyId;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

/// An alert posted as firing, kept to resolve it if its loop vanishes unwritten (a deleted
/// namespace, a policy that no longer selects it) and to resolve exactly what was posted: its
/// labels and summary, not the tenant's note (see [`kept`]).
struct Firing {
    first: DateTime<Utc>,
    namespace: Arc<str>,
    scan: u64,
    alert: Alert,
}

/// Why an alert is resolved from the planner's copy rather than from its loop's final state.
#[derive(Clone, Copy)]
enum Retired {
    /// Loops ranked higher took its slot.
    Preempted,
    /// Its loop is no longer watched (its namespace or the policy's selection gone).
    Gone,
    /// The policy's `alertname` changed: under the new name it is another alert.
    Renamed,
    /// The key's next loop began before this one's finish was seen.
    Superseded,
}

impl Retired {
    fn description(self) -> &'static str {
        match self {
            Retired::Preempted => {
                "No longer alerted: older loops took the alert slots (--max-alerts)."
            }
            Retired::Gone => "No longer alerted: its namespace or its policy's selection is gone.",
            Retired::Renamed => {
                "No longer alerted under this name: the policy's alertname changed."
            }
            Retired::Superseded => "Ended: the same key began a new loop.",
        }
    }
}

/// The copy of a firing alert the planner keeps: its identity (labels and start), not its
/// annotations, whose summary and note a tenant fills up to a few KB. So `--max-alerts` copies
/// cost their labels, whose values the API server bounds; a resend renders the alert afresh from
/// its loop, and one resolved from the copy says why ([`resolved`]).
fn kept(alert: &Alert) -> Alert {
    Alert {
        labels: alert.labels.clone(),
        annotations: BTreeMap::new(),
        starts_at: alert.starts_at,
        ends_at: alert.ends_at,
    }
}

/// Bounds on what one leader alerts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most loops alerting at once (a storm of 10^5 loops is one incident, not 10^5 pages).
    pub max: usize,
    /// Most of them in one namespace, so that one tenant's flood cannot take every slot.
    pub max_per_namespace: usize,
}

/// The alerts of one leader's term. A new leader starts empty and posts every firing loop as soon
/// as its own series objects are restored ([`Planner::scan_restored`]): the same alerts, so
/// Alertmanager notifies nothing new.
pub struct Planner {
    /// How often every firing alert is posted again. Each is valid for four of these, so that two
    /// lost posts or a failover do not resolve it.
    resend: TimeDelta,
    limits: Limits,
    firing: HashMap<KeyId, Firing>,
    scan: u64,
    next_resend: Option<DateTime<Utc>>,
    /// Loops selected at the last ranking beyond the limits.
    over_limit: usize,
    /// A scan has seen the engine with its whole input (the first list of raw events replayed).
    complete: bool,
    /// Until then: the loops (key and start) that the previous leader may have alerted, those its
    /// policy selects ranked within the caps, as the last scan found them. A finish resolves only
    /// these (or what this leader posted): a loop over the caps never alerted.
    handover: HashSet<(KeyId, DateTime<Utc>)>,
}

/// Which loops not firing yet a scan lets begin alerting.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Admit {
    /// Every loop its policy selects, unless quiet for `finishAfter`: its finish is on its way (or
    /// held until the input is known complete).
    Live,
    /// Every loop its policy selects, however long ago its object says it was last seen: objects
    /// are written at heartbeats, and no loop is finished before the raw list is replayed.
    Restored,
    /// None: the raw list is under way, and what it replayed early is not yet the whole story.
    Nothing,
}

impl Admit {
    fn takes(self, view: &LoopView<'_>, now: DateTime<Utc>) -> bool {
        match self {
            Admit::Live => view.seen + view.settings.finish_after > now && !settling(view, now),
            Admit::Restored => true,
            Admit::Nothing => false,
        }
    }
}

/// How long after its start a loop waits before it may begin alerting: long enough for the loops
/// that started in the same second to arrive. Legacy emitters time events to the second, so such
/// loops tie on their start and rank by their keys' hashes; a first comer let in before the others
/// arrive would be preempted by one of lower hash, a resolved and a new notification for two loops
/// that go on. Costs an alert at most this long; a scan comes every 5 s anyway.
const SETTLE: TimeDelta = TimeDelta::seconds(5);

/// Whether `view` started too recently to rank (an emitter's clock ahead of ours waits no longer).
fn settling(view: &LoopView<'_>, now: DateTime<Utc>) -> bool {
    view.first <= now && now - view.first < SETTLE
}

/// A loop that may alert, in the ranking of one scan.
struct Ranked {
    first: DateTime<Utc>,
    id: KeyId,
    namespace: Arc<str>,
    firing: bool,
}

/// What one ranking decided.
#[derive(Default)]
struct Choice {
    /// Loops that begin alerting, with their namespaces.
    fire: HashMap<KeyId, Arc<str>>,
    /// Firing loops whose slot a higher-ranked loop takes.
    preempt: Vec<KeyId>,
}

impl Planner {
    pub fn new(resend: TimeDelta, limits: Limits) -> Planner {
        Planner {
            resend,
            limits,
            firing: HashMap::new(),
            scan: 0,
            next_resend: None,
            over_limit: 0,
            complete: false,
            handover: HashSet::new(),
        }
    }

    pub fn firing(&self) -> usize {
        self.firing.len()
    }

    pub fn over_limit(&self) -> usize {
        self.over_limit
    }

    /// Bytes of the firing alerts' copies, counted as the outbox counts an alert.
    pub fn kept_bytes(&self) -> usize {
        self.firing
            .values()
            .map(|f| super::outbox::size(&f.alert))
            .sum()
    }

    /// A scan of the engine with its whole input: loops that began alerting since the last scan
    /// (and, every `resend`, every firing loop), firing alerts whose loop is gone without a finish,
    /// resolved, and those a higher-ranked loop preempts, resolved.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>) -> Vec<Alert> {
        self.complete = true;
        self.handover = HashSet::new();
        self.plan(engine, now, Admit::Live)
    }

    /// A scan while the first list of raw events is under way, the engine holding what the own
    /// series objects say. The first one posts every restored loop its policy selects (by the
    /// count and times its object holds), ranked and capped as [`Planner::scan`] does; the later
    /// ones re-post and retire, and admit nothing until the list is replayed.
    pub fn scan_restored(&mut self, engine: &Engine, now: DateTime<Utc>) -> Vec<Alert> {
        let admit = if self.scan == 0 {
            Admit::Restored
        } else {
            Admit::Nothing
        };
        self.handover = self.within_caps(engine);
        self.plan(engine, now, admit)
    }

    /// Every loop a policy selects that ranks within the caps (as [`Planner::rank`] takes them):
    /// what a leader with the engine's view would have alerted.
    fn within_caps(&self, engine: &Engine) -> HashSet<(KeyId, DateTime<Utc>)> {
        let mut all = Vec::new();
        engine.for_each_loop(|view| {
            if view.alert().is_some() {
                all.push((view.first, view.id, Arc::<str>::from(view.namespace)));
            }
        });
        let order: Vec<(DateTime<Utc>, KeyId, &str)> = all
            .iter()
            .map(|(first, id, ns)| (*first, *id, ns.as_ref()))
            .collect();
        let within = within_limits(&order, self.limits);
        all.iter()
            .zip(within)
            .filter(|(_, within)| *within)
            .map(|((first, id, _), _)| (*id, *first))
            .collect()
    }

    fn plan(&mut self, engine: &Engine, now: DateTime<Utc>, admit: Admit) -> Vec<Alert> {
        self.scan += 1;
        let resend_all = self.next_resend.is_none_or(|t| now >= t);
        if resend_all {
            self.next_resend = Some(now + self.resend);
        }
        let until = now + self.resend * 4;
        let mut out = Vec::new();
        let new = self.visit(engine, (now, until), resend_all, admit, &mut out);
        self.retire(now, &mut out);
        if admit == Admit::Nothing {
            return out;
        }
        let choice = self.rank(new);
        for id in choice.preempt {
            if let Some(f) = self.firing.remove(&id) {
                out.push(resolved(f.alert, now, Retired::Preempted));
            }
        }
        if !choice.fire.is_empty() {
            self.fire(engine, &choice.fire, (now, until), &mut out);
        }
        out
    }

    /// Marks the firing loops seen (posting them again when `resend_all`) and returns the loops
    /// `admit` lets begin alerting.
    fn visit(
        &mut self,
        engine: &Engine,
        (now, until): (DateTime<Utc>, DateTime<Utc>),
        resend_all: bool,
        admit: Admit,
        out: &mut Vec<Alert>,
    ) -> Vec<Ranked> {
        let scan = self.scan;
        let mut new = Vec::new();
        engine.for_each_loop(|view| {
            let Some(rule) = view.alert() else {
                return;
            };
            match self.firing.get_mut(&view.id) {
                // Already firing stays so, even quiet for finishAfter: its finish resolves it.
                Some(f) if f.first == view.first => {
                    f.scan = scan;
                    let renamed = f.alert.labels.get("alertname").map(String::as_str)
                        != Some(&*rule.alertname);
                    if resend_all || renamed {
                        let alert = Loop::of_view(&view).firing(rule, until, now);
                        let before = std::mem::replace(&mut f.alert, kept(&alert));
                        if renamed {
                            // The alert under the old name is another alert to Alertmanager,
                            // resolved now rather than left to lapse.
                            out.push(resolved(before, now, Retired::Renamed));
                        }
                        out.push(alert);
                    }
                }
                _ if admit.takes(&view, now) => new.push(Ranked {
                    first: view.first,
                    id: view.id,
                    namespace: Arc::from(view.namespace),
                    firing: false,
                }),
                _ => {}
            }
        });
        new
    }

    /// Firing alerts this scan did not see: resolved.
    fn retire(&mut self, now: DateTime<Utc>, out: &mut Vec<Alert>) {
        let scan = self.scan;
        let gone: Vec<KeyId> = self
            .firing
            .iter()
            .filter(|(_, f)| f.scan != scan)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some(f) = self.firing.remove(&id) {
                out.push(resolved(f.alert, now, Retired::Gone));
            }
        }
    }

    /// Which loops alert: the firing ones and `new` as [`within_limits`] takes them. So the set is
    /// a function of the loops alone, not of the order they came in; a firing loop left out is
    /// preempted. The rest are counted.
    fn rank(&mut self, new: Vec<Ranked>) -> Choice {
        let mut choice = Choice::default();
        self.over_limit = 0;
        if new.is_empty() {
            // What fires was taken within the caps, and leaving can only free room.
            return choice;
        }
        let mut all = new;
        all.extend(self.firing.iter().map(|(id, f)| Ranked {
            first: f.first,
            id: *id,
            namespace: f.namespace.clone(),
            firing: true,
        }));
        let order: Vec<(DateTime<Utc>, KeyId, &str)> = all
            .iter()
            .map(|r| (r.first, r.id, r.namespace.as_ref()))
            .collect();
        let within = within_limits(&order, self.limits);
        for (r, within) in all.iter().zip(within) {
            if within {
                if !r.firing {
                    choice.fire.insert(r.id, r.namespace.clone());
                }
            } else {
                self.over_limit += 1;
                if r.firing {
                    choice.preempt.push(r.id);
                }
            }
        }
        choice
    }

    /// Posts the loops `chosen` to begin alerting.
    fn fire(
        &mut self,
        engine: &Engine,
        chosen: &HashMap<KeyId, Arc<str>>,
        (now, until): (DateTime<Utc>, DateTime<Utc>),
        out: &mut Vec<Alert>,
    ) {
        let scan = self.scan;
        engine.for_each_loop(|view| {
            let (Some(namespace), Some(rule)) = (chosen.get(&view.id), view.alert()) else {
                return;
            };
            let alert = Loop::of_view(&view).firing(rule, until, now);
            let firing = Firing {
                first: view.first,
                namespace: namespace.clone(),
                scan,
                alert: kept(&alert),
            };
            out.push(alert);
            // The key's previous loop, ended without a finish seen here: resolved.
            if let Some(earlier) = self.firing.insert(view.id, firing) {
                out.push(resolved(earlier.alert, now, Retired::Superseded));
            }
        });
    }

    /// A series written Finished (quiet, a gap or evicted) at `at`: its alert resolved, carrying
    /// the final count. Alerted by this leader: exactly what it posted. Otherwise only before this
    /// leader's first scan of its whole input (a loop that ended while the Lease changed hands,
    /// which the previous leader may have alerted), if its policy's `rule` selects it and it
    /// ranked within the caps at the last scan: a loop that never alerted is never resolved.
    pub fn ended(
        &mut self,
        s: &Snapshot,
        rule: Option<&AlertRule>,
        at: DateTime<Utc>,
    ) -> Option<Alert> {
        let key = s.key.view();
        let lp = Loop::of_snapshot(s, &key);
        match self.firing.get(&s.id) {
            Some(f) if f.first == s.first => {
                let mut alert = self.firing.remove(&s.id)?.alert;
                alert.ends_at = at.max(alert.starts_at);
                alert.annotations = lp.annotations();
                Some(alert)
            }
            _ if !self.complete && self.handover.contains(&(s.id, s.first)) => rule
                .filter(|r| lp.selected_by(r))
                .map(|r| lp.resolved(r, at)),
            _ => None,
        }
    }
}

/// Which of `loops` (start, key, namespace) alert within `limits`: the namespaces take the slots in
/// turn, each its oldest loops first (by start, then key: the same order on every replica). So a
/// namespace's k-th oldest loop goes before any namespace's (k+1)-th, and each namespace gets its
/// share of `max` (the slots over the namespaces with loops) whatever another floods; none more
/// than `max_per_namespace`.
fn within_limits(loops: &[(DateTime<Utc>, KeyId, &str)], limits: Limits) -> Vec<bool> {
    let mut by_age: Vec<usize> = (0..loops.len()).collect();
    by_age.sort_unstable_by_key(|&i| (loops[i].0, loops[i].1));
    // Each loop's place among its namespace's, oldest first.
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut place = vec![0; loops.len()];
    for &i in &by_age {
        let n = seen.entry(loops[i].2).or_insert(0);
        place[i] = *n;
        *n += 1;
    }
    by_age.sort_by_key(|&i| (place[i], loops[i].0, loops[i].1));
    let mut within = vec![false; loops.len()];
    for (taken, &i) in by_age.iter().enumerate() {
        if taken >= limits.max {
            break;
        }
        within[i] = place[i] < limits.max_per_namespace;
    }
    within
}

/// A kept copy resolved at `at`: a summary from its labels (made inert like every tenant text in
/// an annotation) and a description saying why.
fn resolved(mut alert: Alert, at: DateTime<Utc>, why: Retired) -> Alert {
    alert.ends_at = at.max(alert.starts_at);
    let label = |name| {
        inert(
            alert.labels.get(name).map_or("", String::as_str),
            TEXT_CHARS,
        )
    };
    let summary = format!(
        "{} {}/{}: {}",
        label("namespace"),
        label("kind"),
        label("name"),
        label("reason")
    );
    alert.annotations.insert("summary", summary);
    alert
        .annotations
        .insert("description", why.description().to_owned());
    alert
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::engine::Engine;
    use event_series_core::intent::{SeriesState, StoredSeries, WriteKind};
    use event_series_core::key::{KeyBuf, KeyRef, ObjectRef, Observation, RawId};
    use event_series_core::settings::Settings;
    use std::sync::Arc;

    fn limits(max: usize) -> Limits {
        Limits {
            max,
            max_per_namespace: max,
        }
    }

    fn t0() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap_or_default()
    }

    /// A kubelet BackOff of Pod `name` in `ns`, its raw object counting `count`, the first 10 s
    /// before t0 (settled by then), the last at t0.
    fn observation_in<'a>(ns: &'a str, name: &'a str, count: u64) -> Observation<'a> {
        Observation {
            raw: RawId::of(ns, name, ""),
            resource_version: None,
            namespace: ns,
            key: KeyRef {
                namespace: ns,
                regarding: ObjectRef {
                    api_version: "v1",
                    kind: "Pod",
                    namespace: ns,
                    name,
                    uid: "",
                    field_path: "",
                },
                reason: "BackOff",
                reporting_controller: "kubelet",
                type_: "Warning",
                ..KeyRef::default()
            },
            note: "Back-off restarting failed container",
            count,
            first: t0() - TimeDelta::seconds(10),
            last: t0(),
            written: None,
            created: None,
            truncated: false,
        }
    }

    fn engine(min_count: u64) -> Engine {
        Engine::with_settings(Settings {
            alert: Some(Arc::new(AlertRule {
                min_count,
                ..AlertRule::default()
            })),
            first_refresh: TimeDelta::zero(),
            ..Settings::default()
        })
    }

    #[test]
    fn a_loop_fires_once_is_reposted_every_resend_and_resolves_at_its_finish() {
        let mut e = engine(3);
        let mut p = Planner::new(TimeDelta::minutes(1), limits(100));
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        e.observe(at(0), &observation_in("shop", "web-0", 2));
        e.tick(at(1));
        assert!(p.scan(&e, at(1)).is_empty(), "count 2 is below minCount 3");
        e.observe(at(10), &observation_in("shop", "web-0", 3));
        let first = p.scan(&e, at(11));
        assert_eq!(first.len(), 1);
        assert!(!first[0].is_resolved(at(11)));
        assert!(
            p.scan(&e, at(20)).is_empty(),
            "nothing new before the resend"
        );
        let again = p.scan(&e, at(71));
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].labels, first[0].labels);
        e.tick(at(10 + 6 * 60 + 1));
        let finish = e
            .take_intents()
            .into_iter()
            .find(|i| matches!(i.kind, WriteKind::Finish(_)))
            .expect("finished");
        let rule = e.alert_rule("shop").cloned();
        let done = p
            .ended(&finish.series, rule.as_deref(), finish.due)
            .unwrap();
        assert!(done.is_resolved(at(10 + 6 * 60 + 1)));
        assert_eq!(done.labels, first[0].labels);
        assert_eq!(p.firing(), 0);
        assert!(p.scan(&e, at(500)).is_empty());
    }

    /// 10,000 loops in 100 namespaces alert, `note` in each.
    fn ten_thousand_alerting(note: &str) -> (Engine, Planner, Vec<Alert>) {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        let names: Vec<(String, String)> = (0..10_000)
            .map(|i| (format!("ns-{}", i % 100), format!("web-{i}")))
            .collect();
        for (ns, name) in &names {
            let mut o = observation_in(ns, name, 2);
            o.note = note;
            e.observe(at(0), &o);
        }
        e.tick(at(1));
        let mut p = Planner::new(TimeDelta::minutes(1), limits(10_000));
        let posted = p.scan(&e, at(2));
        assert_eq!((posted.len(), p.firing()), (10_000, 10_000));
        (e, p, posted)
    }

    /// Notes of 1,024 characters of markup (768 B each once made inert) cost the planner's copies
    /// nothing: it keeps labels, not what a tenant writes. A loop that vanishes is resolved with
    /// a summary from its labels and a description saying why.
    #[test]
    fn firing_copies_leave_the_tenants_notes_out() {
        let (_, short, short_posted) = ten_thousand_alerting("x");
        let (mut e, mut long, long_posted) = ten_thousand_alerting(&"<".repeat(1024));
        let posted = |a: &[Alert]| a.iter().map(super::super::outbox::size).sum::<usize>();
        assert!(posted(&long_posted) > posted(&short_posted) + 10_000 * 700);
        assert_eq!(long.kept_bytes(), short.kept_bytes());
        e.namespace_removed("ns-7");
        let gone = long.scan(&e, t0() + TimeDelta::seconds(3));
        assert_eq!(gone.len(), 100);
        for alert in &gone {
            let text = |name| alert.annotations.get(name).map_or("", String::as_str);
            assert_eq!(text("description"), Retired::Gone.description());
            let pod = alert.labels.get("name").map_or("", String::as_str);
            assert_eq!(text("summary"), format!("ns-7 Pod/{pod}: BackOff"));
        }
    }

    #[test]
    fn a_new_leader_posts_the_same_alert_and_a_vanished_loop_is_resolved() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        e.observe(at(0), &observation_in("shop", "web-0", 2));
        e.tick(at(1));
        let before = Planner::new(TimeDelta::minutes(1), limits(100)).scan(&e, at(2));
        let mut after = Planner::new(TimeDelta::minutes(1), limits(100));
        let posted = after.scan(&e, at(30));
        assert_eq!(before[0].labels, posted[0].labels);
        e.namespace_removed("shop");
        let gone = after.scan(&e, at(40));
        assert_eq!(gone.len(), 1);
        assert!(gone[0].is_resolved(at(40)));
        assert_eq!(gone[0].labels, posted[0].labels);
    }

    #[test]
    fn a_namespace_within_its_share_alerts_beside_an_older_flood_that_fills_the_cap() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        for name in ["a", "b", "c", "d", "e", "f"] {
            e.observe(at(0), &observation_in("flood", name, 2));
        }
        // Younger than every loop of the flood.
        e.observe(at(10), &observation_in("quiet", "web", 2));
        e.tick(at(11));
        let limits = Limits {
            max: 4,
            max_per_namespace: 100,
        };
        let mut p = Planner::new(TimeDelta::minutes(1), limits);
        let posted = p.scan(&e, at(12));
        let quiet = posted
            .iter()
            .filter(|a| a.labels["namespace"] == "quiet")
            .count();
        assert_eq!(
            quiet, 1,
            "the quiet namespace's loop alerts: it is within its share"
        );
        assert_eq!((p.firing(), p.over_limit()), (4, 3));
    }

    #[test]
    fn beyond_the_limits_the_oldest_loops_alert_and_one_namespace_cannot_take_them_all() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        for name in ["a", "b", "c", "d"] {
            e.observe(at(0), &observation_in("flood", name, 2));
        }
        e.observe(at(0), &observation_in("quiet", "web", 2));
        e.tick(at(1));
        let limits = Limits {
            max: 4,
            max_per_namespace: 2,
        };
        let mut p = Planner::new(TimeDelta::minutes(1), limits);
        let posted = p.scan(&e, at(2));
        let namespaces: Vec<&str> = posted
            .iter()
            .map(|a| a.labels["namespace"].as_str())
            .collect();
        assert_eq!(namespaces.iter().filter(|n| **n == "flood").count(), 2);
        assert!(namespaces.contains(&"quiet"), "{namespaces:?}");
        assert_eq!((p.firing(), p.over_limit()), (3, 2));
        // Another leader picks the same loops.
        let mut q = Planner::new(TimeDelta::minutes(1), limits);
        let mut again: Vec<String> = q
            .scan(&e, at(3))
            .iter()
            .map(|a| a.series().to_owned())
            .collect();
        let mut first: Vec<String> = posted.iter().map(|a| a.series().to_owned()).collect();
        again.sort();
        first.sort();
        assert_eq!(again, first);
    }

    #[test]
    fn a_new_alertname_resolves_the_alert_under_the_old_one_at_once() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        e.observe(at(0), &observation_in("shop", "web-0", 2));
        e.tick(at(1));
        let mut p = Planner::new(TimeDelta::minutes(1), limits(100));
        let first = p.scan(&e, at(2));
        assert_eq!(first.len(), 1);
        e.set_policies(
            at(3),
            event_series_core::settings::PolicySet::uniform(Settings {
                alert: Some(Arc::new(AlertRule {
                    min_count: 2,
                    alertname: "ShopLoop".into(),
                    ..AlertRule::default()
                })),
                first_refresh: TimeDelta::zero(),
                ..Settings::default()
            }),
        );
        let then = p.scan(&e, at(4));
        let old: Vec<&Alert> = then
            .iter()
            .filter(|a| a.labels == first[0].labels)
            .collect();
        assert!(old.len() == 1 && old[0].is_resolved(at(4)), "{then:#?}");
        let new: Vec<&Alert> = then
            .iter()
            .filter(|a| a.labels["alertname"] == "ShopLoop")
            .collect();
        assert!(new.len() == 1 && !new[0].is_resolved(at(4)), "{then:#?}");
        assert_eq!(p.firing(), 1);
    }

    /// A loop of Pod `name` in `ns` first seen counting `count` occurrences, the last at `at`.
    fn loop_at<'a>(ns: &'a str, name: &'a str, count: u64, at: DateTime<Utc>) -> Observation<'a> {
        Observation {
            first: at,
            last: at,
            ..observation_in(ns, name, count)
        }
    }

    /// The series of the alerts firing after `posted`, sorted.
    fn firing_after(posted: &[Vec<Alert>], now: DateTime<Utc>) -> Vec<String> {
        let mut firing = std::collections::BTreeMap::new();
        for alert in posted.iter().flatten() {
            firing.insert(alert.series().to_owned(), !alert.is_resolved(now));
        }
        firing
            .into_iter()
            .filter(|(_, f)| *f)
            .map(|(s, _)| s)
            .collect()
    }

    #[test]
    fn two_planners_fed_the_same_loops_in_different_orders_alert_the_same_ones() {
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        let limits = Limits {
            max: 3,
            max_per_namespace: 2,
        };
        // Started oldest first (a, b, c in "flood"; d in "quiet"), seen newest first by one
        // leader, all at once by the other.
        let starts = [
            ("flood", "a", 0),
            ("flood", "b", 10),
            ("flood", "c", 20),
            ("quiet", "d", 30),
        ];
        let mut e = engine(2);
        let mut one = Planner::new(TimeDelta::minutes(1), limits);
        let mut posted = Vec::new();
        for (i, (ns, name, start)) in starts.iter().rev().enumerate() {
            e.observe(at(40 + i as i64), &loop_at(ns, name, 2, at(*start)));
            e.tick(at(40 + i as i64));
            posted.push(one.scan(&e, at(40 + i as i64)));
        }
        let mut other = Planner::new(TimeDelta::minutes(1), limits);
        let all_at_once = vec![other.scan(&e, at(50))];
        let (seen_one_by_one, seen_at_once) = (
            firing_after(&posted, at(50)),
            firing_after(&all_at_once, at(50)),
        );
        assert_eq!(seen_one_by_one, seen_at_once);
        let names: Vec<&str> = seen_at_once
            .iter()
            .map(|s| s.split('.').next().unwrap_or(""))
            .collect();
        assert_eq!(names, ["a", "b", "d"], "the oldest, two of flood at most");
        assert_eq!((one.firing(), one.over_limit()), (3, 1));
    }

    #[test]
    fn an_older_loop_that_begins_alerting_takes_the_slot_of_a_younger_one() {
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        let mut e = engine(3);
        let mut p = Planner::new(TimeDelta::minutes(1), limits(1));
        // "old" started first but is slow: it reaches minCount after "young".
        e.observe(at(0), &loop_at("shop", "old", 2, at(0)));
        e.observe(at(10), &loop_at("shop", "young", 3, at(10)));
        e.tick(at(16));
        let first = p.scan(&e, at(16));
        assert_eq!(first.len(), 1);
        assert!(first[0].series().starts_with("young."));
        e.observe(
            at(20),
            &Observation {
                first: at(0),
                ..loop_at("shop", "old", 3, at(20))
            },
        );
        e.tick(at(21));
        let then = p.scan(&e, at(21));
        let fired: Vec<&str> = then
            .iter()
            .filter(|a| !a.is_resolved(at(21)))
            .map(Alert::series)
            .collect();
        let resolved: Vec<&str> = then
            .iter()
            .filter(|a| a.is_resolved(at(21)))
            .map(Alert::series)
            .collect();
        assert!(
            fired.len() == 1 && fired[0].starts_with("old."),
            "{then:#?}"
        );
        assert!(
            resolved.len() == 1 && resolved[0].starts_with("young."),
            "{then:#?}"
        );
        assert_eq!((p.firing(), p.over_limit()), (1, 1));
        // No flapping: nothing changes while the loops go on.
        assert!(p.scan(&e, at(30)).is_empty());
        // A new leader picks the same one.
        let mut fresh = Planner::new(TimeDelta::minutes(1), limits(1));
        let again = fresh.scan(&e, at(31));
        assert!(again.len() == 1 && again[0].series() == fired[0]);
    }

    /// Legacy emitters time an event to the second, so loops that start together tie on their
    /// start and rank by their keys' hashes. Scans while such loops still arrive must not let the
    /// first comers alert, or the later ones of lower hash would preempt them: one resolved and one
    /// new notification each, for loops that go on.
    #[test]
    fn loops_that_start_in_the_same_second_alert_without_a_preemption_however_they_arrive() {
        let ms = |ms: i64| t0() + TimeDelta::milliseconds(ms);
        let names: Vec<String> = (0..20).map(|i| format!("web-{i}")).collect();
        let mut e = engine(2);
        let mut p = Planner::new(TimeDelta::minutes(1), limits(5));
        let mut posted = Vec::new();
        for (i, name) in names.iter().enumerate() {
            let arrived = ms(i as i64 * 200);
            e.observe(arrived, &loop_at("shop", name, 2, t0()));
            e.tick(arrived);
            posted.push(p.scan(&e, arrived + TimeDelta::milliseconds(100)));
        }
        let end = t0() + TimeDelta::seconds(10);
        e.tick(end);
        posted.push(p.scan(&e, end));
        let resolved: Vec<&str> = posted
            .iter()
            .flatten()
            .filter(|a| a.is_resolved(end))
            .map(Alert::series)
            .collect();
        assert!(resolved.is_empty(), "preempted: {resolved:?}");
        let mut fresh = Planner::new(TimeDelta::minutes(1), limits(5));
        let at_once = firing_after(&[fresh.scan(&e, end)], end);
        assert_eq!(firing_after(&posted, end), at_once);
        assert_eq!(at_once.len(), 5);
    }

    /// The Ongoing object of Pod `name`'s loop in "shop" as a restart reads it back: `count`
    /// occurrences from t0 to `last`, written then.
    fn stored(name: &str, count: u64, last: DateTime<Utc>) -> StoredSeries {
        let obs = observation_in("shop", name, count);
        StoredSeries {
            id: obs.key.id(None),
            namespace: "shop".into(),
            key: KeyBuf::new(&obs.key, obs.note),
            count,
            first: t0(),
            last,
            state: SeriesState::Ongoing,
            watermark: 0,
            sources: Vec::new(),
            last_write: Some(last),
            name_variant: 0,
        }
    }

    #[test]
    fn a_new_leader_posts_the_restored_loops_before_the_raw_list_and_nothing_it_takes_back() {
        let now = t0() + TimeDelta::minutes(30);
        let at = |s: i64| now + TimeDelta::seconds(s);
        let mut e = engine(3);
        e.begin_recovery();
        // Written 20 minutes ago, at a heartbeat: quiet for finishAfter by its object alone.
        e.restore(now, stored("web-0", 5, t0() + TimeDelta::minutes(10)));
        // Below minCount by its object: maybe not by the raw list, but no page on a guess.
        e.restore(now, stored("web-1", 2, t0() + TimeDelta::minutes(10)));
        let mut p = Planner::new(TimeDelta::minutes(1), limits(10));
        let posted = p.scan_restored(&e, now);
        assert_eq!(posted.len(), 1, "{posted:#?}");
        assert!(posted[0].series().starts_with("web-0.") && !posted[0].is_resolved(now));
        assert!(
            p.scan_restored(&e, at(5)).is_empty(),
            "nothing before the resend"
        );
        let again = p.scan_restored(&e, at(61));
        assert!(again.len() == 1 && again[0].labels == posted[0].labels);
        // The raw list ends: both loops were quiet; their finishes come now, not before.
        assert_eq!(
            e.take_intents(),
            [],
            "nothing finished while the list was under way"
        );
        e.end_recovery(at(62), at(62));
        let rule = e.alert_rule("shop").cloned();
        let ended: Vec<Option<Alert>> = e
            .take_intents()
            .into_iter()
            .filter(|i| matches!(i.kind, WriteKind::Finish(_)))
            .map(|i| p.ended(&i.series, rule.as_deref(), i.due))
            .collect();
        assert_eq!(ended.len(), 2);
        let resolved: Vec<&Alert> = ended.iter().flatten().collect();
        assert_eq!(resolved.len(), 1, "web-1 never alerted: {resolved:#?}");
        assert_eq!(resolved[0].labels, posted[0].labels);
        assert!(resolved[0].is_resolved(at(62)));
        assert!(p.scan(&e, at(63)).is_empty());
    }

    #[test]
    fn a_loop_quiet_for_finish_after_is_not_posted_and_never_fired_loops_are_not_resolved() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        e.observe(at(0), &observation_in("shop", "web-0", 2));
        // The input clock held back: the finish is due, not yet made.
        let mut p = Planner::new(TimeDelta::minutes(1), limits(100));
        assert!(
            p.scan(&e, at(6 * 60 + 1)).is_empty(),
            "its finish is on its way"
        );
        // One firing already, its finish held back by the input clock: it stays firing.
        let mut firing = Planner::new(TimeDelta::minutes(1), limits(100));
        assert_eq!(firing.scan(&e, at(10)).len(), 1);
        // A new leader that restored the loop before the raw list (its object below the caps).
        let mut fresh = Planner::new(TimeDelta::minutes(1), limits(100));
        fresh.scan_restored(&e, at(11));
        let mut before_its_scan = Planner::new(TimeDelta::minutes(1), limits(100));
        let later = firing.scan(&e, at(6 * 60 + 1));
        assert!(
            later.iter().all(|a| !a.is_resolved(at(6 * 60 + 1))),
            "not resolved by a scan: {later:?}"
        );
        assert_eq!(firing.firing(), 1);
        e.tick(at(6 * 60 + 2));
        let finish = e
            .take_intents()
            .into_iter()
            .find(|i| matches!(i.kind, WriteKind::Finish(_)));
        let finish = finish.expect("finished");
        let rule = e.alert_rule("shop").cloned();
        assert_eq!(p.ended(&finish.series, rule.as_deref(), finish.due), None);
        // A new leader's first look: a loop that ended during the handover is resolved.
        assert!(
            fresh
                .ended(&finish.series, rule.as_deref(), finish.due)
                .is_some()
        );
        // Unless it knows nothing of it: no resolved post on a guess.
        assert_eq!(
            before_its_scan.ended(&finish.series, rule.as_deref(), finish.due),
            None
        );
    }

    #[test]
    fn a_new_leader_resolves_no_loop_that_never_alerted_over_the_caps() {
        let now = t0() + TimeDelta::minutes(30);
        let at = |s: i64| now + TimeDelta::seconds(s);
        let mut e = engine(3);
        e.begin_recovery();
        for name in ["web-0", "web-1", "web-2"] {
            e.restore(now, stored(name, 5, t0() + TimeDelta::minutes(10)));
        }
        let mut p = Planner::new(TimeDelta::minutes(1), limits(2));
        let posted = p.scan_restored(&e, now);
        assert_eq!(posted.len(), 2, "{posted:#?}");
        e.end_recovery(at(1), at(1));
        let rule = e.alert_rule("shop").cloned();
        let resolved: Vec<Alert> = e
            .take_intents()
            .into_iter()
            .filter(|i| matches!(i.kind, WriteKind::Finish(_)))
            .filter_map(|i| p.ended(&i.series, rule.as_deref(), i.due))
            .collect();
        let mut posted: Vec<&str> = posted.iter().map(Alert::series).collect();
        let mut ended: Vec<&str> = resolved.iter().map(Alert::series).collect();
        posted.sort_unstable();
        ended.sort_unstable();
        assert_eq!(
            ended, posted,
            "the loop over the caps never alerted: no resolved post"
        );
    }
}

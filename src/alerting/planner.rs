//! Which alerts to post now: a pure function of the engine's loops, the series that ended and the
//! clock. No I/O: the [`super::outbox::Outbox`] delivers what it returns.

use super::{Alert, Loop};
use chrono::{DateTime, TimeDelta, Utc};
use event_series_core::alert::AlertRule;
use event_series_core::engine::Engine;
use event_series_core::intent::Snapshot;
use event_series_core::key::KeyId;
use std::collections::HashMap;
use std::sync::Arc;

/// An alert posted as firing, kept to resolve it if its loop vanishes unwritten (a deleted
/// namespace, a policy that no longer selects it) and to resolve exactly what was posted.
struct Firing {
    first: DateTime<Utc>,
    namespace: Arc<str>,
    scan: u64,
    alert: Alert,
}

/// Bounds on what one leader alerts.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most loops alerting at once (a storm of 10^5 loops is one incident, not 10^5 pages).
    pub max: usize,
    /// Most of them in one namespace, so that one tenant's flood cannot take every slot.
    pub max_per_namespace: usize,
}

/// The alerts of one leader's term. A new leader starts empty and posts every firing loop at its
/// first scan: the same alerts, so Alertmanager notifies nothing new.
pub struct Planner {
    /// How often every firing alert is posted again. Each is valid for four of these, so that two
    /// lost posts or a failover do not resolve it.
    resend: TimeDelta,
    limits: Limits,
    firing: HashMap<KeyId, Firing>,
    per_namespace: HashMap<Arc<str>, usize>,
    scan: u64,
    next_resend: Option<DateTime<Utc>>,
    /// Loops selected at the last scan beyond the limits.
    over_limit: usize,
}

/// A loop that began alerting in this scan, before the limits pick among them.
struct Candidate {
    first: DateTime<Utc>,
    id: KeyId,
    namespace: Arc<str>,
}

impl Planner {
    pub fn new(resend: TimeDelta, limits: Limits) -> Planner {
        Planner {
            resend,
            limits,
            firing: HashMap::new(),
            per_namespace: HashMap::new(),
            scan: 0,
            next_resend: None,
            over_limit: 0,
        }
    }

    pub fn firing(&self) -> usize {
        self.firing.len()
    }

    pub fn over_limit(&self) -> usize {
        self.over_limit
    }

    /// Loops that began alerting since the last scan (and, every `resend`, every firing loop), and
    /// firing alerts whose loop is gone without a finish, resolved. A loop already quiet for
    /// `finishAfter` is not posted firing: its finish is on its way. Beyond the limits, the
    /// oldest loops alert (by start, then key), so that every leader picks the same ones.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>) -> Vec<Alert> {
        self.scan += 1;
        let resend_all = self.next_resend.is_none_or(|t| now >= t);
        if resend_all {
            self.next_resend = Some(now + self.resend);
        }
        let until = now + self.resend * 4;
        let scan = self.scan;
        let mut out = Vec::new();
        let mut new = Vec::new();
        engine.for_each_loop(|view| {
            let Some(rule) = view.alert() else {
                return;
            };
            // Quiet for finishAfter: its finish is on its way (or held until the input is known
            // complete). An alert already firing stays so; a new one is not raised.
            let due = view.seen + view.settings.finish_after <= now;
            match self.firing.get_mut(&view.id) {
                Some(f) if f.first == view.first => {
                    f.scan = scan;
                    if resend_all {
                        f.alert = Loop::of_view(&view).firing(rule, until, now);
                        out.push(f.alert.clone());
                    }
                }
                _ if due => {}
                _ => new.push(Candidate {
                    first: view.first,
                    id: view.id,
                    namespace: Arc::from(view.namespace),
                }),
            }
        });
        self.retire(scan, now, &mut out);
        let chosen = self.choose(new);
        if !chosen.is_empty() {
            engine.for_each_loop(|view| {
                let Some(namespace) = chosen.get(&view.id) else {
                    return;
                };
                let Some(rule) = view.alert() else {
                    return;
                };
                let alert = Loop::of_view(&view).firing(rule, until, now);
                out.push(alert.clone());
                let firing = Firing {
                    first: view.first,
                    namespace: namespace.clone(),
                    scan,
                    alert,
                };
                // The key's previous loop, ended without a finish seen here: resolved.
                if let Some(earlier) = self.firing.insert(view.id, firing) {
                    self.release(&earlier.namespace);
                    out.push(resolved(earlier.alert, now));
                }
                *self.per_namespace.entry(namespace.clone()).or_insert(0) += 1;
            });
        }
        out
    }

    /// Firing alerts this scan did not see: resolved.
    fn retire(&mut self, scan: u64, now: DateTime<Utc>, out: &mut Vec<Alert>) {
        let gone: Vec<KeyId> = self
            .firing
            .iter()
            .filter(|(_, f)| f.scan != scan)
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            if let Some(f) = self.firing.remove(&id) {
                self.release(&f.namespace);
                out.push(resolved(f.alert, now));
            }
        }
    }

    fn release(&mut self, namespace: &Arc<str>) {
        if let Some(n) = self.per_namespace.get_mut(namespace) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.per_namespace.remove(namespace);
            }
        }
    }

    /// Which new loops may alert within the limits, oldest first; the rest are counted.
    fn choose(&mut self, mut new: Vec<Candidate>) -> HashMap<KeyId, Arc<str>> {
        new.sort_by_key(|c| (c.first, c.id));
        let mut room = self.limits.max.saturating_sub(self.firing.len());
        let mut taken: HashMap<Arc<str>, usize> = HashMap::new();
        let mut chosen = HashMap::new();
        self.over_limit = 0;
        for c in new {
            let held = self.per_namespace.get(&c.namespace).copied().unwrap_or(0);
            let more = taken.entry(c.namespace.clone()).or_insert(0);
            if room == 0 || held + *more >= self.limits.max_per_namespace {
                self.over_limit += 1;
                continue;
            }
            room -= 1;
            *more += 1;
            chosen.insert(c.id, c.namespace);
        }
        chosen
    }

    /// A series written Finished (quiet, a gap or evicted) at `at`: its alert resolved, carrying
    /// the final count. Alerted by this leader: exactly what it posted. Otherwise only before this
    /// leader's first scan (a loop that ended while the Lease changed hands, which the previous
    /// leader may have alerted), if its policy's `rule` selects it; never a loop this leader left
    /// over the limits.
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
                let f = self.firing.remove(&s.id)?;
                self.release(&f.namespace);
                let mut alert = resolved(f.alert, at);
                alert.annotations = lp.annotations();
                Some(alert)
            }
            _ if self.scan == 0 => rule
                .filter(|r| lp.selected_by(r))
                .map(|r| lp.resolved(r, at)),
            _ => None,
        }
    }
}

fn resolved(mut alert: Alert, at: DateTime<Utc>) -> Alert {
    alert.ends_at = at.max(alert.starts_at);
    alert
}

#[cfg(test)]
mod tests {
    use super::*;
    use event_series_core::engine::Engine;
    use event_series_core::intent::WriteKind;
    use event_series_core::key::{KeyRef, ObjectRef, Observation, RawId};
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

    /// A kubelet BackOff of Pod `name` in `ns`, its raw object counting `count`, the last at t0.
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
            first: t0(),
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
        let mut fresh = Planner::new(TimeDelta::minutes(1), limits(100));
        assert!(
            fresh
                .ended(&finish.series, rule.as_deref(), finish.due)
                .is_some()
        );
    }
}

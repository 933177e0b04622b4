//! Which alerts to post now: a pure function of the engine's loops, the series that ended and the
//! clock. No I/O: the [`super::outbox::Outbox`] delivers what it returns.

use super::{Alert, Loop};
use crate::alert::AlertRule;
use crate::engine::Engine;
use crate::intent::Snapshot;
use crate::key::KeyId;
use chrono::{DateTime, TimeDelta, Utc};
use std::collections::HashMap;

/// An alert posted as firing, kept to resolve it if its loop vanishes unwritten (a deleted
/// namespace, a policy that no longer selects it).
struct Firing {
    first: DateTime<Utc>,
    scan: u64,
    alert: Alert,
}

/// The alerts of one leader's term. A new leader starts empty and posts every firing loop at its
/// first scan: the same alerts, so Alertmanager notifies nothing new.
pub struct Planner {
    /// How often every firing alert is posted again. Each is valid for four of these, so that two
    /// lost posts or a failover do not resolve it.
    resend: TimeDelta,
    /// Most loops alerting at once (a storm of 10^5 loops is one incident, not 10^5 pages).
    max: usize,
    firing: HashMap<KeyId, Firing>,
    scan: u64,
    next_resend: Option<DateTime<Utc>>,
    /// Loops selected at the last scan beyond `max`.
    over_limit: usize,
}

impl Planner {
    pub fn new(resend: TimeDelta, max: usize) -> Planner {
        Planner {
            resend,
            max,
            firing: HashMap::new(),
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
    /// firing alerts whose loop is gone without a finish, resolved.
    pub fn scan(&mut self, engine: &Engine, now: DateTime<Utc>) -> Vec<Alert> {
        self.scan += 1;
        let resend_all = self.next_resend.is_none_or(|t| now >= t);
        if resend_all {
            self.next_resend = Some(now + self.resend);
        }
        let until = now + self.resend * 4;
        let (scan, max) = (self.scan, self.max);
        let mut out = Vec::new();
        let mut over = 0;
        engine.for_each_loop(|view| {
            let Some(rule) = view.alert() else {
                return;
            };
            let lp = Loop::of_view(&view);
            let full = self.firing.len() >= max;
            match self.firing.get_mut(&view.id) {
                Some(f) if f.first == view.first => {
                    f.scan = scan;
                    if resend_all {
                        f.alert = lp.firing(rule, until);
                        out.push(f.alert.clone());
                    }
                    return;
                }
                Some(_) => {}
                None if full => {
                    over += 1;
                    return;
                }
                None => {}
            }
            let alert = lp.firing(rule, until);
            out.push(alert.clone());
            let earlier = self.firing.insert(
                view.id,
                Firing {
                    first: view.first,
                    scan,
                    alert,
                },
            );
            // The key's previous loop, ended without a finish seen here: resolved.
            out.extend(earlier.map(|f| resolved(f.alert, now)));
        });
        self.over_limit = over;
        self.firing.retain(|_, f| {
            let live = f.scan == scan;
            if !live {
                out.push(resolved(f.alert.clone(), now));
            }
            live
        });
        out
    }

    /// A series written Finished (quiet, a gap or evicted) at `at`: its alert resolved, if it was
    /// firing or its policy's `rule` selects it (it may have ended before a scan saw it alert, or
    /// on a replica that took over). Resolving an alert that never fired notifies no one.
    pub fn ended(
        &mut self,
        s: &Snapshot,
        rule: Option<&AlertRule>,
        at: DateTime<Utc>,
    ) -> Option<Alert> {
        let was = match self.firing.get(&s.id) {
            Some(f) if f.first == s.first => self.firing.remove(&s.id),
            _ => None,
        };
        let key = s.key.view();
        let lp = Loop::of_snapshot(s, &key);
        match rule {
            Some(rule) if was.is_some() || rule.selects(&key, s.count, s.first, s.last) => {
                Some(lp.resolved(rule, at))
            }
            _ => was.map(|f| resolved(f.alert, at)),
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
    use crate::config::settings::Settings;
    use crate::engine::Engine;
    use crate::intent::WriteKind;
    use crate::key::{KeyRef, ObjectRef, Observation, RawId};
    use std::sync::Arc;

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
        let mut p = Planner::new(TimeDelta::minutes(1), 100);
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
        let before = Planner::new(TimeDelta::minutes(1), 100).scan(&e, at(2));
        let mut after = Planner::new(TimeDelta::minutes(1), 100);
        let posted = after.scan(&e, at(30));
        assert_eq!(before[0].labels, posted[0].labels);
        e.namespace_removed("shop");
        let gone = after.scan(&e, at(40));
        assert_eq!(gone.len(), 1);
        assert!(gone[0].is_resolved(at(40)));
        assert_eq!(gone[0].labels, posted[0].labels);
    }

    #[test]
    fn loops_beyond_the_limit_are_not_alerted_but_counted() {
        let mut e = engine(2);
        let at = |s: i64| t0() + TimeDelta::seconds(s);
        for name in ["a", "b", "c"] {
            e.observe(at(0), &observation_in("shop", name, 2));
        }
        e.tick(at(1));
        let mut p = Planner::new(TimeDelta::minutes(1), 2);
        assert_eq!(p.scan(&e, at(2)).len(), 2);
        assert_eq!((p.firing(), p.over_limit()), (2, 1));
    }
}

//! The policy shell: keeps the EventSeriesPolicies and the namespace labels the operator applies, from
//! two kube-runtime watchers, and writes each policy's status.
//!
//! [`PolicyState`] folds watcher events into plain maps and says what changed; the controller hands the
//! result to the engine ([`crate::engine::Engine::set_policies`], `set_namespace_labels`). Status
//! writes go through [`StatusWriter`], which coalesces per policy and retries with backoff, so that a
//! slow or throttled API never delays the raw-event watch.

use crate::policy::{self, EventSeriesPolicy, EventSeriesPolicyStatus, Resolved};
use crate::settings::Settings;
use futures::Stream;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::time::Instant;

pub type Labels = BTreeMap<String, String>;

/// The stream of policy changes (all policies: they are cluster-scoped).
pub fn policy_events(
    client: &Client,
) -> impl Stream<Item = Result<Event<EventSeriesPolicy>, watcher::Error>> + Send + use<> {
    watcher(Api::all(client.clone()), watcher::Config::default()).default_backoff()
}

/// The stream of namespace label changes; one namespace only when the operator is scoped to it.
pub fn namespace_events(
    client: &Client,
    only: Option<&str>,
) -> impl Stream<Item = Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>> + Send + use<>
{
    let mut config = watcher::Config::default();
    if let Some(ns) = only {
        config = config.fields(&format!("metadata.name={ns}"));
    }
    watcher(
        Api::<PartialObjectMeta<Namespace>>::all(client.clone()),
        config,
    )
    .default_backoff()
}

/// True when a watcher error means the CRD is not installed: policies are then simply absent.
pub fn crd_missing(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// Policies and namespace labels as last listed or watched.
#[derive(Debug)]
pub struct PolicyState {
    defaults: Settings,
    policies: BTreeMap<String, EventSeriesPolicy>,
    namespaces: BTreeMap<String, Labels>,
    /// Objects of a (re)list in progress; swapped in at `InitDone`.
    policy_relist: Option<BTreeMap<String, EventSeriesPolicy>>,
    namespace_relist: Option<BTreeMap<String, Labels>>,
    pub policies_listed: bool,
    pub namespaces_listed: bool,
    /// The last status handed to the status writer, per policy uid: what the object will show.
    sent: HashMap<String, EventSeriesPolicyStatus>,
}

/// What a watcher event changed.
#[derive(Debug, Default, PartialEq)]
pub struct Changed {
    /// The policy set must be re-resolved and handed to the engine.
    pub policies: bool,
    /// Namespaces whose labels changed (or appeared).
    pub namespaces: Vec<(String, Labels)>,
    /// A namespace went away, so the number of namespaces a policy governs may have dropped.
    pub removed: bool,
}

impl PolicyState {
    pub fn new(defaults: Settings) -> PolicyState {
        PolicyState {
            defaults,
            policies: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            policy_relist: None,
            namespace_relist: None,
            policies_listed: false,
            namespaces_listed: false,
            sent: HashMap::new(),
        }
    }

    pub fn on_policy(&mut self, event: Event<EventSeriesPolicy>) -> Changed {
        let spec_changed = |old: Option<&EventSeriesPolicy>, new: &EventSeriesPolicy| {
            old.is_none_or(|o| {
                o.spec != new.spec || o.metadata.generation != new.metadata.generation
            })
        };
        let policies = match event {
            Event::Init => {
                self.policy_relist = Some(BTreeMap::new());
                false
            }
            Event::InitApply(p) => {
                if let Some(relist) = self.policy_relist.as_mut() {
                    relist.insert(p.name_any(), p);
                }
                false
            }
            Event::InitDone => {
                self.policies_listed = true;
                match self.policy_relist.take() {
                    Some(relist) => {
                        let same = |a: &EventSeriesPolicy, b: &EventSeriesPolicy| {
                            a.spec == b.spec && a.metadata.generation == b.metadata.generation
                        };
                        let changed = relist.len() != self.policies.len()
                            || relist
                                .iter()
                                .any(|(n, p)| self.policies.get(n).is_none_or(|o| !same(o, p)));
                        self.policies = relist;
                        changed
                    }
                    None => false,
                }
            }
            Event::Apply(p) => {
                let changed = spec_changed(self.policies.get(&p.name_any()), &p);
                // Always keep the latest object: its status is what the next status write compares to.
                self.policies.insert(p.name_any(), p);
                changed
            }
            Event::Delete(p) => self.policies.remove(&p.name_any()).is_some(),
        };
        Changed {
            policies,
            namespaces: Vec::new(),
            removed: false,
        }
    }

    /// Marks policies as listed when the CRD is not installed: the defaults apply.
    pub fn policies_unavailable(&mut self) {
        self.policies_listed = true;
    }

    pub fn on_namespace(&mut self, event: Event<PartialObjectMeta<Namespace>>) -> Changed {
        let mut changed = Vec::new();
        let mut removed = false;
        match event {
            Event::Init => self.namespace_relist = Some(BTreeMap::new()),
            Event::InitApply(ns) => {
                if let Some(relist) = self.namespace_relist.as_mut() {
                    relist.insert(ns.name_any(), ns.metadata.labels.unwrap_or_default());
                }
            }
            Event::InitDone => {
                self.namespaces_listed = true;
                if let Some(relist) = self.namespace_relist.take() {
                    for (name, labels) in &relist {
                        if self.namespaces.get(name) != Some(labels) {
                            changed.push((name.clone(), labels.clone()));
                        }
                    }
                    removed = self.namespaces.keys().any(|n| !relist.contains_key(n));
                    self.namespaces = relist;
                }
            }
            Event::Apply(ns) => {
                let (name, labels) = (ns.name_any(), ns.metadata.labels.unwrap_or_default());
                if self.namespaces.get(&name) != Some(&labels) {
                    changed.push((name.clone(), labels.clone()));
                    self.namespaces.insert(name, labels);
                }
            }
            Event::Delete(ns) => {
                removed = self.namespaces.remove(&ns.name_any()).is_some();
            }
        }
        Changed {
            policies: false,
            namespaces: changed,
            removed,
        }
    }

    pub fn namespaces(&self) -> impl Iterator<Item = (&String, &Labels)> {
        self.namespaces.iter()
    }

    pub fn resolve(&self) -> Resolved {
        let all: Vec<EventSeriesPolicy> = self.policies.values().cloned().collect();
        policy::resolve(&all, &self.defaults)
    }

    /// The statuses that differ from what each policy object shows, or will show once the statuses
    /// already handed out are written.
    pub fn status_updates(
        &mut self,
        resolved: &Resolved,
        now: Time,
    ) -> Vec<(String, EventSeriesPolicyStatus)> {
        let governs = policy::governed(&resolved.set, self.namespaces.values());
        let mut updates = Vec::new();
        for (name, p) in &self.policies {
            let Some(verdict) = resolved.verdicts.get(name) else {
                continue;
            };
            let uid = p.metadata.uid.clone().unwrap_or_else(|| name.clone());
            let current = p.status.as_ref();
            let sent = self.sent.get(&uid);
            let want = policy::status(
                p.metadata.generation,
                verdict,
                governs.get(name).copied().unwrap_or(0),
                sent.or(current),
                now.clone(),
            );
            if current != Some(&want) && sent != Some(&want) {
                self.sent.insert(uid, want.clone());
                updates.push((name.clone(), want));
            }
        }
        let live: std::collections::HashSet<String> = self
            .policies
            .iter()
            .map(|(n, p)| p.metadata.uid.clone().unwrap_or_else(|| n.clone()))
            .collect();
        self.sent.retain(|uid, _| live.contains(uid));
        updates
    }
}

/// Writes policy statuses in the background: the latest status per policy wins, failures are retried
/// with backoff, a deleted policy is forgotten.
pub struct StatusWriter {
    api: Api<EventSeriesPolicy>,
    pending: HashMap<String, (EventSeriesPolicyStatus, Instant)>,
    delays: HashMap<String, backon::ExponentialBackoff>,
}

impl StatusWriter {
    pub fn spawn(client: Client) -> UnboundedSender<(String, EventSeriesPolicyStatus)> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let writer = StatusWriter {
            api: Api::all(client),
            pending: HashMap::new(),
            delays: HashMap::new(),
        };
        tokio::spawn(writer.run(rx));
        tx
    }

    async fn run(mut self, mut rx: UnboundedReceiver<(String, EventSeriesPolicyStatus)>) {
        loop {
            let next_due = self.pending.values().map(|(_, at)| *at).min();
            tokio::select! {
                update = rx.recv() => match update {
                    Some((name, status)) => {
                        self.pending.insert(name, (status, Instant::now()));
                    }
                    None => return,
                },
                _ = tokio::time::sleep_until(next_due.unwrap_or_else(|| Instant::now() + Duration::from_secs(3600))), if next_due.is_some() => {
                    self.write_due().await;
                }
            }
        }
    }

    async fn write_due(&mut self) {
        let now = Instant::now();
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, (_, at))| *at <= now)
            .map(|(name, _)| name.clone())
            .collect();
        for name in due {
            let Some((status, _)) = self.pending.remove(&name) else {
                continue;
            };
            let patch = Patch::Merge(serde_json::json!({ "status": status }));
            match self
                .api
                .patch_status(&name, &PatchParams::default(), &patch)
                .await
            {
                Ok(_) => {
                    self.delays.remove(&name);
                    tracing::debug!(policy = %name, "policy status written");
                }
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    self.delays.remove(&name);
                }
                Err(e) => {
                    let delays = self.delays.entry(name.clone()).or_insert_with(|| {
                        crate::retry::delays(Duration::from_millis(500), Duration::from_secs(60))
                    });
                    let retry_in = delays.next().unwrap_or(Duration::from_secs(60));
                    tracing::warn!(policy = %name, error = %e, ?retry_in, "policy status write failed; retrying");
                    // A newer status that arrived meanwhile is kept; otherwise retry this one.
                    self.pending
                        .entry(name)
                        .or_insert((status, Instant::now() + retry_in));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::EventSeriesPolicySpec;

    fn policy(name: &str, generation: i64, finish_after: &str) -> EventSeriesPolicy {
        let mut p = EventSeriesPolicy::new(
            name,
            EventSeriesPolicySpec {
                finish_after: finish_after.into(),
                ..Default::default()
            },
        );
        p.metadata.generation = Some(generation);
        p
    }

    fn ns(name: &str, labels: &[(&str, &str)]) -> PartialObjectMeta<Namespace> {
        let mut m = PartialObjectMeta::<Namespace>::default();
        m.metadata.name = Some(name.into());
        m.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        m
    }

    #[test]
    fn a_relist_swaps_in_at_init_done_and_reports_a_change_once() {
        let mut s = PolicyState::new(Settings::default());
        assert!(!s.on_policy(Event::Init).policies);
        assert!(!s.on_policy(Event::InitApply(policy("a", 1, "6m"))).policies);
        assert!(!s.policies_listed);
        assert!(s.on_policy(Event::InitDone).policies);
        assert!(s.policies_listed);
        // The same list again changes nothing.
        s.on_policy(Event::Init);
        s.on_policy(Event::InitApply(policy("a", 1, "6m")));
        assert!(!s.on_policy(Event::InitDone).policies);
        // A status-only update (same generation and spec) does not re-resolve.
        let mut with_status = policy("a", 1, "6m");
        with_status.status = Some(Default::default());
        assert!(!s.on_policy(Event::Apply(with_status)).policies);
        assert!(s.on_policy(Event::Apply(policy("a", 2, "1m"))).policies);
        assert!(s.on_policy(Event::Delete(policy("a", 2, "1m"))).policies);
        assert_eq!(s.resolve().set.slots(), 1);
    }

    #[test]
    fn namespace_label_changes_are_reported_only_when_they_change() {
        let mut s = PolicyState::new(Settings::default());
        s.on_namespace(Event::Init);
        s.on_namespace(Event::InitApply(ns("a", &[("env", "prod")])));
        let c = s.on_namespace(Event::InitDone);
        assert_eq!(c.namespaces.len(), 1);
        assert!(
            s.on_namespace(Event::Apply(ns("a", &[("env", "prod")])))
                .namespaces
                .is_empty()
        );
        let c = s.on_namespace(Event::Apply(ns("a", &[("env", "dev")])));
        assert_eq!(
            c.namespaces[0].1.get("env").map(String::as_str),
            Some("dev")
        );
        assert!(!c.removed);
    }

    #[test]
    fn a_deleted_namespace_is_reported_so_that_statuses_recount() {
        let mut s = PolicyState::new(Settings::default());
        s.on_policy(Event::Apply(policy("all", 1, "6m")));
        s.on_namespace(Event::Apply(ns("a", &[])));
        s.on_namespace(Event::Apply(ns("b", &[])));
        let governed = |s: &mut PolicyState, at: i64| {
            let r = s.resolve();
            let now = Time(k8s_openapi::jiff::Timestamp::from_second(at).unwrap());
            s.status_updates(&r, now)
                .into_iter()
                .find(|(n, _)| n == "all")
                .and_then(|(_, st)| st.namespaces)
        };
        assert_eq!(governed(&mut s, 1_000), Some(2));
        assert!(s.on_namespace(Event::Delete(ns("b", &[]))).removed);
        assert_eq!(governed(&mut s, 2_000), Some(1));
        // Gone while the watch was down: noticed when the relist completes.
        s.on_namespace(Event::Init);
        let c = s.on_namespace(Event::InitDone);
        assert!(c.removed, "a was not relisted");
        assert_eq!(governed(&mut s, 3_000), Some(0));
        // Deleting what is not known changes nothing.
        assert!(!s.on_namespace(Event::Delete(ns("zzz", &[]))).removed);
    }

    #[test]
    fn statuses_are_written_only_when_they_differ() {
        let mut s = PolicyState::new(Settings::default());
        s.on_policy(Event::Apply(policy("good", 1, "6m")));
        s.on_policy(Event::Apply(policy("bad", 4, "0s")));
        s.on_namespace(Event::Apply(ns("x", &[])));
        let now = Time(k8s_openapi::jiff::Timestamp::from_second(1_000).unwrap());
        let r = s.resolve();
        let updates = s.status_updates(&r, now.clone());
        assert_eq!(updates.len(), 2);
        let bad = &updates.iter().find(|(n, _)| n == "bad").unwrap().1;
        assert_eq!(bad.observed_generation, Some(4));
        assert_eq!(bad.conditions[0].status, "False");
        let good = &updates.iter().find(|(n, _)| n == "good").unwrap().1;
        assert_eq!(good.namespaces, Some(1));
        // Handed out once: not again while the write is under way.
        let soon = Time(k8s_openapi::jiff::Timestamp::from_second(1_500).unwrap());
        assert!(s.status_updates(&r, soon).is_empty());
        // Once the objects show those statuses, nothing more is written.
        for (name, status) in updates {
            let mut p = s.policies[&name].clone();
            p.status = Some(status);
            s.on_policy(Event::Apply(p));
        }
        let later = Time(k8s_openapi::jiff::Timestamp::from_second(2_000).unwrap());
        assert!(s.status_updates(&r, later).is_empty());
    }
}

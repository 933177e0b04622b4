//! Keeps the EventSeriesPolicies and the namespace labels the operator applies live, from two
//! kube-runtime watchers, and hands each policy's status to the [`StatusWriter`].
//!
//! [`PolicyState`] folds watcher events into plain maps and says what changed (pure, unit-tested);
//! [`PolicyWatch`] is the shell around it that the controller polls for [`Update`]s to hand to the
//! engine. Status writes go through the [`StatusWriter`], which coalesces and retries on its own, so a
//! slow or throttled API never delays the raw-event watch.

use super::crd::{EventSeriesPolicy, EventSeriesPolicyStatus};
use super::resolve::{self, Resolved};
use super::status::{self, StatusPatch, StatusSender, StatusWriter};
use event_series_core::settings::{PolicySet, Settings};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::Api;
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event, watcher};
use kube::{Client, ResourceExt};
use std::collections::{BTreeMap, HashMap};

pub type Labels = BTreeMap<String, String>;

/// The stream of policy changes (all policies: they are cluster-scoped).
fn policy_events(
    client: &Client,
) -> impl Stream<Item = Result<Event<EventSeriesPolicy>, watcher::Error>> + Send + use<> {
    watcher(Api::all(client.clone()), watcher::Config::default()).default_backoff()
}

/// The stream of namespace label changes; one namespace only when the operator is scoped to it.
fn namespace_events(
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
fn crd_missing(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) if s.code == 404)
}

/// What the engine must apply after a watcher event.
#[derive(Debug)]
pub enum Update {
    /// The policies changed: the engine applies this set.
    Policies(PolicySet),
    /// These namespaces' labels changed (or they appeared), and these went away.
    Namespaces {
        changed: Vec<(String, Labels)>,
        removed: Vec<String>,
    },
    /// Nothing the engine needs to know.
    Nothing,
}

type PolicyStream = BoxStream<'static, Result<Event<EventSeriesPolicy>, watcher::Error>>;
type NamespaceStream =
    BoxStream<'static, Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>>;

/// The live policies and namespace labels, and the status writes that report them.
pub struct PolicyWatch {
    state: PolicyState,
    policies: PolicyStream,
    namespaces: NamespaceStream,
    resolved: Resolved,
    /// `None` when the operator is scoped to one namespace: policies are cluster-scoped, so only an
    /// operator that sees every namespace can say how many a policy governs, and several scoped
    /// operators must not fight over the status.
    statuses: Option<StatusSender>,
}

impl PolicyWatch {
    /// Starts both watchers and waits until both have listed, so that restored and replayed series
    /// land in the right policy from the start. Statuses are written only when `namespace` is `None`.
    pub async fn start(
        client: &Client,
        defaults: Settings,
        namespace: Option<&str>,
    ) -> anyhow::Result<PolicyWatch> {
        let state = PolicyState::new(defaults);
        let resolved = state.resolve();
        let statuses = match namespace {
            None => Some(StatusWriter::spawn(client.clone())),
            Some(ns) => {
                tracing::info!(namespace = %ns, "scoped to one namespace: policy statuses are not written");
                None
            }
        };
        let mut watch = PolicyWatch {
            state,
            policies: policy_events(client).boxed(),
            namespaces: namespace_events(client, namespace).boxed(),
            resolved,
            statuses,
        };
        while !(watch.state.policies_listed && watch.state.namespaces_listed) {
            tokio::select! {
                ev = watch.policies.next() => { watch.on_policy(ev)?; }
                ev = watch.namespaces.next() => { watch.on_namespace(ev)?; }
            }
        }
        watch.resolved = watch.state.resolve();
        log_verdicts(&watch.resolved);
        watch.publish_statuses();
        Ok(watch)
    }

    /// The policies as last resolved.
    pub fn set(&self) -> &PolicySet {
        &self.resolved.set
    }

    /// Every namespace with its labels.
    pub fn namespaces(&self) -> impl Iterator<Item = (&String, &Labels)> {
        self.state.namespaces()
    }

    /// The name of the policy that governs `namespace`, if one does.
    pub fn governing(&self, namespace: &str) -> Option<&str> {
        let labels = self.state.namespaces.get(namespace)?;
        let set = &self.resolved.set;
        set.policy_name(set.resolve(labels))
    }

    /// Every policy as last seen.
    pub fn policies(&self) -> impl Iterator<Item = &EventSeriesPolicy> {
        self.state.policies.values()
    }

    /// Where status writes go; `None` when this operator writes no statuses (scoped to a namespace).
    pub fn statuses(&self) -> Option<StatusSender> {
        self.statuses.clone()
    }

    /// Waits for the next watcher event; an error only when a watch ended for good.
    pub async fn next(&mut self) -> anyhow::Result<Update> {
        tokio::select! {
            ev = self.policies.next() => {
                let changed = self.on_policy(ev)?;
                let update = if changed.policies {
                    self.resolved = self.state.resolve();
                    log_verdicts(&self.resolved);
                    Update::Policies(self.resolved.set.clone())
                } else {
                    Update::Nothing
                };
                self.publish_statuses();
                Ok(update)
            }
            ev = self.namespaces.next() => {
                let changed = self.on_namespace(ev)?;
                if changed.namespaces.is_empty() && changed.removed.is_empty() {
                    return Ok(Update::Nothing);
                }
                self.publish_statuses();
                Ok(Update::Namespaces {
                    changed: changed.namespaces,
                    removed: changed.removed,
                })
            }
        }
    }

    fn on_policy(
        &mut self,
        event: Option<Result<Event<EventSeriesPolicy>, watcher::Error>>,
    ) -> anyhow::Result<Changed> {
        match event {
            None => anyhow::bail!("policy watch ended"),
            Some(Ok(ev)) => Ok(self.state.on_policy(ev)),
            Some(Err(e)) if crd_missing(&e) => {
                if !self.state.policies_listed {
                    tracing::warn!(
                        "the EventSeriesPolicy CRD is not installed: the defaults apply to \
                        every namespace until it is"
                    );
                    self.state.policies_unavailable();
                }
                Ok(Changed::default())
            }
            Some(Err(e)) => {
                tracing::warn!(error = %e, "policy watch failed; retrying");
                Ok(Changed::default())
            }
        }
    }

    fn on_namespace(
        &mut self,
        event: Option<Result<Event<PartialObjectMeta<Namespace>>, watcher::Error>>,
    ) -> anyhow::Result<Changed> {
        match event {
            None => anyhow::bail!("namespace watch ended"),
            Some(Ok(ev)) => Ok(self.state.on_namespace(ev)),
            Some(Err(e)) => {
                tracing::warn!(error = %e, "namespace watch failed; retrying");
                Ok(Changed::default())
            }
        }
    }

    /// Hands every status that changed to the status writer, if this operator writes statuses.
    fn publish_statuses(&mut self) {
        let Some(tx) = &self.statuses else { return };
        let now = Time(k8s_openapi::jiff::Timestamp::now());
        for update in self.state.status_updates(&self.resolved, now) {
            // The writer lives as long as the process.
            let _ = tx.send((update.0, StatusPatch::Ready(update.1)));
        }
    }
}

fn log_verdicts(resolved: &Resolved) {
    for (name, verdict) in &resolved.verdicts {
        match verdict {
            Ok(()) => tracing::info!(policy = %name, "policy applied"),
            Err(e) => tracing::warn!(policy = %name, error = %e, "policy not applied"),
        }
    }
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
    /// Namespaces that went away (the number of namespaces a policy governs may have dropped).
    pub removed: Vec<String>,
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
            removed: Vec::new(),
        }
    }

    /// Marks policies as listed when the CRD is not installed: the defaults apply.
    pub fn policies_unavailable(&mut self) {
        self.policies_listed = true;
    }

    pub fn on_namespace(&mut self, event: Event<PartialObjectMeta<Namespace>>) -> Changed {
        let mut changed = Vec::new();
        let mut removed = Vec::new();
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
                    removed = (self.namespaces.keys())
                        .filter(|n| !relist.contains_key(*n))
                        .cloned()
                        .collect();
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
                let name = ns.name_any();
                if self.namespaces.remove(&name).is_some() {
                    removed.push(name);
                }
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
        resolve::resolve(&all, &self.defaults)
    }

    /// The statuses that differ from what each policy object shows, or will show once the statuses
    /// already handed out are written.
    pub fn status_updates(
        &mut self,
        resolved: &Resolved,
        now: Time,
    ) -> Vec<(String, EventSeriesPolicyStatus)> {
        let governs = resolve::governed(&resolved.set, self.namespaces.values());
        let mut updates = Vec::new();
        for (name, p) in &self.policies {
            let Some(verdict) = resolved.verdicts.get(name) else {
                continue;
            };
            let uid = p.metadata.uid.clone().unwrap_or_else(|| name.clone());
            // The `Degraded` condition is another writer's: compared without it.
            let current = p.status.as_ref().map(status::own_part);
            let current = current.as_ref();
            let sent = self.sent.get(&uid);
            let want = status::status(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::crd::EventSeriesPolicySpec;

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
        assert!(c.removed.is_empty());
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
        assert_eq!(s.on_namespace(Event::Delete(ns("b", &[]))).removed, ["b"]);
        assert_eq!(governed(&mut s, 2_000), Some(1));
        // Gone while the watch was down: noticed when the relist completes.
        s.on_namespace(Event::Init);
        let c = s.on_namespace(Event::InitDone);
        assert_eq!(c.removed, ["a"], "a was not relisted");
        assert_eq!(governed(&mut s, 3_000), Some(0));
        // Deleting what is not known changes nothing.
        assert!(
            s.on_namespace(Event::Delete(ns("zzz", &[])))
                .removed
                .is_empty()
        );
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

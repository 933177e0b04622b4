//! The controller: the imperative shell around the engine. It waits for the policies and namespace
//! labels, rebuilds the engine from the operator's own series objects, feeds it the raw-event watch,
//! policy changes and a clock tick, and hands its intents to the writer task.
//!
//! ```text
//!  policies + namespace labels (watch) ────▶ ┌────────┐             policy status writer
//!  list own series (paginated) ──restore──▶ │        │
//!  raw list (buffered, time-ordered) ──────▶ │ engine │──intents──▶ writer task ──▶ events.k8s.io/v1
//!  raw watch: applied / deleted / bookmark ─▶ │ (pure) │
//!  tick every second ──────────────────────▶ └────────┘
//! ```

use crate::engine::{Engine, EngineConfig};
use crate::key::{self, OwnedObservation, RawId};
use crate::mapping::managed_selector;
use crate::metrics::Metrics;
use crate::policies::{self, Changed, PolicyState, StatusWriter};
use crate::policy::{EventSeriesPolicy, EventSeriesPolicyStatus, Resolved};
use crate::recovery;
use crate::settings::Settings;
use crate::watch::{Step, raw_events};
use crate::writer::{Writer, WriterConfig};
use chrono::Utc;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use kube::{Client, Resource};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Settings of the namespaces no EventSeriesPolicy selects.
    pub defaults: Settings,
    /// Watch one namespace instead of the whole cluster.
    pub namespace: Option<String>,
    pub writer: WriterConfig,
    /// How long pending writes may take to flush on shutdown.
    pub drain: Duration,
    /// Lifetime of one watch request before it is re-established.
    pub watch_timeout_secs: u32,
    /// Ask the raw-event watch for bookmarks (always, except in benchmarks: `--no-watch-bookmarks`).
    pub watch_bookmarks: bool,
}

fn scoped<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    K::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

fn resource_version(rv: &str) -> Option<u64> {
    rv.parse().ok()
}

/// Lists one page, retrying throttling and server errors with backoff (a restart in a busy cluster
/// must not fail on a 429).
async fn list_with_retry(api: &Api<Event>, params: &ListParams) -> kube::core::ObjectList<Event> {
    let mut delays = crate::retry::delays(Duration::from_millis(200), Duration::from_secs(30));
    loop {
        match api.list(params).await {
            Ok(page) => return page,
            Err(e) => {
                let retry_in = delays.next().unwrap_or(Duration::from_secs(30));
                tracing::warn!(error = %e, ?retry_in, "listing own series objects failed; retrying");
                tokio::time::sleep(retry_in).await;
            }
        }
    }
}

/// Restores every series object the operator wrote (Ongoing and Finished), page by page.
async fn restore_own_series(
    api: &Api<Event>,
    engine: &mut Engine,
    metrics: &Metrics,
) -> anyhow::Result<usize> {
    let mut params = ListParams::default().labels(&managed_selector()).limit(500);
    let mut restored = 0;
    loop {
        let page = list_with_retry(api, &params).await;
        let now = Utc::now();
        for ev in &page.items {
            match recovery::parse(ev) {
                Ok(series) => {
                    engine.restore(now, series);
                    restored += 1;
                }
                Err(e) => {
                    tracing::warn!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
                        error = %e, "series object not restored");
                    metrics.dropped("unreadable_series", 1);
                }
            }
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => return Ok(restored),
        }
    }
}

/// Feeds one raw event to the engine; a raw event that cannot be read is skipped with a log line and a
/// metric.
/// Feeds one raw event to the engine. `watched`: it came from the watch (not a list), so its latest
/// occurrence is recent and its ingest lag is recorded.
fn observe(engine: &mut Engine, metrics: &Metrics, ev: &CoreEvent, watched: bool) {
    match key::observe(ev) {
        Ok(obs) => {
            let now = Utc::now();
            if watched {
                metrics.ingest_lag(now, obs.last);
            }
            engine.observe(now, &obs)
        }
        Err(e) => skipped(metrics, ev, &e),
    }
}

fn skipped(metrics: &Metrics, ev: &CoreEvent, e: &key::NormaliseError) {
    tracing::warn!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
        error = %e, "raw event skipped");
    metrics.dropped(e.reason(), 1);
}

fn on_policy_event(
    state: &mut PolicyState,
    event: Option<Result<watcher::Event<EventSeriesPolicy>, watcher::Error>>,
) -> anyhow::Result<Changed> {
    match event {
        None => anyhow::bail!("policy watch ended"),
        Some(Ok(ev)) => Ok(state.on_policy(ev)),
        Some(Err(e)) if policies::crd_missing(&e) => {
            if !state.policies_listed {
                tracing::warn!(
                    "the EventSeriesPolicy CRD is not installed: the defaults apply to \
                    every namespace until it is"
                );
                state.policies_unavailable();
            }
            Ok(Changed::default())
        }
        Some(Err(e)) => {
            tracing::warn!(error = %e, "policy watch failed; retrying");
            Ok(Changed::default())
        }
    }
}

fn on_namespace_event(
    state: &mut PolicyState,
    event: Option<
        Result<
            watcher::Event<kube::core::PartialObjectMeta<k8s_openapi::api::core::v1::Namespace>>,
            watcher::Error,
        >,
    >,
) -> anyhow::Result<Changed> {
    match event {
        None => anyhow::bail!("namespace watch ended"),
        Some(Ok(ev)) => Ok(state.on_namespace(ev)),
        Some(Err(e)) => {
            tracing::warn!(error = %e, "namespace watch failed; retrying");
            Ok(Changed::default())
        }
    }
}

/// Hands every status that changed to the status writer, if this operator writes statuses.
fn publish_statuses(
    state: &mut PolicyState,
    resolved: &Resolved,
    tx: &Option<UnboundedSender<(String, EventSeriesPolicyStatus)>>,
) {
    let Some(tx) = tx else { return };
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    for update in state.status_updates(resolved, now) {
        let _ = tx.send(update);
    }
}

fn log_policies(resolved: &Resolved) {
    for (name, verdict) in &resolved.verdicts {
        match verdict {
            Ok(()) => tracing::info!(policy = %name, "policy applied"),
            Err(e) => tracing::warn!(policy = %name, error = %e, "policy not applied"),
        }
    }
}

/// Why the controller stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// SIGTERM: flush pending writes for at most `drain`.
    Graceful,
    /// Another replica leads now and owns the series: stop writing at once.
    LeadershipLost,
}

/// Runs until `shutdown` resolves, then flushes pending writes for at most `config.drain` (none when
/// leadership was lost).
pub async fn run(
    client: Client,
    config: ControllerConfig,
    metrics: Arc<Metrics>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    // Policies and namespace labels first: restored and replayed series must land in the right policy.
    let mut state = PolicyState::new(config.defaults.clone());
    let mut policy_events = Box::pin(policies::policy_events(&client));
    let mut namespace_events = Box::pin(policies::namespace_events(
        &client,
        config.namespace.as_deref(),
    ));
    tokio::pin!(shutdown);
    while !(state.policies_listed && state.namespaces_listed) {
        tokio::select! {
            ev = policy_events.next() => { on_policy_event(&mut state, ev)?; }
            ev = namespace_events.next() => { on_namespace_event(&mut state, ev)?; }
            stop = &mut shutdown => return Ok(stop),
        }
    }
    let mut resolved = state.resolve();
    log_policies(&resolved);
    // Policies are cluster-scoped: only an operator that sees every namespace can say how many a policy
    // governs. One scoped to a namespace applies policies but leaves their status alone, so that
    // several scoped operators never fight over it.
    let status_tx = match &config.namespace {
        None => Some(StatusWriter::spawn(client.clone())),
        Some(ns) => {
            tracing::info!(namespace = %ns, "scoped to one namespace: policy statuses are not written");
            None
        }
    };
    publish_statuses(&mut state, &resolved, &status_tx);
    let mut engine = Engine::new(resolved.set.clone(), EngineConfig::default());
    let now = Utc::now();
    for (ns, labels) in state.namespaces() {
        engine.set_namespace_labels(now, ns, labels.clone());
    }
    engine.begin_recovery();
    let own: Api<Event> = scoped(&client, &config.namespace);
    let restored = restore_own_series(&own, &mut engine, &metrics).await?;
    tracing::info!(
        restored,
        active = engine.active_series(),
        "own series objects restored"
    );

    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = Writer::new(client.clone(), config.writer, metrics.clone());
    let writer = tokio::spawn(writer.run(rx, config.drain));

    let mut steps = Box::pin(raw_events(
        scoped(&client, &config.namespace),
        config.watch_timeout_secs,
        config.watch_bookmarks,
    ));
    // The first list is buffered in compact form and replayed in time order once complete (see
    // `recovery::sort_for_replay`).
    let mut first_list: Option<Vec<OwnedObservation>> = Some(Vec::new());
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stop;
    loop {
        tokio::select! {
            step = steps.next() => {
                let Some(step) = step else { anyhow::bail!("raw event watch ended") };
                match step {
                    Step::ListStarted { relist } => {
                        if relist {
                            metrics.watch_relists.inc();
                            engine.begin_resync();
                        }
                    }
                    Step::Listed(ev) => match first_list.as_mut() {
                        Some(buffer) => match key::observe(&ev) {
                            Ok(obs) => buffer.push(OwnedObservation::new(&obs)),
                            Err(e) => skipped(&metrics, &ev, &e),
                        },
                        None => observe(&mut engine, &metrics, &ev, false),
                    },
                    Step::ListDone { resource_version: rv } => {
                        let rv = resource_version(&rv).unwrap_or(0);
                        match first_list.take() {
                            Some(mut listed) => {
                                recovery::sort_for_replay(&mut listed);
                                let now = Utc::now();
                                for obs in &listed {
                                    engine.observe(now, &obs.view());
                                }
                                engine.checkpoint(rv);
                                engine.end_recovery(now);
                                let raw_events = listed.len();
                                drop(listed);
                                crate::memory::release_free_pages();
                                ready.store(true, Ordering::Relaxed);
                                tracing::info!(raw_events, active = engine.active_series(),
                                    "recovered; watching");
                            }
                            None => {
                                engine.end_resync();
                                engine.checkpoint(rv);
                            }
                        }
                    }
                    Step::Applied(ev) => {
                        observe(&mut engine, &metrics, &ev, true);
                        if let Some(rv) = ev.metadata.resource_version.as_deref().and_then(resource_version) {
                            engine.checkpoint(rv);
                        }
                    }
                    Step::Deleted(ev) => {
                        let m = &ev.metadata;
                        engine.forget(RawId::of(
                            m.namespace.as_deref().unwrap_or(""),
                            m.name.as_deref().unwrap_or(""),
                            m.uid.as_deref().unwrap_or(""),
                        ));
                    }
                    Step::Bookmark { resource_version: rv } => {
                        metrics.bookmarks.inc();
                        if let Some(rv) = resource_version(&rv) {
                            engine.checkpoint(rv);
                        }
                    }
                    Step::Restarted => {
                        metrics.watch_restarts.inc();
                    }
                    Step::Failed { error, retry_in } => {
                        tracing::warn!(%error, ?retry_in, "raw event watch failed; retrying");
                    }
                }
            }
            ev = policy_events.next() => {
                if on_policy_event(&mut state, ev)?.policies {
                    resolved = state.resolve();
                    log_policies(&resolved);
                    engine.set_policies(Utc::now(), resolved.set.clone());
                }
                publish_statuses(&mut state, &resolved, &status_tx);
            }
            ev = namespace_events.next() => {
                let changed = on_namespace_event(&mut state, ev)?;
                if !changed.namespaces.is_empty() || changed.removed {
                    let now = Utc::now();
                    for (ns, labels) in changed.namespaces {
                        engine.set_namespace_labels(now, &ns, labels);
                    }
                    publish_statuses(&mut state, &resolved, &status_tx);
                }
            }
            _ = tick.tick() => engine.tick(Utc::now()),
            s = &mut shutdown => {
                stop = s;
                break;
            }
        }
        for intent in engine.take_intents() {
            tracing::debug!(kind = ?intent.kind, name = %intent.series.name, count = intent.series.count, "intent");
            // The writer only stops after this loop drops the sender.
            let _ = tx.send(intent);
        }
        metrics.observe_engine(engine.stats(), engine.active_series());
    }
    drop(tx);
    match stop {
        Stop::Graceful => {
            tracing::info!("shutting down: flushing pending writes");
            writer.await?;
        }
        Stop::LeadershipLost => writer.abort(),
    }
    Ok(stop)
}

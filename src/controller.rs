//! The controller: the imperative shell around the engine. It waits for the policies and namespace
//! labels, rebuilds the engine ([`crate::restart`]), feeds it the raw-event watch, policy changes and
//! a clock tick, and hands its intents to the writer task.
//!
//! ```text
//!  policies + namespace labels (watch) ────▶ ┌────────┐             policy status writer
//!  list own series (per namespace) ─restore─▶ │        │
//!  raw list (buffered, time-ordered) ──────▶ │ engine │──intents──▶ writer task ──▶ events.k8s.io/v1
//!  raw watch: applied / deleted / bookmark ─▶ │ (pure) │◀─landed──── (crate::handoff)
//!  tick every second ──────────────────────▶ └────────┘
//!  input clock (crate::currency): proofs from the watch, and a probe while a finish is held
//! ```

use crate::alerts::{AlertConfig, Loops};
use crate::config::Settings;
use crate::config::policy_watch::{PolicyWatch, Update};
use crate::currency::{self, Currency, Proof};
use crate::engine::{Engine, EngineConfig};
use crate::feed::{Arrival, feed};
use crate::handoff;
use crate::health::Health;
use crate::key::RawId;
use crate::leader::WriteFence;
use crate::metrics::Metrics;
use crate::paging::PageSize;
use crate::restart::{self, Restart};
use crate::watch::{Step, raw_events};
use crate::writer::{Writer, WriterConfig};
use chrono::{DateTime, Utc};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1 as events;
use kube::api::Api;
use kube::{Client, Resource};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// See [`EngineConfig::clock_tolerance`].
    pub clock_tolerance: chrono::TimeDelta,
    /// The API server's event TTL: bounds how far heartbeats are put off
    /// ([`EngineConfig::heartbeat_ceiling`]) and how long lone keys are remembered.
    pub event_ttl: chrono::TimeDelta,
    /// [`crate::engine::EngineConfig::key_bytes`].
    pub key_bytes: usize,
    /// Most raw events per list page.
    pub list_page_size: u32,
    /// About how many bytes (of JSON) a list page may hold ([`crate::paging`]).
    pub list_page_bytes: usize,
    /// [`restart::Bounds::buffer_bytes`].
    pub restart_buffer_bytes: usize,
    /// How long a restore may go without a page of its list before the operator gives up.
    pub restore_timeout: Duration,
    /// Loops as alerts, when an Alertmanager is configured.
    pub alerts: Option<AlertConfig>,
    /// Most label sets of the `loops` gauge.
    pub max_loop_label_sets: usize,
}

/// How often the engine's memory upkeep runs ([`Engine::housekeep`]), and the loop gauge and
/// `series_ongoing_longer_than` are refreshed.
const HOUSEKEEPING: Duration = Duration::from_secs(10);

/// How often the loops are scanned for alerts that begin (or re-posts that are due).
const ALERT_SCAN: Duration = Duration::from_secs(5);

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

/// Applies one step of the raw-event watch. During a restart the first list is buffered and
/// replayed at its end, after which the operator is ready.
fn on_step(
    engine: &mut Engine,
    metrics: &Metrics,
    health: &Health,
    restart: &mut Option<Restart>,
    (step, received): (Step, Option<DateTime<Utc>>),
) -> Told {
    if step.heard() {
        health.watch_heard(Instant::now());
    }
    let mut proof = Proof::Nothing;
    let mut handed_on = None;
    let mut relisted = false;
    match step {
        Step::ListStarted { relist } => {
            relisted = relist;
            if relist {
                metrics.watch_relists.inc();
                engine.begin_relist();
            }
        }
        Step::Listed(ev) => match restart.as_mut() {
            Some(restart) => {
                restart.buffer(&ev, metrics);
                if restart.is_full() {
                    restart.flush(engine, metrics, Utc::now());
                }
            }
            None => {
                feed(engine, metrics, &ev, Arrival::Listed);
            }
        },
        Step::ListDone {
            resource_version: rv,
        } => {
            let rv = resource_version(&rv).unwrap_or(0);
            proof = Proof::Current;
            handed_on = Some(rv);
            match restart.take() {
                Some(restart) => {
                    // The list is complete as of its snapshot, not of its last page.
                    restart.finish(engine, rv, received.unwrap_or_else(Utc::now), Utc::now());
                    health.set_recovered(true);
                }
                None => {
                    engine.end_relist();
                    engine.checkpoint(rv);
                }
            }
        }
        Step::Applied(ev) => {
            if let Some(last) = feed(engine, metrics, &ev, Arrival::Watched) {
                proof = Proof::Occurrence(last);
            }
            if let Some(rv) = ev
                .metadata
                .resource_version
                .as_deref()
                .and_then(resource_version)
            {
                engine.checkpoint(rv);
                handed_on = Some(rv);
            }
        }
        Step::Deleted(ev) => {
            let m = &ev.metadata;
            handed_on = m.resource_version.as_deref().and_then(resource_version);
            engine.forget_raw(RawId::of(
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or(""),
                m.uid.as_deref().unwrap_or(""),
            ));
        }
        Step::Bookmark {
            resource_version: rv,
        } => {
            metrics.bookmarks.inc();
            proof = Proof::Current;
            if let Some(rv) = resource_version(&rv) {
                engine.checkpoint(rv);
                handed_on = Some(rv);
            }
        }
        Step::Restarted { clean } => {
            metrics.watch_restarts.inc();
            if clean {
                proof = Proof::Current;
            }
        }
        Step::Stalled => {
            tracing::warn!("raw event watch went silent (dead connection?); resuming it");
            metrics.watch_stalls.inc();
        }
        Step::Failed { error, retry_in } => {
            tracing::warn!(%error, ?retry_in, "raw event watch failed; retrying");
        }
    }
    Told {
        proof,
        received,
        handed_on,
        relisted,
    }
}

/// What one step of the watch tells the input clock.
struct Told {
    proof: Proof,
    received: Option<DateTime<Utc>>,
    /// The resourceVersion of the change, bookmark or list it was.
    handed_on: Option<u64>,
    relisted: bool,
}

impl Told {
    fn tell(self, current: &mut Currency) {
        if self.relisted {
            current.relisted();
        }
        if let Some(rv) = self.handed_on {
            current.handed_on(rv);
        }
        current.update(self.proof, self.received);
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
    health: Arc<Health>,
    fence: WriteFence,
    shutdown: impl std::future::Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    tokio::pin!(shutdown);
    // Policies and namespace labels first: restored and replayed series must land in the right policy.
    let start = PolicyWatch::start(
        &client,
        config.defaults.clone(),
        config.namespace.as_deref(),
    );
    let mut policies = tokio::select! {
        policies = start => policies?,
        stop = &mut shutdown => return Ok(stop),
    };
    let mut engine = Engine::new(
        policies.set().clone(),
        EngineConfig {
            clock_tolerance: config.clock_tolerance,
            dormant_retention: config.event_ttl,
            // A quarter of the writer's rate stays for creates and finishes, a quarter of the TTL
            // for a heartbeat that waits in the writer's queue.
            heartbeat_rate: config.writer.qps * 0.75,
            heartbeat_ceiling: config.event_ttl * 3 / 4,
            key_bytes: config.key_bytes,
            ..EngineConfig::default()
        },
    );
    let now = Utc::now();
    for (ns, labels) in policies.namespaces() {
        engine.set_namespace_labels(now, ns, labels.clone());
    }
    let (mut handoff, ends) = handoff::channels();
    let writer = Writer::new(
        client.clone(),
        config.writer,
        metrics.clone(),
        fence.clone(),
    )
    .reporting(ends.landed);
    let (stop_writer, writer_stop) = tokio::sync::oneshot::channel();
    let writer = tokio::spawn(writer.run(ends.intents, writer_stop, config.drain, health.clone()));
    // Stopping before the end of the restore leaves nothing to write: the writer is told at once.
    let mut writer = AbortOnDrop {
        task: Some(writer),
        fence,
        writing: false,
    };

    let mut steps = raw_events(
        scoped(&client, &config.namespace),
        config.watch_timeout_secs,
        config.watch_bookmarks,
        PageSize::new(config.list_page_size, config.list_page_bytes),
    );
    // The own series objects namespace by namespace: a label-selected list is a range read over every
    // stored event of its scope, and over the whole cluster (10^6 stored events) one page of it
    // outlasts any request deadline.
    let own: Vec<Api<events::Event>> = match &config.namespace {
        Some(ns) => vec![Api::namespaced(client.clone(), ns)],
        None => policies
            .namespaces()
            .map(|(ns, _)| Api::namespaced(client.clone(), ns))
            .collect(),
    };
    let bounds = restart::Bounds {
        page_bytes: config.list_page_bytes,
        restore_timeout: config.restore_timeout,
        buffer_bytes: config.restart_buffer_bytes,
    };
    let restore = Restart::run(&own, &mut engine, (&metrics, &health), &mut steps, bounds);
    let (restart, held) = tokio::select! {
        started = restore => started?,
        stop = &mut shutdown => return Ok(stop),
    };
    let mut restart = Some(restart);
    // From here on intents reach the writer: an early return abandons what it has in flight.
    writer.writing = true;
    // How far the engine's input is known to be complete: the lifecycle clock never runs past it, so
    // that a loop is not finished while its occurrences are held up in a silent connection.
    let mut current = Currency::default();
    if let Some(step) = held {
        let received = steps.received();
        on_step(
            &mut engine,
            &metrics,
            &health,
            &mut restart,
            (step, received),
        )
        .tell(&mut current);
    }
    let mut seen = Loops::new(
        config.alerts.as_ref(),
        config.max_loop_label_sets,
        config.event_ttl,
        (&metrics, &health),
    )?;
    health.alerts_required(seen.alerting() && alerts_required(policies.set()));
    let mut alert_scan = tokio::time::interval(ALERT_SCAN);
    alert_scan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let raw_api: Api<Event> = scoped(&client, &config.namespace);
    let mut probe: Option<tokio::task::JoinHandle<currency::Probed>> = None;
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut housekeeping = tokio::time::interval(HOUSEKEEPING);
    housekeeping.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let stop;
    loop {
        // Until the first list is complete, what a part of it replayed early (a full restart
        // buffer) stays in the engine: written before the list's resourceVersion is checkpointed,
        // an object would carry a watermark that says less than it counted.
        if restart.is_none() {
            tokio::select! {
                () = handoff.forward(&mut engine, &metrics, &mut seen) => {}
                s = &mut shutdown => {
                    stop = s;
                    break;
                }
            }
        }
        tokio::select! {
            step = steps.next() => match step {
                Some(step) => {
                    let received = steps.received();
                    on_step(&mut engine, &metrics, &health, &mut restart, (step, received))
                        .tell(&mut current);
                }
                None => anyhow::bail!("raw event watch ended"),
            },
            update = policies.next() => match update? {
                Update::Policies(set) => {
                    health.alerts_required(seen.alerting() && alerts_required(&set));
                    engine.set_policies(Utc::now(), set);
                }
                Update::Namespaces { changed, removed } => {
                    let now = Utc::now();
                    for (ns, labels) in changed {
                        engine.set_namespace_labels(now, &ns, labels);
                    }
                    for ns in removed {
                        engine.namespace_removed(&ns);
                    }
                }
                Update::Nothing => {}
            },
            found = probed(&mut probe) => {
                probe = None;
                metrics.watch_probe(found.label());
                current.probed(found);
            }
            Some(report) = handoff.landed() => engine.written(&report),
            _ = tick.tick() => {
                let now = Utc::now();
                engine.tick_with_input(now, current.clock(now));
                if let Some(from) = current.probe_from(Instant::now(), engine.finishes_held()) {
                    let selector = crate::object::not_managed_selector();
                    probe = Some(tokio::spawn(currency::probe(raw_api.clone(), selector, from)));
                }
            }
            _ = housekeeping.tick() => {
                let now = Utc::now();
                engine.housekeep(now);
                metrics.set_ongoing_ages(engine.ongoing_longer_than(now, Metrics::ongoing_bounds()));
                if restart.is_none() {
                    seen.housekeep(&engine, now);
                }
            }
            _ = alert_scan.tick(), if restart.is_none() && seen.alerting() => {
                seen.scan(&engine, Utc::now());
            }
            s = &mut shutdown => {
                stop = s;
                break;
            }
        }
    }
    if let Some(task) = probe.take() {
        task.abort();
    }
    // The writer hears this even when its queue is full and it takes no intents.
    let _ = stop_writer.send(());
    drop(handoff);
    match (stop, writer.task.take()) {
        (Stop::Graceful, Some(task)) => {
            tracing::info!("shutting down: flushing pending writes");
            if let Err(e) = task.await {
                // The writer died (a panic) with whatever it had in flight.
                writer.fence.abandoned();
                return Err(e.into());
            }
        }
        (_, Some(task)) => task.abort(),
        (_, None) => {}
    }
    Ok(stop)
}

/// Whether a policy in force requires its alerts delivered (`spec.alert.required`).
fn alerts_required(set: &crate::config::settings::PolicySet) -> bool {
    (0..set.slots()).any(|slot| {
        set.settings(slot)
            .alert
            .as_ref()
            .is_some_and(|a| a.required)
    })
}

/// The answer of the currency probe in flight, if any (never resolves without one).
async fn probed(probe: &mut Option<tokio::task::JoinHandle<currency::Probed>>) -> currency::Probed {
    match probe.as_mut() {
        Some(task) => task.await.unwrap_or(currency::Probed::Failed),
        None => std::future::pending().await,
    }
}

/// The writer task, aborted if the controller returns early (a stop or an error). Once the restore is
/// over the writer may have requests in flight: aborting it then abandons them, which the fence is
/// told, so that the Lease is left to expire rather than released.
struct AbortOnDrop {
    task: Option<tokio::task::JoinHandle<()>>,
    fence: WriteFence,
    writing: bool,
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            if self.writing && !task.is_finished() {
                self.fence.abandoned();
            }
            task.abort();
        }
    }
}

//! The controller: the central loop of the operator, the imperative shell around the engine.
//!
//! [`run`] is four steps: **set up** (wait for the policies and namespace labels, make the engine,
//! start the writer task), **restore** (rebuild the engine from the stored series objects and the
//! first list of raw Events, [`crate::input::restart`]), **lead** (feed the engine the raw-event
//! watch, policy changes and a clock tick, and hand its intents to the writer) and **shut down**
//! (flush, or abandon when leadership was lost).
//!
//! ```text
//!  policies + namespace labels (watch) ────▶ ┌────────┐             policy status writer
//!  list own series (per namespace) ─restore─▶ │        │
//!  raw list (buffered, time-ordered) ──────▶ │ engine │──intents──▶ writer task ──▶ events.k8s.io/v1
//!  raw watch: applied / deleted / bookmark ─▶ │ (pure) │◀─landed──── (channels)
//!  tick every second ──────────────────────▶ └────────┘
//!  input clock (crate::input::completeness): proofs from the watch, and a probe while a finish is held
//! ```

mod channels;
mod loop_reports;
mod standby;
mod steps;
mod writer_task;

use crate::alerting::{AlertConfig, Input};
use crate::config::policy_watch::{PolicyWatch, Update};
use crate::input::completeness::{self, Completeness, Probed};
use crate::input::own_watch::{OwnObjects, own_objects};
use crate::input::pace::Pace;
use crate::input::paging::PageSize;
use crate::input::restart::{self, Restart};
use crate::input::watch::{Step, Steps, raw_events};
use crate::leader::WriteFence;
use crate::leader::elector::Fence;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use crate::operations::reporter::{Explainer, ReportConfig};
use crate::writer::{Observed, WriterConfig};
use channels::ControllerEnds;
use chrono::Utc;
use event_series_core::engine::{Engine, EngineConfig};
use event_series_core::intent::StoredSeries;
use event_series_core::settings::Settings;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::events::v1 as events;
use kube::api::Api;
use kube::{Client, Resource};
use loop_reports::LoopReports;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::task::JoinHandle;
use tokio::time::{Interval, MissedTickBehavior};
use writer_task::WriterTask;

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
    /// [`event_series_core::engine::EngineConfig::key_bytes`].
    pub key_bytes: usize,
    /// Most raw events per list page.
    pub list_page_size: u32,
    /// About how many bytes (of JSON) a list page may hold ([`crate::input::paging`]).
    pub list_page_bytes: usize,
    /// [`restart::Bounds::buffer_bytes`].
    pub restart_buffer_bytes: usize,
    /// How long a restore may go without a page of its list before the operator gives up.
    pub restore_timeout: Duration,
    /// The share of time a standby's lists may hold a request ([`crate::input::pace`]).
    pub standby_list_share: f64,
    /// Loops as alerts, when an Alertmanager is configured.
    pub alerts: Option<AlertConfig>,
    /// Most label sets of the `loops` gauge.
    pub max_loop_label_sets: usize,
    /// The operator's own trouble as Events and the `Degraded` condition.
    pub report: ReportConfig,
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
    shutdown: impl Future<Output = Stop>,
) -> anyhow::Result<Stop> {
    tokio::pin!(shutdown);
    // Policies and namespace labels first: restored and replayed series must land in the right policy.
    let start = PolicyWatch::start(
        &client,
        config.defaults.clone(),
        config.namespace.as_deref(),
    );
    let policies = match until(start, &mut shutdown).await {
        Ok(policies) => policies?,
        Err(stop) => return Ok(stop),
    };
    let mut engine = set_up_engine(&config, &policies);
    // A standby follows the leader's writes from before its restore reads the same objects.
    let own = (!leading(&fence)).then(|| {
        own_objects(
            scoped(&client, &config.namespace),
            config.watch_timeout_secs,
        )
    });
    let (to_writer, mut writer) =
        WriterTask::start(&client, &config, &metrics, &health, fence.clone());
    let pace = standby::paces(&config, &fence);
    let mut steps = raw_events(
        scoped(&client, &config.namespace),
        config.watch_timeout_secs,
        config.watch_bookmarks,
        (
            PageSize::new(config.list_page_size, config.list_page_bytes),
            pace(),
        ),
    );
    let restored = restore(
        (&client, &config, &policies),
        &mut engine,
        (&metrics, &health),
        &mut steps,
        &to_writer,
        pace(),
    );
    let (restart, held) = match until(restored, &mut shutdown).await {
        Ok(restored) => restored?,
        Err(stop) => return Ok(stop),
    };
    // From here on intents reach the writer: an early return abandons what it has in flight.
    writer.writing = true;
    let mut controller = Controller {
        raw_api: scoped(&client, &config.namespace),
        reports: LoopReports::new(
            config.alerts.as_ref(),
            config.max_loop_label_sets,
            config.event_ttl,
            (&metrics, &health),
        ),
        engine,
        metrics,
        health,
        steps,
        policies,
        restart: Some(restart),
        completeness: Completeness::default(),
        to_writer,
        probe: None,
        timers: Timers::new(),
        own,
        fence,
        explainer: Explainer::start(&client, config.report.clone()),
    };
    controller.lead_if_leading()?;
    if let Some(step) = held {
        controller.on_step(Some(step))?;
    }
    let stop = controller.lead(&mut shutdown).await?;
    // The writer hears this even when its queue is full and it takes no intents.
    writer.signal_stop();
    drop(controller);
    writer.shut_down(stop).await
}

/// `work`, unless `shutdown` resolves first.
async fn until<T>(
    work: impl Future<Output = T>,
    shutdown: &mut Pin<&mut impl Future<Output = Stop>>,
) -> Result<T, Stop> {
    tokio::select! {
        done = work => Ok(done),
        stop = shutdown => Err(stop),
    }
}

/// The engine, bounded by the flags and the API server's event TTL, with every namespace's labels.
fn set_up_engine(config: &ControllerConfig, policies: &PolicyWatch) -> Engine {
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
    engine
}

/// Rebuilds the engine: the own series objects, then the first raw list ([`Restart::run`]).
async fn restore(
    (client, config, policies): (&Client, &ControllerConfig, &PolicyWatch),
    engine: &mut Engine,
    shared: (&Metrics, &Health),
    steps: &mut Steps,
    to_writer: &ControllerEnds,
    pace: Arc<Pace>,
) -> anyhow::Result<(Restart, Option<Step>)> {
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
        pace,
    };
    // The writer learns each restored object's version: its first update carries it.
    let mut adopted = |ev: &events::Event, stored: &StoredSeries| {
        if let Some(observed) = Observed::of(ev, stored) {
            to_writer.seen(observed);
        }
    };
    Ok(Restart::run(&own, engine, shared, steps, bounds, &mut adopted).await?)
}

/// What the central loop owns once the engine is rebuilt.
struct Controller {
    engine: Engine,
    metrics: Arc<Metrics>,
    health: Arc<Health>,
    steps: Steps,
    policies: PolicyWatch,
    /// Until the first list is complete: its buffered replay ([`Restart`]).
    restart: Option<Restart>,
    /// How far the engine's input is known to be complete: the lifecycle clock never runs past it, so
    /// that a loop is not finished while its occurrences are held up in a silent connection.
    completeness: Completeness,
    reports: LoopReports,
    to_writer: ControllerEnds,
    /// The completeness probe in flight, if any.
    probe: Option<JoinHandle<Probed>>,
    raw_api: Api<Event>,
    timers: Timers,
    /// While this replica stands by: the leader's writes ([`standby`]).
    own: Option<OwnObjects>,
    fence: WriteFence,
    explainer: Explainer,
}

/// The clock ticks of the central loop: a late tick is skipped, never caught up in a burst.
struct Timers {
    tick: Interval,
    housekeeping: Interval,
    alert_scan: Interval,
}

impl Timers {
    fn new() -> Timers {
        let every = |period| {
            let mut interval = tokio::time::interval(period);
            interval.set_missed_tick_behavior(MissedTickBehavior::Skip);
            interval
        };
        Timers {
            tick: every(Duration::from_secs(1)),
            housekeeping: every(HOUSEKEEPING),
            alert_scan: every(ALERT_SCAN),
        }
    }
}

impl Controller {
    /// The central loop, until `shutdown` resolves or an input fails for good.
    async fn lead(
        &mut self,
        shutdown: &mut Pin<&mut impl Future<Output = Stop>>,
    ) -> anyhow::Result<Stop> {
        loop {
            // Until the first list is complete, what a part of it replayed early (a full restart
            // buffer) stays in the engine: written before the list's resourceVersion is
            // checkpointed, an object would carry a watermark that says less than it counted.
            if self.restart.is_none() {
                tokio::select! {
                    () = self.to_writer.forward(&mut self.engine, &self.metrics, &mut self.reports) => {}
                    stop = &mut *shutdown => return Ok(stop),
                }
            }
            let scan_alerts = self.reports.alerting();
            tokio::select! {
                step = self.steps.next() => self.on_step(step)?,
                update = self.policies.next() => self.on_policies(update?),
                found = probed(&mut self.probe) => self.on_probed(found),
                Some(report) = self.to_writer.landed() => self.engine.written(&report),
                Some(ev) = next_own(&mut self.own), if self.restart.is_none() => {
                    if let Some(observed) = standby::learn(&mut self.engine, &ev) {
                        self.to_writer.seen(observed);
                    }
                }
                _ = self.timers.tick.tick() => {
                    self.lead_if_leading()?;
                    self.on_tick();
                    (self.explainer).tick(&self.metrics.trouble, &self.policies, leading(&self.fence));
                }
                _ = self.timers.housekeeping.tick() => self.on_housekeeping(),
                _ = self.timers.alert_scan.tick(), if scan_alerts => {
                    let input = match self.restart {
                        Some(_) => Input::Restored,
                        None => Input::Complete,
                    };
                    self.reports.scan(&self.engine, Utc::now(), input);
                }
                stop = &mut *shutdown => return Ok(stop),
            }
        }
    }

    /// One step of the raw-event watch, applied and told to the input clock.
    fn on_step(&mut self, step: Option<Step>) -> anyhow::Result<()> {
        let Some(step) = step else {
            anyhow::bail!("raw event watch ended");
        };
        let received = self.steps.received();
        let shared = (&*self.metrics, &*self.health);
        let completed = steps::apply(
            &mut self.engine,
            shared,
            &mut self.restart,
            (step, received),
        )
        .tell(&mut self.completeness);
        if completed {
            self.on_tick();
        }
        Ok(())
    }

    fn on_policies(&mut self, update: Update) {
        match update {
            Update::Policies(set) => {
                self.health
                    .alerts_required(self.reports.alerting() && set.alerts_required());
                self.engine.set_policies(Utc::now(), set);
            }
            Update::Namespaces { changed, removed } => {
                let now = Utc::now();
                for (ns, labels) in changed {
                    self.engine.set_namespace_labels(now, &ns, labels);
                }
                for ns in removed {
                    self.engine.namespace_removed(&ns);
                }
            }
            Update::Nothing => {}
        }
    }

    fn on_probed(&mut self, found: Probed) {
        self.probe = None;
        self.metrics.watch_probe(found.label());
        if self.completeness.probed(found) {
            self.on_tick();
        }
    }

    /// The lifecycle clock (never past what the input is known complete to), and a probe of the
    /// input's completeness when a finish is held back for want of it.
    /// Once this replica leads: its own writes are known without a watch, and its alerts start.
    fn lead_if_leading(&mut self) -> anyhow::Result<()> {
        if !leading(&self.fence) {
            return Ok(());
        }
        if self.own.take().is_some() {
            tracing::info!("leading: the standby's engine is current; writing what is owed");
        }
        if self.reports.lead()? {
            let required = self.policies.set().alerts_required();
            self.health.alerts_required(required);
            // The alerts the previous leader kept firing, posted again at once, before the raw
            // list if it is still under way: they would lapse in Alertmanager meanwhile, and fire
            // again.
            let input = match self.restart {
                Some(_) => Input::Restored,
                None => Input::Complete,
            };
            self.reports.scan(&self.engine, Utc::now(), input);
        }
        Ok(())
    }

    fn on_tick(&mut self) {
        let now = Utc::now();
        self.engine
            .tick_with_input(now, self.completeness.clock(now));
        let held = self.engine.finishes_held();
        if let Some(from) = self.completeness.probe_from(Instant::now(), held) {
            let selector = crate::object::not_managed_selector();
            let probe = completeness::probe(self.raw_api.clone(), selector, from);
            self.probe = Some(tokio::spawn(probe));
        }
    }

    fn on_housekeeping(&mut self) {
        let now = Utc::now();
        self.engine.housekeep(now);
        self.metrics.set_ongoing_ages(
            self.engine
                .ongoing_longer_than(now, Metrics::ongoing_bounds()),
        );
        if self.restart.is_none() {
            self.reports.housekeep(&self.engine, now);
        }
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        if let Some(task) = self.probe.take() {
            task.abort();
        }
    }
}

/// Whether this replica may write now (a single replica, or the holder of the Lease).
fn leading(fence: &WriteFence) -> bool {
    matches!(fence.check(std::time::Instant::now()), Fence::Open { .. })
}

/// The next object of the own-object watch, if one runs (never resolves without one).
async fn next_own(own: &mut Option<OwnObjects>) -> Option<Box<events::Event>> {
    match own.as_mut() {
        Some(own) => own.next().await,
        None => std::future::pending().await,
    }
}

/// The answer of the completeness probe in flight, if any (never resolves without one).
async fn probed(probe: &mut Option<JoinHandle<Probed>>) -> Probed {
    match probe.as_mut() {
        Some(task) => task.await.unwrap_or(Probed::Failed),
        None => std::future::pending().await,
    }
}

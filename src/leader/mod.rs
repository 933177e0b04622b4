//! Leader election on a coordination.k8s.io/v1 Lease, so that several replicas can run and exactly one
//! writes series, even when the API server is unreachable from one of them.
//!
//! [`elector`] decides (client-go's protocol, monotonic clock injected, no I/O); this module performs
//! its reads and writes of the Lease every retry period and publishes the outcome: the [`Role`] the
//! process follows, and the [`WriteFence`] the writer checks before every request.
//!
//! Written here rather than taken from a crate: `kube-lease-manager`, used before, never reported a
//! lost lease while its renewals failed and compared expiry with the wall clock; a fence needs the
//! time of the last successful renewal on the monotonic clock, which no crate exposes.
//!
//! A leader that cannot renew within the renew deadline is fenced at once (the writer issues nothing
//! more, and every request it has in flight must be over before a standby could take the Lease),
//! then the process exits 1 so that its Pod restarts as a standby. On SIGTERM the Lease is released
//! so that a standby takes over at once, unless a request of this leader went unanswered: the server
//! may still carry it out (a proxy that does not pass on the reset, another apiserver), so the Lease
//! is then left to expire and the standby waits it out.

pub mod elector;

use crate::api::client::timed_out;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use anyhow::Context;
use elector::{Decision, Elector, Fence, Record, Timings};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use std::hash::{BuildHasher, Hasher};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tokio::task::JoinHandle;

#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub name: String,
    pub namespace: String,
    /// The holder identity: the pod name in a Deployment.
    pub identity: String,
    pub timings: Timings,
    /// The deadline of each read or write of the Lease (shortened further for a leader, see
    /// [`Elector::renew_by`]).
    pub request_timeout: Duration,
}

/// Where this replica stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Standby,
    Leading,
    /// It led and may not any more: fenced, it must stop.
    Lost,
}

/// What the writer asks before each request: may it write, and by when must the request be over.
#[derive(Clone, Default)]
pub struct WriteFence(Option<Arc<Mutex<Elector>>>);

impl WriteFence {
    /// No election: always open.
    pub fn open() -> WriteFence {
        WriteFence(None)
    }

    /// A request made under this fence went unanswered (timed out, its connection broke, or it was
    /// cut at shutdown): the Lease is then not released early ([`Elector::may_release`]).
    pub fn abandoned(&self) {
        if let Some(elector) = &self.0 {
            lock(elector).abandoned();
        }
    }

    /// Whether a request may start at `now`, and its latest end.
    pub fn check(&self, now: Instant) -> Fence {
        match &self.0 {
            None => Fence::Open {
                until: now + Duration::from_secs(365 * 24 * 3600),
            },
            Some(elector) => lock(elector).fence(now),
        }
    }
}

fn lock(elector: &Mutex<Elector>) -> MutexGuard<'_, Elector> {
    // The elector's state stays consistent across a panic elsewhere (every update is one assignment).
    elector
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running election for one replica.
pub struct Election {
    elector: Arc<Mutex<Elector>>,
    role: watch::Receiver<Role>,
    task: JoinHandle<()>,
    api: Api<Lease>,
    config: LeaseConfig,
}

impl Election {
    /// Joins the election: reads (and creates, or takes) the Lease every retry period from now on;
    /// until `health` says the engine is current, a free Lease is left to a warm replica for a
    /// lease duration.
    pub fn start(
        client: Client,
        config: LeaseConfig,
        metrics: Arc<Metrics>,
        health: Arc<Health>,
    ) -> Election {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let elector = Arc::new(Mutex::new(Elector::new(
            config.identity.clone(),
            config.timings,
        )));
        let (tx, role) = watch::channel(Role::Standby);
        let task = tokio::spawn(campaign(
            api.clone(),
            elector.clone(),
            tx,
            config.clone(),
            (metrics, health),
        ));
        Election {
            elector,
            role,
            task,
            api,
            config,
        }
    }

    /// Resolves once this replica leads.
    pub async fn acquired(&mut self) -> anyhow::Result<()> {
        self.role
            .wait_for(|r| *r == Role::Leading)
            .await
            .context("the election stopped")?;
        Ok(())
    }

    /// Resolves when this replica, having led, may no longer write (or the election stopped).
    pub async fn lost(&mut self) {
        let _ = self.role.wait_for(|r| *r == Role::Lost).await;
    }

    /// The Lease this election is for.
    pub fn config(&self) -> &LeaseConfig {
        &self.config
    }

    /// The fence for the writer.
    pub fn fence(&self) -> WriteFence {
        WriteFence(Some(self.elector.clone()))
    }

    /// Leaves the election; if this replica still leads, the Lease is released (no holder, a one
    /// second duration, as client-go does) so that a standby takes over without waiting.
    pub async fn release(self) {
        self.task.abort();
        let now = Instant::now();
        let (until, rv, transitions) = {
            let e = lock(&self.elector);
            match (e.fence(now), e.held()) {
                (Fence::Open { until }, Some((rv, record))) if e.may_release(now) => {
                    (until, rv.to_owned(), record.transitions)
                }
                (Fence::Open { .. }, Some(_)) => {
                    tracing::warn!(
                        "a request of this leader went unanswered: the lease is left to expire, \
                         not released, so that it cannot land after the next leader's writes"
                    );
                    return;
                }
                _ => return,
            }
        };
        let deadline = until.min(now + self.config.request_timeout);
        match tokio::time::timeout_at(
            deadline.into(),
            release_lease(&self.api, &self.config, rv, transitions),
        )
        .await
        {
            Ok(Ok(true)) => tracing::info!("lease released"),
            Ok(Ok(false)) => tracing::warn!("the lease is no longer ours: left as it is"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the lease failed"),
            Err(_) => tracing::warn!("releasing the lease timed out"),
        }
    }
}

/// Releases the Lease held by `config.identity` at resourceVersion `rv` (no holder, a one second
/// duration, as client-go does); whether it was ours to release. A conflict is read again once: a
/// renewal that was on its way when the election stopped may land after all and move the Lease to a
/// newer version, still ours, and released from the version it read, a standby takes over at once
/// instead of waiting out the lease duration.
pub async fn release_lease(
    api: &Api<Lease>,
    config: &LeaseConfig,
    rv: String,
    transitions: i32,
) -> kube::Result<bool> {
    let (mut rv, mut transitions) = (rv, transitions);
    for read_again in [true, false] {
        let wall = Timestamp::now();
        let released = Record {
            holder: String::new(),
            lease_duration_secs: 1,
            acquire_time: Some(wall),
            renew_time: Some(wall),
            transitions,
        };
        let mut lease = lease_object(config, &released);
        lease.metadata.resource_version = Some(rv);
        match api
            .replace(&config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => return Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 && read_again => {
                match api.get_opt(&config.name).await? {
                    Some(now) if Record::of(&now).holder == config.identity => {
                        rv = now.metadata.resource_version.clone().unwrap_or_default();
                        transitions = Record::of(&now).transitions;
                    }
                    _ => return Ok(false),
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

fn lease_object(config: &LeaseConfig, record: &Record) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(config.name.clone()),
            namespace: Some(config.namespace.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(record.spec()),
    }
}

/// A random factor in [1, 1.2): standbys retry with jitter, as client-go's do, so that they do not
/// all ask at the same instant.
fn jitter(d: Duration) -> Duration {
    let random = std::collections::hash_map::RandomState::new()
        .build_hasher()
        .finish();
    d.mul_f64(1.0 + 0.2 * (random % 1000) as f64 / 1000.0)
}

/// Counts one Lease request in `api_requests_total` and says whether it answered at all.
fn counted<T>(metrics: &Metrics, verb: &str, result: &Result<kube::Result<T>, ()>) {
    let code = match result {
        Err(()) => "timeout".to_owned(),
        Ok(Ok(_)) => "200".to_owned(),
        Ok(Err(kube::Error::Api(s))) => s.code.to_string(),
        Ok(Err(e)) if timed_out(e) => "timeout".to_owned(),
        Ok(Err(_)) => "error".to_owned(),
    };
    metrics.request_code(verb, &code);
}

/// How a round of Lease requests ended.
enum Round {
    /// Read and, if the decision was to, written (or it failed and the next round retries).
    Done,
    /// Our write met a conflict: read the Lease at once.
    Conflict,
}

/// Reads the Lease (by `deadline`) into the elector; `false` when the read failed.
async fn read_lease(
    api: &Api<Lease>,
    elector: &Mutex<Elector>,
    config: &LeaseConfig,
    metrics: &Metrics,
    deadline: Instant,
) -> bool {
    let read = tokio::time::timeout_at(deadline.into(), api.get_opt(&config.name))
        .await
        .map_err(drop);
    counted(metrics, "get", &read);
    match read {
        Ok(Ok(lease)) => {
            let observed = lease.map(|l| {
                let rv = l.metadata.resource_version.clone().unwrap_or_default();
                (rv, Record::of(&l))
            });
            lock(elector).observe(Instant::now(), observed);
            true
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reading the lease failed");
            false
        }
        Err(()) => {
            tracing::warn!("reading the lease timed out");
            false
        }
    }
}

/// Creates, takes or renews the Lease as the elector decides (by `deadline`).
async fn write_lease(
    api: &Api<Lease>,
    elector: &Mutex<Elector>,
    config: &LeaseConfig,
    metrics: &Metrics,
    deadline: Instant,
) -> Round {
    let decision = lock(elector).decide(Instant::now(), Timestamp::now());
    let params = PostParams::default();
    let sent = Instant::now();
    let (verb, answer) = match decision {
        Decision::Wait => return Round::Done,
        Decision::Create(record) => {
            let lease = lease_object(config, &record);
            let create = api.create(&params, &lease);
            (
                "create",
                tokio::time::timeout_at(deadline.into(), create).await,
            )
        }
        Decision::Update {
            record,
            resource_version,
        } => {
            let mut lease = lease_object(config, &record);
            lease.metadata.resource_version = Some(resource_version);
            let update = api.replace(&config.name, &params, &lease);
            (
                "update",
                tokio::time::timeout_at(deadline.into(), update).await,
            )
        }
    };
    let answer = answer.map_err(drop);
    counted(metrics, verb, &answer);
    match answer {
        Ok(Ok(lease)) => {
            let rv = lease.metadata.resource_version.clone().unwrap_or_default();
            lock(elector).written(sent, rv, Record::of(&lease));
        }
        Ok(Err(kube::Error::Api(s))) if s.code == 409 => {
            tracing::debug!("lease changed under us; reading it again");
            return Round::Conflict;
        }
        Ok(Err(e)) => tracing::warn!(error = %e, verb, "lease write failed"),
        Err(()) => tracing::warn!(verb, "lease write timed out"),
    }
    Round::Done
}

/// The election loop: one round of Lease requests per retry period; publishes `Leading` after a
/// successful acquire, `Lost` (and ends) once a leader's fence has closed. A leader renews from the
/// record it last wrote (one request a round) and reads first only after a conflict; a round may
/// take until the renew deadline ([`Elector::round_deadline`]).
async fn campaign(
    api: Api<Lease>,
    elector: Arc<Mutex<Elector>>,
    role: watch::Sender<Role>,
    config: LeaseConfig,
    (metrics, health): (Arc<Metrics>, Arc<Health>),
) {
    let timings = config.timings;
    let mut must_read = true;
    // Conflicts in a row: the first is read again at once, later ones wait their turn, so that a
    // client rewriting the Lease faster than a round trip cannot drive a busy loop.
    let mut conflicts = 0u32;
    loop {
        let now = Instant::now();
        let (leading, blind, deadline) = {
            let e = lock(&elector);
            let deadline = e.round_deadline(now, config.request_timeout);
            (e.leading(now), e.renews_blind(now), deadline)
        };
        if *role.borrow() == Role::Leading && !leading {
            tracing::error!(
                renew_deadline = ?timings.renew_deadline,
                "leadership lost: no renewal within the renew deadline, or another holder; writes fenced"
            );
            metrics.leader.set(0);
            let _ = role.send(Role::Lost);
            return;
        }
        let renewed_before = {
            let mut e = lock(&elector);
            e.set_warm(health.recovered());
            e.renew_by()
        };
        let read =
            (must_read || !blind) && read_lease(&api, &elector, &config, &metrics, deadline).await;
        let round = if read || (blind && !must_read) {
            write_lease(&api, &elector, &config, &metrics, deadline).await
        } else {
            Round::Done
        };
        must_read = matches!(round, Round::Conflict);
        conflicts = if must_read { conflicts + 1 } else { 0 };
        let now = Instant::now();
        let (leading, renew_by) = {
            let e = lock(&elector);
            (e.leading(now), e.renew_by())
        };
        if leading && *role.borrow() == Role::Standby {
            tracing::info!(identity = %config.identity, "lease acquired");
            metrics.leader.set(1);
            let _ = role.send(Role::Leading);
        }
        if (must_read && conflicts == 1) || (!leading && *role.borrow() == Role::Leading) {
            // A conflict is read at once; a fence that closed during this round is reported now,
            // not a retry period later.
            continue;
        }
        let mut next = now
            + if leading {
                timings.retry_period
            } else {
                jitter(timings.retry_period)
            };
        if leading && let Some(by) = renew_by {
            // A renewal that succeeded is followed a retry period after it was *sent*, not after
            // its answer: on a slow control plane the answer takes much of the renew deadline,
            // which is timed from the send. Wake at the latest when the fence closes, to report it.
            let renewed = by - timings.renew_deadline;
            if renew_by != renewed_before {
                next = (renewed + timings.retry_period).max(now);
            }
            next = next.min(by);
        }
        tokio::time::sleep_until(next.into()).await;
    }
}

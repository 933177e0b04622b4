//! The restart shell: how an operator that starts (or takes over the lease) rebuilds the engine from
//! what the API server holds, so that final counts equal those of a run that never stopped.
//!
//! 1. [`Restart::run`]: list the operator's own series objects (Ongoing and Finished, paginated,
//!    namespace by namespace, a few namespaces at once: a label-selected list is a range read over
//!    every stored event of its scope, and over a whole cluster holding 10^6 events even its first
//!    page outlasts the request deadline), decode each as a claim ([`crate::object::decode()`]) and restore it into the
//!    engine. Meanwhile the
//!    first list of raw events is fetched; each raw event is kept as a compact observation in a
//!    [`ReplayBuffer`] ([`Restart::buffer`]) rather than fed at once, because a list comes in name order and because
//!    the engine must know every stored series before it counts a raw event. What the watch
//!    alongside that list brings (changes after its snapshot, [`crate::input::watch`]) is listed
//!    too, and buffered the same way.
//! 2. [`Restart::finish`], at the end of that list: replay the buffer in the order the occurrences
//!    happened, so candidates and gaps form exactly as they did when the events were watched live,
//!    then end the recovery. From then on the watch feeds the engine directly. The buffer is
//!    bounded in bytes (`--restart-buffer-bytes`): a full buffer pauses the list until the restore
//!    is complete, and is then replayed early ([`Restart::flush`]).
//!
//! The engine's side of it (what a stored series says was already counted) is `engine::restore`.

use crate::input::list_body::{self, Part};
use crate::input::pace::Pace;
use crate::input::paging::PageSize;
use crate::input::watch::Step;
use crate::object;
use crate::operations::health::Health;
use crate::operations::metrics::Metrics;
use chrono::{DateTime, Utc};
use event_series_core::engine::Engine;
use event_series_core::intent::StoredSeries;
use event_series_core::key::ReplayBuffer;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{Api, ListParams};
use std::sync::Arc;
use std::time::{Duration, Instant};

mod list_retry;

use list_retry::{Progress, failed, retry_delays};

/// Most objects per page of the list of own series objects. The operator's own objects are bounded
/// (the note to 1 KiB, the annotations to the sources of a few raw objects), so large pages are
/// safe and fewer pages matter (each costs the apiserver a range read over every stored event);
/// look-alikes a tenant wrote can be large, and the byte budget ([`crate::input::paging`]) still applies.
pub const OWN_PAGE_SIZE: u32 = 2000;

/// A restart in progress, from the restore of the own series objects to the end of the first list
/// of raw events.
pub struct Restart {
    buffer: ReplayBuffer,
    /// About how many bytes `buffer` may hold.
    budget: usize,
    /// Times the buffer was replayed before the end of the list.
    flushes: u32,
    started: Instant,
}

impl Restart {
    /// Restores every series object the operator wrote while the first list of raw events is
    /// fetched: both lists run at once, but a raw event is only buffered until every series is
    /// restored. Returns the restart and the first step of `steps` that is not part of that list
    /// (its end, usually), which the caller handles once the restore is complete; `None` when the
    /// watch ended first. Fails when the restore makes no progress for `bounds.restore_timeout`.
    /// Each object adopted is also handed to `adopted` (the writer learns its version there).
    pub async fn run(
        own: &[Api<Event>],
        engine: &mut Engine,
        (metrics, health): (&Metrics, &Health),
        steps: &mut (impl Stream<Item = Step> + Unpin),
        bounds: Bounds,
        adopted: &mut impl FnMut(&Event, &StoredSeries),
    ) -> Result<(Restart, Option<Step>), RestoreError> {
        let mut restart = Restart::new(bounds.buffer_bytes);
        let started = restart.started;
        engine.begin_recovery();
        let restore = restore_own_series(own, engine, (metrics, health), &bounds, adopted);
        tokio::pin!(restore);
        let mut held = None;
        let mut watch_open = true;
        loop {
            tokio::select! {
                restored = &mut restore => {
                    restored?;
                    break;
                }
                // A full buffer waits for the restore (raw events are fed only once every stored
                // series is known): the list pauses.
                step = steps.next(), if watch_open && held.is_none() && !restart.is_full() => match step {
                    Some(Step::Listed(ev)) => restart.buffer(&ev, metrics),
                    Some(Step::ListStarted { relist: false }) => {}
                    Some(Step::Failed { error, retry_in }) => {
                        tracing::warn!(%error, ?retry_in, "raw event list failed; retrying");
                    }
                    Some(step) => held = Some(step),
                    None => watch_open = false,
                },
            }
        }
        tracing::info!(
            buffered = restart.buffer.len(),
            restore_ms = started.elapsed().as_millis() as u64,
            "own series restored; first list of raw events under way"
        );
        if held.is_none() && watch_open {
            held = steps.next().await;
        }
        Ok((restart, held))
    }

    /// A restart whose buffer holds about `budget` bytes at most.
    pub fn new(budget: usize) -> Restart {
        Restart {
            buffer: ReplayBuffer::default(),
            budget: budget.max(1),
            flushes: 0,
            started: Instant::now(),
        }
    }

    /// Keeps one raw event of the first list for the replay; an event that cannot be read is skipped
    /// with a log line and a metric.
    pub fn buffer(&mut self, ev: &CoreEvent, metrics: &Metrics) {
        if let Some(obs) = crate::input::feed::read(ev, metrics) {
            self.buffer.push(&obs);
        }
    }

    /// The buffer holds its budget: [`Restart::flush`] it once the restore is complete.
    pub fn is_full(&self) -> bool {
        self.buffer.bytes() >= self.budget
    }

    /// Replays what the buffer holds now, in time order, and empties it: what bounds a restart's
    /// memory where the first list holds more than the budget (10^6 stored events take hundreds
    /// of MB buffered). Only once every stored series is restored. Each part of the list is replayed
    /// in time order, not the whole: an occurrence listed after a flush but older than one replayed
    /// before it arrives as an occurrence written late does, which the engine places by its own
    /// timestamp (it joins its series, or reopens it); the raw objects of one key mostly sit side
    /// by side in the list (one namespace, often one object).
    pub fn flush(&mut self, engine: &mut Engine, metrics: &Metrics, now: DateTime<Utc>) {
        let replayed = self.replay(engine, now);
        self.flushes += 1;
        metrics.restart_buffer_flushes.inc();
        tracing::info!(
            replayed,
            flushes = self.flushes,
            budget = self.budget,
            "restart buffer full: replayed the first list so far"
        );
    }

    /// Replays and empties the buffer; how many raw events it held.
    fn replay(&mut self, engine: &mut Engine, now: DateTime<Utc>) -> usize {
        let mut buffer = std::mem::take(&mut self.buffer);
        buffer.sort_for_replay();
        for obs in buffer.iter() {
            engine.observe(now, &obs);
        }
        let n = buffer.len();
        drop(buffer);
        crate::operations::memory::release_free_pages();
        n
    }

    /// The first list is complete at resourceVersion `rv`, as of `snapshot` (when its first page was
    /// asked for: later occurrences come through the watch): replays it in time order and ends the
    /// recovery. Returns how many raw events were replayed.
    pub fn finish(
        mut self,
        engine: &mut Engine,
        rv: u64,
        snapshot: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> usize {
        let listed_ms = self.started.elapsed().as_millis() as u64;
        let replay = Instant::now();
        let raw_events = self.replay(engine, now);
        engine.checkpoint(rv);
        engine.end_recovery(now, snapshot);
        tracing::info!(
            raw_events,
            flushes = self.flushes,
            active = engine.active_series(),
            list_ms = listed_ms,
            replay_ms = replay.elapsed().as_millis() as u64,
            "recovered; watching"
        );
        raw_events
    }
}

/// How many lists of own series objects (one per namespace) run at once. A cluster of 10,000
/// namespaces makes 10,000 lists of a page or two each; one after the other they cost a round trip
/// each (21.7 s at 10,000 namespaces, `just bench-growth`). Each list keeps its own page budget, so
/// at most this many pages of `--list-page-bytes` are in flight.
pub const RESTORE_LISTS: usize = 4;

/// Restores every series object the operator wrote (Ongoing and Finished), one list per API in
/// `own` (one per namespace), [`RESTORE_LISTS`] lists at once, page by page, each page read one
/// object at a time ([`crate::input::list_body`]): a look-alike a tenant made large costs one object
/// of memory, not a page of them. Each object is a claim checked by [`object::decode()`]; one that
/// fails is skipped with a log line and counted in `event_series_recovery_rejected_total{reason}`.
/// Objects are applied to the engine one at a time, in whatever order the lists deliver them:
/// restoring is per object and idempotent (a page read again after a failure restores nothing
/// twice).
async fn restore_own_series(
    own: &[Api<Event>],
    engine: &mut Engine,
    (metrics, health): (&Metrics, &Health),
    bounds: &Bounds,
    adopted: &mut impl FnMut(&Event, &StoredSeries),
) -> Result<(), RestoreError> {
    let started = Instant::now();
    health.restore_progress(Some(started));
    tracing::info!(namespaces = own.len(), "restoring own series objects");
    let mut tally = Tally::default();
    // A standby's pages go one at a time all the same ([`crate::input::pace`]).
    let mut parts = futures::stream::iter(own)
        .map(|api| Box::pin(own_objects(api, bounds, metrics)))
        .flatten_unordered(RESTORE_LISTS);
    loop {
        let asked = Instant::now();
        let Some(part) = parts.next().await else {
            break;
        };
        tally.waiting += asked.elapsed();
        health.restore_progress(Some(Instant::now()));
        match part? {
            Own::Object(ev, list_rv) => {
                if let Some(series) = restore_one(&ev, list_rv, engine, metrics, &mut tally) {
                    adopted(&ev, &series);
                }
            }
            Own::PageDone => tally.pages += 1,
        }
    }
    health.restore_progress(None);
    let Tally {
        restored,
        rejected,
        pages,
        waiting,
    } = tally;
    tracing::info!(
        restored,
        rejected,
        pages,
        namespaces = own.len(),
        active = engine.active_series(),
        list_ms = waiting.as_millis() as u64,
        total_ms = started.elapsed().as_millis() as u64,
        "own series objects restored"
    );
    Ok(())
}

/// What the lists of a restore did.
#[derive(Default)]
struct Tally {
    restored: u64,
    rejected: u64,
    pages: u64,
    /// Time spent waiting for pages.
    waiting: Duration,
}

/// What one list of own series objects hands out.
enum Own {
    /// An object, with the resourceVersion the list is served at (when known).
    Object(Box<Event>, Option<u64>),
    /// A page was read to its end.
    PageDone,
}

/// One list of own series objects (one namespace's): its objects, each with the resourceVersion
/// the list is served at, and the end of each page. Ends after the last page, or with the error
/// that stopped it.
fn own_objects<'a>(
    api: &'a Api<Event>,
    bounds: &'a Bounds,
    metrics: &'a Metrics,
) -> impl Stream<Item = Result<Own, RestoreError>> + 'a {
    let sizes = PageSize::new(OWN_PAGE_SIZE, bounds.page_bytes);
    let list = OwnList {
        api,
        params: ListParams::default()
            .labels(&object::managed_selector())
            .limit(sizes.limit()),
        sizes,
        progress: Progress {
            last: Instant::now(),
            delays: retry_delays(),
            restarts: 0,
            timeout: bounds.restore_timeout,
            metrics,
        },
        list_rv: None,
        page: None,
        largest: 0,
        pace: &bounds.pace,
    };
    futures::stream::try_unfold(Some(list), |list| async move {
        let Some(mut list) = list else {
            return Ok(None);
        };
        loop {
            match list.next_part().await? {
                Part::Head(meta) => list.served_at(&meta),
                Part::Item(ev, bytes) => {
                    list.largest = list.largest.max(bytes);
                    let list_rv = list.list_rv;
                    return Ok(Some((Own::Object(ev, list_rv), Some(list))));
                }
                Part::End(meta) => {
                    list.served_at(&meta);
                    list.sizes.measured(std::mem::take(&mut list.largest));
                    let next = match meta.continue_.filter(|c| !c.is_empty()) {
                        Some(token) => {
                            list.params.continue_token = Some(token);
                            list.params.limit = Some(list.sizes.limit());
                            Some(list)
                        }
                        None => None,
                    };
                    return Ok(Some((Own::PageDone, next)));
                }
            }
        }
    })
}

/// Where one list of own series objects stands.
struct OwnList<'a> {
    api: &'a Api<Event>,
    params: ListParams,
    sizes: PageSize,
    progress: Progress<'a>,
    /// The resourceVersion the list is served at, once its first page told.
    list_rv: Option<u64>,
    /// The page being read.
    page: Option<BoxStream<'static, kube::Result<Part<Event>>>>,
    /// The largest object of that page.
    largest: usize,
    pace: &'a Arc<Pace>,
}

impl OwnList<'_> {
    /// Every page of one list is served at the first page's resourceVersion.
    fn served_at(&mut self, meta: &ListMeta) {
        self.list_rv = self
            .list_rv
            .or_else(|| meta.resource_version.as_deref()?.parse().ok());
    }

    /// The next part of the page being read, asking for it (again) as needed: a page that failed
    /// is asked for again ([`failed`]), smaller when it failed on large objects.
    async fn next_part(&mut self) -> Result<Part<Event>, RestoreError> {
        loop {
            let page = self.page.get_or_insert_with(|| {
                let (api, params) = (self.api.clone(), self.params.clone());
                self.pace.page(move || list_body::page(&api, &params))
            });
            let e = match page.next().await {
                Some(Ok(part)) => {
                    if matches!(part, Part::End(_)) {
                        self.page = None;
                    }
                    self.progress.last = Instant::now();
                    self.progress.delays = retry_delays();
                    return Ok(part);
                }
                Some(Err(e)) => e,
                None => kube::Error::Service("the list page ended without its end".into()),
            };
            self.page = None;
            if self.largest > 0 {
                self.sizes.measured(std::mem::take(&mut self.largest));
                self.params.limit = Some(self.sizes.limit());
            }
            failed(e, &mut self.params, &mut self.progress).await?;
        }
    }
}

/// Restores one series object of a list served at `list_rv`; what it holds, if adopted.
fn restore_one(
    ev: &Event,
    list_rv: Option<u64>,
    engine: &mut Engine,
    metrics: &Metrics,
    tally: &mut Tally,
) -> Option<StoredSeries> {
    let now = Utc::now();
    let check = object::Check {
        now,
        tolerance: engine.clock_tolerance(),
    };
    let claim = object::decode(ev, check).and_then(|s| match list_rv {
        // No object can record raw events newer than the list it is read in.
        Some(list) if s.watermark > list => Err(object::DecodeError::FutureWatermark {
            watermark: s.watermark,
            list,
        }),
        _ => Ok(s),
    });
    match claim {
        Ok(series) => {
            engine.restore(now, series.clone());
            tally.restored += 1;
            Some(series)
        }
        Err(e) => {
            tracing::warn!(name = ?ev.metadata.name, namespace = ?ev.metadata.namespace,
                error = %e, "series object not adopted");
            tally.rejected += 1;
            metrics.recovery_rejected(e.reason());
            None
        }
    }
}

/// The bounds of a restore.
#[derive(Clone)]
pub struct Bounds {
    /// About how many bytes of JSON a page may hold ([`crate::input::paging`]).
    pub page_bytes: usize,
    /// How long the restore may go without a page of its list before it gives up.
    pub restore_timeout: Duration,
    /// About how many bytes the buffer of the first list may hold ([`Restart::flush`]).
    pub buffer_bytes: usize,
    /// When the next page may be asked for ([`crate::input::pace`]).
    pub pace: Arc<Pace>,
}

/// A restore that could not go on.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    #[error(
        "the restore made no progress for {0:?} (--restore-timeout): no page of the list of own \
         series objects arrived"
    )]
    Stuck(Duration),
    #[error(
        "the list of own series objects was started over {0} times (expired continue tokens, none \
         offered) without reaching its end"
    )]
    Restarts(u32),
}

//! The list+watch of raw core/v1 Events: an explicit state machine ([`Watch`]), in the manner of
//! kube-runtime's `watcher`, and the thin shell that performs its requests ([`raw_events`]).
//!
//! Written here rather than taken from kube-runtime because the operator needs what that watcher
//! keeps to itself: bookmarks (counted, and they advance the engine's watermark), the end of each list
//! (a consistent point), and the difference between a re-established watch and a relist.
//!
//! ```text
//!            ┌──────────────── 410 Gone: relist ────────────────┐
//!            ▼                                                  │
//!   Listing{continue} ──last page──▶ Watching{rv} ──event or bookmark──▶ Watching{rv'}
//!     │   ▲                              │   ▲
//!     └───┘ next page                    │   └── stream ended or failed: watch again from rv
//!   failure: the same page after backoff └──── request failed: the same watch after backoff
//!                                         └──── silent (stalled): the same watch at once
//! ```
//!
//! | state | input | next state | steps handed on |
//! |---|---|---|---|
//! | `Listing` | a page with a continue token | `Listing` with that token | `ListStarted` (first page only), `Listed` per object |
//! | `Listing` | the last page, at list resourceVersion `rv` | `Watching{rv}` | `ListStarted` (if first), `Listed`…, `ListDone{rv}` |
//! | `Watching{rv}` | an added, modified or deleted object at `rv'` | `Watching{rv'}` | `Applied` or `Deleted` |
//! | `Watching{rv}` | a bookmark at `rv'` | `Watching{rv'}` | `Bookmark{rv'}` |
//! | `Watching{rv}` | the stream ended at its timeout | `Watching{rv}` | `Restarted{clean}` |
//! | `Watching{rv}` | the stream ended early, no error | `Watching{rv}` | `Failed`, then `Restarted` |
//! | `Watching{rv}` | the stream failed | `Watching{rv}` | `Failed`, then `Restarted` |
//! | `Watching{rv}` | the stream went silent for its timeout plus a margin | `Watching{rv}` | `Stalled`, then `Restarted` at once |
//! | any | a request failed | unchanged | `Failed` (the shell waits `retry_in`) |
//! | `Listing{token}` | 410 Gone for the page, a token offered | `Listing` with the offered token | `Failed` (no wait) |
//! | any | 410 Gone (request, stream or error event) | `Listing` from scratch, `relist` | none until the next page |
//!
//! A relist happens only on 410 Gone; every other interruption resumes from the last resourceVersion
//! seen, bookmarks included. A list page whose continue token expired (etcd compacted the list's
//! snapshot, every 5 minutes by default) goes on from the token the API server offers with the 410:
//! from the same key, at the current resourceVersion, where the watch then starts. That is not a
//! snapshot: an object changed between the two versions, before the key, is missed until its next
//! change (whose cumulative count brings the missed occurrences). Starting over instead would never
//! end where one list takes longer than the compaction interval: 10^6 stored events take about ten
//! minutes on a 2-core machine (docs/BENCHMARKS.md, Failover). A silent watch (a dead connection: no FIN, no RST) is ended by the
//! client's watch deadline ([`crate::api::client`]), reported as a stall and resumed at once. [`Watch`] does no I/O, so every decision is unit-tested without a server.

use crate::api::client::{self, DeadlineExceeded};
use crate::input::paging::{self, PageSize};
use crate::object::not_managed_selector;
use chrono::{DateTime, Utc};
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::core::ObjectList;
use std::time::Duration;

/// What the watch hands to the operator loop.
#[derive(Debug)]
pub enum Step {
    /// A list begins: the first one, or a relist after 410 Gone.
    ListStarted {
        relist: bool,
    },
    /// One object of a list page (in name order, not resourceVersion order).
    Listed(Box<Event>),
    /// The list is complete at this resourceVersion.
    ListDone {
        resource_version: String,
    },
    /// An object was added or modified (watch events arrive in resourceVersion order).
    Applied(Box<Event>),
    Deleted(Box<Event>),
    /// Everything up to this resourceVersion has been sent.
    Bookmark {
        resource_version: String,
    },
    /// The watch was re-established from the last resourceVersion: `clean` after the server ended it
    /// at its timeout, else after an error or a stall.
    Restarted {
        clean: bool,
    },
    /// The watch went silent (nothing, not even a bookmark, for its timeout plus a margin): the
    /// connection is dead; it is resumed at once.
    Stalled,
    /// A request failed; the watch retries after `retry_in`.
    Failed {
        error: String,
        retry_in: Duration,
    },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum State {
    Listing {
        continue_token: Option<String>,
        /// A relist after 410 Gone, not the first list.
        relist: bool,
        /// `ListStarted` was handed on for this list.
        announced: bool,
    },
    Watching {
        resource_version: String,
    },
}

/// The request the shell makes next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    List { continue_token: Option<String> },
    Watch { resource_version: String },
}

/// Why a request or a stream failed, as far as the state machine cares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Failure {
    /// 410 Gone: the resourceVersion (or continue token) is too old.
    Gone,
    /// 410 Gone for a list page's continue token, with the token the API server offers to go on
    /// from the same key at its current resourceVersion.
    Expired {
        offered: String,
    },
    /// The stream went silent past its deadline.
    Stalled,
    Other(String),
}

impl Failure {
    pub fn of(e: &kube::Error) -> Failure {
        match e {
            kube::Error::Api(s) if s.code == 410 => {
                match s.metadata.as_ref().and_then(|m| m.continue_.clone()) {
                    Some(offered) if !offered.is_empty() => Failure::Expired { offered },
                    _ => Failure::Gone,
                }
            }
            e if client::deadline_of(e) == Some(DeadlineExceeded::Silent) => Failure::Stalled,
            e => Failure::Other(e.to_string()),
        }
    }
}

/// The list+watch state machine. Feed it what the API answered; it says what to hand on and what
/// to request next.
pub struct Watch {
    state: State,
    delays: backon::ExponentialBackoff,
}

/// Retry delays for failed list or watch requests.
fn backoff() -> backon::ExponentialBackoff {
    crate::api::retry::delays(Duration::from_millis(200), Duration::from_secs(30))
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            state: State::Listing {
                continue_token: None,
                relist: false,
                announced: false,
            },
            delays: backoff(),
        }
    }
}

impl Watch {
    pub fn state(&self) -> &State {
        &self.state
    }

    pub fn request(&self) -> Request {
        match &self.state {
            State::Listing { continue_token, .. } => Request::List {
                continue_token: continue_token.clone(),
            },
            State::Watching { resource_version } => Request::Watch {
                resource_version: resource_version.clone(),
            },
        }
    }

    /// A list page arrived.
    pub fn page(&mut self, page: ObjectList<Event>) -> Vec<Step> {
        let State::Listing {
            relist, announced, ..
        } = self.state
        else {
            return Vec::new();
        };
        self.delays = backoff();
        let mut steps = Vec::with_capacity(page.items.len() + 2);
        if !announced {
            steps.push(Step::ListStarted { relist });
        }
        steps.extend(page.items.into_iter().map(|ev| Step::Listed(Box::new(ev))));
        let resource_version = page.metadata.resource_version.unwrap_or_default();
        self.state = match page.metadata.continue_.filter(|t| !t.is_empty()) {
            Some(token) => State::Listing {
                continue_token: Some(token),
                relist,
                announced: true,
            },
            None => {
                steps.push(Step::ListDone {
                    resource_version: resource_version.clone(),
                });
                State::Watching { resource_version }
            }
        };
        steps
    }

    /// A watch event arrived: `Ok` with the step to hand on, or `Err` with the steps to hand on when
    /// the stream must be dropped (an error event).
    pub fn watched(&mut self, event: WatchEvent<Event>) -> Result<Step, Vec<Step>> {
        let (step, resource_version) = match event {
            WatchEvent::Added(ev) | WatchEvent::Modified(ev) => {
                let rv = ev.metadata.resource_version.clone();
                (Step::Applied(Box::new(ev)), rv)
            }
            WatchEvent::Deleted(ev) => {
                let rv = ev.metadata.resource_version.clone();
                (Step::Deleted(Box::new(ev)), rv)
            }
            WatchEvent::Bookmark(b) => {
                let rv = b.metadata.resource_version;
                (
                    Step::Bookmark {
                        resource_version: rv.clone(),
                    },
                    Some(rv),
                )
            }
            WatchEvent::Error(s) if s.code == 410 => return Err(self.stream_failed(Failure::Gone)),
            WatchEvent::Error(s) => {
                return Err(self.stream_failed(Failure::Other(format!("{s:?}"))));
            }
        };
        if let (
            State::Watching {
                resource_version: at,
            },
            Some(rv),
        ) = (&mut self.state, resource_version)
        {
            *at = rv;
        }
        Ok(step)
    }

    /// The watch stream ended without an error: watch again from the last resourceVersion. `full`:
    /// it lasted its whole timeout, the server ended it on schedule. An early end (a server that
    /// went away, a proxy that cut it) is retried after a delay, like a failure, so that a server
    /// ending watches at once cannot make the watch spin.
    pub fn ended(&mut self, full: bool) -> Vec<Step> {
        if full {
            self.delays = backoff();
            return vec![Step::Restarted { clean: true }];
        }
        let mut steps = self.request_failed(Failure::Other("the watch ended early".into()));
        steps.push(Step::Restarted { clean: false });
        steps
    }

    /// The watch stream broke off.
    pub fn stream_failed(&mut self, failure: Failure) -> Vec<Step> {
        let mut steps = self.request_failed(failure);
        if matches!(self.state, State::Watching { .. }) {
            steps.push(Step::Restarted { clean: false });
        }
        steps
    }

    /// A list or watch request failed: the same request again after a delay, or a relist on 410.
    pub fn request_failed(&mut self, failure: Failure) -> Vec<Step> {
        match failure {
            Failure::Expired { offered } => {
                if let State::Listing {
                    continue_token: token @ Some(_),
                    ..
                } = &mut self.state
                {
                    // Not a snapshot any more, but it ends; see the module docs.
                    *token = Some(offered);
                    return vec![Step::Failed {
                        error:
                            "continue token expired (etcd compacted the list's snapshot); going \
                                on from the token the API server offered"
                                .into(),
                        retry_in: Duration::ZERO,
                    }];
                }
                self.request_failed(Failure::Gone)
            }
            Failure::Gone => {
                // Within a list whose continue token expired, `ListStarted` was already handed on.
                let announced = matches!(
                    self.state,
                    State::Listing {
                        announced: true,
                        ..
                    }
                );
                self.state = State::Listing {
                    continue_token: None,
                    relist: true,
                    announced,
                };
                Vec::new()
            }
            // The connection died, not the server: a new one at once.
            Failure::Stalled => vec![Step::Stalled],
            Failure::Other(error) => {
                let retry_in = self.delays.next().unwrap_or(Duration::from_secs(30));
                vec![Step::Failed { error, retry_in }]
            }
        }
    }
}

/// The list+watch of every raw core/v1 Event in the cluster, the operator's own objects excluded. The
/// stream ends only when its consumer is dropped: failures are reported as [`Step::Failed`] and
/// retried. A bounded channel sits between the API and the consumer, so a slow consumer slows the
/// watch instead of buffering without limit.
///
/// `bookmarks` sets `allowWatchBookmarks`; the operator always asks for them, only the bookmark
/// benchmark (`event-series run --no-watch-bookmarks`, hidden) turns them off.
///
/// List pages are sized by `pages` ([`crate::input::paging`]), so that Events carrying 1 MB messages
/// cannot make one page hundreds of MB.
pub fn raw_events(
    api: Api<Event>,
    watch_timeout_secs: u32,
    bookmarks: bool,
    pages: PageSize,
) -> Steps {
    let (tx, rx) = tokio::sync::mpsc::channel::<Received>(1024);
    tokio::spawn(async move {
        // Err only when the consumer is gone, which ends the task.
        let _ = drive(api, tx, watch_timeout_secs, bookmarks, pages).await;
    });
    Steps { rx, received: None }
}

/// A step and when the server's answer that made it arrived (for `ListDone`: when the list's
/// first page was asked for, the moment its snapshot was taken).
type Received = (Step, DateTime<Utc>);

/// The steps of the raw-event watch, as a stream.
pub struct Steps {
    rx: tokio::sync::mpsc::Receiver<Received>,
    received: Option<DateTime<Utc>>,
}

impl Steps {
    /// When the answer behind the step last handed out arrived from the server. Steps are in the
    /// server's order, so whatever the server sent before it has been handed out already: a consumer
    /// slower than the watch sees these times lag, never run ahead.
    pub fn received(&self) -> Option<DateTime<Utc>> {
        self.received
    }
}

impl Stream for Steps {
    type Item = Step;

    fn poll_next(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Step>> {
        let this = self.get_mut();
        this.rx.poll_recv(cx).map(|item| {
            item.map(|(step, at)| {
                this.received = Some(at);
                step
            })
        })
    }
}

impl Step {
    /// The API server answered the watch: an object, a bookmark, a list page or its end, or the end
    /// of a watch at its timeout. A failure, a stall or a resumption proves nothing.
    pub fn heard(&self) -> bool {
        !matches!(
            self,
            Step::Failed { .. } | Step::Stalled | Step::Restarted { clean: false }
        )
    }
}

type Closed = tokio::sync::mpsc::error::SendError<Received>;
type Sender = tokio::sync::mpsc::Sender<Received>;

/// Performs the requests [`Watch`] asks for and hands its steps on.
async fn drive(
    api: Api<Event>,
    tx: Sender,
    watch_timeout_secs: u32,
    bookmarks: bool,
    mut pages: PageSize,
) -> Result<(), Closed> {
    let selector = not_managed_selector();
    let mut watch = Watch::default();
    let timeout = watch_timeout_secs.max(1);
    // When the current list's first page was asked for.
    let mut snapshot = Utc::now();
    loop {
        let steps = match watch.request() {
            Request::List { continue_token } => {
                if continue_token.is_none() {
                    pages.restart();
                }
                let mut lp = ListParams::default().labels(&selector).limit(pages.limit());
                match &continue_token {
                    Some(token) => lp = lp.continue_token(token),
                    None => snapshot = Utc::now(),
                }
                match api.list(&lp).await {
                    Ok(page) => {
                        pages.measured(paging::largest(&page.items));
                        watch.page(page)
                    }
                    Err(e) => watch.request_failed(Failure::of(&e)),
                }
            }
            Request::Watch { resource_version } => {
                let mut wp = WatchParams::default().labels(&selector).timeout(timeout);
                wp.bookmarks = bookmarks;
                match api.watch(&wp, &resource_version).await {
                    Ok(stream) => {
                        let lasts = Duration::from_secs(timeout.into());
                        follow(&tx, &mut watch, stream.boxed(), lasts).await?
                    }
                    Err(e) => watch.request_failed(Failure::of(&e)),
                }
            }
        };
        hand_on(&tx, steps, snapshot).await?;
    }
}

/// Forwards one watch response until it ends; returns the steps that close it. `lasts`: how long
/// the server keeps it open.
async fn follow(
    tx: &Sender,
    watch: &mut Watch,
    mut stream: futures::stream::BoxStream<'_, kube::Result<WatchEvent<Event>>>,
    lasts: Duration,
) -> Result<Vec<Step>, Closed> {
    let opened = tokio::time::Instant::now();
    while let Some(item) = stream.next().await {
        let step = match item {
            Ok(event) => watch.watched(event),
            Err(e) => Err(watch.stream_failed(Failure::of(&e))),
        };
        match step {
            Ok(step) => tx.send((step, Utc::now())).await?,
            Err(closing) => return Ok(closing),
        }
    }
    // The server ends a watch on time, give or take its scheduling.
    let full = opened.elapsed() + Duration::from_secs(1) >= lasts;
    Ok(watch.ended(full))
}

/// Sends steps in order, waiting out the delay of a [`Step::Failed`] before the next request. A
/// `ListDone` is stamped with the list's `snapshot` time, everything else with now.
async fn hand_on(tx: &Sender, steps: Vec<Step>, snapshot: DateTime<Utc>) -> Result<(), Closed> {
    for step in steps {
        let wait = match &step {
            Step::Failed { retry_in, .. } => Some(*retry_in),
            _ => None,
        };
        let at = match &step {
            Step::ListDone { .. } => snapshot,
            _ => Utc::now(),
        };
        tx.send((step, at)).await?;
        if let Some(wait) = wait {
            tokio::time::sleep(wait).await;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ListMeta, ObjectMeta};
    use kube::core::{Status, TypeMeta};

    fn event(name: &str, rv: &str) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn page(names: &[&str], continue_token: Option<&str>, rv: &str) -> ObjectList<Event> {
        ObjectList {
            types: TypeMeta::default(),
            metadata: ListMeta {
                continue_: continue_token.map(str::to_owned),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            items: names.iter().map(|n| event(n, "1")).collect(),
        }
    }

    fn bookmark(rv: &str) -> WatchEvent<Event> {
        serde_json::from_value(serde_json::json!({
            "type": "BOOKMARK",
            "object": {"kind": "Event", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}
        }))
        .unwrap()
    }

    fn error(code: u16) -> WatchEvent<Event> {
        WatchEvent::Error(Box::new(
            Status::failure("expired", "Expired").with_code(code),
        ))
    }

    fn kinds(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::ListStarted { relist } => format!("ListStarted{{relist:{relist}}}"),
                Step::Listed(e) => format!("Listed({})", e.metadata.name.clone().unwrap()),
                Step::ListDone { resource_version } => format!("ListDone({resource_version})"),
                Step::Applied(e) => format!("Applied({})", e.metadata.name.clone().unwrap()),
                Step::Deleted(e) => format!("Deleted({})", e.metadata.name.clone().unwrap()),
                Step::Bookmark { resource_version } => format!("Bookmark({resource_version})"),
                Step::Restarted { clean: true } => "Ended".into(),
                Step::Restarted { clean: false } => "Restarted".into(),
                Step::Stalled => "Stalled".into(),
                Step::Failed { .. } => "Failed".into(),
            })
            .collect()
    }

    fn watching(w: &Watch) -> Option<&str> {
        match w.state() {
            State::Watching { resource_version } => Some(resource_version),
            State::Listing { .. } => None,
        }
    }

    #[test]
    fn pages_continue_then_watch_from_the_list_version() {
        let mut w = Watch::default();
        assert_eq!(
            w.request(),
            Request::List {
                continue_token: None
            }
        );
        let steps = w.page(page(&["a", "b"], Some("abc"), "10"));
        assert_eq!(
            kinds(&steps),
            ["ListStarted{relist:false}", "Listed(a)", "Listed(b)"]
        );
        assert_eq!(
            w.request(),
            Request::List {
                continue_token: Some("abc".into())
            }
        );
        let steps = w.page(page(&["c"], None, "12"));
        assert_eq!(kinds(&steps), ["Listed(c)", "ListDone(12)"]);
        assert_eq!(
            w.request(),
            Request::Watch {
                resource_version: "12".into()
            }
        );
    }

    #[test]
    fn bookmarks_and_events_advance_the_resume_point() {
        let mut w = Watch::default();
        w.page(page(&[], None, "12"));
        let step = w.watched(WatchEvent::Added(event("a", "30"))).unwrap();
        assert_eq!(kinds(&[step]), ["Applied(a)"]);
        assert_eq!(watching(&w), Some("30"));
        let step = w.watched(bookmark("40")).unwrap();
        assert_eq!(kinds(&[step]), ["Bookmark(40)"]);
        assert_eq!(watching(&w), Some("40"));
        let step = w.watched(WatchEvent::Deleted(event("a", "41"))).unwrap();
        assert_eq!(kinds(&[step]), ["Deleted(a)"]);
        assert_eq!(
            w.request(),
            Request::Watch {
                resource_version: "41".into()
            }
        );
    }

    #[test]
    fn a_dropped_watch_resumes_without_relisting() {
        let mut w = Watch::default();
        w.page(page(&[], None, "12"));
        w.watched(bookmark("40")).unwrap();
        // The server closed the stream at its timeout.
        assert_eq!(kinds(&w.ended(true)), ["Ended"]);
        // A stream that ends early (the server went away) is retried after a delay, not at once.
        assert_eq!(kinds(&w.ended(false)), ["Failed", "Restarted"]);
        assert_eq!(watching(&w), Some("40"));
        assert_eq!(watching(&w), Some("40"));
        // The connection broke.
        let steps = w.stream_failed(Failure::Other("reset".into()));
        assert_eq!(kinds(&steps), ["Failed", "Restarted"]);
        assert_eq!(watching(&w), Some("40"));
        // The watch request itself failed.
        let steps = w.request_failed(Failure::Other("refused".into()));
        assert_eq!(kinds(&steps), ["Failed"]);
        assert_eq!(watching(&w), Some("40"));
        // An error event that is not 410 drops the stream, not the resume point.
        let steps = w.watched(error(500)).unwrap_err();
        assert_eq!(kinds(&steps), ["Failed", "Restarted"]);
        assert_eq!(watching(&w), Some("40"));
    }

    #[test]
    fn a_silent_watch_is_a_stall_resumed_at_once_from_the_last_version() {
        let mut w = Watch::default();
        w.page(page(&[], None, "12"));
        w.watched(WatchEvent::Added(event("a", "30"))).unwrap();
        w.watched(bookmark("44")).unwrap();
        // What the client's watch deadline makes of a silent stream, as kube's watch stream hands it on.
        let silent = kube::Error::ReadEvents(std::io::Error::other(Box::new(
            DeadlineExceeded::Silent,
        )
            as Box<dyn std::error::Error + Send + Sync>));
        assert_eq!(Failure::of(&silent), Failure::Stalled);
        let steps = w.stream_failed(Failure::of(&silent));
        assert_eq!(
            kinds(&steps),
            ["Stalled", "Restarted"],
            "no wait, no relist"
        );
        assert_eq!(
            w.request(),
            Request::Watch {
                resource_version: "44".into()
            }
        );
        // A request that got no answer in time is an ordinary failure, retried after a delay.
        let answer = kube::Error::Service(Box::new(DeadlineExceeded::Answer));
        assert!(matches!(Failure::of(&answer), Failure::Other(_)));
    }

    #[test]
    fn only_gone_relists() {
        for gone in [
            |w: &mut Watch| w.watched(error(410)).unwrap_err(),
            |w: &mut Watch| w.stream_failed(Failure::Gone),
            |w: &mut Watch| w.request_failed(Failure::Gone),
        ] {
            let mut w = Watch::default();
            w.page(page(&[], None, "12"));
            assert!(
                gone(&mut w).is_empty(),
                "no step until the relist's first page"
            );
            assert_eq!(
                w.request(),
                Request::List {
                    continue_token: None
                }
            );
            let steps = w.page(page(&["a"], None, "90"));
            assert_eq!(
                kinds(&steps),
                ["ListStarted{relist:true}", "Listed(a)", "ListDone(90)"]
            );
        }
    }

    #[test]
    fn a_failed_page_is_retried_not_restarted() {
        let mut w = Watch::default();
        w.page(page(&["a"], Some("x"), "10"));
        let steps = w.request_failed(Failure::Other("timeout".into()));
        assert_eq!(kinds(&steps), ["Failed"]);
        assert_eq!(
            w.request(),
            Request::List {
                continue_token: Some("x".into())
            }
        );
        // An expired continue token restarts the list; it was announced already.
        w.request_failed(Failure::Gone);
        let steps = w.page(page(&["a"], None, "20"));
        assert_eq!(kinds(&steps), ["Listed(a)", "ListDone(20)"]);
    }

    /// A list that outlives etcd's compaction goes on from the offered token instead of starting
    /// over (which would never end), and the watch starts at the version of its last page.
    #[test]
    fn an_expired_continue_token_goes_on_from_the_offered_one() {
        let mut w = Watch::default();
        w.page(page(&["a"], Some("x"), "10"));
        let expired =
            kube::Error::Api(Status::failure("too old", "Expired").with_code(410).boxed());
        let mut status = match expired {
            kube::Error::Api(s) => s,
            _ => unreachable!(),
        };
        status.metadata = Some(kube::core::ListMeta {
            continue_: Some("y".into()),
            ..Default::default()
        });
        let failure = Failure::of(&kube::Error::Api(status));
        assert_eq!(
            failure,
            Failure::Expired {
                offered: "y".into()
            }
        );
        let steps = w.request_failed(failure.clone());
        assert!(
            matches!(steps.as_slice(), [Step::Failed { retry_in, .. }] if retry_in.is_zero()),
            "{:?}",
            kinds(&steps)
        );
        assert_eq!(
            w.request(),
            Request::List {
                continue_token: Some("y".into())
            }
        );
        let steps = w.page(page(&["b"], None, "30"));
        assert_eq!(kinds(&steps), ["Listed(b)", "ListDone(30)"], "no relist");
        assert_eq!(
            w.request(),
            Request::Watch {
                resource_version: "30".into()
            }
        );
        // Watching, an offered token means nothing: a relist.
        assert!(w.request_failed(failure).is_empty());
        assert_eq!(
            w.request(),
            Request::List {
                continue_token: None
            }
        );
    }

    #[test]
    fn retry_delays_grow_and_reset_after_progress() {
        let mut w = Watch::default();
        let delay = |steps: Vec<Step>| match steps.as_slice() {
            [Step::Failed { retry_in, .. }] => *retry_in,
            other => panic!("{:?}", kinds(other)),
        };
        let first = delay(w.request_failed(Failure::Other("x".into())));
        let mut later = first;
        for _ in 0..6 {
            later = delay(w.request_failed(Failure::Other("x".into())));
        }
        assert!(later > first, "{later:?} after {first:?}");
        w.page(page(&[], None, "5"));
        let after_progress = delay(w.request_failed(Failure::Other("x".into())));
        assert!(after_progress < later, "{after_progress:?} vs {later:?}");
        assert_eq!(
            Failure::of(&kube::Error::Api(
                Status::failure("gone", "Expired").with_code(410).boxed()
            )),
            Failure::Gone
        );
    }
}

//! The list+watch of raw core/v1 Events: an explicit state machine ([`Watch`]), in the manner of
//! kube-runtime's `watcher`, and the thin shell that performs its requests ([`raw_events`]).
//!
//! Written here rather than taken from kube-runtime because the operator needs what that watcher
//! keeps to itself: bookmarks (counted, and they advance the engine's watermark), the end of each list
//! (a consistent point), and the difference between a re-established watch and a relist.
//!
//! **A list loses nothing, however long it takes.** Its first page fixes the list's snapshot, the
//! resourceVersion `S` it is served at, and the watch starts from `S` at once, alongside the rest
//! of the list: every change after `S` reaches the operator through the watch, in order. A list page
//! whose continue token expired (etcd compacted the snapshot, every 5 minutes by default; 10^6
//! stored events take about ten minutes to list) goes on from the token the API server offers with
//! the 410: from the same key, at a later resourceVersion. Of what such a page holds, an object at
//! or below `S` is the state the snapshot would have served; one above `S` changed after it, and
//! is left to the watch, which brings that change (and every earlier one). An object deleted before
//! the page's version is missing from it, and its deletion, which the watch brings, carries its last
//! state. So the list hands on every object's state at `S` and the watch every change after: each
//! object's newest state, as a list that never expired would. What the watch delivers during the list
//! is handed on as listed (the order of a list is no order), and the list ends at the version the
//! watch has reached, the version up to which everything was handed on (never the version of the
//! last page, which may run ahead of the watch): the engine records no more as processed than it
//! saw. Starting over instead would never end where one list takes longer than the compaction
//! interval. The watch alongside asks to outlast the list (an hour: `ALONGSIDE_SECONDS`): resumed within
//! it, from a version a quiet scope has not moved past, it could meet 410 and start the list over.
//! Once the list is complete, a watch of `--watch-timeout` replaces it from where it got to (in a
//! scope quiet for longer than the compaction interval that version may be gone too: 410, a relist
//! that loses nothing either, as for any watch resumed after a quiet spell without bookmarks).
//!
//! ```text
//!            ┌──────────────── 410 Gone: relist (a new generation) ───────────┐
//!            ▼                                                                │
//!   Listing{continue, S?, W?} ──last page──▶ Watching{W} ──event or bookmark──▶ Watching{W'}
//!     │   ▲   │ ▲                               │   ▲
//!     └───┘   └─┘ watch alongside from S:       │   └── stream ended or failed: watch again from W
//!   next page     changes handed on as listed,  └──── request failed: the same watch after backoff
//!                 W advances                    └──── silent (stalled): the same watch at once
//! ```
//!
//! | state | input | next state | steps handed on |
//! |---|---|---|---|
//! | `Listing` | the head of the first page, at `S` | `Listing`, watching alongside from `W = S` | none |
//! | `Listing` | an item at or below `S` (or `S` unknown) | unchanged | `ListStarted` (first only), `Listed` |
//! | `Listing` | an item above `S` (a page after an expiry) | unchanged | `ListStarted` (first only); the watch brings it |
//! | `Listing` | a page's end, with a continue token | `Listing` with that token | `ListStarted` (if none yet) |
//! | `Listing` | the last page's end | `Watching{W}` (`W = S` without a watch yet) | `ListStarted` (if none yet), `ListDone{W}` |
//! | `Listing` | watched: added or modified at `W'` | `Listing`, `W'` | `Listed` |
//! | `Listing` | watched: deleted at `W'` | `Listing`, `W'` | `Listed` (its last state), `Deleted` |
//! | `Listing` | watched: a bookmark at `W'` | `Listing`, `W'` | none (no checkpoint within a list) |
//! | `Listing` | the watch ended at its timeout (it asks to outlast the list) | unchanged | `Restarted` (proves nothing within a list) |
//! | `Watching{rv}` | an added, modified or deleted object at `rv'` | `Watching{rv'}` | `Applied` or `Deleted` |
//! | `Watching{rv}` | a bookmark at `rv'` | `Watching{rv'}` | `Bookmark{rv'}` |
//! | `Watching{rv}` | the stream ended at its timeout | `Watching{rv}` | `Restarted{clean}` |
//! | either | the stream ended early, no error | unchanged | `Failed`, then `Restarted` |
//! | either | the stream failed | unchanged | `Failed`, then `Restarted` |
//! | either | the stream went silent for its timeout plus a margin | unchanged | `Stalled`, then `Restarted` at once |
//! | any | a request failed | unchanged | `Failed` (the shell waits `retry_in`) |
//! | `Listing{token}` | 410 Gone for the page, a token offered | `Listing` with the offered token | `Failed` (no wait) |
//! | any | 410 Gone (request, stream or error event) | `Listing` from scratch, `relist`, next generation | none until the next page |
//!
//! A relist happens only on 410 Gone (of the watch, or of a list whose token expired with none
//! offered); every other interruption resumes from the last resourceVersion seen, bookmarks
//! included. The shell drops a page or a watch of an earlier generation. Pages are read as they
//! stream ([`crate::input::list_body`]) and each object is cut ([`crate::input::feed::slim`]) as it
//! is decoded, watched or listed: what a page or the channel holds of a tenant's 1 MB Event is a few
//! KB. A silent watch (a dead connection: no FIN, no RST) is ended by the client's watch deadline
//! ([`crate::api::client`]), reported as a stall and resumed at once. [`Watch`] does no I/O, so every
//! decision is unit-tested without a server.

use crate::api::client::{self, DeadlineExceeded};
use crate::input::feed::slim;
use crate::input::list_body::{self, Part};
use crate::input::paging::PageSize;
use crate::object::not_managed_selector;
use chrono::{DateTime, Utc};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::time::Duration;

mod driver;

pub use driver::{Steps, raw_events};

/// What the watch hands to the operator loop.
#[derive(Debug)]
pub enum Step {
    /// A list begins: the first one, or a relist after 410 Gone.
    ListStarted {
        relist: bool,
    },
    /// One object of a list: its state at the list's snapshot, or a later one the watch alongside
    /// the list delivered (in no particular order: the engine counts only what a higher count adds).
    Listed(Box<Event>),
    /// The list is complete at this resourceVersion: every change up to it was handed on.
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
        /// Once the first page's head arrived: the watch that runs alongside the list.
        alongside: Option<Alongside>,
    },
    Watching {
        resource_version: String,
    },
}

/// The watch that runs alongside a list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alongside {
    /// The resourceVersion of the list's first page: the list hands on objects at or below it.
    pub snapshot: String,
    /// How far the watch has handed on (from `snapshot`).
    pub watched: String,
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
    /// Counts the lists begun: a page or a watch of an earlier one is dropped.
    generation: u64,
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
                alongside: None,
            },
            delays: backoff(),
            generation: 0,
        }
    }
}

/// Whether resourceVersion `rv` is above `than` (both etcd revisions; one that does not parse is
/// not).
fn above(rv: Option<&str>, than: &str) -> bool {
    let parse = |v: &str| v.parse::<u64>().ok();
    matches!((rv.and_then(parse), parse(than)), (Some(rv), Some(than)) if rv > than)
}

impl Watch {
    pub fn state(&self) -> &State {
        &self.state
    }

    /// The current list (or the watch that follows it): a page or a watch of another is stale.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// While listing: the continue token of the next page (`None` for the first).
    pub fn list_request(&self) -> Option<Option<String>> {
        match &self.state {
            State::Listing { continue_token, .. } => Some(continue_token.clone()),
            State::Watching { .. } => None,
        }
    }

    /// Where a watch (re)starts, once there is one to run: from the list's snapshot on, alongside
    /// the list, then after it.
    pub fn watch_from(&self) -> Option<String> {
        match &self.state {
            State::Listing { alongside, .. } => alongside.as_ref().map(|a| a.watched.clone()),
            State::Watching { resource_version } => Some(resource_version.clone()),
        }
    }

    /// `ListStarted` once per list, before anything else of it.
    fn announce(&mut self, steps: &mut Vec<Step>) {
        if let State::Listing {
            relist, announced, ..
        } = &mut self.state
            && !*announced
        {
            *announced = true;
            steps.push(Step::ListStarted { relist: *relist });
        }
    }

    /// The metadata before a page's items: the first page's fixes the snapshot, and the watch
    /// alongside the list can start.
    pub fn page_head(&mut self, meta: &ListMeta) {
        if let State::Listing {
            continue_token: None,
            alongside: alongside @ None,
            ..
        } = &mut self.state
            && let Some(rv) = meta.resource_version.as_ref().filter(|rv| !rv.is_empty())
        {
            *alongside = Some(Alongside {
                snapshot: rv.clone(),
                watched: rv.clone(),
            });
        }
    }

    /// One object of a list page.
    pub fn listed(&mut self, ev: Event) -> Vec<Step> {
        let State::Listing { alongside, .. } = &self.state else {
            return Vec::new();
        };
        let later = alongside
            .as_ref()
            .is_some_and(|a| above(ev.metadata.resource_version.as_deref(), &a.snapshot));
        self.delays = backoff();
        let mut steps = Vec::with_capacity(2);
        self.announce(&mut steps);
        if !later {
            steps.push(Step::Listed(Box::new(ev)));
        }
        steps
    }

    /// A list page was read to its end.
    pub fn page_end(&mut self, meta: ListMeta) -> Vec<Step> {
        if !matches!(self.state, State::Listing { .. }) {
            return Vec::new();
        }
        self.page_head(&meta);
        self.delays = backoff();
        let mut steps = Vec::with_capacity(2);
        self.announce(&mut steps);
        let State::Listing {
            continue_token,
            alongside,
            ..
        } = &mut self.state
        else {
            return steps;
        };
        match meta.continue_.filter(|t| !t.is_empty()) {
            Some(token) => *continue_token = Some(token),
            None => {
                let resource_version = match alongside.take() {
                    Some(a) => a.watched,
                    None => meta.resource_version.unwrap_or_default(),
                };
                steps.push(Step::ListDone {
                    resource_version: resource_version.clone(),
                });
                self.state = State::Watching { resource_version };
            }
        }
        steps
    }

    /// A watch event arrived: `Ok` with the steps to hand on, or `Err` with the steps to hand on
    /// when the stream must be dropped (an error event).
    pub fn watched(&mut self, event: WatchEvent<Event>) -> Result<Vec<Step>, Vec<Step>> {
        let (steps, resource_version) = match event {
            WatchEvent::Added(ev) | WatchEvent::Modified(ev) => {
                let rv = ev.metadata.resource_version.clone();
                (vec![self.changed(ev)], rv)
            }
            WatchEvent::Deleted(ev) => {
                let rv = ev.metadata.resource_version.clone();
                let mut steps = Vec::with_capacity(2);
                if matches!(self.state, State::Listing { .. }) {
                    // Its last state may be all the list will ever see of it.
                    steps.push(Step::Listed(Box::new(ev.clone())));
                }
                steps.push(Step::Deleted(Box::new(ev)));
                (steps, rv)
            }
            WatchEvent::Bookmark(b) => {
                let rv = b.metadata.resource_version;
                let steps = match self.state {
                    State::Watching { .. } => vec![Step::Bookmark {
                        resource_version: rv.clone(),
                    }],
                    // Within a list, the list's end is its checkpoint.
                    State::Listing { .. } => Vec::new(),
                };
                (steps, Some(rv))
            }
            WatchEvent::Error(s) if s.code == 410 => return Err(self.stream_failed(Failure::Gone)),
            WatchEvent::Error(s) => {
                return Err(self.stream_failed(Failure::Other(format!("{s:?}"))));
            }
        };
        if let Some(rv) = resource_version {
            self.advance(rv);
        }
        Ok(steps)
    }

    /// An added or modified object: applied, or, within a list, one more listed state.
    fn changed(&self, ev: Event) -> Step {
        match self.state {
            State::Watching { .. } => Step::Applied(Box::new(ev)),
            State::Listing { .. } => Step::Listed(Box::new(ev)),
        }
    }

    /// The watch has handed on everything up to `rv`.
    fn advance(&mut self, rv: String) {
        match &mut self.state {
            State::Watching { resource_version } => *resource_version = rv,
            State::Listing {
                alongside: Some(a), ..
            } => a.watched = rv,
            State::Listing { .. } => {}
        }
    }

    /// The watch stream ended without an error: watch again from the last resourceVersion. `full`:
    /// it lasted its whole timeout, the server ended it on schedule (within a list that proves
    /// nothing: the list is not complete). An early end (a server that went away, a proxy that cut
    /// it) is retried after a delay, like a failure, so that a server ending watches at once cannot
    /// make the watch spin.
    pub fn ended(&mut self, full: bool) -> Vec<Step> {
        if full {
            self.delays = backoff();
            let clean = matches!(self.state, State::Watching { .. });
            return vec![Step::Restarted { clean }];
        }
        let mut steps = self.request_failed(Failure::Other("the watch ended early".into()));
        steps.push(Step::Restarted { clean: false });
        steps
    }

    /// The watch stream broke off.
    pub fn stream_failed(&mut self, failure: Failure) -> Vec<Step> {
        let generation = self.generation;
        let mut steps = self.request_failed(failure);
        if self.generation == generation {
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
                    // What the offered token serves above the snapshot, the watch brings.
                    *token = Some(offered);
                    return vec![Step::Failed {
                        error:
                            "continue token expired (etcd compacted the list's snapshot); going \
                                on from the token the API server offered, the watch alongside \
                                bringing what changed since"
                                .into(),
                        retry_in: Duration::ZERO,
                    }];
                }
                self.request_failed(Failure::Gone)
            }
            Failure::Gone => {
                // Within a list, `ListStarted` was already handed on.
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
                    alongside: None,
                };
                self.generation += 1;
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use kube::core::Status;

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

    fn meta(continue_token: Option<&str>, rv: &str) -> ListMeta {
        ListMeta {
            continue_: continue_token.map(str::to_owned),
            resource_version: Some(rv.into()),
            ..Default::default()
        }
    }

    /// A page as the shell reads it: its head, each item (`name` or `name@rv`), its end.
    fn page(w: &mut Watch, items: &[&str], continue_token: Option<&str>, rv: &str) -> Vec<Step> {
        w.page_head(&meta(continue_token, rv));
        let mut steps = Vec::new();
        for item in items {
            let (name, at) = item.split_once('@').unwrap_or((item, "1"));
            steps.extend(w.listed(event(name, at)));
        }
        steps.extend(w.page_end(meta(continue_token, rv)));
        steps
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

    /// A watch that has listed everything (an empty list at `rv`).
    fn listed_at(rv: &str) -> Watch {
        let mut w = Watch::default();
        page(&mut w, &[], None, rv);
        w
    }

    #[test]
    fn pages_continue_then_watch_from_the_list_version() {
        let mut w = Watch::default();
        assert_eq!(w.list_request(), Some(None));
        assert_eq!(
            w.watch_from(),
            None,
            "no watch before the snapshot is known"
        );
        let steps = page(&mut w, &["a", "b"], Some("abc"), "10");
        assert_eq!(
            kinds(&steps),
            ["ListStarted{relist:false}", "Listed(a)", "Listed(b)"]
        );
        assert_eq!(w.list_request(), Some(Some("abc".into())));
        assert_eq!(w.watch_from().as_deref(), Some("10"), "alongside the list");
        let steps = page(&mut w, &["c"], None, "10");
        assert_eq!(kinds(&steps), ["Listed(c)", "ListDone(10)"]);
        assert_eq!(w.list_request(), None);
        assert_eq!(w.watch_from().as_deref(), Some("10"));
        // An empty list is a list too.
        let mut w = Watch::default();
        let steps = page(&mut w, &[], None, "12");
        assert_eq!(kinds(&steps), ["ListStarted{relist:false}", "ListDone(12)"]);
    }

    /// What the watch brings while the list runs is handed on as listed, bookmarks only move it
    /// on, and the list ends at the version the watch has reached.
    #[test]
    fn the_watch_alongside_a_list_hands_on_changes_as_listed_and_the_list_ends_where_it_is() {
        let mut w = Watch::default();
        page(&mut w, &["a"], Some("x"), "10");
        let steps = w.watched(WatchEvent::Modified(event("a", "11"))).unwrap();
        assert_eq!(kinds(&steps), ["Listed(a)"]);
        let steps = w.watched(WatchEvent::Added(event("z", "12"))).unwrap();
        assert_eq!(kinds(&steps), ["Listed(z)"]);
        let steps = w.watched(WatchEvent::Deleted(event("q", "13"))).unwrap();
        assert_eq!(
            kinds(&steps),
            ["Listed(q)", "Deleted(q)"],
            "its last state, which the list may never show"
        );
        assert!(
            w.watched(bookmark("15")).unwrap().is_empty(),
            "no checkpoint"
        );
        assert_eq!(w.watch_from().as_deref(), Some("15"));
        // The watch ends at its timeout: resumed from where it was, proving nothing.
        assert_eq!(kinds(&w.ended(true)), ["Restarted"]);
        assert_eq!(w.watch_from().as_deref(), Some("15"));
        let steps = page(&mut w, &["b"], None, "10");
        assert_eq!(kinds(&steps), ["Listed(b)", "ListDone(15)"]);
        assert_eq!(watching(&w), Some("15"));
        let steps = w.watched(WatchEvent::Modified(event("b", "16"))).unwrap();
        assert_eq!(kinds(&steps), ["Applied(b)"]);
    }

    #[test]
    fn bookmarks_and_events_advance_the_resume_point() {
        let mut w = listed_at("12");
        let steps = w.watched(WatchEvent::Added(event("a", "30"))).unwrap();
        assert_eq!(kinds(&steps), ["Applied(a)"]);
        assert_eq!(watching(&w), Some("30"));
        let steps = w.watched(bookmark("40")).unwrap();
        assert_eq!(kinds(&steps), ["Bookmark(40)"]);
        assert_eq!(watching(&w), Some("40"));
        let steps = w.watched(WatchEvent::Deleted(event("a", "41"))).unwrap();
        assert_eq!(kinds(&steps), ["Deleted(a)"]);
        assert_eq!(w.watch_from().as_deref(), Some("41"));
    }

    #[test]
    fn a_dropped_watch_resumes_without_relisting() {
        let mut w = listed_at("12");
        w.watched(bookmark("40")).unwrap();
        // The server closed the stream at its timeout.
        assert_eq!(kinds(&w.ended(true)), ["Ended"]);
        // A stream that ends early (the server went away) is retried after a delay, not at once.
        assert_eq!(kinds(&w.ended(false)), ["Failed", "Restarted"]);
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
        assert_eq!(w.generation(), 0, "no relist");
    }

    #[test]
    fn a_silent_watch_is_a_stall_resumed_at_once_from_the_last_version() {
        let mut w = listed_at("12");
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
        assert_eq!(w.watch_from().as_deref(), Some("44"));
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
            let mut w = listed_at("12");
            assert!(
                gone(&mut w).is_empty(),
                "no step until the relist's first page"
            );
            assert_eq!(w.generation(), 1, "the old watch is dropped");
            assert_eq!(w.list_request(), Some(None));
            assert_eq!(w.watch_from(), None);
            let steps = page(&mut w, &["a"], None, "90");
            assert_eq!(
                kinds(&steps),
                ["ListStarted{relist:true}", "Listed(a)", "ListDone(90)"]
            );
        }
    }

    /// The watch alongside a list gets 410 (its snapshot was compacted before it started): the list
    /// starts over, once announced.
    #[test]
    fn a_gone_watch_alongside_a_list_starts_the_list_over() {
        let mut w = Watch::default();
        page(&mut w, &["a"], Some("x"), "10");
        assert!(w.watched(error(410)).unwrap_err().is_empty());
        assert_eq!(w.generation(), 1);
        assert_eq!(w.list_request(), Some(None));
        assert_eq!(w.watch_from(), None);
        let steps = page(&mut w, &["a"], None, "20");
        assert_eq!(kinds(&steps), ["Listed(a)", "ListDone(20)"]);
    }

    #[test]
    fn a_failed_page_is_retried_not_restarted() {
        let mut w = Watch::default();
        page(&mut w, &["a"], Some("x"), "10");
        let steps = w.request_failed(Failure::Other("timeout".into()));
        assert_eq!(kinds(&steps), ["Failed"]);
        assert_eq!(w.list_request(), Some(Some("x".into())));
        assert_eq!(w.generation(), 0, "the watch alongside goes on");
        // An expired continue token with none offered restarts the list; it was announced already.
        w.request_failed(Failure::Gone);
        let steps = page(&mut w, &["a"], None, "20");
        assert_eq!(kinds(&steps), ["Listed(a)", "ListDone(20)"]);
    }

    /// A list that outlives etcd's compaction goes on from the offered token instead of starting
    /// over (which would never end). What that token serves above the snapshot is left to the
    /// watch alongside, which brings it, and the list ends where the watch is, not at the version
    /// of its last page: nothing counts as processed that was not handed on.
    #[test]
    fn an_expired_continue_token_goes_on_from_the_offered_one_and_loses_nothing() {
        let mut w = Watch::default();
        page(&mut w, &["a@9"], Some("x"), "10");
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
        assert_eq!(w.list_request(), Some(Some("y".into())));
        // `a` changed at 12 (the watch brings it); `b` at 25 is served by the offered token.
        let steps = w.watched(WatchEvent::Modified(event("a", "12"))).unwrap();
        assert_eq!(kinds(&steps), ["Listed(a)"]);
        let steps = page(&mut w, &["b@25", "c@8"], None, "30");
        assert_eq!(
            kinds(&steps),
            ["Listed(c)", "ListDone(12)"],
            "b is left to the watch; the list ends where the watch is"
        );
        assert_eq!(w.watch_from().as_deref(), Some("12"));
        let steps = w.watched(WatchEvent::Modified(event("b", "25"))).unwrap();
        assert_eq!(kinds(&steps), ["Applied(b)"]);
        // Watching, an offered token means nothing: a relist.
        assert!(w.request_failed(failure).is_empty());
        assert_eq!(w.list_request(), Some(None));
    }

    #[test]
    fn versions_compare_as_numbers_and_others_are_kept() {
        assert!(above(Some("100"), "99"));
        assert!(!above(Some("99"), "100"));
        assert!(!above(Some("10"), "10"));
        assert!(!above(None, "10"));
        assert!(!above(Some("x"), "10"));
        assert!(!above(Some("11"), "y"));
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
        page(&mut w, &[], None, "5");
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

//! The list+watch of raw core/v1 Events: an explicit state machine, in the manner of kube-runtime's
//! `watcher`, written here because the operator needs what that watcher keeps to itself: bookmarks
//! (counted, and they advance the engine's watermark), the end of each list (a consistent point), and
//! the difference between a re-established watch and a relist.
//!
//! ```text
//!            ┌────────────── 410 Gone (relist) ───────────────┐
//!            ▼                                                │
//!   Listing{continue} ──last page──▶ Watching{rv} ──events──▶ Watching{rv'}
//!     │   ▲                              │   ▲
//!     └───┘ next page                    │   └── stream ended / error: re-watch from rv (no relist)
//!   error: retry the page after backoff  └─ Bookmark: rv' = bookmark's rv
//! ```
//!
//! Transitions are decided by [`Watch::transition`], a pure function of the state and what the API
//! answered, so they are unit-tested without a server; [`raw_events`] performs the calls.

use crate::mapping::not_managed_selector;
use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::time::Duration;

/// Page size of the list.
pub const PAGE_SIZE: u32 = 500;
/// Default server-side timeout of one watch request (kube-rs always sends one, so the apiserver's
/// `--min-request-timeout` does not apply); the watch is then re-established from the last
/// resourceVersion.
pub const WATCH_TIMEOUT_SECS: u32 = 290;

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
    /// The watch was re-established from the last resourceVersion (after a timeout or an error).
    Restarted,
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
        relist: bool,
    },
    Watching {
        resource_version: String,
    },
}

/// What one API call answered, as far as the state machine cares.
#[derive(Debug)]
pub enum Answer {
    Page {
        continue_token: Option<String>,
        resource_version: String,
    },
    /// A watch event with this resourceVersion (object or bookmark).
    Seen { resource_version: String },
    /// The watch stream ended (server timeout).
    Ended,
    /// 410 Gone: the resourceVersion is too old.
    Gone,
    /// Any other failure.
    Error,
}

pub struct Watch {
    pub state: State,
}

impl Default for Watch {
    fn default() -> Self {
        Watch {
            state: State::Listing {
                continue_token: None,
                relist: false,
            },
        }
    }
}

impl Watch {
    /// The next state. A relist happens only on 410 Gone; every other interruption resumes from the
    /// last resourceVersion seen, bookmarks included.
    pub fn transition(&self, answer: &Answer) -> State {
        match (&self.state, answer) {
            (_, Answer::Gone) => State::Listing {
                continue_token: None,
                relist: true,
            },
            (
                State::Listing { relist, .. },
                Answer::Page {
                    continue_token: Some(token),
                    ..
                },
            ) => State::Listing {
                continue_token: Some(token.clone()),
                relist: *relist,
            },
            (
                State::Listing { .. },
                Answer::Page {
                    continue_token: None,
                    resource_version,
                },
            ) => State::Watching {
                resource_version: resource_version.clone(),
            },
            (State::Watching { .. }, Answer::Seen { resource_version }) => State::Watching {
                resource_version: resource_version.clone(),
            },
            (state, _) => state.clone(),
        }
    }
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

fn rv_of(ev: &Event) -> String {
    ev.metadata.resource_version.clone().unwrap_or_default()
}

/// Retry delays for failed list or watch requests: 200 ms to 30 s.
fn backoff() -> impl Iterator<Item = Duration> {
    crate::retry::delays(Duration::from_millis(200), Duration::from_secs(30))
}

/// The list+watch of every raw core/v1 Event in the cluster, the operator's own objects excluded. The
/// stream ends only when its consumer is dropped: failures are reported as [`Step::Failed`] and
/// retried. A bounded channel sits between the API and the consumer, so a slow consumer slows the
/// watch instead of buffering without limit.
///
/// `bookmarks` sets `allowWatchBookmarks`; the operator always asks for them, only the bookmark
/// benchmark (`event-series run --no-watch-bookmarks`, hidden) turns them off.
pub fn raw_events(
    api: Api<Event>,
    watch_timeout_secs: u32,
    bookmarks: bool,
) -> impl Stream<Item = Step> {
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Step>(1024);
    tokio::spawn(async move {
        // Err only when the consumer is gone, which ends the task.
        let _ = drive(api, tx, watch_timeout_secs, bookmarks).await;
    });
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

type Closed = tokio::sync::mpsc::error::SendError<Step>;

async fn drive(
    api: Api<Event>,
    tx: tokio::sync::mpsc::Sender<Step>,
    watch_timeout_secs: u32,
    bookmarks: bool,
) -> Result<(), Closed> {
    let selector = not_managed_selector();
    let mut watch = Watch::default();
    let mut delays = backoff();
    let mut list_started = false;
    loop {
        let answer = match watch.state.clone() {
            State::Listing {
                continue_token,
                relist,
            } => {
                if !list_started {
                    tx.send(Step::ListStarted { relist }).await?;
                    list_started = true;
                }
                let mut lp = ListParams::default().labels(&selector).limit(PAGE_SIZE);
                if let Some(token) = &continue_token {
                    lp = lp.continue_token(token);
                }
                match api.list(&lp).await {
                    Ok(page) => {
                        let resource_version =
                            page.metadata.resource_version.clone().unwrap_or_default();
                        let continue_token =
                            page.metadata.continue_.clone().filter(|t| !t.is_empty());
                        for ev in page.items {
                            tx.send(Step::Listed(Box::new(ev))).await?;
                        }
                        if continue_token.is_none() {
                            tx.send(Step::ListDone {
                                resource_version: resource_version.clone(),
                            })
                            .await?;
                            list_started = false;
                        }
                        delays = backoff();
                        Answer::Page {
                            continue_token,
                            resource_version,
                        }
                    }
                    Err(e) if is_gone(&e) => Answer::Gone,
                    Err(e) => failed(&tx, &mut delays, e.to_string()).await?,
                }
            }
            State::Watching { resource_version } => {
                let mut wp = WatchParams::default()
                    .labels(&selector)
                    .timeout(watch_timeout_secs.max(1));
                wp.bookmarks = bookmarks; // allowWatchBookmarks (true but in benchmarks)
                match api.watch(&wp, &resource_version).await {
                    Ok(stream) => {
                        let (answer, error) = follow(&tx, &mut watch, stream.boxed()).await?;
                        match error {
                            Some(error) => {
                                failed(&tx, &mut delays, error).await?;
                            }
                            None => delays = backoff(),
                        }
                        if !matches!(answer, Answer::Gone) {
                            tx.send(Step::Restarted).await?;
                        }
                        answer
                    }
                    Err(e) if is_gone(&e) => Answer::Gone,
                    Err(e) => failed(&tx, &mut delays, e.to_string()).await?,
                }
            }
        };
        watch.state = watch.transition(&answer);
    }
}

/// Reports a failure and waits out the next backoff delay.
async fn failed(
    tx: &tokio::sync::mpsc::Sender<Step>,
    delays: &mut impl Iterator<Item = Duration>,
    error: String,
) -> Result<Answer, Closed> {
    let retry_in = delays.next().unwrap_or(Duration::from_secs(30));
    tx.send(Step::Failed { error, retry_in }).await?;
    tokio::time::sleep(retry_in).await;
    Ok(Answer::Error)
}

/// Forwards one watch response until it ends; returns why it ended, and the error if one did it.
async fn follow(
    tx: &tokio::sync::mpsc::Sender<Step>,
    watch: &mut Watch,
    mut stream: futures::stream::BoxStream<'_, kube::Result<WatchEvent<Event>>>,
) -> Result<(Answer, Option<String>), Closed> {
    while let Some(item) = stream.next().await {
        let (step, resource_version) = match item {
            Ok(WatchEvent::Added(ev) | WatchEvent::Modified(ev)) => {
                let rv = rv_of(&ev);
                (Step::Applied(Box::new(ev)), rv)
            }
            Ok(WatchEvent::Deleted(ev)) => {
                let rv = rv_of(&ev);
                (Step::Deleted(Box::new(ev)), rv)
            }
            Ok(WatchEvent::Bookmark(b)) => {
                let rv = b.metadata.resource_version;
                (
                    Step::Bookmark {
                        resource_version: rv.clone(),
                    },
                    rv,
                )
            }
            Ok(WatchEvent::Error(s)) if s.code == 410 => return Ok((Answer::Gone, None)),
            Ok(WatchEvent::Error(s)) => return Ok((Answer::Error, Some(format!("{s:?}")))),
            Err(e) => return Ok((Answer::Error, Some(e.to_string()))),
        };
        tx.send(step).await?;
        watch.state = watch.transition(&Answer::Seen { resource_version });
    }
    Ok((Answer::Ended, None))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn watching(rv: &str) -> Watch {
        Watch {
            state: State::Watching {
                resource_version: rv.into(),
            },
        }
    }

    #[test]
    fn pages_continue_then_watch_from_the_list_version() {
        let w = Watch::default();
        let next = w.transition(&Answer::Page {
            continue_token: Some("abc".into()),
            resource_version: "10".into(),
        });
        assert_eq!(
            next,
            State::Listing {
                continue_token: Some("abc".into()),
                relist: false
            }
        );
        let w = Watch { state: next };
        let next = w.transition(&Answer::Page {
            continue_token: None,
            resource_version: "12".into(),
        });
        assert_eq!(
            next,
            State::Watching {
                resource_version: "12".into()
            }
        );
    }

    #[test]
    fn bookmarks_and_events_advance_the_resume_point() {
        let w = watching("12");
        let next = w.transition(&Answer::Seen {
            resource_version: "40".into(),
        });
        assert_eq!(
            next,
            State::Watching {
                resource_version: "40".into()
            }
        );
    }

    #[test]
    fn a_dropped_watch_resumes_without_relisting() {
        for answer in [Answer::Ended, Answer::Error] {
            assert_eq!(watching("40").transition(&answer), watching("40").state);
        }
    }

    #[test]
    fn only_gone_relists() {
        assert_eq!(
            watching("40").transition(&Answer::Gone),
            State::Listing {
                continue_token: None,
                relist: true
            }
        );
        let listing = Watch {
            state: State::Listing {
                continue_token: Some("x".into()),
                relist: false,
            },
        };
        assert_eq!(
            listing.transition(&Answer::Error),
            listing.state,
            "a failed page is retried, not restarted"
        );
    }
}

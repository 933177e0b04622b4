//! The thin shell that performs the [`Watch`]'s requests: the list pages (read one object at a
//! time), the watch alongside a list and the watch after it, handing steps on to the controller.

use super::*;
use crate::input::pace::Pace;
use std::sync::Arc;

type Closed = tokio::sync::mpsc::error::SendError<Received>;
type Sender = tokio::sync::mpsc::Sender<Received>;

/// A page of a list in flight, and the watch stream, each of the generation it was made for (the
/// watch also tagged with whether it runs alongside a list).
type PageStream = (u64, BoxStream<'static, kube::Result<Part<Event>>>);
type WatchStream = ((u64, bool), BoxStream<'static, Watched>);

/// The list+watch of every raw core/v1 Event in the cluster, the operator's own objects excluded. The
/// stream ends only when its consumer is dropped: failures are reported as [`Step::Failed`] and
/// retried. A bounded channel sits between the API and the consumer, so a slow consumer slows the
/// watch instead of buffering without limit.
///
/// `bookmarks` sets `allowWatchBookmarks`; the operator always asks for them, only the bookmark
/// benchmark (`event-series run --no-watch-bookmarks`, hidden) turns them off.
///
/// List pages are read as they stream, one object at a time ([`crate::input::list_body`]), and
/// sized by `pages` ([`crate::input::paging`]) so that one response does not take long to arrive;
/// `pace` spaces them while the replica stands by ([`crate::input::pace`]).
pub fn raw_events(
    api: Api<Event>,
    watch_timeout_secs: u32,
    bookmarks: bool,
    (pages, pace): (PageSize, Arc<Pace>),
) -> Steps {
    let (tx, rx) = tokio::sync::mpsc::channel::<Received>(1024);
    tokio::spawn(async move {
        // Err only when the consumer is gone, which ends the task.
        let _ = drive(api, tx, watch_timeout_secs, bookmarks, (pages, pace)).await;
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

/// How long the watch alongside a list asks to last (`timeoutSeconds`). Resumed within a list, it
/// would start from where it got to, and in a scope where nothing changed that version may be
/// compacted already (410 Gone: the list starts over); asked to outlast the list, it need not be.
/// Once the list is complete it is replaced by a watch of `--watch-timeout`.
const ALONGSIDE_SECONDS: u32 = 3600;

/// What the watch stream brings the shell.
enum Watched {
    /// The watch request failed.
    Refused(kube::Error),
    Event(Box<kube::Result<WatchEvent<Event>>>),
    /// The stream ended without an error; `full`: it lasted its whole timeout.
    Ended {
        full: bool,
    },
}

/// What the shell waits for: the next part of a page, or of the watch.
enum Input {
    Page(Option<kube::Result<Part<Event>>>),
    Watch(Option<Watched>),
}

/// Performs the requests [`Watch`] asks for (a page and the watch at once, while listing) and
/// hands its steps on.
async fn drive(
    api: Api<Event>,
    tx: Sender,
    watch_timeout_secs: u32,
    bookmarks: bool,
    (mut pages, pace): (PageSize, Arc<Pace>),
) -> Result<(), Closed> {
    let selector = not_managed_selector();
    let mut watch = Watch::default();
    let timeout = watch_timeout_secs.max(1);
    // When the current list's first page was asked for.
    let mut snapshot = Utc::now();
    let mut page: Option<PageStream> = None;
    let mut stream: Option<WatchStream> = None;
    // The largest object of the page being read.
    let mut largest = 0;
    loop {
        let generation = watch.generation();
        let alongside = matches!(watch.state(), State::Listing { .. });
        page = page.filter(|(g, _)| *g == generation);
        stream = stream.filter(|(tag, _)| *tag == (generation, alongside));
        if page.is_none()
            && let Some(token) = watch.list_request()
        {
            let mut lp = ListParams::default().labels(&selector);
            match token {
                Some(token) => lp = lp.continue_token(&token),
                None => {
                    pages.restart();
                    snapshot = Utc::now();
                }
            }
            largest = 0;
            let (api, lp) = (api.clone(), lp.limit(pages.limit()));
            page = Some((generation, pace.page(move || list_body::page(&api, &lp))));
        }
        if stream.is_none()
            && let Some(rv) = watch.watch_from()
        {
            let lasts = if alongside {
                ALONGSIDE_SECONDS
            } else {
                timeout
            };
            let mut wp = WatchParams::default().labels(&selector).timeout(lasts);
            wp.bookmarks = bookmarks;
            stream = Some(((generation, alongside), open(api.clone(), wp, rv)));
        }
        let input = tokio::select! {
            part = next(&mut page) => Input::Page(part),
            watched = next(&mut stream) => Input::Watch(watched),
        };
        let steps = match input {
            Input::Page(part) => on_page(&mut watch, &mut page, part, (&mut pages, &mut largest)),
            Input::Watch(watched) => on_watch(&mut watch, &mut stream, watched),
        };
        hand_on(&tx, steps, snapshot).await?;
    }
}

/// The next item of `stream`; never, without one.
async fn next<G, T>(stream: &mut Option<(G, BoxStream<'static, T>)>) -> Option<T> {
    match stream {
        Some((_, s)) => s.next().await,
        None => std::future::pending().await,
    }
}

/// One part of the page being read; the page is dropped at its end or failure, and the next page
/// is sized by the largest object read (of a failed page too, which is asked for again smaller).
fn on_page(
    watch: &mut Watch,
    page: &mut Option<PageStream>,
    part: Option<kube::Result<Part<Event>>>,
    (pages, largest): (&mut PageSize, &mut usize),
) -> Vec<Step> {
    match part {
        Some(Ok(Part::Head(meta))) => {
            watch.page_head(&meta);
            Vec::new()
        }
        Some(Ok(Part::Item(ev, bytes))) => {
            *largest = (*largest).max(bytes);
            watch.listed(slim(*ev))
        }
        Some(Ok(Part::End(meta))) => {
            *page = None;
            pages.measured(*largest);
            watch.page_end(meta)
        }
        Some(Err(e)) => {
            *page = None;
            if *largest > 0 {
                pages.measured(*largest);
            }
            watch.request_failed(Failure::of(&e))
        }
        None => {
            *page = None;
            watch.request_failed(Failure::Other("the list page ended without its end".into()))
        }
    }
}

/// One part of the watch stream; the stream is dropped when it ends or fails.
fn on_watch(
    watch: &mut Watch,
    stream: &mut Option<WatchStream>,
    watched: Option<Watched>,
) -> Vec<Step> {
    let closing = match watched {
        Some(Watched::Event(event)) => match *event {
            Ok(event) => watch.watched(slim_event(event)),
            Err(e) => Err(watch.stream_failed(Failure::of(&e))),
        },
        Some(Watched::Refused(e)) => Err(watch.request_failed(Failure::of(&e))),
        Some(Watched::Ended { full }) => Err(watch.ended(full)),
        None => Err(watch.ended(false)),
    };
    closing.unwrap_or_else(|steps| {
        *stream = None;
        steps
    })
}

/// A watch event with its object cut as it arrives ([`slim`]).
fn slim_event(event: WatchEvent<Event>) -> WatchEvent<Event> {
    match event {
        WatchEvent::Added(ev) => WatchEvent::Added(slim(ev)),
        WatchEvent::Modified(ev) => WatchEvent::Modified(slim(ev)),
        WatchEvent::Deleted(ev) => WatchEvent::Deleted(slim(ev)),
        other => other,
    }
}

/// The watch from `rv`, as a stream that also says how it was refused or ended.
fn open(api: Api<Event>, wp: WatchParams, rv: String) -> BoxStream<'static, Watched> {
    let lasts = Duration::from_secs(wp.timeout.unwrap_or(0).into());
    let opened = tokio::time::Instant::now();
    futures::stream::once(async move { api.watch(&wp, &rv).await })
        .flat_map(move |answer| match answer {
            Ok(events) => events
                .map(|event| Watched::Event(Box::new(event)))
                .chain(futures::stream::once(async move {
                    // The server ends a watch on time, give or take its scheduling.
                    let full = opened.elapsed() + Duration::from_secs(1) >= lasts;
                    Watched::Ended { full }
                }))
                .left_stream(),
            Err(e) => futures::stream::iter([Watched::Refused(e)]).right_stream(),
        })
        .boxed()
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

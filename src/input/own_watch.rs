//! The standby's view of the leader's writes: a watch of the operator's own series objects.
//!
//! A standby runs the same list and watch of raw Events as the leader and keeps its engine current,
//! writing nothing: what its engine decides waits in its writer's queue. This watch tells it what the
//! leader wrote, so that a pending write the leader has already made is dropped, and the standby's
//! heartbeats are booked from the leader's. On taking the Lease the new leader then writes only what
//! is owed, at once, and nothing twice.
//!
//! It starts at the collection's current resourceVersion (a one-object list, which reads one object
//! whatever a tenant stores), before the restore lists the same objects, so no write falls between
//! the two. A watch that cannot resume (410 Gone: etcd compacted past it) starts again from the
//! current version rather than relisting: a write it missed costs at most one write again at a
//! hand-over, never a count (writes carry whole counts and are idempotent).

use crate::api::retry;
use crate::object::managed_selector;
use futures::{Stream, StreamExt};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;

/// Most own objects waiting for the controller: a full channel holds the watch up, never memory.
const CHANNEL: usize = 1024;

/// The own series objects as the API server changes them, in its order.
pub struct OwnObjects {
    rx: mpsc::Receiver<Box<Event>>,
    task: tokio::task::JoinHandle<()>,
}

impl Stream for OwnObjects {
    type Item = Box<Event>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Box<Event>>> {
        self.rx.poll_recv(cx)
    }
}

impl Drop for OwnObjects {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the own series objects of `api`'s scope from now on; each request ends after
/// `timeout_secs` and is resumed from the last version seen, bookmarks included.
pub fn own_objects(api: Api<Event>, timeout_secs: u32) -> OwnObjects {
    let (tx, rx) = mpsc::channel(CHANNEL);
    let task = tokio::spawn(follow(api, tx, timeout_secs));
    OwnObjects { rx, task }
}

/// The collection's resourceVersion now, from a list of at most one object (of any label: a
/// label-selected list would read every stored Event until it found one of ours).
async fn current_version(api: &Api<Event>) -> kube::Result<String> {
    let list = api.list_metadata(&ListParams::default().limit(1)).await?;
    Ok(list.metadata.resource_version.unwrap_or_default())
}

/// Runs until the receiver is gone.
async fn follow(api: Api<Event>, tx: mpsc::Sender<Box<Event>>, timeout_secs: u32) {
    let mut params = WatchParams::default()
        .labels(&managed_selector())
        .timeout(timeout_secs);
    params.bookmarks = true;
    let mut delays = retry::delays(Duration::from_millis(200), Duration::from_secs(30));
    let mut version: Option<String> = None;
    loop {
        let from = match &version {
            Some(v) => v.clone(),
            None => match current_version(&api).await {
                Ok(v) => v,
                Err(error) => {
                    let retry_in = delays.next().unwrap_or(Duration::from_secs(30));
                    tracing::debug!(%error, ?retry_in, "own series watch: no current version");
                    tokio::time::sleep(retry_in).await;
                    continue;
                }
            },
        };
        match api.watch(&params, &from).await {
            Ok(stream) => {
                let mut stream = stream.boxed();
                version = Some(from);
                let mut failed = false;
                while let Some(event) = stream.next().await {
                    match event {
                        Ok(WatchEvent::Added(ev) | WatchEvent::Modified(ev)) => {
                            version = ev.metadata.resource_version.clone().or(version);
                            if tx.send(Box::new(ev)).await.is_err() {
                                return;
                            }
                        }
                        Ok(WatchEvent::Deleted(ev)) => {
                            version = ev.metadata.resource_version.clone().or(version);
                        }
                        Ok(WatchEvent::Bookmark(b)) => version = Some(b.metadata.resource_version),
                        Ok(WatchEvent::Error(status)) if status.code == 410 => {
                            tracing::debug!("own series watch expired; resuming from now");
                            version = None;
                            break;
                        }
                        Ok(WatchEvent::Error(status)) => {
                            tracing::debug!(?status, "own series watch ended with an error");
                            failed = true;
                            break;
                        }
                        Err(error) => {
                            tracing::debug!(%error, "own series watch failed");
                            failed = true;
                            break;
                        }
                    }
                }
                if failed {
                    tokio::time::sleep(delays.next().unwrap_or(Duration::from_secs(30))).await;
                } else {
                    delays = retry::delays(Duration::from_millis(200), Duration::from_secs(30));
                }
            }
            Err(kube::Error::Api(status)) if status.code == 410 => version = None,
            Err(error) => {
                let retry_in = delays.next().unwrap_or(Duration::from_secs(30));
                if refused(&error) {
                    // Not a passing fault: without this watch a standby that takes over writes
                    // every series again. Said each time, at the backoff's pace.
                    tracing::warn!(%error, ?retry_in, "own series watch refused: a standby cannot follow the leader's writes (RBAC: events.k8s.io events watch)");
                } else {
                    tracing::debug!(%error, ?retry_in, "own series watch refused; retrying");
                }
                tokio::time::sleep(retry_in).await;
            }
        }
        if tx.is_closed() {
            return;
        }
    }
}

/// Whether the API server refused the watch for want of rights, which no retry mends.
fn refused(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 401 || status.code == 403)
}

//! A standby's lists go gently, so that its start does not depose the leader.
//!
//! A warm standby lists what the leader listed at its own start: every raw Event and every series
//! object, 10^6 stored events taking minutes of the API server's and etcd's time. Meanwhile the
//! leader must renew its Lease within the renew deadline; on a control plane short of CPU a list
//! running flat out slowed a renewal past it, and the leader fenced itself while the standby was
//! still cold (`just bench-failover` at 10^6). API Priority and Fairness separates the requests'
//! queues, not the CPU they share.
//!
//! So, while the replica does not lead, each page of its lists is followed by a pause in
//! proportion to how long the page took: with `--standby-list-share 0.5` a pause as long as the
//! page, so the standby's lists hold a request at the API server at most about half of the time,
//! and a slower server (longer pages) gets longer pauses by itself. A replica that leads (a single
//! replica, or a standby that took the Lease mid-list) lists at full speed: it owes writes. The
//! price is a standby that is warm later; it is not Ready meanwhile, so a rollout waits for it.

use crate::input::list_body::Part;
use futures::StreamExt;
use futures::stream::BoxStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// The longest pause after one page, however long it took: a page that took minutes (a server
/// in trouble) is not followed by minutes more of nothing, which the restore would count as no
/// progress.
pub const MAX_PAUSE: Duration = Duration::from_secs(10);

/// How often a pause looks again whether the replica leads now.
const LOOK: Duration = Duration::from_millis(500);

/// Whether the replica leads now.
pub type Leading = Arc<dyn Fn() -> bool + Send + Sync>;

/// When the lists of one replica may ask for their next page.
pub struct Pace {
    /// The share of time a standby's lists may hold a request (0 < share ≤ 1; 1: no pause).
    share: f64,
    leading: Leading,
    /// No page starts before this.
    next: Mutex<Instant>,
}

impl Pace {
    /// Lists that never pause (no election, or a benchmark's cold standby).
    pub fn unpaced() -> Arc<Pace> {
        Pace::new(1.0, Arc::new(|| true))
    }

    /// Lists that pause after each page while `leading` says no.
    pub fn new(share: f64, leading: Leading) -> Arc<Pace> {
        Arc::new(Pace {
            share,
            leading,
            next: Mutex::new(Instant::now()),
        })
    }

    /// Whether pages are spaced now: the replica does not lead, and the share is below 1.
    pub fn paused(&self) -> bool {
        self.share < 1.0 && !(self.leading)()
    }

    /// `make`'s page, asked for once this replica's lists may ask again; its end (or failure)
    /// sets when the next page may start.
    pub fn page<K: Send + 'static>(
        self: &Arc<Self>,
        make: impl FnOnce() -> BoxStream<'static, kube::Result<Part<K>>> + Send + 'static,
    ) -> BoxStream<'static, kube::Result<Part<K>>> {
        let pace = Arc::clone(self);
        futures::stream::once(async move {
            pace.turn().await;
            let started = Instant::now();
            make().inspect(move |part| {
                if matches!(part, Ok(Part::End(_)) | Err(_)) {
                    pace.finished(started.elapsed());
                }
            })
        })
        .flatten()
        .boxed()
    }

    /// Waits until a page may start: at once while leading.
    async fn turn(&self) {
        loop {
            let at = *self.lock();
            let now = Instant::now();
            if at <= now || (self.leading)() {
                return;
            }
            tokio::time::sleep_until(at.min(now + LOOK)).await;
        }
    }

    /// A page took `took`: the next may start after the pause it earns.
    fn finished(&self, took: Duration) {
        if (self.leading)() {
            return;
        }
        let at = Instant::now() + pause(took, self.share);
        let mut next = self.lock();
        *next = (*next).max(at);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Instant> {
        // An Instant is written in one assignment: a panic elsewhere cannot leave it torn.
        self.next
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The pause after a page that took `took`, for lists that may hold a request `share` of the
/// time: `took × (1 − share) / share`, at most [`MAX_PAUSE`]; none at a share of 1 or more.
pub fn pause(took: Duration, share: f64) -> Duration {
    if share.is_nan() || share <= 0.0 || share >= 1.0 {
        return Duration::ZERO;
    }
    took.mul_f64((1.0 - share) / share).min(MAX_PAUSE)
}

/// Parses `--standby-list-share`: a number above 0 and at most 1.
pub fn parse_share(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if share > 0.0 && share <= 1.0 => Ok(share),
        _ => Err(format!(
            "{text:?} is not a share above 0 and at most 1 (0.5: a pause as long as each page)"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_page_earns_a_pause_in_proportion_to_its_time_and_bounded() {
        let s = Duration::from_secs;
        assert_eq!(
            pause(s(2), 0.5),
            s(2),
            "half the time: a pause as long as the page"
        );
        assert_eq!(pause(s(1), 0.25), s(3));
        assert_eq!(pause(s(4), 0.8), s(1));
        assert_eq!(
            pause(s(2), 1.0),
            Duration::ZERO,
            "a share of 1 never pauses"
        );
        assert_eq!(
            pause(s(60), 0.5),
            MAX_PAUSE,
            "a page of minutes is not followed by minutes"
        );
        assert_eq!(pause(s(1), 0.0), Duration::ZERO);
        assert_eq!(pause(s(1), f64::NAN), Duration::ZERO);
    }

    #[test]
    fn shares_parse_within_zero_and_one_and_refuse_the_rest() {
        assert_eq!(parse_share("0.5"), Ok(0.5));
        assert_eq!(parse_share("1"), Ok(1.0));
        for bad in ["0", "-0.5", "1.5", "half", "", "NaN", "inf"] {
            let e = parse_share(bad).unwrap_err();
            assert!(e.contains("not a share"), "{bad}: {e}");
        }
    }

    /// A page that takes `took` of (paused) time and ends.
    fn slow_page(took: Duration) -> BoxStream<'static, kube::Result<Part<()>>> {
        futures::stream::once(async move {
            tokio::time::sleep(took).await;
            Ok(Part::End(ListMeta::default()))
        })
        .boxed()
    }

    /// When each of three pages (of 2 s each) started, relative to the first.
    async fn starts(pace: &Arc<Pace>) -> Vec<u64> {
        let t0 = Instant::now();
        let mut starts = Vec::new();
        for _ in 0..3 {
            let started = Arc::new(Mutex::new(None));
            let mark = Arc::clone(&started);
            let page = pace.page(move || {
                *mark.lock().unwrap() = Some(Instant::now());
                slow_page(Duration::from_secs(2))
            });
            page.collect::<Vec<_>>().await;
            let at = started.lock().unwrap().expect("the page was asked for");
            starts.push((at - t0).as_secs());
        }
        starts
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_pauses_between_pages_and_a_leader_does_not() {
        let standby = Pace::new(0.5, Arc::new(|| false));
        assert_eq!(starts(&standby).await, [0, 4, 8], "2 s pages, 2 s pauses");

        assert_eq!(starts(&Pace::unpaced()).await, [0, 2, 4]);
        let leader = Pace::new(0.5, Arc::new(|| true));
        assert_eq!(starts(&leader).await, [0, 2, 4]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_that_takes_the_lease_mid_pause_lists_at_once() {
        let leads = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&leads);
        let pace = Pace::new(0.2, Arc::new(move || flag.load(Ordering::SeqCst)));
        // The first page ends at 2 s and earns an 8 s pause; the Lease comes at 3 s.
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(3)).await;
            leads.store(true, Ordering::SeqCst);
        });
        assert_eq!(starts(&pace).await, [0, 3, 5]);
    }
}

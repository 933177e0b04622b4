//! A standby's lists go gently, so that its start does not depose the leader.
//!
//! A warm standby lists what the leader listed at its own start: every raw Event and every series
//! object, 10^6 stored events taking minutes of the API server's and etcd's time. Meanwhile the
//! leader must renew its Lease within the renew deadline; on a control plane short of CPU a list
//! running flat out slowed a renewal past it, and the leader fenced itself while the standby was
//! still cold (`just bench-failover` at 10^6). API Priority and Fairness separates the requests'
//! queues, not the CPU they share.
//!
//! So, while the replica does not lead, each list has at most one page in flight, and a page is
//! followed by a pause in proportion to the time the API server took to answer it (from the
//! request to the list's head, so that the operator's own back-pressure is not taken for the
//! server's): with `--standby-list-share 0.5` a pause as long as that, so each list keeps a
//! request at the API server about half of the time, and a slower server gets longer pauses by
//! itself. A pause is at most a tenth of `--restore-timeout`, which counts a pause as time without
//! a page. A page is paced by what the replica is when it asks for it: one that leads (it took the
//! Lease mid-list) lists at full speed, several pages at once, from its next page on, since it
//! owes writes. The price is a standby that is warm later; it is not Ready meanwhile, so a rollout
//! waits for it.

use crate::input::list_body::Part;
use futures::StreamExt;
use futures::stream::BoxStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// How often a waiting page looks again whether the replica leads now.
const LOOK: Duration = Duration::from_millis(500);

/// Whether the replica leads now.
pub type Leading = Arc<dyn Fn() -> bool + Send + Sync>;

/// When the pages of one list (or of one set of lists) may be asked for.
pub struct Pace {
    /// The share of time a standby's list may hold a request (0 < share ≤ 1; 1: no pause).
    share: f64,
    /// The longest pause after one page.
    most: Duration,
    leading: Leading,
    /// No page of a standby starts before this.
    next: Mutex<Instant>,
    /// A standby's one page in flight.
    one: Arc<Semaphore>,
}

impl Pace {
    /// Lists that never pause (no election, or a benchmark's cold standby).
    pub fn unpaced() -> Arc<Pace> {
        Pace::new(1.0, Duration::ZERO, Arc::new(|| true))
    }

    /// Lists that, while `leading` says no, have one page in flight and pause after each, for at
    /// most `most`.
    pub fn new(share: f64, most: Duration, leading: Leading) -> Arc<Pace> {
        Arc::new(Pace {
            share,
            most,
            leading,
            next: Mutex::new(Instant::now()),
            one: Arc::new(Semaphore::new(1)),
        })
    }

    /// `make`'s page, asked for once this list may ask again; the time its answer took sets when
    /// the next page may start.
    pub fn page<K: Send + 'static>(
        self: &Arc<Self>,
        make: impl FnOnce() -> BoxStream<'static, kube::Result<Part<K>>> + Send + 'static,
    ) -> BoxStream<'static, kube::Result<Part<K>>> {
        let pace = Arc::clone(self);
        futures::stream::once(async move {
            let mut permit = pace.turn().await;
            let started = Instant::now();
            let mut answered = None;
            make().inspect(move |part| {
                if matches!(part, Ok(Part::Head(_))) {
                    answered = answered.or(Some(started.elapsed()));
                }
                if matches!(part, Ok(Part::End(_)) | Err(_)) {
                    pace.finished(answered.unwrap_or_else(|| started.elapsed()));
                    permit.take();
                }
            })
        })
        .flatten()
        .boxed()
    }

    /// Waits until a page may start, and holds the standby's one page in flight: at once, and
    /// without, while leading.
    async fn turn(&self) -> Option<OwnedSemaphorePermit> {
        loop {
            if (self.leading)() {
                return None;
            }
            let now = Instant::now();
            let at = *self.lock();
            if at > now {
                tokio::time::sleep_until(at.min(now + LOOK)).await;
                continue;
            }
            tokio::select! {
                permit = Arc::clone(&self.one).acquire_owned() => {
                    // The page before may have ended meanwhile and set a pause.
                    match permit {
                        Ok(permit) if *self.lock() <= Instant::now() => return Some(permit),
                        Ok(_) => {}
                        Err(_) => return None,
                    }
                }
                () = tokio::time::sleep(LOOK) => {}
            }
        }
    }

    /// A page's answer took `took`: the next may start after the pause it earns.
    fn finished(&self, took: Duration) {
        if (self.leading)() {
            return;
        }
        let at = Instant::now() + pause(took, self.share).min(self.most);
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

/// The pause after a page whose answer took `took`, for a list that may hold a request `share`
/// of the time: `took × (1 − share) / share`; none at a share of 1 or more.
pub fn pause(took: Duration, share: f64) -> Duration {
    if share.is_nan() || share <= 0.0 || share >= 1.0 {
        return Duration::ZERO;
    }
    // A share near 0 makes the product overflow a Duration: the longest then, never a panic.
    Duration::try_from_secs_f64(took.as_secs_f64() * (1.0 - share) / share).unwrap_or(Duration::MAX)
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

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_page_earns_a_pause_in_proportion_to_its_time() {
        assert_eq!(pause(S(2), 0.5), S(2), "half the time: as long as the page");
        assert_eq!(pause(S(1), 0.25), S(3));
        assert_eq!(pause(S(4), 0.8), S(1));
        assert_eq!(
            pause(S(2), 1.0),
            Duration::ZERO,
            "a share of 1 never pauses"
        );
        assert_eq!(pause(S(1), 0.0), Duration::ZERO);
        assert_eq!(pause(S(1), f64::NAN), Duration::ZERO);
        assert_eq!(
            pause(S(1), 1e-300),
            Duration::MAX,
            "an overflow is no panic"
        );
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

    /// A page whose head comes after 2 s (the server's answer) and its end 1 s later (the body,
    /// read as slowly as the operator consumes it).
    fn slow_page() -> BoxStream<'static, kube::Result<Part<()>>> {
        futures::stream::iter([2, 1])
            .then(|secs| async move {
                tokio::time::sleep(S(secs)).await;
                secs
            })
            .map(|secs| {
                let meta = ListMeta::default();
                Ok(if secs == 2 {
                    Part::Head(meta)
                } else {
                    Part::End(meta)
                })
            })
            .boxed()
    }

    /// When each of `n` pages, asked for at once, started (whole seconds after the first ask).
    async fn starts(pace: &Arc<Pace>, n: usize) -> Vec<u64> {
        let t0 = Instant::now();
        let pages = (0..n).map(|_| {
            let started = Arc::new(Mutex::new(None));
            let mark = Arc::clone(&started);
            let page = pace.page(move || {
                *mark.lock().unwrap() = Some(Instant::now());
                slow_page()
            });
            async move {
                page.collect::<Vec<_>>().await;
                let at = started.lock().unwrap().expect("the page was asked for");
                (at - t0).as_secs()
            }
        });
        let mut starts = futures::future::join_all(pages).await;
        starts.sort_unstable();
        starts
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_pauses_by_the_servers_time_and_a_leader_does_not() {
        let t0 = Instant::now();
        let standby = Pace::new(0.5, S(60), Arc::new(|| false));
        for _ in 0..3 {
            starts(&standby, 1).await;
        }
        // 3 s pages, each followed by 2 s (the time to its head, not its end).
        assert_eq!((Instant::now() - t0).as_secs(), 3 + 2 + 3 + 2 + 3);

        let t0 = Instant::now();
        let capped = Pace::new(0.5, S(1), Arc::new(|| false));
        for _ in 0..3 {
            starts(&capped, 1).await;
        }
        assert_eq!(
            (Instant::now() - t0).as_secs(),
            3 + 1 + 3 + 1 + 3,
            "at most the cap"
        );

        for leader in [Pace::unpaced(), Pace::new(0.5, S(60), Arc::new(|| true))] {
            let t0 = Instant::now();
            for _ in 0..3 {
                starts(&leader, 1).await;
            }
            assert_eq!((Instant::now() - t0).as_secs(), 9);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_has_one_page_in_flight_and_a_leader_several() {
        let standby = Pace::new(0.5, S(60), Arc::new(|| false));
        assert_eq!(starts(&standby, 3).await, [0, 5, 10]);
        let leader = Pace::new(0.5, S(60), Arc::new(|| true));
        assert_eq!(starts(&leader, 3).await, [0, 0, 0]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_standby_that_takes_the_lease_mid_list_goes_full_speed_from_its_next_pages() {
        let leads = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&leads);
        let pace = Pace::new(0.2, S(60), Arc::new(move || flag.load(Ordering::SeqCst)));
        // The first page's head comes at 2 s and earns an 8 s pause; the Lease comes at 4 s.
        tokio::spawn(async move {
            tokio::time::sleep(S(4)).await;
            leads.store(true, Ordering::SeqCst);
        });
        assert_eq!(starts(&pace, 4).await, [0, 4, 4, 4]);
    }
}

//! Raw event writes that must get through: retried through 429s, 5xx, and connection errors while the
//! apiserver is down, so that what a test wrote is exactly what it meant to write.

use anyhow::{Result, bail};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// What the writes met on their way.
#[derive(Debug, Default)]
pub struct WriteStats {
    pub writes: AtomicU64,
    pub throttled: AtomicU64,
    pub failed: AtomicU64,
    pub timed_out: AtomicU64,
    /// Longest time from an occurrence (its lastTimestamp) to the write that recorded it.
    pub longest_delay_ms: AtomicU64,
}

impl WriteStats {
    pub fn summary(&self) -> String {
        format!(
            "{} writes accepted, {} answered 429 (after the client's own retries), {} other \
             failures and {} unanswered requests (30 s) retried, longest delay from an \
             occurrence to its write {:.1}s",
            self.writes.load(Ordering::Relaxed),
            self.throttled.load(Ordering::Relaxed),
            self.failed.load(Ordering::Relaxed),
            self.timed_out.load(Ordering::Relaxed),
            self.longest_delay_ms.load(Ordering::Relaxed) as f64 / 1000.0
        )
    }
}

/// Retries `call` until the API accepts it, counting in `stats` what it met, and fails after
/// `deadline` or on a refusal other than 429. `done_if_conflict`: a 409 means an earlier attempt went
/// through (a create whose answer was lost), and the result is `None`.
pub async fn until_accepted<T, F, Fut>(
    stats: &WriteStats,
    deadline: Instant,
    done_if_conflict: bool,
    mut call: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = kube::Result<T>>,
{
    let mut pause = Duration::from_millis(20);
    loop {
        // A request the apiserver never answers (seen under a 429 storm) must not hang the writer:
        // it is retried like a failure.
        match tokio::time::timeout(Duration::from_secs(30), call()).await {
            Ok(Ok(v)) => {
                stats.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(Some(v));
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 409 && done_if_conflict => {
                stats.writes.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 429 => {
                stats.throttled.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Err(kube::Error::Api(s))) if s.code < 500 => {
                bail!("write refused: {s:?}")
            }
            Ok(Err(_)) => {
                stats.failed.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                stats.timed_out.fetch_add(1, Ordering::Relaxed);
            }
        }
        if Instant::now() > deadline {
            bail!("a write was not accepted before the deadline");
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

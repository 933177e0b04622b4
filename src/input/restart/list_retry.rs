//! The own-series list's retries: what to do after a page failed, and when a list that makes no
//! progress gives up.

use super::*;

/// How often the own-series list may start over when a continue token expired and the API server
/// offered none to go on from (a real API server offers one; each start over restores idempotently).
pub(super) const MAX_LIST_RESTARTS: u32 = 5;

/// What to do after a page of the own-series list failed (the request, or its body on the way):
/// wait and ask again, with backoff (a restart in a busy cluster must not fail on a 429), until
/// `progress.timeout` has passed since the last progress.
///
/// A continue token that expired (410: etcd compacted the list's snapshot, which a long list on a
/// slow or busy control plane outlives) is replaced by the one the API server offers with the 410,
/// which goes on from the same key at the current resourceVersion. That list is not a snapshot, but
/// nothing it could miss or repeat matters here: no one writes the operator's series objects during
/// a restore (the previous leader is fenced, tenants are refused by the admission policy, a forged
/// object is refused by `decode` anyway), an object deleted meanwhile (TTL) needs no restoring, and
/// one served twice is restored once ([`Engine::restore`] is idempotent). Starting over instead
/// would never end where one whole list takes longer than the compaction interval.
pub(super) async fn failed(
    e: kube::Error,
    params: &mut ListParams,
    progress: &mut Progress<'_>,
) -> Result<(), RestoreError> {
    if let kube::Error::Api(status) = &e
        && status.code == 410
        && params.continue_token.is_some()
    {
        progress.metrics.restore_tokens_expired.inc();
        let offered = status.metadata.as_ref().and_then(|m| m.continue_.clone());
        match offered.filter(|t| !t.is_empty()) {
            Some(token) => {
                tracing::warn!(
                    "continue token of the own-series list expired; going on from the token the API server offered"
                );
                params.continue_token = Some(token);
            }
            None if progress.restarts < MAX_LIST_RESTARTS => {
                progress.restarts += 1;
                tracing::warn!(
                    restarts = progress.restarts,
                    "continue token of the own-series list expired and none was offered; listing again from the start"
                );
                params.continue_token = None;
            }
            None => return Err(RestoreError::Restarts(MAX_LIST_RESTARTS)),
        }
    }
    let left = progress.timeout.saturating_sub(progress.last.elapsed());
    if left.is_zero() {
        return Err(RestoreError::Stuck(progress.timeout));
    }
    // The last try comes at the bound itself. An expired token is tried again with backoff
    // too: a server that answers 410 to every continuation cannot make this loop spin.
    let retry_in = progress
        .delays
        .next()
        .unwrap_or(Duration::from_secs(30))
        .min(left);
    if !matches!(&e, kube::Error::Api(s) if s.code == 410) {
        tracing::warn!(error = %e, ?retry_in, "listing own series objects failed; retrying");
    }
    tokio::time::sleep(retry_in).await;
    Ok(())
}

pub(super) fn retry_delays() -> backon::ExponentialBackoff {
    crate::api::retry::delays(Duration::from_millis(200), Duration::from_secs(30))
}

/// What tells a list that makes progress from one that does not.
pub(super) struct Progress<'a> {
    /// When the list last made progress (or started).
    pub(super) last: Instant,
    /// Retry delays since then.
    pub(super) delays: backon::ExponentialBackoff,
    /// Times the list started over.
    pub(super) restarts: u32,
    pub(super) timeout: Duration,
    pub(super) metrics: &'a Metrics,
}

//! Who may read `/metrics`: the bearer token of the request, checked by the API server.
//!
//! The API server answers two questions, the way Kubernetes components delegate them: a
//! TokenReview (is this token valid, and whose is it?) and a SubjectAccessReview (may that user
//! `get` the non-resource URL `/metrics`?). A scrape every 15 s must not cost two API requests, and
//! a flood of made-up tokens must not become a flood of reviews, so:
//!
//! - decisions are cached by the token's SHA-256 (the token itself is not kept), an allowance for
//!   [`ALLOWED_TTL`], a refusal for [`DENIED_TTL`], at most [`CACHE_ENTRIES`] tokens (least recently
//!   used first out);
//! - at most [`CONCURRENT_REVIEWS`] reviews are in flight; others wait, and give up with the request
//!   deadline (answered 503, not cached);
//! - at most [`REVIEWS_PER_SECOND`] new tokens are reviewed per second (burst [`REVIEW_BURST`],
//!   `governor`); beyond that a request is answered 503 at once, without asking. Scrapers are
//!   cached, so they meet the limit only while someone floods the port with made-up tokens, which
//!   cannot then be turned into load on the API server.
//!
//! A revoked binding therefore stops a scraper within [`ALLOWED_TTL`].

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use schnellru::{ByLength, LruMap};
use std::num::NonZeroU32;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;

/// How long an allowed token stays allowed without asking again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long an unknown or unauthorized token stays refused without asking again: short, so that a
/// scraper whose role was just bound gets in soon.
pub const DENIED_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered. Scrapers are a handful; the bound is for floods of made-up tokens.
pub const CACHE_ENTRIES: u32 = 1024;
/// Reviews in flight at once.
pub const CONCURRENT_REVIEWS: usize = 4;
/// New tokens reviewed per second, and the burst above it.
pub const REVIEWS_PER_SECOND: u32 = 10;
pub const REVIEW_BURST: u32 = 20;

/// The path and verb a scrape needs (the metrics-reader ClusterRole grants them).
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";

/// What a request may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No token, a malformed header, or a token the API server does not accept: 401.
    Unauthenticated,
    /// A valid token of a user without the right: 403.
    Forbidden,
}

/// The API server could not be asked: the request is answered 503 and nothing is cached.
#[derive(Debug, thiserror::Error)]
pub enum ReviewError {
    #[error("review request failed: {0}")]
    Api(#[from] kube::Error),
    #[error("no review answer within {0:?}")]
    Timeout(Duration),
    #[error("the TokenReview came back without a status")]
    NoStatus,
    #[error("more new tokens than {REVIEWS_PER_SECOND} per second: not reviewed")]
    Throttled,
}

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, RFC 6750).
pub fn bearer(header: &[u8]) -> Option<&str> {
    let header = std::str::from_utf8(header).ok()?;
    let (scheme, token) = header.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() && !token.contains(' '))
        .then_some(token)
}

/// What the cache keeps of a token: its digest, so that memory holds no credential.
type Fingerprint = [u8; 32];

fn fingerprint(token: &str) -> Fingerprint {
    let digest = ring::digest::digest(&ring::digest::SHA256, token.as_bytes());
    let mut out = [0u8; 32];
    out.copy_from_slice(digest.as_ref());
    out
}

/// Decisions by token, each until its expiry; the clock is passed in.
pub struct Cache {
    entries: LruMap<Fingerprint, (Decision, Instant)>,
}

impl Cache {
    pub fn new(capacity: u32) -> Cache {
        Cache {
            entries: LruMap::new(ByLength::new(capacity)),
        }
    }

    /// The decision for `token` if one is cached and still fresh at `now`.
    pub fn get(&mut self, token: &str, now: Instant) -> Option<Decision> {
        let key = fingerprint(token);
        match self.entries.get(&key) {
            Some((decision, until)) if now < *until => Some(*decision),
            Some(_) => {
                self.entries.remove(&key);
                None
            }
            None => None,
        }
    }

    pub fn put(&mut self, token: &str, decision: Decision, now: Instant) {
        let ttl = match decision {
            Decision::Allowed => ALLOWED_TTL,
            Decision::Unauthenticated | Decision::Forbidden => DENIED_TTL,
        };
        self.entries
            .insert(fingerprint(token), (decision, now + ttl));
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Checks scrape requests with the API server.
pub struct Authorizer {
    client: kube::Client,
    cache: Mutex<Cache>,
    reviews: Semaphore,
    new_tokens: DefaultDirectRateLimiter,
    deadline: Duration,
}

impl Authorizer {
    /// `deadline` bounds the wait for a review slot and the reviews together (the request timeout).
    pub fn new(client: kube::Client, deadline: Duration) -> Authorizer {
        Authorizer::with_limit(client, deadline, REVIEWS_PER_SECOND, REVIEW_BURST)
    }

    fn with_limit(
        client: kube::Client,
        deadline: Duration,
        per_second: u32,
        burst: u32,
    ) -> Authorizer {
        let quota = Quota::per_second(NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN))
            .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN));
        Authorizer {
            client,
            cache: Mutex::new(Cache::new(CACHE_ENTRIES)),
            reviews: Semaphore::new(CONCURRENT_REVIEWS),
            new_tokens: RateLimiter::direct(quota),
            deadline,
        }
    }

    fn cached(&self, token: &str) -> Option<Decision> {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(token, Instant::now())
    }

    /// The decision for a request with this `Authorization` header (or none).
    pub async fn check(&self, header: Option<&http::HeaderValue>) -> Result<Decision, ReviewError> {
        let Some(token) = header.and_then(|h| bearer(h.as_bytes())) else {
            return Ok(Decision::Unauthenticated);
        };
        if let Some(decision) = self.cached(token) {
            return Ok(decision);
        }
        if self.new_tokens.check().is_err() {
            return Err(ReviewError::Throttled);
        }
        let decision = tokio::time::timeout(self.deadline, async {
            let _slot = self.reviews.acquire().await;
            // Another request with the same token may have been answered while this one waited.
            match self.cached(token) {
                Some(decision) => Ok(decision),
                None => self.review(token).await,
            }
        })
        .await
        .map_err(|_| ReviewError::Timeout(self.deadline))??;
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .put(token, decision, Instant::now());
        Ok(decision)
    }

    async fn review(&self, token: &str) -> Result<Decision, ReviewError> {
        let review = TokenReview {
            spec: TokenReviewSpec {
                token: token.to_owned(),
                audiences: None,
            },
            ..TokenReview::default()
        };
        let reviewed = Api::<TokenReview>::all(self.client.clone())
            .create(&PostParams::default(), &review)
            .await?;
        let status = reviewed.status.ok_or(ReviewError::NoStatus)?;
        let user = match (status.authenticated, status.user) {
            (Some(true), Some(user)) => user,
            _ => return Ok(Decision::Unauthenticated),
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username,
                uid: user.uid,
                groups: user.groups,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.to_owned()),
                    verb: Some(METRICS_VERB.to_owned()),
                }),
                resource_attributes: None,
            },
            ..SubjectAccessReview::default()
        };
        let answered = Api::<SubjectAccessReview>::all(self.client.clone())
            .create(&PostParams::default(), &access)
            .await?;
        Ok(match answered.status {
            Some(s) if s.allowed => Decision::Allowed,
            _ => Decision::Forbidden,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bearer_token_is_read_from_the_header_and_nothing_else() {
        assert_eq!(bearer(b"Bearer abc.def"), Some("abc.def"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"BEARER abc"), Some("abc"));
        assert_eq!(bearer(b"Basic dXNlcjpwYXNz"), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer "), None);
        assert_eq!(bearer(b"Bearer a b"), None);
        assert_eq!(bearer(b"Bearer \xff\xfe"), None);
    }

    #[test]
    fn an_allowance_lasts_longer_than_a_refusal() {
        let mut cache = Cache::new(8);
        let t0 = Instant::now();
        cache.put("good", Decision::Allowed, t0);
        cache.put("bad", Decision::Forbidden, t0);
        cache.put("unknown", Decision::Unauthenticated, t0);
        let later = t0 + DENIED_TTL;
        assert_eq!(cache.get("good", later), Some(Decision::Allowed));
        assert_eq!(cache.get("bad", later), None, "refusals are asked again");
        assert_eq!(cache.get("unknown", later), None);
        assert_eq!(cache.get("good", t0 + ALLOWED_TTL), None);
        assert!(cache.is_empty(), "expired entries are dropped");
    }

    #[test]
    fn a_flood_of_tokens_keeps_the_cache_bounded_and_recent_scrapers_in_it() {
        let mut cache = Cache::new(16);
        let t0 = Instant::now();
        cache.put("prometheus", Decision::Allowed, t0);
        for i in 0..1_000 {
            cache.put(&format!("made-up-{i}"), Decision::Unauthenticated, t0);
            if i % 8 == 0 {
                // The scraper keeps coming back, so it stays among the recently used.
                assert_eq!(cache.get("prometheus", t0), Some(Decision::Allowed), "{i}");
            }
        }
        assert_eq!(cache.len(), 16);
        assert_eq!(cache.get("made-up-0", t0), None, "the oldest went first");
    }

    /// Past the limit of new tokens a request is refused without a review: the API server sees no
    /// more than the limit, whatever a flood of made-up tokens does.
    #[tokio::test]
    async fn new_tokens_beyond_the_limit_are_not_reviewed() {
        // Nothing listens on port 1: a review fails at once with a connection error.
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URI"));
        let client = kube::Client::try_from(config).expect("a client");
        let auth = Authorizer::with_limit(client, Duration::from_secs(5), 1, 2);
        let header = |t: &str| http::HeaderValue::from_str(&format!("Bearer {t}")).expect("header");
        for token in ["a", "b"] {
            let r = auth.check(Some(&header(token))).await;
            assert!(
                matches!(r, Err(ReviewError::Api(_))),
                "{token}: reviewed: {r:?}"
            );
        }
        let r = auth.check(Some(&header("c"))).await;
        assert!(matches!(r, Err(ReviewError::Throttled)), "{r:?}");
        assert_eq!(
            auth.check(None).await.ok(),
            Some(Decision::Unauthenticated),
            "no token needs no review"
        );
    }

    #[test]
    fn tokens_are_kept_as_digests() {
        let mut cache = Cache::new(4);
        cache.put("secret-token", Decision::Allowed, Instant::now());
        let held = format!("{:?}", cache.entries.iter().next().map(|(k, _)| k));
        assert!(!held.contains("secret"), "{held}");
        assert_ne!(fingerprint("a"), fingerprint("b"));
    }
}

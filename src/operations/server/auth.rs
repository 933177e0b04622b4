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
//!   `governor`), and at most [`PEER_REVIEWS_PER_SECOND`] (burst [`PEER_REVIEW_BURST`]) from any one
//!   peer address, checked first; beyond either a request is answered 503 at once, without asking.
//!   A flood of made-up tokens cannot be turned into load on the API server, and one Pod sending
//!   them spends its own share only: another peer's new token (a scraper's rotated token) is still
//!   reviewed;
//! - a token allowed before, whose allowance expired less than [`KNOWN_TTL`] ago, is reviewed again
//!   outside both limits: only a valid token gets there, so a scraper is never refused because
//!   someone else floods the port.
//!
//! A revoked binding therefore stops a scraper within [`ALLOWED_TTL`].

use governor::{DefaultDirectRateLimiter, DefaultKeyedRateLimiter, Quota, RateLimiter};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{
    NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};
use schnellru::{ByLength, LruMap};
use std::net::IpAddr;
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
/// New tokens reviewed per second from one peer address, and the burst above it.
pub const PEER_REVIEWS_PER_SECOND: u32 = 2;
pub const PEER_REVIEW_BURST: u32 = 5;
/// How long after its allowance expired a token is still known as a scraper's.
pub const KNOWN_TTL: Duration = Duration::from_secs(600);
/// Peers whose budget is tracked before the idle ones are forgotten.
const PEERS_TRACKED: usize = 4096;

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
    #[error(
        "more new tokens than {REVIEWS_PER_SECOND} per second, or {PEER_REVIEWS_PER_SECOND} from one peer: not reviewed"
    )]
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

/// What the cache knows of a token.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    Fresh(Decision),
    /// Allowed until lately: valid then, so its review is not held to the limits of new tokens.
    Known,
    Unknown,
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
        match self.lookup(token, now) {
            Lookup::Fresh(decision) => Some(decision),
            Lookup::Known | Lookup::Unknown => None,
        }
    }

    /// What is known of `token` at `now`. An allowance expired less than [`KNOWN_TTL`] ago is
    /// kept (as [`Lookup::Known`]); anything else expired is dropped.
    pub fn lookup(&mut self, token: &str, now: Instant) -> Lookup {
        let key = fingerprint(token);
        match self.entries.get(&key) {
            Some((decision, until)) if now < *until => Lookup::Fresh(*decision),
            Some((Decision::Allowed, until)) if now < *until + KNOWN_TTL => Lookup::Known,
            Some(_) => {
                self.entries.remove(&key);
                Lookup::Unknown
            }
            None => Lookup::Unknown,
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
    per_peer: DefaultKeyedRateLimiter<IpAddr>,
    deadline: Duration,
}

impl Authorizer {
    /// `deadline` bounds the wait for a review slot and the reviews together (the request timeout).
    pub fn new(client: kube::Client, deadline: Duration) -> Authorizer {
        Authorizer::with_limits(
            client,
            deadline,
            (REVIEWS_PER_SECOND, REVIEW_BURST),
            (PEER_REVIEWS_PER_SECOND, PEER_REVIEW_BURST),
        )
    }

    /// Limits as (per second, burst): of all new tokens, and of those from one peer.
    fn with_limits(
        client: kube::Client,
        deadline: Duration,
        all: (u32, u32),
        peer: (u32, u32),
    ) -> Authorizer {
        let quota = |(per_second, burst): (u32, u32)| {
            Quota::per_second(NonZeroU32::new(per_second).unwrap_or(NonZeroU32::MIN))
                .allow_burst(NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN))
        };
        Authorizer {
            client,
            cache: Mutex::new(Cache::new(CACHE_ENTRIES)),
            reviews: Semaphore::new(CONCURRENT_REVIEWS),
            new_tokens: RateLimiter::direct(quota(all)),
            per_peer: RateLimiter::keyed(quota(peer)),
            deadline,
        }
    }

    fn lookup(&self, token: &str) -> Lookup {
        self.cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .lookup(token, Instant::now())
    }

    fn cached(&self, token: &str) -> Option<Decision> {
        match self.lookup(token) {
            Lookup::Fresh(decision) => Some(decision),
            Lookup::Known | Lookup::Unknown => None,
        }
    }

    /// Whether a new token from `peer` may be reviewed now: the peer's share first, so that a
    /// peer over it spends nothing of the others'.
    fn admit_new(&self, peer: IpAddr) -> bool {
        if self.per_peer.len() > PEERS_TRACKED {
            self.per_peer.retain_recent();
        }
        self.per_peer.check_key(&peer).is_ok() && self.new_tokens.check().is_ok()
    }

    /// The decision for a request with this `Authorization` header (or none), from `peer`.
    pub async fn check(
        &self,
        header: Option<&http::HeaderValue>,
        peer: IpAddr,
    ) -> Result<Decision, ReviewError> {
        let Some(token) = header.and_then(|h| bearer(h.as_bytes())) else {
            return Ok(Decision::Unauthenticated);
        };
        match self.lookup(token) {
            Lookup::Fresh(decision) => return Ok(decision),
            Lookup::Known => {}
            Lookup::Unknown if self.admit_new(peer) => {}
            Lookup::Unknown => return Err(ReviewError::Throttled),
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
        assert_eq!(cache.lookup("good", t0 + ALLOWED_TTL), Lookup::Known);
        assert_eq!(cache.len(), 1, "expired refusals are dropped");
        assert_eq!(
            cache.lookup("good", t0 + ALLOWED_TTL + KNOWN_TTL),
            Lookup::Unknown
        );
        assert!(cache.is_empty(), "and allowances once no longer known");
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

    /// A client of an API server that is not there: nothing listens on port 1, so a review fails at
    /// once with a connection error (which shows that it was made).
    fn unreachable() -> kube::Client {
        let config = kube::Config::new("http://127.0.0.1:1".parse().expect("a URI"));
        kube::Client::try_from(config).expect("a client")
    }

    fn header(token: &str) -> http::HeaderValue {
        http::HeaderValue::from_str(&format!("Bearer {token}")).expect("header")
    }

    /// Past the limit of new tokens a request is refused without a review: the API server sees no
    /// more than the limit, whatever a flood of made-up tokens does.
    #[tokio::test]
    async fn new_tokens_beyond_the_limit_are_not_reviewed() {
        let auth = Authorizer::with_limits(unreachable(), Duration::from_secs(5), (1, 2), (1, 2));
        let (one, two) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
        for token in ["a", "b"] {
            let r = auth.check(Some(&header(token)), one).await;
            assert!(
                matches!(r, Err(ReviewError::Api(_))),
                "{token}: reviewed: {r:?}"
            );
        }
        let r = auth.check(Some(&header("c")), two).await;
        assert!(matches!(r, Err(ReviewError::Throttled)), "{r:?}");
        assert_eq!(
            auth.check(None, one).await.ok(),
            Some(Decision::Unauthenticated),
            "no token needs no review"
        );
    }

    /// One peer flooding made-up tokens spends its own share: another peer's new token is still
    /// reviewed, and a token allowed before is reviewed again whatever the limits say.
    #[tokio::test]
    async fn a_flooding_peer_spends_its_own_share_and_known_scrapers_none() {
        let auth = Authorizer::with_limits(unreachable(), Duration::from_secs(5), (1, 3), (1, 2));
        let (flood, prometheus) = (IpAddr::from([10, 0, 0, 9]), IpAddr::from([10, 0, 0, 2]));
        let mut throttled = 0;
        for i in 0..50 {
            let r = auth
                .check(Some(&header(&format!("made-up-{i}"))), flood)
                .await;
            throttled += usize::from(matches!(r, Err(ReviewError::Throttled)));
        }
        assert_eq!(
            throttled, 48,
            "the flooding peer got its burst of 2 reviews"
        );
        let r = auth.check(Some(&header("rotated")), prometheus).await;
        assert!(matches!(r, Err(ReviewError::Api(_))), "reviewed: {r:?}");
        // The global budget is spent now; a scraper's token allowed before is still reviewed.
        let past = Instant::now() - ALLOWED_TTL - Duration::from_secs(1);
        auth.cache.lock().unwrap_or_else(|e| e.into_inner()).put(
            "scraper",
            Decision::Allowed,
            past,
        );
        let r = auth.check(Some(&header("new")), prometheus).await;
        assert!(matches!(r, Err(ReviewError::Throttled)), "{r:?}");
        let r = auth.check(Some(&header("scraper")), prometheus).await;
        assert!(matches!(r, Err(ReviewError::Api(_))), "reviewed: {r:?}");
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

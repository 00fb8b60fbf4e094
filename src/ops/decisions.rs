//! Authorization decisions and a bounded cache of them, shared by the
//! `/metrics` gate ([`crate::ops::metrics_auth`]) and the instance gate
//! ([`crate::gate`]).
//!
//! Entries are keyed by a SHA-256 ([`CacheKey`]): of a bearer token
//! ([`token_key`]), never the token itself, or of whatever else names the
//! caller (the instance gate hashes a user and their groups).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use sha2::{Digest, Sha256};

/// The apiserver's answer for one caller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    Allowed,
    /// No such token, an expired one, or one for another audience.
    Unauthenticated,
    /// Authenticated, but not allowed what was asked.
    Forbidden,
}

impl Decision {
    /// The status a request with this decision is answered with.
    pub fn status(self) -> StatusCode {
        match self {
            Decision::Allowed => StatusCode::OK,
            Decision::Unauthenticated => StatusCode::UNAUTHORIZED,
            Decision::Forbidden => StatusCode::FORBIDDEN,
        }
    }
}

/// Longest one review (its API calls together) may take.
pub const REVIEW_TIMEOUT: Duration = Duration::from_secs(5);

/// The answer of `review`, or an error once [`REVIEW_TIMEOUT`] has passed
/// without one.
pub async fn within_timeout(review: impl Future<Output = Result<Decision, String>>) -> Result<Decision, String> {
    tokio::time::timeout(REVIEW_TIMEOUT, review)
        .await
        .unwrap_or_else(|_| Err(format!("no answer within {REVIEW_TIMEOUT:?}")))
}

/// What a decision is remembered by: a SHA-256.
pub type CacheKey = [u8; 32];

/// The SHA-256 of a token.
pub fn token_key(token: &str) -> CacheKey {
    Sha256::digest(token.as_bytes()).into()
}

// Not moka: an entry lives by its outcome (allowed and refused decisions
// have their own TTLs), and the clock is a parameter, so the tests prove
// expiry and the cap without sleeping; moka keeps its own clock and evicts
// in the background.
/// Decisions by key, each until it expires; at most `max` of them.
#[derive(Debug)]
pub struct DecisionCache {
    entries: HashMap<CacheKey, (Decision, Instant)>,
    max: usize,
    allowed_ttl: Duration,
    refused_ttl: Duration,
}

impl DecisionCache {
    /// At most `max` decisions: an allowed one kept for `allowed_ttl`, a
    /// refusal (unauthenticated or forbidden) for `refused_ttl`.
    pub fn new(max: usize, allowed_ttl: Duration, refused_ttl: Duration) -> Self {
        DecisionCache { entries: HashMap::new(), max, allowed_ttl, refused_ttl }
    }

    fn ttl(&self, decision: Decision) -> Duration {
        match decision {
            Decision::Allowed => self.allowed_ttl,
            Decision::Unauthenticated | Decision::Forbidden => self.refused_ttl,
        }
    }

    /// The decision for `key` if it has not expired at `now` (an expired one is forgotten).
    pub fn get(&mut self, key: &CacheKey, now: Instant) -> Option<Decision> {
        match self.entries.get(key) {
            Some((decision, expires)) if now < *expires => Some(*decision),
            Some(_) => {
                self.entries.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remembers `decision` from `now` for its time to live. When full, the
    /// expired entries go first, then the one that would expire soonest.
    pub fn insert(&mut self, key: CacheKey, decision: Decision, now: Instant) {
        let ttl = self.ttl(decision);
        if self.max == 0 || ttl.is_zero() {
            return;
        }
        if !self.entries.contains_key(&key) && self.entries.len() >= self.max {
            self.entries.retain(|_, (_, expires)| now < *expires);
            if self.entries.len() >= self.max {
                let soonest = self.entries.iter().min_by_key(|(_, (_, expires))| *expires).map(|(k, _)| *k);
                if let Some(k) = soonest {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(key, (decision, now + ttl));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// A [`DecisionCache`] shared by concurrent requests: the apiserver is
/// asked only for a key without a live decision.
#[derive(Debug)]
pub struct Decisions {
    cache: Mutex<DecisionCache>,
}

impl Decisions {
    pub fn new(cache: DecisionCache) -> Self {
        Decisions { cache: Mutex::new(cache) }
    }

    /// The live decision for `key`, else the one `review()` gives, which is
    /// remembered; a failed review is not (the next request asks again).
    /// `review` is not called when the cache answers.
    pub async fn decide<F>(&self, key: CacheKey, review: impl FnOnce() -> F) -> Result<Decision, String>
    where
        F: Future<Output = Result<Decision, String>>,
    {
        let cached = self.cache.lock().expect("lock").get(&key, Instant::now());
        if let Some(decision) = cached {
            return Ok(decision);
        }
        let decision = review().await?;
        self.cache.lock().expect("lock").insert(key, decision, Instant::now());
        Ok(decision)
    }

    /// Decisions remembered now (expired ones included until they are dropped).
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.cache.lock().expect("lock").len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALLOWED: Duration = Duration::from_secs(60);
    const REFUSED: Duration = Duration::from_secs(10);

    #[test]
    fn decisions_map_to_status_codes() {
        assert_eq!(Decision::Allowed.status(), StatusCode::OK);
        assert_eq!(Decision::Unauthenticated.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Decision::Forbidden.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn the_key_is_the_tokens_sha256_not_the_token() {
        let key = token_key("secret-token");
        assert_eq!(hex::encode(key), hex::encode(Sha256::digest(b"secret-token")));
        assert_ne!(token_key("secret-token"), token_key("secret-tokem"));
    }

    #[test]
    fn cached_decisions_expire_allowed_later_than_refused() {
        let mut cache = DecisionCache::new(8, ALLOWED, REFUSED);
        let t0 = Instant::now();
        let (yes, no) = (token_key("yes"), token_key("no"));
        cache.insert(yes, Decision::Allowed, t0);
        cache.insert(no, Decision::Forbidden, t0);
        let soon = t0 + REFUSED - Duration::from_millis(1);
        assert_eq!(cache.get(&yes, soon), Some(Decision::Allowed));
        assert_eq!(cache.get(&no, soon), Some(Decision::Forbidden));
        let later = t0 + REFUSED;
        assert_eq!(cache.get(&no, later), None, "a refusal is asked again after {REFUSED:?}");
        assert_eq!(cache.len(), 1, "the expired refusal is forgotten");
        assert_eq!(cache.get(&yes, t0 + ALLOWED - Duration::from_millis(1)), Some(Decision::Allowed));
        assert_eq!(cache.get(&yes, t0 + ALLOWED), None);
        assert!(cache.is_empty());
    }

    #[test]
    fn the_cache_is_bounded_dropping_expired_then_soonest_to_expire() {
        let t0 = Instant::now();
        let mut cache = DecisionCache::new(3, ALLOWED, REFUSED);
        cache.insert(token_key("refused"), Decision::Unauthenticated, t0);
        cache.insert(token_key("a"), Decision::Allowed, t0);
        cache.insert(token_key("b"), Decision::Allowed, t0 + Duration::from_secs(1));
        // Full: the refusal (expires first) makes room.
        cache.insert(token_key("c"), Decision::Allowed, t0 + Duration::from_secs(2));
        assert_eq!(cache.len(), 3);
        let now = t0 + Duration::from_secs(3);
        assert_eq!(cache.get(&token_key("refused"), now), None);
        assert_eq!(cache.get(&token_key("a"), now), Some(Decision::Allowed));
        // Full again: "a" expires soonest.
        cache.insert(token_key("d"), Decision::Allowed, now);
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.get(&token_key("a"), now), None);
        for k in ["b", "c", "d"] {
            assert_eq!(cache.get(&token_key(k), now), Some(Decision::Allowed), "{k}");
        }
        // Once all have expired, a new entry clears them out.
        let much_later = now + ALLOWED * 2;
        cache.insert(token_key("e"), Decision::Forbidden, much_later);
        assert_eq!(cache.len(), 1);
        // Re-deciding a known key replaces its entry without evicting another.
        let mut cache = DecisionCache::new(2, ALLOWED, REFUSED);
        cache.insert(token_key("x"), Decision::Forbidden, t0);
        cache.insert(token_key("y"), Decision::Allowed, t0);
        cache.insert(token_key("x"), Decision::Allowed, t0);
        assert_eq!(
            (cache.get(&token_key("x"), t0), cache.get(&token_key("y"), t0)),
            (Some(Decision::Allowed), Some(Decision::Allowed))
        );
        let mut none = DecisionCache::new(0, ALLOWED, REFUSED);
        none.insert(token_key("x"), Decision::Allowed, t0);
        assert!(none.is_empty());
    }

    #[test]
    fn a_zero_time_to_live_caches_nothing() {
        let t0 = Instant::now();
        let mut cache = DecisionCache::new(8, Duration::ZERO, Duration::ZERO);
        cache.insert(token_key("x"), Decision::Allowed, t0);
        cache.insert(token_key("y"), Decision::Forbidden, t0);
        assert!(cache.is_empty());
        assert_eq!(cache.get(&token_key("x"), t0), None);
    }

    #[tokio::test]
    async fn decide_asks_only_on_a_miss_and_forgets_failures() {
        let decisions = Decisions::new(DecisionCache::new(8, ALLOWED, REFUSED));
        let asked = std::sync::atomic::AtomicUsize::new(0);
        let review = |answer: Result<Decision, String>| {
            let asked = &asked;
            move || async move {
                asked.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                answer
            }
        };
        let key = token_key("k");
        assert_eq!(decisions.decide(key, review(Err("down".into()))).await, Err("down".into()));
        assert!(decisions.is_empty(), "a failure is not remembered");
        assert_eq!(decisions.decide(key, review(Ok(Decision::Forbidden))).await, Ok(Decision::Forbidden));
        assert_eq!(decisions.decide(key, review(Ok(Decision::Allowed))).await, Ok(Decision::Forbidden));
        assert_eq!(asked.load(std::sync::atomic::Ordering::Relaxed), 2, "the cached decision answered the third");
        assert_eq!(decisions.len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_review_without_an_answer_fails_after_the_timeout() {
        let started = tokio::time::Instant::now();
        let never = within_timeout(futures::future::pending()).await;
        assert!(never.unwrap_err().contains("no answer"));
        assert_eq!(started.elapsed(), REVIEW_TIMEOUT);
        assert_eq!(within_timeout(async { Ok(Decision::Allowed) }).await, Ok(Decision::Allowed));
    }
}

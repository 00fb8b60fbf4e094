//! Who may read `/metrics` (`--metrics-auth`).
//!
//! `rbac` (the default) does what controller-runtime's
//! `WithAuthenticationAndAuthorization` filter does: the caller's bearer
//! token is authenticated with a TokenReview and the user it names is
//! authorized with a SubjectAccessReview for the non-resource URL `/metrics`,
//! verb `get`. So a scraper needs a token of an identity bound to a role like
//! `config/prometheus/metrics_reader_role.yaml`, as for any other controller's
//! metrics.
//!
//! | request                                   | answer |
//! |-------------------------------------------|--------|
//! | no `Authorization: Bearer <token>` header | 401    |
//! | a token the apiserver does not accept     | 401    |
//! | an identity not allowed `get /metrics`    | 403    |
//! | an allowed identity                       | 200    |
//! | the reviews themselves failed             | 503    |
//!
//! Decisions are cached by the token's SHA-256 (never the token) for
//! [`ALLOWED_TTL`] (a refusal for [`REFUSED_TTL`], so a binding just made
//! takes effect soon) in a map of at most [`MAX_ENTRIES`] tokens: a
//! scraper costs two API calls a minute, not two per scrape. A failed review
//! is not cached.
//!
//! `none` serves `/metrics` to anyone who reaches the port (local
//! development and the benchmark).

use std::sync::Arc;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode, header};
use futures::future::BoxFuture;
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec};
use k8s_openapi::api::authorization::v1::{NonResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
use kube::api::PostParams;

pub use crate::ops::decisions::Decision;
use crate::ops::decisions::{DecisionCache, Decisions, token_key, within_timeout};
use crate::watch_scope::cluster_api;

/// `--metrics-auth`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum MetricsAuth {
    /// TokenReview + SubjectAccessReview (get on the non-resource URL /metrics).
    Rbac,
    /// No authentication: anyone reaching the port reads the metrics.
    None,
}

/// The path and verb a caller must be allowed.
pub const METRICS_PATH: &str = "/metrics";
pub const METRICS_VERB: &str = "get";

/// How long an allowed token is let in without asking the apiserver again.
pub const ALLOWED_TTL: Duration = Duration::from_secs(60);
/// How long a refused token (unauthenticated or forbidden) stays refused.
pub const REFUSED_TTL: Duration = Duration::from_secs(10);
/// Tokens remembered at once.
pub const MAX_ENTRIES: usize = 256;
/// Longest a token may be; longer is malformed (service account tokens are about 1 KiB).
pub const MAX_TOKEN_LEN: usize = 16 * 1024;

/// The bearer token of a request: exactly one `Authorization` header of the
/// form `Bearer <token>` (the scheme in any case), the token visible ASCII
/// without spaces and at most [`MAX_TOKEN_LEN`] long. `None` when missing or
/// malformed.
pub fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let mut values = headers.get_all(header::AUTHORIZATION).iter();
    let value = values.next()?;
    if values.next().is_some() {
        return None;
    }
    let value = value.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim_start();
    if !scheme.eq_ignore_ascii_case("bearer") || token.is_empty() || token.len() > MAX_TOKEN_LEN {
        return None;
    }
    token.bytes().all(|b| b.is_ascii_graphic()).then_some(token)
}

/// Asks who a token is and whether they may read the metrics.
pub trait Reviewer: Send + Sync {
    /// The decision for `token`, or why the apiserver could not be asked.
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>>;
}

/// The reviews through the Kubernetes API.
pub struct KubeReviewer {
    client: kube::Client,
}

impl KubeReviewer {
    pub fn new(client: kube::Client) -> Self {
        KubeReviewer { client }
    }

    async fn reviews(&self, token: &str) -> Result<Decision, String> {
        let review = TokenReview {
            spec: TokenReviewSpec { token: token.to_string(), ..Default::default() },
            ..Default::default()
        };
        let reviewed = cluster_api::<TokenReview>(&self.client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("TokenReview: {e}"))?;
        let status = reviewed.status.unwrap_or_default();
        let user = match status.user {
            Some(user) if status.authenticated == Some(true) => user,
            _ => {
                tracing::debug!(error = status.error.as_deref().unwrap_or(""), "/metrics: token not authenticated");
                return Ok(Decision::Unauthenticated);
            }
        };
        let access = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: user.username.clone(),
                groups: user.groups,
                uid: user.uid,
                extra: user.extra,
                non_resource_attributes: Some(NonResourceAttributes {
                    path: Some(METRICS_PATH.into()),
                    verb: Some(METRICS_VERB.into()),
                }),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = cluster_api::<SubjectAccessReview>(&self.client)
            .create(&PostParams::default(), &access)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        let status = reviewed.status.unwrap_or_default();
        let username = user.username.as_deref().unwrap_or("");
        if status.allowed {
            tracing::debug!(user = username, "/metrics: allowed");
            Ok(Decision::Allowed)
        } else {
            tracing::debug!(
                user = username,
                reason = status.reason.as_deref().unwrap_or(""),
                evaluation_error = status.evaluation_error.as_deref().unwrap_or(""),
                "/metrics: forbidden"
            );
            Ok(Decision::Forbidden)
        }
    }
}

impl Reviewer for KubeReviewer {
    fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(within_timeout(self.reviews(token)))
    }
}

/// The `/metrics` gate of `--metrics-auth rbac`.
pub struct Gate {
    reviewer: Arc<dyn Reviewer>,
    decisions: Decisions,
}

/// Whether a request is served, else its status and body.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    Serve,
    Refuse(StatusCode, &'static str),
}

impl Gate {
    pub fn new(reviewer: Arc<dyn Reviewer>) -> Self {
        Gate { reviewer, decisions: Decisions::new(DecisionCache::new(MAX_ENTRIES, ALLOWED_TTL, REFUSED_TTL)) }
    }

    /// The gate asking the apiserver `client` talks to.
    pub fn kube(client: kube::Client) -> Self {
        Gate::new(Arc::new(KubeReviewer::new(client)))
    }

    /// Checks a request's headers, from the cache when it can.
    pub async fn check(&self, headers: &HeaderMap) -> Verdict {
        let Some(token) = bearer_token(headers) else {
            return Verdict::Refuse(StatusCode::UNAUTHORIZED, "Unauthorized: send Authorization: Bearer <token>\n");
        };
        let decision = match self.decisions.decide(token_key(token), || self.reviewer.review(token)).await {
            Ok(decision) => decision,
            Err(e) => {
                tracing::warn!(error = %e, "/metrics: cannot review the caller's token");
                return Verdict::Refuse(StatusCode::SERVICE_UNAVAILABLE, "cannot review the token now\n");
            }
        };
        verdict(decision)
    }
}

/// The verdict for a decision.
pub fn verdict(decision: Decision) -> Verdict {
    match decision {
        Decision::Allowed => Verdict::Serve,
        Decision::Unauthenticated => Verdict::Refuse(decision.status(), "Unauthorized\n"),
        Decision::Forbidden => Verdict::Refuse(decision.status(), "Forbidden: not allowed get on /metrics\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::http::HeaderValue;

    fn headers(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn bearer_tokens_are_taken_from_one_well_formed_header() {
        assert_eq!(bearer_token(&headers(&["Bearer abc.def-ghi_jkl"])), Some("abc.def-ghi_jkl"));
        assert_eq!(bearer_token(&headers(&["bearer abc"])), Some("abc"), "the scheme is case-insensitive");
        assert_eq!(bearer_token(&headers(&["BEARER   abc  "])), Some("abc"));
        for malformed in [
            &[][..],
            &["Basic dXNlcjpwYXNz"],
            &["Bearer"],
            &["Bearer "],
            &["Bearerabc"],
            &["Bearer abc def"],
            &["Token abc"],
            &["Bearer a", "Bearer b"],
        ] {
            assert_eq!(bearer_token(&headers(malformed)), None, "{malformed:?}");
        }
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_LEN + 1));
        assert_eq!(bearer_token(&headers(&[&long])), None, "an overlong token");
        let mut h = HeaderMap::new();
        h.insert(header::AUTHORIZATION, HeaderValue::from_bytes(b"Bearer ab\xffc").unwrap());
        assert_eq!(bearer_token(&h), None, "a token of non-ASCII bytes");
    }

    #[test]
    fn verdicts_follow_decisions() {
        assert_eq!(verdict(Decision::Allowed), Verdict::Serve);
        assert!(matches!(verdict(Decision::Forbidden), Verdict::Refuse(StatusCode::FORBIDDEN, _)));
        assert!(matches!(verdict(Decision::Unauthenticated), Verdict::Refuse(StatusCode::UNAUTHORIZED, _)));
    }

    /// Answers from a fixed table and counts the reviews asked.
    struct Fake {
        calls: AtomicUsize,
        fail: bool,
    }

    impl Reviewer for Fake {
        fn review<'a>(&'a self, token: &'a str) -> BoxFuture<'a, Result<Decision, String>> {
            self.calls.fetch_add(1, Ordering::Relaxed);
            let answer = match token {
                _ if self.fail => Err("apiserver unreachable".to_string()),
                "reader" => Ok(Decision::Allowed),
                "stranger" => Ok(Decision::Forbidden),
                _ => Ok(Decision::Unauthenticated),
            };
            Box::pin(async move { answer })
        }
    }

    #[tokio::test]
    async fn the_gate_reviews_each_token_once_and_answers_by_decision() {
        let fake = Arc::new(Fake { calls: AtomicUsize::new(0), fail: false });
        let gate = Gate::new(fake.clone());
        assert!(matches!(gate.check(&headers(&[])).await, Verdict::Refuse(StatusCode::UNAUTHORIZED, _)));
        assert!(matches!(gate.check(&headers(&["Basic x"])).await, Verdict::Refuse(StatusCode::UNAUTHORIZED, _)));
        assert_eq!(fake.calls.load(Ordering::Relaxed), 0, "no review without a bearer token");
        for _ in 0..3 {
            assert_eq!(gate.check(&headers(&["Bearer reader"])).await, Verdict::Serve);
            assert!(matches!(
                gate.check(&headers(&["Bearer stranger"])).await,
                Verdict::Refuse(StatusCode::FORBIDDEN, _)
            ));
            assert!(matches!(
                gate.check(&headers(&["Bearer forged"])).await,
                Verdict::Refuse(StatusCode::UNAUTHORIZED, _)
            ));
        }
        assert_eq!(fake.calls.load(Ordering::Relaxed), 3, "one review per token, then the cache");
    }

    #[tokio::test]
    async fn a_failed_review_is_503_and_not_cached() {
        let fake = Arc::new(Fake { calls: AtomicUsize::new(0), fail: true });
        let gate = Gate::new(fake.clone());
        for _ in 0..2 {
            assert!(matches!(
                gate.check(&headers(&["Bearer reader"])).await,
                Verdict::Refuse(StatusCode::SERVICE_UNAVAILABLE, _)
            ));
        }
        assert_eq!(fake.calls.load(Ordering::Relaxed), 2, "a failure is asked again");
        assert!(gate.decisions.is_empty());
    }
}

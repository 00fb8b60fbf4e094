//! The reconcile's one error type. Its variant decides the requeue policy,
//! the status reason and the event reason.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

use crate::helm::HelmError;
use crate::reconcile::reason::Blocked;
use crate::reconcile::rules::InvalidSpec;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec breaks a rule: nothing is applied and nothing is retried until the spec changes.
    #[error("invalid spec: {0}")]
    InvalidSpec(#[from] InvalidSpec),

    /// Something outside the spec must be fixed first (namespace preparation, a
    /// missing Secret, SCC approval): re-checked on a slow timer.
    #[error("{message}")]
    Blocked { reason: Blocked, message: String },

    /// The API server failed or refused a call: retried with backoff. It
    /// says what the operator was doing (`during`), not only what failed.
    #[error("Kubernetes API call failed while the operator tried to {during}: {}", api_message(.source))]
    Kube { during: &'static str, source: kube::Error },

    /// Helm failed: retried with backoff.
    #[error(transparent)]
    Helm(#[from] HelmError),

    /// Helm failed as often as the retry budget allows for this rendering: no
    /// more helm runs until the spec, the chart or the reconcile request changes.
    #[error("{0}")]
    Stalled(String),
}

/// Says what a failed API call was for: `result.during("apply the SCC grant")?`.
pub trait During<T> {
    fn during(self, what: &'static str) -> Result<T, Error>;
}

impl<T> During<T> for Result<T, kube::Error> {
    fn during(self, what: &'static str) -> Result<T, Error> {
        self.map_err(|source| Error::Kube { during: what, source })
    }
}

/// The apiserver's own message (what was refused and why), not the debug dump.
fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// What the controller does after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Only a spec change helps.
    OnChange,
    /// Re-check after the settings' blocked delay.
    Slowly,
    /// Exponential backoff.
    Backoff,
}

impl Error {
    pub fn blocked(reason: Blocked, message: impl Into<String>) -> Self {
        Error::Blocked { reason, message: message.into() }
    }

    /// CamelCase reason for the Ready condition, events and metrics.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::InvalidSpec(_) => "InvalidSpec",
            Error::Blocked { reason, .. } => reason.as_str(),
            Error::Kube { .. } => "KubernetesApiError",
            Error::Helm(_) => "HelmFailed",
            Error::Stalled(_) => "RetriesExhausted",
        }
    }

    /// The condition type besides Ready this error sets False, if any.
    pub fn condition_type(&self) -> Option<&'static str> {
        match self {
            Error::Blocked { reason, .. } if reason.condition_type() != crate::reconcile::condition_types::READY => {
                Some(reason.condition_type())
            }
            _ => None,
        }
    }

    pub fn retry(&self) -> Retry {
        match self {
            Error::InvalidSpec(_) | Error::Stalled(_) => Retry::OnChange,
            Error::Blocked { .. } => Retry::Slowly,
            Error::Kube { .. } | Error::Helm(_) => Retry::Backoff,
        }
    }
}

/// Backoff after `failures` consecutive transient errors: 5 s doubling to
/// 5 min, each delay drawn between half of it and all of it. Without the
/// jitter, instances that failed together (an apiserver outage) retry
/// together, in lock-step, at every step.
pub fn backoff(failures: u32) -> Duration {
    ExponentialBuilder::default()
        .with_min_delay(Duration::from_millis(2500))
        .with_max_delay(Duration::from_secs(150))
        .with_factor(2.0)
        // backon's jitter adds up to the delay itself: [d, 2d).
        .with_jitter()
        .without_max_times()
        .build()
        .nth(failures.min(7) as usize)
        .unwrap_or(Duration::from_secs(300))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps_within_its_jitter() {
        for (failures, full) in [(0, 5.0), (1, 10.0), (5, 160.0), (6, 300.0), (60, 300.0)] {
            for _ in 0..200 {
                let d = backoff(failures).as_secs_f64();
                assert!(
                    (full / 2.0..full).contains(&d),
                    "after {failures} failures: {d} s, not in [{}, {full})",
                    full / 2.0
                );
            }
        }
    }

    /// A thousand instances that failed together do not retry together: their
    /// delays spread over the jitter's range, at the first step and the last.
    #[test]
    fn instances_failing_together_spread_their_retries() {
        for (failures, half) in [(0u32, 2.5), (6, 150.0)] {
            let mut delays: Vec<f64> = (0..1000).map(|_| backoff(failures).as_secs_f64()).collect();
            delays.sort_by(f64::total_cmp);
            let (p10, p90) = (delays[100], delays[900]);
            assert!(p90 - p10 > half * 0.6, "after {failures} failures: p10 {p10} s, p90 {p90} s: no spread");
            // In any tenth of the range, about a tenth of the retries.
            for k in 0..10 {
                let lo = half + half * k as f64 / 10.0;
                let n = delays.iter().filter(|d| (lo..lo + half / 10.0).contains(*d)).count();
                assert!((50..=150).contains(&n), "after {failures} failures: {n} of 1000 in [{lo}, +{})", half / 10.0);
            }
        }
    }

    #[test]
    fn variants_drive_the_retry_policy() {
        let invalid = Error::InvalidSpec(InvalidSpec(vec![]));
        assert_eq!((invalid.retry(), invalid.reason()), (Retry::OnChange, "InvalidSpec"));
        let blocked = Error::blocked(Blocked::PasswordSecretMissing, "create it");
        assert_eq!(
            (blocked.retry(), blocked.reason(), blocked.to_string().as_str()),
            (Retry::Slowly, "PasswordSecretMissing", "create it")
        );
        let helm = Error::Helm(HelmError::Failed { action: "upgrade", stderr: "boom".into() });
        assert_eq!((helm.retry(), helm.reason()), (Retry::Backoff, "HelmFailed"));
    }

    #[test]
    fn an_api_error_says_what_the_operator_was_doing() {
        let refused = kube::core::Status::failure("rolebindings is forbidden", "Forbidden").with_code(403);
        let failed: Result<(), kube::Error> = Err(kube::Error::Api(Box::new(refused)));
        let e = failed.during("apply the SCC grant").unwrap_err();
        assert!(matches!(e, Error::Kube { during: "apply the SCC grant", .. }));
        assert_eq!((e.retry(), e.reason()), (Retry::Backoff, "KubernetesApiError"));
        assert_eq!(
            e.to_string(),
            "Kubernetes API call failed while the operator tried to apply the SCC grant: rolebindings is forbidden (403)"
        );
    }
}

//! Leader election on a `coordination.k8s.io` Lease in the operator's
//! namespace, so two replicas never reconcile at once.
//!
//! No clock is shared between replicas: every decision is taken on the
//! deciding replica's own monotonic clock, never by comparing the Lease's
//! `renewTime` (another machine's wall clock) with the local one.
//!
//! * A standby remembers when it last *observed* the Lease change (its
//!   `resourceVersion`, holder or `renewTime`), and takes over only once the
//!   Lease has stayed unchanged for a whole lease duration (the longer of its
//!   own and the one the Lease states) since that observation. A released
//!   Lease (no holder) is taken at once.
//! * The leader renews every retry period. Its term ends a renew deadline
//!   after the *start* of its last successful renewal (the write landed
//!   after that instant, so a standby saw it no earlier). Each attempt is cut
//!   off at half the renew deadline and never outlives the deadline, so a
//!   hung connection cannot stall it. When the deadline passes without a
//!   renewal, or another replica holds the Lease, [`Elector::lead`] drops the
//!   work it was given (the controller: its reconcile tasks are aborted and a
//!   running helm is killed) and reports the loss; the process then exits
//!   non-zero and its Deployment restarts it as a standby.
//!
//! Because the renew deadline is strictly shorter than the lease duration,
//! the old leader has stopped before a standby can take over, as long as the
//! two machines' clocks run at about the same *rate* (their readings may
//! differ arbitrarily). Defaults (flags in [`crate::cli`]): lease duration
//! 15 s, renew deadline 10 s (two thirds of the lease), retry period 2 s (two
//! fifteenths); the leader gives up at least 5 s before a standby can take over.
//!
//! All writes are compare-and-swap on the `resourceVersion`: of two racing
//! replicas one gets a conflict. On an orderly shutdown (after the work has
//! stopped) the Lease is released so a standby starts at once. Deleting the
//! Lease by hand lets a standby create it at once, while the leader notices
//! only at its next renewal (within a retry period).

use std::future::Future;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::Client;
use kube::api::{Api, PostParams};
use tokio::time::Instant;

/// Name of the Lease.
pub const LEASE_NAME: &str = "tinycode-operator-leader";

/// How long a lease lasts and how the leader keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timings {
    /// A standby takes over once the Lease stayed unchanged this long (on its clock).
    pub lease_duration: Duration,
    /// The leader stops when no renewal succeeded for this long (on its clock).
    pub renew_deadline: Duration,
    /// Pause between two renewals (leader) or two attempts to take over (standby).
    pub retry_period: Duration,
}

impl Default for Timings {
    fn default() -> Self {
        Self::for_lease(crate::settings::DEFAULT_LEASE_DURATION)
    }
}

impl Timings {
    /// A lease duration with its usual companions: a renew deadline of two
    /// thirds of it and a retry period of two fifteenths (15 s: 10 s and 2 s).
    pub fn for_lease(lease_duration: Duration) -> Self {
        Self { lease_duration, renew_deadline: lease_duration * 2 / 3, retry_period: lease_duration * 2 / 15 }
    }

    /// Checked timings: retry period < renew deadline < lease duration.
    pub fn new(lease_duration: Duration, renew_deadline: Duration, retry_period: Duration) -> Result<Self, String> {
        if retry_period.is_zero() {
            return Err("the leader election retry period must be positive".into());
        }
        if renew_deadline >= lease_duration {
            return Err(format!(
                "the renew deadline ({renew_deadline:?}) must be shorter than the lease duration ({lease_duration:?})"
            ));
        }
        if retry_period >= renew_deadline {
            return Err(format!(
                "the retry period ({retry_period:?}) must be shorter than the renew deadline ({renew_deadline:?})"
            ));
        }
        Ok(Self { lease_duration, renew_deadline, retry_period })
    }

    /// Longest single attempt (a GET and a write).
    fn attempt_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }

    /// The lease duration written into the Lease, in whole seconds (rounded up).
    fn lease_seconds(&self) -> i32 {
        let secs = self.lease_duration.as_secs() + u64::from(self.lease_duration.subsec_nanos() > 0);
        secs.clamp(1, i32::MAX as u64) as i32
    }
}

/// Why a leader stopped leading.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Lost {
    /// Another replica holds the Lease (`None`: the Lease is gone or was released).
    TakenOver(Option<String>),
    /// No renewal succeeded within the renew deadline.
    RenewDeadline(Duration),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::TakenOver(Some(h)) => write!(f, "replica {h} holds the leader lease"),
            Lost::TakenOver(None) => write!(f, "the leader lease was deleted or released by someone else"),
            Lost::RenewDeadline(d) => write!(f, "the leader lease was not renewed within the renew deadline ({d:?})"),
        }
    }
}

/// The last state of the Lease a standby saw, and when it first saw it (its own clock).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    key: String,
    since: Instant,
}

impl Observed {
    /// Folds in a reading taken at `now`: `since` moves only when the Lease changed.
    pub fn update(previous: Option<Observed>, key: String, now: Instant) -> Observed {
        match previous {
            Some(p) if p.key == key => p,
            _ => Observed { key, since: now },
        }
    }

    pub fn unchanged_for(&self, now: Instant) -> Duration {
        now.saturating_duration_since(self.since)
    }
}

/// What identifies one state of the Lease: any write changes its resourceVersion.
fn lease_key(lease: &Lease) -> String {
    let spec = lease.spec.as_ref();
    format!(
        "{:?}|{:?}|{:?}",
        lease.metadata.resource_version,
        spec.and_then(|s| s.holder_identity.as_deref()),
        spec.and_then(|s| s.renew_time.as_ref()).map(|t| t.0),
    )
}

/// Whether `me` may take a Lease held by `holder` that has not changed for
/// `unchanged_for` on the local clock; `lease` is how long a holder may go
/// without renewing.
pub fn may_take(holder: Option<&str>, me: &str, unchanged_for: Duration, lease: Duration) -> bool {
    match holder {
        None | Some("") => true,
        Some(h) if h == me => true,
        Some(_) => unchanged_for >= lease,
    }
}

/// Outcome of one renewal attempt.
enum Renewal {
    Renewed,
    /// Someone wrote the Lease between our read and our write: try again.
    Conflict,
    Lost(Option<String>),
}

pub struct Elector {
    api: Api<Lease>,
    identity: String,
    timings: Timings,
    observed: Mutex<Option<Observed>>,
}

impl Elector {
    pub fn new(client: Client, namespace: &str, identity: String, timings: Timings) -> Self {
        Self { api: Api::namespaced(client, namespace), identity, timings, observed: Mutex::new(None) }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    pub fn timings(&self) -> Timings {
        self.timings
    }

    /// Waits until this replica holds the Lease. Returns when the winning
    /// request was sent: the leader's term counts from there.
    pub async fn acquire(&self) -> Instant {
        let mut standing_by = false;
        loop {
            let sent = Instant::now();
            match tokio::time::timeout(self.timings.attempt_timeout(), self.try_acquire()).await {
                Ok(Ok(true)) => return sent,
                Ok(Ok(false)) if !standing_by => {
                    tracing::info!(identity = %self.identity, lease = LEASE_NAME, "standing by: another replica is the leader");
                    standing_by = true;
                }
                Ok(Ok(false)) => {}
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot read or take the leader lease"),
                Err(_) => tracing::warn!("reading or taking the leader lease timed out"),
            }
            tokio::time::sleep(self.timings.retry_period).await;
        }
    }

    /// One attempt to take (or keep) the Lease; false while another replica
    /// holds it and has not been seen to stop renewing it for a lease duration.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            let lease = Lease {
                metadata: ObjectMeta { name: Some(LEASE_NAME.into()), ..Default::default() },
                spec: Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(self.timings.lease_seconds()),
                    acquire_time: Some(MicroTime(Timestamp::now())),
                    renew_time: Some(MicroTime(Timestamp::now())),
                    lease_transitions: Some(0),
                    ..Default::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let now = Instant::now();
        let observed = {
            let mut slot = self.observed.lock().expect("lock");
            let o = Observed::update(slot.take(), lease_key(&lease), now);
            *slot = Some(o.clone());
            o
        };
        let spec = lease.spec.take().unwrap_or_default();
        let stated = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let lease_duration = self.timings.lease_duration.max(stated);
        let holder = spec.holder_identity.clone();
        if !may_take(holder.as_deref(), &self.identity, observed.unchanged_for(now), lease_duration) {
            return Ok(false);
        }
        let taking_over = holder.as_deref() != Some(self.identity.as_str());
        if taking_over {
            tracing::info!(previous = holder.as_deref().unwrap_or(""), "taking over the leader lease");
        }
        lease.spec = Some(self.renewed_spec(spec, taking_over));
        // The resourceVersion read above makes this a compare-and-swap.
        match self.api.replace(LEASE_NAME, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn renewed_spec(&self, spec: LeaseSpec, taking_over: bool) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let mut new = spec.clone();
        new.holder_identity = Some(self.identity.clone());
        new.lease_duration_seconds = Some(self.timings.lease_seconds());
        new.renew_time = Some(now.clone());
        if taking_over {
            new.acquire_time = Some(now);
            new.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        new
    }

    /// The leader's renewal; unlike [`Elector::try_acquire`] it never takes the Lease from another holder.
    async fn renew(&self) -> Result<Renewal, kube::Error> {
        let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? else {
            return Ok(Renewal::Lost(None));
        };
        let spec = lease.spec.take().unwrap_or_default();
        if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
            return Ok(Renewal::Lost(spec.holder_identity.filter(|h| !h.is_empty())));
        }
        lease.spec = Some(self.renewed_spec(spec, false));
        match self.api.replace(LEASE_NAME, &PostParams::default(), &lease).await {
            Ok(_) => Ok(Renewal::Renewed),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Renewal::Conflict),
            Err(e) => Err(e),
        }
    }

    /// Renews the Lease until leadership is lost; `renewed` is when the
    /// request that acquired it was sent (from [`Elector::acquire`]).
    pub async fn hold(&self, mut renewed: Instant) -> Lost {
        let t = self.timings;
        loop {
            let deadline = renewed + t.renew_deadline;
            tokio::time::sleep_until(deadline.min(Instant::now() + t.retry_period)).await;
            let sent = Instant::now();
            if sent >= deadline {
                return Lost::RenewDeadline(t.renew_deadline);
            }
            match tokio::time::timeout_at(deadline.min(sent + t.attempt_timeout()), self.renew()).await {
                Ok(Ok(Renewal::Renewed)) => renewed = sent,
                Ok(Ok(Renewal::Conflict)) => tracing::info!("the leader lease changed while renewing it; trying again"),
                Ok(Ok(Renewal::Lost(holder))) => return Lost::TakenOver(holder),
                Ok(Err(e)) => tracing::warn!(error = %e, "could not renew the leader lease"),
                Err(_) => tracing::warn!("renewing the leader lease timed out"),
            }
        }
    }

    /// Runs `work` while renewing the Lease. When leadership is lost first,
    /// `work` is dropped (cancelled) before this returns the loss.
    pub async fn lead<F: Future>(&self, renewed: Instant, work: F) -> Result<F::Output, Lost> {
        tokio::select! {
            biased;
            lost = self.hold(renewed) => Err(lost),
            out = work => Ok(out),
        }
    }

    /// Gives the Lease up so a standby takes over at once. Call only after
    /// the work stopped.
    pub async fn release(&self) {
        let result = async {
            if let Some(mut lease) = self.api.get_opt(LEASE_NAME).await? {
                let mut spec = lease.spec.clone().unwrap_or_default();
                if spec.holder_identity.as_deref() == Some(self.identity.as_str()) {
                    spec.holder_identity = None;
                    spec.renew_time = None;
                    lease.spec = Some(spec);
                    self.api.replace(LEASE_NAME, &PostParams::default(), &lease).await?;
                }
            }
            Ok::<_, kube::Error>(())
        };
        match tokio::time::timeout(self.timings.renew_deadline, result).await {
            Ok(Ok(())) => tracing::info!(identity = %self.identity, "released the leader lease"),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "could not release the leader lease; a successor waits for it to expire")
            }
            Err(_) => tracing::warn!("releasing the leader lease timed out; a successor waits for it to expire"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn lease_rules() {
        let lease = 15 * S;
        assert!(may_take(None, "a", Duration::ZERO, lease), "free lease");
        assert!(may_take(Some(""), "a", Duration::ZERO, lease), "released lease");
        assert!(may_take(Some("a"), "a", Duration::ZERO, lease), "own lease");
        assert!(!may_take(Some("b"), "a", 14 * S, lease), "foreign lease seen changing recently");
        assert!(may_take(Some("b"), "a", 15 * S, lease), "unchanged for a whole lease duration");
    }

    #[test]
    fn only_a_change_restarts_the_wait() {
        let t0 = Instant::now();
        let first = Observed::update(None, "rv1".into(), t0);
        let same = Observed::update(Some(first.clone()), "rv1".into(), t0 + 10 * S);
        assert_eq!(same, first, "an unchanged lease keeps its first sighting");
        assert_eq!(same.unchanged_for(t0 + 10 * S), 10 * S);
        let changed = Observed::update(Some(same), "rv2".into(), t0 + 12 * S);
        assert_eq!(changed.unchanged_for(t0 + 12 * S), Duration::ZERO, "a renewal restarts the wait");
        assert_eq!(changed.unchanged_for(t0), Duration::ZERO, "never negative");
    }

    #[test]
    fn the_lease_key_covers_version_holder_and_renewal() {
        let mut lease = Lease {
            metadata: ObjectMeta { resource_version: Some("7".into()), ..Default::default() },
            spec: Some(LeaseSpec { holder_identity: Some("b".into()), ..Default::default() }),
        };
        let k = lease_key(&lease);
        lease.metadata.resource_version = Some("8".into());
        assert_ne!(lease_key(&lease), k);
        let k = lease_key(&lease);
        lease.spec.as_mut().unwrap().holder_identity = Some("c".into());
        assert_ne!(lease_key(&lease), k);
    }

    #[test]
    fn timings_keep_the_deadline_inside_the_lease() {
        assert!(Timings::new(15 * S, 10 * S, 2 * S).is_ok());
        assert_eq!(Timings::new(15 * S, 10 * S, 2 * S).unwrap(), Timings::default());
        let six = Timings::for_lease(6 * S);
        assert_eq!((six.renew_deadline, six.retry_period), (4 * S, Duration::from_millis(800)));
        assert!(Timings::new(six.lease_duration, six.renew_deadline, six.retry_period).is_ok());
        assert!(Timings::new(10 * S, 10 * S, 2 * S).is_err(), "deadline equal to the lease");
        assert!(Timings::new(10 * S, 12 * S, 2 * S).is_err(), "deadline longer than the lease");
        assert!(Timings::new(15 * S, 10 * S, 10 * S).is_err(), "retry as long as the deadline");
        assert!(Timings::new(15 * S, 10 * S, Duration::ZERO).is_err());
        let t = Timings::new(Duration::from_millis(3500), 2 * S, S / 2).unwrap();
        assert_eq!(t.lease_seconds(), 4, "rounded up into the Lease");
        assert_eq!(t.attempt_timeout(), S);
    }
}

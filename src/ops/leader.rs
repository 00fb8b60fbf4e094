//! Leader election on a `coordination.k8s.io` Lease in the operator's
//! namespace, so two replicas never reconcile at once. The holder renews the
//! lease; others stand by and take it over once it has not been renewed for a
//! lease duration. The lease is released on shutdown so a successor starts at once.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::Client;
use kube::api::{Api, PostParams};

/// Name of the Lease.
pub const LEASE_NAME: &str = "tinycode-operator-leader";

#[derive(Clone, Debug)]
pub struct Elector {
    api: Api<Lease>,
    identity: String,
    lease_duration: Duration,
}

/// Whether `me` may take or keep a lease held by `holder`, last renewed at `renewed`.
pub fn may_hold(
    holder: Option<&str>,
    renewed: Option<Timestamp>,
    duration_secs: i32,
    me: &str,
    now: Timestamp,
) -> bool {
    match holder {
        None | Some("") => true,
        Some(h) if h == me => true,
        Some(_) => match renewed {
            None => true,
            Some(r) => r + SignedDuration::from_secs(i64::from(duration_secs.max(1))) < now,
        },
    }
}

impl Elector {
    pub fn new(client: Client, namespace: &str, identity: String, lease_duration: Duration) -> Self {
        Self { api: Api::namespaced(client, namespace), identity, lease_duration }
    }

    pub fn identity(&self) -> &str {
        &self.identity
    }

    /// Takes or renews the lease; false when someone else holds it.
    pub async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let secs = self.lease_duration.as_secs().clamp(1, i32::MAX as u64) as i32;
        match self.api.get_opt(LEASE_NAME).await? {
            None => {
                let lease = Lease {
                    metadata: ObjectMeta { name: Some(LEASE_NAME.into()), ..Default::default() },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let holder = spec.holder_identity.as_deref();
                let renewed = spec.renew_time.as_ref().map(|t| t.0);
                if !may_hold(holder, renewed, spec.lease_duration_seconds.unwrap_or(secs), &self.identity, now) {
                    return Ok(false);
                }
                let taking_over = holder != Some(self.identity.as_str());
                let mut new_spec = spec.clone();
                new_spec.holder_identity = Some(self.identity.clone());
                new_spec.lease_duration_seconds = Some(secs);
                new_spec.renew_time = Some(MicroTime(now));
                if taking_over {
                    new_spec.acquire_time = Some(MicroTime(now));
                    new_spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
                }
                lease.spec = Some(new_spec);
                // The resourceVersion makes this a compare-and-swap: of two racing replicas one gets 409.
                match self.api.replace(LEASE_NAME, &PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Renews until the lease is lost (a renewal failed for a whole lease
    /// duration, or someone else holds it); then returns.
    pub async fn hold(&self) {
        let renew_every = self.lease_duration / 3;
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::time::sleep(renew_every).await;
            match self.try_acquire().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!(identity = %self.identity, "another replica took the leader lease");
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "could not renew the leader lease");
                    if last_ok.elapsed() >= self.lease_duration {
                        tracing::error!("leader lease expired without renewal");
                        return;
                    }
                }
            }
        }
    }

    /// Gives the lease up so a standby replica takes over at once.
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
        }
        .await;
        match result {
            Ok(()) => tracing::info!(identity = %self.identity, "released the leader lease"),
            Err(e) => {
                tracing::warn!(error = %e, "could not release the leader lease; a successor waits for it to expire")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(s).unwrap()
    }

    #[test]
    fn lease_rules() {
        assert!(may_hold(None, None, 15, "a", t(100)), "free lease");
        assert!(may_hold(Some(""), Some(t(99)), 15, "a", t(100)), "released lease");
        assert!(may_hold(Some("a"), Some(t(99)), 15, "a", t(100)), "own lease");
        assert!(!may_hold(Some("b"), Some(t(90)), 15, "a", t(100)), "fresh foreign lease");
        assert!(!may_hold(Some("b"), Some(t(85)), 15, "a", t(100)), "expires only after the full duration");
        assert!(may_hold(Some("b"), Some(t(84)), 15, "a", t(100)), "expired foreign lease");
    }
}

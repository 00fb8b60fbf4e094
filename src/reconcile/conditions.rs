//! Status of a `TinycodeInstance` (pure): conditions that keep their
//! transition time unless their status flips, and the phase/Ready decision
//! from what the cluster reports.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{Condition, Phase, TinycodeInstance, TinycodeInstanceStatus};
use crate::reconcile::diagnose::Reason;

pub use crate::reconcile::condition_types::{
    CLUSTER_ADMIN_READY, INGRESS_READY, READY, RECONCILING, STALLED, VLLM_CONFIG_READY, VLLM_WARNING,
};
/// Annotation whose changed value asks for one full reconcile, helm included.
pub const RECONCILE_REQUEST_ANNOTATION: &str = "tinycode.dev/reconcile-requested-at";

/// The value of the reconcile-request annotation, if set.
pub fn reconcile_request(inst: &TinycodeInstance) -> Option<String> {
    inst.metadata.annotations.as_ref().and_then(|a| a.get(RECONCILE_REQUEST_ANNOTATION)).cloned()
}

/// A condition as the reconcile wants it, before transition times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Desired {
    pub type_: &'static str,
    pub status: bool,
    pub reason: String,
    pub message: String,
}

impl Desired {
    pub fn new(type_: &'static str, status: bool, reason: impl Into<String>, message: impl Into<String>) -> Self {
        Self { type_, status, reason: reason.into(), message: message.into() }
    }
}

/// VllmConfigReady and VllmWarning from what the probes found.
pub fn vllm(summary: &crate::vllm::Summary) -> Vec<Desired> {
    let as_condition = |type_, f: &crate::vllm::Finding| Desired::new(type_, f.holds, f.reason, f.message.clone());
    summary
        .config_ready
        .iter()
        .map(|f| as_condition(VLLM_CONFIG_READY, f))
        .chain(summary.warning.iter().map(|f| as_condition(VLLM_WARNING, f)))
        .collect()
}

/// Merges desired conditions into the previous ones. `lastTransitionTime`
/// moves only when a condition's status changes; conditions of types not
/// desired any more (say VllmConfigReady once vllm is removed) are dropped.
pub fn merge_conditions(
    previous: &[Condition],
    desired: &[Desired],
    now: &str,
    generation: Option<i64>,
) -> Vec<Condition> {
    desired
        .iter()
        .map(|d| {
            let status = if d.status { "True" } else { "False" }.to_string();
            let last_transition_time = previous
                .iter()
                .find(|c| c.type_ == d.type_ && c.status == status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| time(now));
            Condition {
                type_: d.type_.to_string(),
                status,
                reason: d.reason.clone(),
                message: d.message.clone(),
                last_transition_time,
                observed_generation: generation,
            }
        })
        .collect()
}

/// An RFC 3339 time as a condition time (the epoch for anything else).
pub fn time(rfc3339: &str) -> Time {
    Time(rfc3339.parse().unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH))
}

/// What the cluster says about the workload (Deployment and exposure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Workload {
    /// Deployment replicas wanted.
    pub desired_replicas: i32,
    /// Deployment `status.availableReplicas`.
    pub available_replicas: i32,
    /// Deployment `status.updatedReplicas`.
    pub updated_replicas: i32,
    /// Deployment status reflects its current spec.
    pub deployment_current: bool,
    /// Host the router admitted the Route under, if it has.
    pub admitted_host: Option<String>,
    /// The Route terminates TLS.
    pub tls: bool,
    /// What exposes the instance: "Route" or "Ingress".
    pub exposure: &'static str,
    /// spec.stopped: the workloads run zero replicas on purpose.
    pub stopped: bool,
    /// Stopped for idleness (not by spec.stopped): how to start it again.
    pub idle_message: Option<String>,
    /// Why the rollout does not finish, when the pods say.
    pub diagnosis: Option<crate::reconcile::diagnose::Diagnosis>,
    /// The bundled Ollama, when the spec asks for one and the workloads run:
    /// whether it is rolled out (Ready: serving, every model pulled).
    pub ollama_ready: Option<bool>,
    /// The front, when the instance has one and the workloads run: whether
    /// it is rolled out.
    pub front_ready: Option<bool>,
    /// The egress proxy, when the class limits egress and the workloads
    /// run: whether it is rolled out.
    pub egress_ready: Option<bool>,
}

/// Phase, URL and Ready condition for a successfully applied instance.
pub fn workload_status(observed: &Workload, warnings: &[String]) -> (Phase, Option<String>, Desired) {
    let url = observed.admitted_host.as_ref().map(|h| format!("{}://{h}", if observed.tls { "https" } else { "http" }));
    if let (true, Some(message)) = (observed.stopped, &observed.idle_message) {
        return (Phase::Stopped, url, Desired::new(READY, false, "Idle", message.clone()));
    }
    if observed.stopped {
        let message = "spec.stopped is true: tinycode (and a bundled Ollama) are scaled to zero; the data volumes, Secrets, the Route or Ingress and the release are kept (status.url is where it will be, and with sign-in its front says there that the instance is stopped); set it to false to start again";
        return (Phase::Stopped, url, Desired::new(READY, false, "Stopped", message));
    }
    let rollout_done = observed.deployment_current
        && observed.updated_replicas >= observed.desired_replicas
        && observed.available_replicas >= observed.desired_replicas;
    let ollama_waiting = observed.ollama_ready == Some(false);
    let front_waiting = observed.front_ready == Some(false);
    let egress_waiting = observed.egress_ready == Some(false);
    if !rollout_done || ollama_waiting || front_waiting || egress_waiting {
        if let Some(d) = &observed.diagnosis {
            // Past the Deployment's progress deadline the rollout is Stalled,
            // and a Stalled instance is Failed (as after exhausted helm retries).
            let phase = if d.stalled { Phase::Failed } else { Phase::Deploying };
            return (phase, url, Desired::new(READY, false, d.reason.as_str(), d.message.clone()));
        }
        // Routes are OpenShift's, whose CLI is oc.
        let cli = if observed.exposure == "Route" { "oc" } else { "kubectl" };
        if !rollout_done {
            let msg = format!(
                "waiting for the Deployment: {}/{} replicas available and updated; see `{cli} get pods -l app.kubernetes.io/component=server` for pods that do not start",
                observed.available_replicas.min(observed.updated_replicas),
                observed.desired_replicas
            );
            return (Phase::Deploying, url, Desired::new(READY, false, "Deploying", msg));
        }
        if front_waiting {
            let msg = format!(
                "tinycode is up; waiting for its front (the gate, with the sign-in proxy in the sign-in modes, which answers the URL); see `{cli} get pods -l app.kubernetes.io/component=front` for pods that do not start"
            );
            return (Phase::Deploying, url, Desired::new(READY, false, "Deploying", msg));
        }
        if egress_waiting {
            let msg = format!(
                "tinycode is up; waiting for its egress proxy (its class limits egress, and the proxy is the agent's only way out); see `{cli} get pods -l app.kubernetes.io/component=egress` for pods that do not start"
            );
            return (Phase::Deploying, url, Desired::new(READY, false, "Deploying", msg));
        }
        let msg = format!(
            "tinycode is up; waiting for the bundled Ollama to answer and to pull every model in spec.ollama.models (its pod is Ready once they are); see `{cli} logs -l app.kubernetes.io/component=ollama`"
        );
        return (Phase::Deploying, url, Desired::new(READY, false, Reason::OllamaNotReady.as_str(), msg));
    }
    let mut message = match &url {
        Some(u) => format!("tinycode is available at {u}"),
        None if observed.exposure == "Ingress" => {
            "tinycode is available; it has no URL yet (see the IngressReady condition)".to_string()
        }
        None => "tinycode is available; the Route has not been admitted by a router yet, so it has no URL".to_string(),
    };
    for w in warnings {
        message.push_str("; warning: ");
        message.push_str(w);
    }
    (Phase::Running, url, Desired::new(READY, true, "Available", message))
}

/// kstatus conditions for a reconcile that ended in `err`: Stalled when only
/// a change can help, Reconciling while the operator keeps trying.
pub fn progress(err: &crate::reconcile::error::Error) -> Vec<Desired> {
    use crate::reconcile::error::Error;
    let reason = err.reason();
    match err {
        Error::Stalled(m) => vec![
            Desired::new(
                RECONCILING,
                false,
                reason,
                "gave up until the spec, the chart or the reconcile request changes",
            ),
            Desired::new(STALLED, true, reason, m.clone()),
        ],
        Error::InvalidSpec(_) => vec![
            Desired::new(RECONCILING, false, reason, "waiting for a valid spec"),
            Desired::new(STALLED, true, reason, err.to_string()),
        ],
        _ => vec![
            Desired::new(RECONCILING, true, reason, "retrying"),
            Desired::new(STALLED, false, reason, "the operator keeps retrying"),
        ],
    }
}

/// kstatus conditions for a reconcile that succeeded with `phase`.
/// Reconciling and Stalled for an applied instance; `stalled` says why its
/// rollout stopped progressing (the Deployment's deadline passed). Stalled
/// then comes with Reconciling False, as kstatus readers expect of a stall.
pub fn progress_applied(phase: Phase, stalled: Option<String>) -> Vec<Desired> {
    const REASON: &str = "ProgressDeadlineExceeded";
    match stalled {
        Some(why) => vec![
            Desired::new(
                RECONCILING,
                false,
                REASON,
                "the Deployment reports no progress within its deadline; the pods are still read while it is not available, and the instance turns Running once they are ready",
            ),
            Desired::new(STALLED, true, REASON, why),
        ],
        None => progress_ok(phase),
    }
}

pub fn progress_ok(phase: Phase) -> Vec<Desired> {
    let (reconciling, message) = match phase {
        Phase::Running => (false, "the release is applied and the Deployment is available"),
        Phase::Suspended => (false, "spec.suspend is true: nothing is applied"),
        Phase::Stopped => (false, "spec.stopped is true: the release is applied with no replicas"),
        _ => (true, "waiting for the Deployment to roll out"),
    };
    vec![
        Desired::new(RECONCILING, reconciling, if reconciling { "Progressing" } else { phase.as_str() }, message),
        Desired::new(STALLED, false, "Progressing", "nothing is stuck"),
    ]
}

/// Status for a failure, keeping what is still true (URL, release revision).
pub fn failed(
    previous: Option<&TinycodeInstanceStatus>,
    reason: &str,
    message: &str,
    extra: &[Desired],
    now: &str,
    generation: Option<i64>,
) -> TinycodeInstanceStatus {
    let prev = previous.cloned().unwrap_or_default();
    let mut desired = vec![Desired::new(READY, false, reason, message)];
    desired.extend(extra.iter().cloned());
    // Conditions of other types stay exactly as they were.
    let mut conditions = merge_conditions(&prev.conditions, &desired, now, generation);
    conditions.extend(prev.conditions.iter().filter(|c| !desired.iter().any(|d| d.type_ == c.type_)).cloned());
    TinycodeInstanceStatus { phase: Some(Phase::Failed), conditions, observed_generation: generation, ..prev }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cond(type_: &str, status: &str, t: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: "R".into(),
            message: "m".into(),
            last_transition_time: time(t),
            observed_generation: Some(1),
        }
    }

    #[test]
    fn transition_time_changes_only_on_flip() {
        let prev = vec![cond(READY, "False", "2026-01-01T00:00:00Z")];
        let same = merge_conditions(
            &prev,
            &[Desired::new(READY, false, "Deploying", "still")],
            "2026-01-02T00:00:00Z",
            Some(2),
        );
        assert_eq!(same[0].last_transition_time, time("2026-01-01T00:00:00Z"));
        assert_eq!(same[0].message, "still");
        assert_eq!(same[0].observed_generation, Some(2));
        let flipped =
            merge_conditions(&prev, &[Desired::new(READY, true, "Available", "up")], "2026-01-02T00:00:00Z", Some(2));
        assert_eq!(flipped[0].last_transition_time, time("2026-01-02T00:00:00Z"));
        assert_eq!(flipped[0].status, "True");
    }

    #[test]
    fn undesired_conditions_are_dropped() {
        let prev =
            vec![cond(READY, "True", "2026-01-01T00:00:00Z"), cond(VLLM_CONFIG_READY, "True", "2026-01-01T00:00:00Z")];
        let out = merge_conditions(&prev, &[Desired::new(READY, true, "Available", "up")], "t1", None);
        assert_eq!(out.len(), 1);
        assert_eq!(out[0].last_transition_time, time("2026-01-01T00:00:00Z"));
    }

    #[test]
    fn running_needs_an_available_current_rollout() {
        let mut o = Workload {
            desired_replicas: 2,
            available_replicas: 1,
            updated_replicas: 2,
            deployment_current: true,
            admitted_host: None,
            tls: true,
            exposure: "Route",
            stopped: false,
            idle_message: None,
            diagnosis: None,
            ollama_ready: None,
            front_ready: None,
            egress_ready: None,
        };
        let (phase, url, ready) = workload_status(&o, &[]);
        assert_eq!((phase, url, ready.status), (Phase::Deploying, None, false));
        assert!(ready.message.contains("1/2"));
        // What the pods say replaces the generic reason, and only while deploying.
        let why = crate::reconcile::diagnose::Diagnosis {
            reason: crate::reconcile::diagnose::Reason::ImagePullFailed,
            message: "cannot pull".into(),
            stalled: false,
        };
        let told = Workload { diagnosis: Some(why), ..o.clone() };
        let (phase, _, ready) = workload_status(&told, &[]);
        assert_eq!(
            (phase, ready.reason.as_str(), ready.message.as_str()),
            (Phase::Deploying, "ImagePullFailed", "cannot pull")
        );
        let stalled = progress_applied(phase, Some("deadline".into()));
        assert_eq!(
            stalled.iter().map(|c| (c.type_, c.status, c.reason.as_str())).collect::<Vec<_>>(),
            [(RECONCILING, false, "ProgressDeadlineExceeded"), (STALLED, true, "ProgressDeadlineExceeded")]
        );
        assert!(!progress_applied(phase, None)[1].status);
        let past_deadline = Workload {
            diagnosis: Some(crate::reconcile::diagnose::Diagnosis {
                reason: crate::reconcile::diagnose::Reason::ProgressDeadlineExceeded,
                message: "stopped".into(),
                stalled: true,
            }),
            ..o.clone()
        };
        let (phase, _, ready) = workload_status(&past_deadline, &[]);
        assert_eq!(
            (phase, ready.status, ready.reason.as_str()),
            (Phase::Failed, false, "ProgressDeadlineExceeded"),
            "a stalled rollout is Failed, as a stalled helm run is"
        );
        let stopped = Workload { stopped: true, admitted_host: Some("dev.apps.example.com".into()), ..o.clone() };
        let (phase, url, ready) = workload_status(&stopped, &[]);
        assert_eq!(
            (phase, url.as_deref(), ready.status, ready.reason.as_str()),
            (Phase::Stopped, Some("https://dev.apps.example.com"), false, "Stopped"),
            "stopped: no rollout awaited, the URL kept"
        );
        o.available_replicas = 2;
        o.deployment_current = false;
        assert_eq!(workload_status(&o, &[]).0, Phase::Deploying, "a stale Deployment status is not a finished rollout");
        o.deployment_current = true;
        let (phase, url, ready) = workload_status(&o, &["no password".into()]);
        assert_eq!((phase, url, ready.status), (Phase::Running, None, true));
        assert!(ready.message.contains("not been admitted") && ready.message.contains("no password"));
        // A bundled Ollama that is not Ready (models still pulling) holds the
        // instance in Deploying, under its own reason.
        let pulling = Workload { ollama_ready: Some(false), ..o.clone() };
        let (phase, _, ready) = workload_status(&pulling, &[]);
        assert_eq!((phase, ready.status, ready.reason.as_str()), (Phase::Deploying, false, "OllamaNotReady"));
        assert!(ready.message.contains("spec.ollama.models"), "{}", ready.message);
        assert_eq!(workload_status(&Workload { ollama_ready: Some(true), ..o.clone() }, &[]).0, Phase::Running);
        o.admitted_host = Some("dev.apps.example.com".into());
        assert_eq!(workload_status(&o, &[]).1.as_deref(), Some("https://dev.apps.example.com"));
        o.tls = false;
        assert_eq!(workload_status(&o, &[]).1.as_deref(), Some("http://dev.apps.example.com"));
    }

    #[test]
    fn kstatus_conditions_follow_the_outcome() {
        use crate::reconcile::error::Error;
        let stalled = progress(&Error::Stalled("helm failed 5 times: boom".into()));
        assert_eq!((stalled[0].type_, stalled[0].status), (RECONCILING, false));
        assert_eq!(
            (stalled[1].type_, stalled[1].status, stalled[1].message.as_str()),
            (STALLED, true, "helm failed 5 times: boom")
        );
        let retrying = progress(&Error::blocked(crate::reconcile::reason::Blocked::PasswordSecretMissing, "create it"));
        assert_eq!((retrying[0].status, retrying[1].status), (true, false));
        let ok = progress_ok(Phase::Running);
        assert_eq!((ok[0].status, ok[1].status), (false, false));
        assert!(progress_ok(Phase::Deploying)[0].status);
    }

    #[test]
    fn failure_keeps_url_and_other_conditions() {
        let prev = TinycodeInstanceStatus {
            phase: Some(Phase::Running),
            url: Some("https://x".into()),
            conditions: vec![
                cond(READY, "True", "2026-01-01T00:00:00Z"),
                cond(VLLM_WARNING, "False", "2026-01-01T00:00:00Z"),
            ],
            ..Default::default()
        };
        let s = failed(Some(&prev), "SecretMissing", "create it", &[], "2026-01-03T00:00:00Z", Some(3));
        assert_eq!(s.phase, Some(Phase::Failed));
        assert_eq!(s.url.as_deref(), Some("https://x"));
        assert_eq!(s.observed_generation, Some(3));
        let ready = s.conditions.iter().find(|c| c.type_ == READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str(), ready.last_transition_time.clone()),
            ("False", "SecretMissing", time("2026-01-03T00:00:00Z"))
        );
        let w = s.conditions.iter().find(|c| c.type_ == VLLM_WARNING).unwrap();
        assert_eq!(w.last_transition_time, time("2026-01-01T00:00:00Z"));
    }
}

//! Why a rollout does not finish, from what the node and the controllers
//! wrote (pure). Read only while an instance is Deploying: a Running
//! instance costs no pod reads. The Deployment's own status says what its
//! ReplicaSet could not create (quota, Pod Security) and when the rollout
//! stopped progressing; the pods say what the scheduler and the kubelet met.

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition};
use k8s_openapi::api::core::v1::{ContainerStatus, PersistentVolumeClaim, Pod, PodCondition, PodSpec};

/// What keeps an instance from Running, as its Ready condition's reason.
/// Among the pods' causes (the first four) the first declared wins, so
/// their order is their precedence; the ReplicaSet's refusals come before
/// them all ([`diagnose`] says why).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Reason {
    /// A container's image could not be pulled.
    ImagePullFailed,
    /// The scheduler found no node.
    PodUnschedulable,
    /// A data volume has no volume behind it.
    VolumeNotBound,
    /// A container keeps exiting.
    CrashLoop,
    /// The ReplicaSet could not create the pod: a ResourceQuota (or another
    /// admission refusal).
    QuotaExceeded,
    /// The ReplicaSet could not create the pod: Pod Security refused it.
    PodSecurityRefused,
    /// The Deployment's progress deadline passed, with no other cause seen.
    ProgressDeadlineExceeded,
    /// tinycode is up; the bundled Ollama has not answered or not pulled
    /// its models yet (no pod says anything is wrong).
    OllamaNotReady,
}

impl Reason {
    /// Every reason, for the documentation check (tests/docs_reasons.rs).
    pub const ALL: [Reason; 8] = [
        Reason::ImagePullFailed,
        Reason::PodUnschedulable,
        Reason::VolumeNotBound,
        Reason::CrashLoop,
        Reason::QuotaExceeded,
        Reason::PodSecurityRefused,
        Reason::ProgressDeadlineExceeded,
        Reason::OllamaNotReady,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Reason::ImagePullFailed => "ImagePullFailed",
            Reason::PodUnschedulable => "PodUnschedulable",
            Reason::VolumeNotBound => "VolumeNotBound",
            Reason::CrashLoop => "CrashLoop",
            Reason::QuotaExceeded => "QuotaExceeded",
            Reason::PodSecurityRefused => "PodSecurityRefused",
            Reason::ProgressDeadlineExceeded => "ProgressDeadlineExceeded",
            Reason::OllamaNotReady => "OllamaNotReady",
        }
    }
}

/// The cause, said for a person: what, where, and the next step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Diagnosis {
    pub reason: Reason,
    pub message: String,
    /// The Deployment stopped progressing: the instance is Stalled too.
    pub stalled: bool,
}

impl Diagnosis {
    /// The Stalled condition's message once the progress deadline passed:
    /// that the rollout stopped, and what the pods say.
    pub fn stalled_message(&self) -> Option<String> {
        match (self.stalled, self.reason) {
            (false, _) => None,
            (true, Reason::ProgressDeadlineExceeded) => Some(self.message.clone()),
            (true, reason) => Some(format!("{STOPPED}; {}: {}", reason.as_str(), self.message)),
        }
    }
}

const STOPPED: &str = "the rollout stopped making progress (the Deployment's progress deadline passed)";

/// Longest piece of a kubelet's or controller's message kept in ours.
const QUOTE: usize = 300;

/// The workloads an instance's readiness waits for, in the order it waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The tinycode pods.
    Server,
    /// The bundled Ollama server (spec.ollama.enabled).
    Ollama,
    /// The front: the gate, with the sign-in proxy in the sign-in modes.
    Front,
    /// The egress proxy (the class limits egress).
    Egress,
}

impl Component {
    /// The chart's `app.kubernetes.io/component` label.
    pub fn label(self) -> &'static str {
        match self {
            Component::Server => "server",
            Component::Ollama => "ollama",
            Component::Front => "front",
            Component::Egress => "egress",
        }
    }
}

/// The label selector of an instance's pods of `component`: the chart's
/// `tinycode.selectorLabels`, which is also their Deployment's selector.
pub fn selector(instance: &str, component: Component) -> String {
    format!(
        "app.kubernetes.io/name=tinycode,app.kubernetes.io/instance={instance},app.kubernetes.io/component={}",
        component.label()
    )
}

/// The claims worth reading for [`diagnose`]: those of pods the scheduler
/// refused because of their volumes. Any other rollout needs no PVC read.
pub fn claims_in_question(pods: &[Pod]) -> Vec<String> {
    let mut out: Vec<String> = current(pods)
        .filter(|p| unschedulable(p).is_some_and(|c| blames_volumes(c.message.as_deref().unwrap_or_default())))
        .flat_map(claims)
        .map(str::to_string)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The cause the Deployment and its pods show, in this order: what the
/// ReplicaSet could not create (with one replica, every pod then left is an
/// older ReplicaSet's, so theirs is not what holds the rollout), then the
/// pods' image pulls, scheduling (an unbound volume first), and crash loops,
/// the first of those across all pods. A passed progress deadline marks any
/// of them stalled, or is the cause itself when nothing else is seen.
/// `None`: nothing wrong is visible yet (the pod is starting). `cli` is the
/// cluster's CLI, for the commands the messages suggest.
pub fn diagnose(
    pods: &[Pod],
    pvcs: &[PersistentVolumeClaim],
    deployment: Option<&Deployment>,
    cli: &str,
) -> Option<Diagnosis> {
    let stalled = deployment_condition(deployment, "Progressing").is_some_and(|c| {
        c.status.as_deref() == Some("False") && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
    });
    let found = replica_failure(deployment, cli)
        .or_else(|| current(pods).filter_map(|p| pod_cause(p, pvcs, cli)).min_by_key(|(reason, _)| *reason));
    match found {
        Some((reason, message)) => Some(Diagnosis { reason, message, stalled }),
        None if stalled => Some(Diagnosis {
            reason: Reason::ProgressDeadlineExceeded,
            message: format!(
                "{STOPPED} and its pods name no cause; see the events of the Deployment and its pods (`{cli} describe deployment{}`)",
                deployment.map(|d| format!(" -n {} {}", namespace(&d.metadata), name(&d.metadata))).unwrap_or_default()
            ),
            stalled: true,
        }),
        None => None,
    }
}

/// The pods that are not on their way out: a terminating pod's trouble is
/// its ReplicaSet's past.
fn current(pods: &[Pod]) -> impl Iterator<Item = &Pod> {
    pods.iter().filter(|p| p.metadata.deletion_timestamp.is_none())
}

fn deployment_condition<'a>(deployment: Option<&'a Deployment>, type_: &str) -> Option<&'a DeploymentCondition> {
    deployment?.status.as_ref()?.conditions.as_ref()?.iter().find(|c| c.type_.as_deref() == Some(type_))
}

fn replica_failure(deployment: Option<&Deployment>, cli: &str) -> Option<(Reason, String)> {
    let c = deployment_condition(deployment, "ReplicaFailure").filter(|c| c.status.as_deref() == Some("True"))?;
    let ns = deployment.map(|d| namespace(&d.metadata)).unwrap_or_default();
    let said = quote(c.message.as_deref().unwrap_or_default());
    if said.contains("violates PodSecurity") {
        let message = format!(
            "Pod Security refused the instance's pod: {said}; the namespace's pod-security.kubernetes.io/enforce label is stricter than the pod (the hostpath and shell tiers need privileged), which a cluster-admin sets"
        );
        return Some((Reason::PodSecurityRefused, message));
    }
    let message = format!(
        "the pod could not be created: {said}; raise the namespace's ResourceQuota (`{cli} describe resourcequota -n {ns}`) or lower spec.resources"
    );
    Some((Reason::QuotaExceeded, message))
}

/// What keeps a pod from running, by precedence: a pull that fails, then
/// scheduling (a volume not bound, else no node), then a crash loop.
fn pod_cause(pod: &Pod, pvcs: &[PersistentVolumeClaim], cli: &str) -> Option<(Reason, String)> {
    let spec = pod.spec.as_ref()?;
    let status = pod.status.as_ref()?;
    let statuses: Vec<(&str, &ContainerStatus)> = status
        .init_container_statuses
        .iter()
        .flatten()
        .map(|cs| ("init container", cs))
        .chain(status.container_statuses.iter().flatten().map(|cs| ("container", cs)))
        .collect();
    let name = name(&pod.metadata);
    statuses
        .iter()
        .find_map(|(kind, cs)| pull_failure(spec, name, kind, cs))
        .or_else(|| unschedulable(pod).map(|c| scheduling_failure(pod, c, pvcs, cli)))
        .or_else(|| statuses.iter().find_map(|(kind, cs)| crash_loop(pod, kind, cs, cli)))
}

fn pull_failure(spec: &PodSpec, name: &str, kind: &str, cs: &ContainerStatus) -> Option<(Reason, String)> {
    let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref())?;
    let reason = waiting.reason.as_deref().unwrap_or_default();
    if !matches!(reason, "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull") {
        return None;
    }
    // The spec's image is what the kubelet tries; the status may lag.
    let image = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .find(|c| c.name == cs.name)
        .and_then(|c| c.image.clone())
        .unwrap_or_else(|| cs.image.clone());
    let secrets: Vec<&str> = spec.image_pull_secrets.iter().flatten().map(|s| s.name.as_str()).collect();
    let used = if secrets.is_empty() {
        "no pull secret was used (spec.imagePullSecrets names none)".to_string()
    } else {
        format!("pull secrets used: {} (check they hold this registry's credentials)", secrets.join(", "))
    };
    let message = format!(
        "{kind} {} of pod {name} cannot pull image {image}: {reason}: {}; {used}; fix spec.image, or name the registry's Secret in spec.imagePullSecrets",
        cs.name,
        quote(waiting.message.as_deref().unwrap_or_default())
    );
    Some((Reason::ImagePullFailed, message))
}

fn scheduling_failure(pod: &Pod, c: &PodCondition, pvcs: &[PersistentVolumeClaim], cli: &str) -> (Reason, String) {
    let (ns, name) = (namespace(&pod.metadata), name(&pod.metadata));
    let said = c.message.as_deref().unwrap_or_default();
    // A claim that waits for its first consumer is Pending because the pod
    // has no node yet: only when the scheduler blames a volume is one the
    // cause. A claim not read (missing, or the read failed) is left to
    // the scheduler's own words.
    let blamed = claims(pod).filter(|_| blames_volumes(said));
    for claim in blamed {
        let Some(pvc) = pvcs.iter().find(|p| p.metadata.name.as_deref() == Some(claim)) else { continue };
        let phase = pvc.status.as_ref().and_then(|s| s.phase.as_deref()).unwrap_or("Pending");
        if phase == "Bound" {
            continue;
        }
        let class = match pvc.spec.as_ref().and_then(|s| s.storage_class_name.as_deref()) {
            None => "the cluster's default StorageClass".to_string(),
            Some("") => "no StorageClass (storageClassName \"\": only a matching PersistentVolume binds it)".into(),
            Some(c) => format!("StorageClass {c}"),
        };
        let message = format!(
            "PersistentVolumeClaim {claim} is {phase}, not Bound, so pod {name} cannot be scheduled: no volume came from {class}; check that the StorageClass exists and its provisioner runs (`{cli} describe pvc -n {ns} {claim}`), or set spec.storage.storageClassName"
        );
        return (Reason::VolumeNotBound, message);
    }
    let message = format!(
        "no node can run pod {name}: {}; check spec.nodeSelector, spec.tolerations and spec.resources against the cluster's nodes",
        quote(said)
    );
    (Reason::PodUnschedulable, message)
}

fn crash_loop(pod: &Pod, kind: &str, cs: &ContainerStatus, cli: &str) -> Option<(Reason, String)> {
    let (ns, name) = (namespace(&pod.metadata), name(&pod.metadata));
    let waiting = cs.state.as_ref().and_then(|s| s.waiting.as_ref());
    let looping = waiting.and_then(|w| w.reason.as_deref()) == Some("CrashLoopBackOff");
    let last = cs.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    // Between back-offs a looping container runs again briefly: its
    // restarts and last exit still say what it does.
    if !(looping || (cs.restart_count >= 2 && !cs.ready && last.is_some())) {
        return None;
    }
    let exit = match last {
        Some(t) => format!(
            "its last run exited with code {}{}{}",
            t.exit_code,
            t.reason.as_deref().map(|r| format!(" ({r})")).unwrap_or_default(),
            if t.reason.as_deref() == Some("OOMKilled") { ": raise spec.resources.limits.memory" } else { "" }
        ),
        None => "it keeps exiting".to_string(),
    };
    // Its last words, when the pod keeps them (terminationMessagePolicy
    // FallbackToLogsOnError: the log's tail); the last line says most.
    let said = last
        .and_then(|t| t.message.as_deref())
        .and_then(|m| m.lines().rev().find(|l| !l.trim().is_empty()))
        .map(|l| format!(" (it said: {})", quote(l)))
        .unwrap_or_default();
    let exit = exit + &said;
    let message = format!(
        "{kind} {} of pod {name} keeps crashing ({} restarts); {exit}; see `{cli} logs -n {ns} {name} -c {} --previous`",
        cs.name, cs.restart_count, cs.name
    );
    Some((Reason::CrashLoop, message))
}

fn unschedulable(pod: &Pod) -> Option<&PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
}

/// Whether the scheduler's message names volumes as (part of) the reason:
/// "unbound immediate PersistentVolumeClaims", "didn't find available
/// persistent volumes to bind", `persistentvolumeclaim "x" not found`.
fn blames_volumes(said: &str) -> bool {
    let said = said.to_ascii_lowercase();
    ["persistentvolumeclaim", "persistent volume", "pvc"].iter().any(|w| said.contains(w))
}

/// The PVCs a pod mounts.
fn claims(pod: &Pod) -> impl Iterator<Item = &str> {
    let volumes = pod.spec.as_ref().and_then(|s| s.volumes.as_ref());
    volumes.into_iter().flatten().filter_map(|v| v.persistent_volume_claim.as_ref().map(|p| p.claim_name.as_str()))
}

fn name(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.name.as_deref().unwrap_or_default()
}

fn namespace(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> &str {
    meta.namespace.as_deref().unwrap_or_default()
}

/// At most [`QUOTE`] bytes of somebody else's message, on one line.
fn quote(text: &str) -> String {
    super::truncate(&text.split_whitespace().collect::<Vec<_>>().join(" "), QUOTE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A server pod of instance `demo` in namespace `team`, with `status`.
    fn pod(name: &str, status: Value, secrets: &[&str]) -> Pod {
        let secrets: Vec<Value> = secrets.iter().map(|s| json!({"name": s})).collect();
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "team"},
            "spec": {
                "imagePullSecrets": secrets,
                "initContainers": [{"name": "init-config", "image": "quay.io/x/init:1"}],
                "containers": [
                    {"name": "tinycode", "image": "quay.io/x/tinycode:1"},
                    {"name": "gate", "image": "quay.io/x/gate:1"}
                ],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "demo-data"}},
                    {"name": "projects", "persistentVolumeClaim": {"claimName": "demo-projects"}},
                    {"name": "tmp", "emptyDir": {}}
                ]
            },
            "status": status
        }))
        .unwrap()
    }

    fn server(status: Value) -> Pod {
        pod("demo-tinycode-abc", status, &[])
    }

    fn container(name: &str, ready: bool, restarts: i32, state: Value, last: Value) -> Value {
        json!({"name": name, "image": format!("quay.io/x/{name}:1"), "imageID": "", "ready": ready,
            "restartCount": restarts, "state": state, "lastState": last})
    }

    /// The server container in `state`, the gate running.
    fn tinycode(ready: bool, restarts: i32, state: Value, last: Value) -> Value {
        json!({"phase": "Running", "containerStatuses": [
            container("tinycode", ready, restarts, state, last),
            container("gate", true, 0, json!({"running": {}}), json!({}))
        ]})
    }

    fn waiting(reason: &str, message: &str) -> Value {
        tinycode(false, 0, json!({"waiting": {"reason": reason, "message": message}}), json!({}))
    }

    fn crash_loop(exit: i32, why: &str) -> Value {
        tinycode(
            false,
            3,
            json!({"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container"}}),
            json!({"terminated": {"exitCode": exit, "reason": why}}),
        )
    }

    fn unschedulable(message: &str) -> Value {
        json!({"phase": "Pending", "conditions": [
            {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
        ]})
    }

    const NO_NODE: &str = "0/1 nodes are available: 1 node(s) didn't match Pod's node affinity/selector.";
    const UNBOUND: &str = "0/1 nodes are available: pod has unbound immediate PersistentVolumeClaims.";

    fn pvc(name: &str, phase: &str, class: Option<&str>) -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": "team"},
            "spec": {"storageClassName": class}, "status": {"phase": phase}}))
        .unwrap()
    }

    fn bound() -> Vec<PersistentVolumeClaim> {
        vec![pvc("demo-data", "Bound", Some("local-path")), pvc("demo-projects", "Bound", None)]
    }

    fn deployment(conditions: Value) -> Deployment {
        serde_json::from_value(json!({"metadata": {"name": "demo-tinycode", "namespace": "team"},
            "spec": {"selector": {}, "template": {}}, "status": {"conditions": conditions}}))
        .unwrap()
    }

    fn refused(message: &str) -> Deployment {
        deployment(json!([
            {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
            {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": message}
        ]))
    }

    fn deadline_passed() -> Deployment {
        deployment(json!([{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
            "message": "ReplicaSet \"demo-tinycode-abc\" has timed out progressing."}]))
    }

    const QUOTA: &str = "pods \"demo-tinycode-abc-x\" is forbidden: exceeded quota: no-pods, requested: pods=1, used: pods=0, limited: pods=0";
    const POD_SECURITY: &str =
        "pods \"demo-tinycode-abc-x\" is forbidden: violates PodSecurity \"restricted:latest\": hostPath volumes";

    /// One case: what the cluster shows, the reason expected (as the
    /// variant) and words its message must hold.
    struct Case {
        what: &'static str,
        pods: Vec<Pod>,
        pvcs: Vec<PersistentVolumeClaim>,
        deployment: Option<Deployment>,
        want: Option<(Reason, bool)>,
        says: &'static [&'static str],
    }

    fn run(cases: Vec<Case>) {
        for c in cases {
            let got = diagnose(&c.pods, &c.pvcs, c.deployment.as_ref(), "kubectl");
            assert_eq!(got.as_ref().map(|d| (d.reason, d.stalled)), c.want, "{}: {got:?}", c.what);
            let message = got.map(|d| d.message).unwrap_or_default();
            for words in c.says {
                assert!(message.contains(words), "{}: {words:?} not in {message:?}", c.what);
            }
        }
    }

    #[test]
    fn each_reason_names_what_and_how_to_fix_it() {
        run(vec![
            Case {
                what: "image pull in back-off, no pull secret",
                pods: vec![server(waiting("ImagePullBackOff", "Back-off pulling image \"quay.io/x/tinycode:1\""))],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::ImagePullFailed, false)),
                says: &[
                    "container tinycode",
                    "image quay.io/x/tinycode:1",
                    "Back-off pulling image",
                    "no pull secret was used",
                    "spec.imagePullSecrets",
                ],
            },
            Case {
                what: "first pull refused, with pull secrets",
                pods: vec![pod(
                    "demo-tinycode-abc",
                    waiting("ErrImagePull", "401 Unauthorized"),
                    &["regcred", "mirror"],
                )],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::ImagePullFailed, false)),
                says: &["ErrImagePull: 401 Unauthorized", "pull secrets used: regcred, mirror"],
            },
            Case {
                what: "an init container's image name is invalid",
                pods: vec![server(json!({"phase": "Pending", "initContainerStatuses": [container("init-config",
                    false, 0, json!({"waiting": {"reason": "InvalidImageName", "message": "couldn't parse"}}), json!({}))]}))],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::ImagePullFailed, false)),
                says: &["init container init-config", "image quay.io/x/init:1", "InvalidImageName"],
            },
            Case {
                what: "no node matches",
                pods: vec![server(unschedulable(NO_NODE))],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::PodUnschedulable, false)),
                says: &[
                    "pod demo-tinycode-abc",
                    "1 node(s) didn't match Pod's node affinity/selector",
                    "spec.nodeSelector",
                ],
            },
            Case {
                what: "a claim no StorageClass provisions",
                pods: vec![server(unschedulable(UNBOUND))],
                pvcs: vec![pvc("demo-data", "Pending", Some("no-such-class")), bound()[1].clone()],
                deployment: None,
                want: Some((Reason::VolumeNotBound, false)),
                says: &[
                    "PersistentVolumeClaim demo-data is Pending",
                    "StorageClass no-such-class",
                    "kubectl describe pvc -n team demo-data",
                ],
            },
            Case {
                what: "a claim of the default StorageClass",
                pods: vec![server(unschedulable(
                    "0/1 nodes are available: 1 node(s) didn't find available persistent volumes to bind.",
                ))],
                pvcs: vec![bound()[0].clone(), pvc("demo-projects", "Pending", None)],
                deployment: None,
                want: Some((Reason::VolumeNotBound, false)),
                says: &["PersistentVolumeClaim demo-projects is Pending", "the cluster's default StorageClass"],
            },
            Case {
                what: "crash loop",
                pods: vec![server(crash_loop(1, "Error"))],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::CrashLoop, false)),
                says: &[
                    "container tinycode",
                    "3 restarts",
                    "exited with code 1 (Error)",
                    "kubectl logs -n team demo-tinycode-abc -c tinycode --previous",
                ],
            },
            Case {
                what: "restarting between back-offs, out of memory",
                pods: vec![server(tinycode(
                    false,
                    2,
                    json!({"running": {}}),
                    json!({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}),
                ))],
                pvcs: bound(),
                deployment: None,
                want: Some((Reason::CrashLoop, false)),
                says: &["exited with code 137 (OOMKilled)", "spec.resources.limits.memory"],
            },
            Case {
                what: "quota",
                pods: vec![],
                pvcs: vec![],
                deployment: Some(refused(QUOTA)),
                want: Some((Reason::QuotaExceeded, false)),
                says: &["exceeded quota: no-pods", "kubectl describe resourcequota -n team"],
            },
            Case {
                what: "pod security",
                pods: vec![],
                pvcs: vec![],
                deployment: Some(refused(POD_SECURITY)),
                want: Some((Reason::PodSecurityRefused, false)),
                says: &["violates PodSecurity \"restricted:latest\"", "pod-security.kubernetes.io/enforce"],
            },
            Case {
                what: "deadline passed, pods say nothing",
                pods: vec![server(waiting("ContainerCreating", ""))],
                pvcs: bound(),
                deployment: Some(deadline_passed()),
                want: Some((Reason::ProgressDeadlineExceeded, true)),
                says: &["stopped making progress", "kubectl describe deployment -n team demo-tinycode"],
            },
        ]);
    }

    #[test]
    fn a_healthy_or_starting_rollout_has_no_diagnosis() {
        let ready = tinycode(true, 0, json!({"running": {}}), json!({}));
        let progressing = deployment(json!([{"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"}]));
        let terminating = {
            let mut p = server(crash_loop(1, "Error"));
            p.metadata.deletion_timestamp = Some(crate::reconcile::conditions::time("2026-12-02T00:00:00Z"));
            p
        };
        let none = |what, pods: Vec<Pod>, pvcs: Vec<PersistentVolumeClaim>, deployment: Option<Deployment>| Case {
            what,
            pods,
            pvcs,
            deployment,
            want: None,
            says: &[],
        };
        run(vec![
            none("healthy pod", vec![server(ready.clone())], bound(), Some(progressing.clone())),
            none("no pods yet", vec![], vec![], None),
            none("creating", vec![server(waiting("ContainerCreating", ""))], bound(), Some(progressing)),
            none(
                "one restart is not a loop",
                vec![server(tinycode(false, 1, json!({"running": {}}), json!({"terminated": {"exitCode": 1}})))],
                bound(),
                None,
            ),
            none("an old pod on its way out", vec![terminating, server(ready)], bound(), None),
            // Waiting for its first consumer, a claim is Pending because the
            // pod has no node; the scheduler did not blame it.
            none(
                "scheduled, claims waiting for it",
                vec![server(json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}))],
                vec![pvc("demo-data", "Pending", Some("local-path"))],
                None,
            ),
        ]);
    }

    #[test]
    fn precedence() {
        let pull = || pod("demo-tinycode-b", waiting("ImagePullBackOff", "x"), &[]);
        let crash = || pod("demo-tinycode-a", crash_loop(1, "Error"), &[]);
        let nowhere = || pod("demo-tinycode-c", unschedulable(NO_NODE), &[]);
        let no_volume = || pod("demo-tinycode-d", unschedulable(UNBOUND), &[]);
        let pending = vec![pvc("demo-data", "Pending", Some("fast")), bound()[1].clone()];
        let case = |what, pods, pvcs, deployment, want| Case { what, pods, pvcs, deployment, want, says: &[] };
        run(vec![
            case(
                "pull before crash, whichever pod",
                vec![crash(), pull()],
                bound(),
                None,
                Some((Reason::ImagePullFailed, false)),
            ),
            case(
                "pull before scheduling",
                vec![nowhere(), pull()],
                bound(),
                None,
                Some((Reason::ImagePullFailed, false)),
            ),
            case(
                "scheduling before crash",
                vec![crash(), nowhere()],
                bound(),
                None,
                Some((Reason::PodUnschedulable, false)),
            ),
            case(
                "volume before crash",
                vec![crash(), no_volume()],
                pending.clone(),
                None,
                Some((Reason::VolumeNotBound, false)),
            ),
            // The scheduler blamed a volume, but both are Bound by now: its words stand.
            case("bound since", vec![no_volume()], bound(), None, Some((Reason::PodUnschedulable, false))),
            // A claim not read (missing, or the read failed): the scheduler's words stand.
            case("claim unread", vec![no_volume()], vec![], None, Some((Reason::PodUnschedulable, false))),
            // Claims waiting for their first consumer wait for the pod, not the other way round.
            case(
                "claims waiting, no node",
                vec![nowhere()],
                vec![
                    pvc("demo-data", "Pending", Some("local-path")),
                    pvc("demo-projects", "Pending", Some("local-path")),
                ],
                None,
                Some((Reason::PodUnschedulable, false)),
            ),
            // The ReplicaSet's refusal holds the current rollout; pods left are older.
            case(
                "refusal before pods",
                vec![pull()],
                vec![],
                Some(refused(QUOTA)),
                Some((Reason::QuotaExceeded, false)),
            ),
            case(
                "pod security before pods",
                vec![crash()],
                vec![],
                Some(refused(POD_SECURITY)),
                Some((Reason::PodSecurityRefused, false)),
            ),
            // A passed deadline keeps the cause and marks it stalled.
            case(
                "deadline with a cause",
                vec![crash()],
                bound(),
                Some(deadline_passed()),
                Some((Reason::CrashLoop, true)),
            ),
            case(
                "deadline with a pull",
                vec![pull()],
                bound(),
                Some(deadline_passed()),
                Some((Reason::ImagePullFailed, true)),
            ),
        ]);
    }

    #[test]
    fn a_stalled_diagnosis_says_the_rollout_stopped_and_why() {
        let d = diagnose(&[server(crash_loop(1, "Error"))], &bound(), Some(&deadline_passed()), "oc").unwrap();
        let stalled = d.stalled_message().unwrap();
        assert!(
            stalled.starts_with("the rollout stopped making progress") && stalled.contains("CrashLoop: "),
            "{stalled}"
        );
        assert!(stalled.contains("oc logs -n team"), "the cluster's CLI: {stalled}");
        let alone = diagnose(&[], &[], Some(&deadline_passed()), "kubectl").unwrap();
        assert_eq!(alone.stalled_message().as_deref(), Some(alone.message.as_str()));
        let going = diagnose(&[server(crash_loop(1, "Error"))], &bound(), None, "kubectl").unwrap();
        assert_eq!(going.stalled_message(), None);
    }

    #[test]
    fn others_messages_are_cut_to_one_line() {
        let long = format!("line one\n{}", "y".repeat(5000));
        let d = diagnose(&[server(waiting("ErrImagePull", &long))], &bound(), None, "kubectl").unwrap();
        assert!(d.message.len() < 800 && !d.message.contains('\n'), "{}", d.message);
        assert!(d.message.contains("line one y"), "{}", d.message);
    }

    #[test]
    fn only_claims_the_scheduler_blames_are_read() {
        let pods = [
            server(unschedulable(UNBOUND)),
            pod("demo-tinycode-b", unschedulable(UNBOUND), &[]),
            pod("demo-tinycode-c", unschedulable(NO_NODE), &[]),
        ];
        assert_eq!(claims_in_question(&pods), ["demo-data", "demo-projects"]);
        assert!(claims_in_question(&[server(unschedulable(NO_NODE)), server(crash_loop(1, "Error"))]).is_empty());
    }

    #[test]
    fn the_selector_is_the_charts_server_selector() {
        let chart = include_str!("../../helm-charts/tinycode/templates/_helpers.tpl");
        let start = chart.find("define \"tinycode.selectorLabels\"").expect("the chart defines selectorLabels");
        let block = &chart[start..start + chart[start..].find("{{- end -}}").unwrap()];
        let keys: Vec<&str> = block.lines().skip(1).filter_map(|l| l.split_once(':').map(|(k, _)| k)).collect();
        assert_eq!(keys, ["app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"]);
        assert!(block.contains("app.kubernetes.io/name: tinycode"), "{block}");
        assert_eq!(
            selector("demo", Component::Server),
            "app.kubernetes.io/name=tinycode,app.kubernetes.io/instance=demo,app.kubernetes.io/component=server"
        );
        // The components the chart labels its two Deployments with.
        let deployment = include_str!("../../helm-charts/tinycode/templates/deployment.yaml");
        for c in [Component::Server, Component::Ollama] {
            let pattern = format!("\"component\" \"{}\")", c.label());
            assert!(deployment.contains(&pattern), "{pattern}");
        }
    }

    #[test]
    fn a_crash_loop_quotes_the_containers_last_line() {
        let mut status = crash_loop(1, "Error");
        status["containerStatuses"][0]["lastState"]["terminated"]["message"] =
            json!("pulling model nope (attempt 3)\nerror: could not pull model nope\n\n");
        let (reason, message) = pod_cause(&server(status), &[], "kubectl").unwrap();
        assert_eq!(reason, Reason::CrashLoop);
        assert!(message.contains("(it said: error: could not pull model nope)"), "{message}");
        assert!(!message.contains("attempt 3"), "{message}");
    }
}

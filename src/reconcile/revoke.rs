//! Approvals taken back win in every state (README.md, "Security model"). Whatever the instance
//! is doing (suspended, an invalid spec, a namespace gate failing first),
//! what an approval granted is withdrawn as soon as the approval is gone:
//! the reconcile calls [`revoke`] on each path that returns before a plan
//! would have re-rendered the instance. A workload that used a withdrawn
//! grant is scaled to zero; helm scales it up again once the instance may run.
//!
//! What the instance holds comes from the caches (bindings, the Deployment)
//! and one live read of the kubeconfig copy; the decision ([`withdrawals`])
//! is pure.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use serde_json::json;

use crate::api::TinycodeInstance;
use crate::api::naming;
use crate::platform::prepare;
use crate::platform::scc::{ALL_TIERS, SccTier};
use crate::reconcile::error::During;
use crate::reconcile::{Context, Error, approval, discover};
use crate::settings::Settings;
use crate::watch_scope::cluster_api;

/// Field manager of the scale-down: not one of the operator's own managers,
/// so the drift check sees the write and helm restores the replicas once the
/// instance may run again.
pub const REVOKE_MANAGER: &str = "tinycode-operator-revocation";

/// What an instance holds that some approval granted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Held {
    /// The role its ClusterRoleBinding binds.
    pub cluster_role: Option<String>,
    /// Tiers whose SCC grant (RoleBinding) exists.
    pub scc_grants: Vec<SccTier>,
    /// Other namespaces holding its discovery RoleBinding.
    pub discovery_bindings: Vec<String>,
    /// The kubeconfig copied from another namespace, and whether that Secret
    /// (still) shares it with the instance namespace.
    pub kubeconfig_copy: Option<bool>,
    /// The pod mounts its host directory writable.
    pub writable_host_path: bool,
    /// The Deployment exists and was not scaled down by a revocation yet.
    pub workload_running: bool,
    /// What the workloads run (a class's limits apply to it).
    pub running: crate::reconcile::class_policy::Running,
}

/// Something granted whose approval is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Withdraw {
    ClusterRoleBinding,
    KubeconfigCopy,
    SccGrant(SccTier),
    DiscoveryBinding(String),
    /// Writes to the host directory (no object: the workload stops).
    HostPathWrites,
    /// What runs is beyond its class now (an image, a mode, resources): the
    /// workload concerned stops.
    BeyondClass(crate::reconcile::class_policy::Beyond),
}

impl Withdraw {
    /// Whether the running pod keeps using it after the object is gone (a
    /// mounted file, an admitted pod's host access): then it is scaled down.
    fn in_the_pod(&self) -> bool {
        match self {
            Withdraw::ClusterRoleBinding | Withdraw::DiscoveryBinding(_) => false,
            Withdraw::KubeconfigCopy | Withdraw::HostPathWrites => true,
            Withdraw::BeyondClass(b) => !b.ollama,
            Withdraw::SccGrant(tier) => *tier != SccTier::Restricted,
        }
    }

    fn describe(&self) -> String {
        match self {
            Withdraw::ClusterRoleBinding => "the ClusterRoleBinding".into(),
            Withdraw::KubeconfigCopy => "the kubeconfig copy".into(),
            Withdraw::SccGrant(tier) => format!("the {} SCC grant", tier.scc_name()),
            Withdraw::DiscoveryBinding(ns) => format!("the discovery RoleBinding in {ns}"),
            Withdraw::HostPathWrites => "writes to the host directory".into(),
            Withdraw::BeyondClass(b) => format!("what runs as {} ({})", b.exceeds.field, b.exceeds.message),
        }
    }
}

/// What is held but no longer approved. `labels` are the instance
/// namespace's (None: the namespace is gone or going); `discovery_open` the
/// namespaces open to discovery (labelled, and prepared where required).
pub fn withdrawals(
    inst: &TinycodeInstance,
    labels: Option<&BTreeMap<String, String>>,
    discovery_open: &std::collections::BTreeSet<String>,
    settings: &Settings,
    held: &Held,
) -> Vec<Withdraw> {
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let spec = &inst.spec;
    let empty = BTreeMap::new();
    let gates = labels.is_some_and(|l| namespace_approved(l, settings));
    let labels = labels.unwrap_or(&empty);
    let mut out = Vec::new();
    if let Some(bound) = &held.cluster_role {
        let cli = settings.platform.cli();
        let approved = approval::cluster_role(cli, &ns, &spec.cluster_admin, labels, &settings.allowed_cluster_roles);
        if !gates || approved.ok().flatten().as_ref() != Some(bound) {
            out.push(Withdraw::ClusterRoleBinding);
        }
    }
    if held.kubeconfig_copy.is_some_and(|shared| !gates || !shared || !spec.cluster_admin.enabled) {
        out.push(Withdraw::KubeconfigCopy);
    }
    for tier in &held.scc_grants {
        if !gates || tier.check_approval(settings.platform.cli(), &ns, labels).is_err() {
            out.push(Withdraw::SccGrant(*tier));
        }
    }
    let approved_discovery = if gates { discover::approved_discovery(&ns, spec, discovery_open) } else { Vec::new() };
    for other in &held.discovery_bindings {
        if !approved_discovery.contains(other) {
            out.push(Withdraw::DiscoveryBinding(other.clone()));
        }
    }
    if held.writable_host_path
        && held.scc_grants.contains(&SccTier::Hostpath)
        && !out.contains(&Withdraw::SccGrant(SccTier::Hostpath))
        && SccTier::check_host_path_write(settings.platform.cli(), &ns, labels).is_err()
    {
        out.push(Withdraw::HostPathWrites);
    }
    out
}

/// What a class no longer permits, withdrawn as an approval taken back is:
/// the shell and hostPath tiers' SCC grants, cluster-admin mode's
/// ClusterRoleBinding and kubeconfig copy, and the workload running what the
/// class no longer allows (its image, git or Ollama, resources above a cap).
pub fn class_withdrawals(class: Option<(&str, &crate::api::TinycodeClassSpec)>, held: &Held) -> Vec<Withdraw> {
    use crate::api::Mode;
    use crate::reconcile::class_policy::permits;
    let mut out = Vec::new();
    if let Some((name, spec)) = class {
        out.extend(
            crate::reconcile::class_policy::beyond_class(name, spec, &held.running)
                .into_iter()
                .map(Withdraw::BeyondClass),
        );
    }
    let class = class.map(|(_, spec)| spec);
    for (tier, mode) in [(SccTier::Shell, Mode::Shell), (SccTier::Hostpath, Mode::HostPath)] {
        if held.scc_grants.contains(&tier) && !permits(class, mode) {
            out.push(Withdraw::SccGrant(tier));
        }
    }
    if !permits(class, Mode::ClusterAdmin) {
        if held.cluster_role.is_some() {
            out.push(Withdraw::ClusterRoleBinding);
        }
        if held.kubeconfig_copy.is_some() {
            out.push(Withdraw::KubeconfigCopy);
        }
    }
    out
}

/// Whether the workload must stop because of `what`.
pub fn stops_workload(what: &[Withdraw], held: &Held) -> bool {
    held.workload_running && what.iter().any(Withdraw::in_the_pod)
}

/// Whether the bundled Ollama must stop because of `what`.
pub fn stops_ollama(what: &[Withdraw], held: &Held) -> bool {
    held.running.ollama.is_some() && what.iter().any(|w| matches!(w, Withdraw::BeyondClass(b) if b.ollama))
}

/// What a Deployment's pods run, as far as a class limits it (None: it does
/// not run, or a revocation stopped it): the container's image and
/// resources, the git init container, the replicas, and whether the
/// container takes Secrets into its environment beyond its password.
struct Ran {
    image: String,
    lists: crate::api::ResourceLists,
    git: bool,
    replicas: i32,
    env_secrets: bool,
    /// The container reaches out through an egress proxy (HTTPS_PROXY set).
    proxied: bool,
}

fn running_of(d: Option<&Deployment>, container: &str) -> Option<Ran> {
    let d = d.filter(|d| !scaled_down(d) && d.spec.replicas != Some(0))?;
    let pod = d.spec.template.spec.as_ref()?;
    let main = pod.containers.iter().find(|c| c.name == container)?;
    let lists = |m: Option<
        &std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >| { m.into_iter().flatten().map(|(k, v)| (k.clone(), v.0.clone())).collect() };
    let resources = main.resources.as_ref();
    let lists = crate::api::ResourceLists {
        requests: lists(resources.and_then(|r| r.requests.as_ref())),
        limits: lists(resources.and_then(|r| r.limits.as_ref())),
    };
    let git = pod.init_containers.iter().flatten().any(|c| c.name == GIT_INIT_CONTAINER);
    // spec.env names may not start with TINYCODE_ (admission): those are the
    // chart's own (the password; model keys, before the model-key proxy).
    let env_secrets = main.env.iter().flatten().any(|e| {
        !e.name.starts_with(CHART_ENV_PREFIX) && e.value_from.as_ref().is_some_and(|v| v.secret_key_ref.is_some())
    });
    let proxied = main.env.iter().flatten().any(|e| e.name == "HTTPS_PROXY");
    let (image, replicas) = (main.image.clone().unwrap_or_default(), d.spec.replicas.unwrap_or(1));
    Some(Ran { image, lists, git, replicas, env_secrets, proxied })
}

/// The prefix of the chart's own variables in the tinycode container.
const CHART_ENV_PREFIX: &str = "TINYCODE_";

/// The chart's init container that clones spec.git.
const GIT_INIT_CONTAINER: &str = "git-clone";

/// The namespace opted in (where required) and carries the cluster-admin's
/// preparation mark (where required).
fn namespace_approved(labels: &BTreeMap<String, String>, settings: &Settings) -> bool {
    let opted_in = settings.required_namespace_label.as_ref().is_none_or(|(k, v)| labels.get(k) == Some(v));
    opted_in && (!settings.require_prepared_label || prepare::labelled_prepared(labels))
}

/// What the instance holds now.
async fn held(ctx: &Context, inst: &TinycodeInstance) -> Result<Held, Error> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let stores = &ctx.stores;
    let cluster_role = stores
        .cluster_role_bindings
        .get(&ObjectRef::new(&naming::cluster_role_binding(&ns, &name)))
        .map(|b| b.role_ref.name.clone());
    let scc_grants = ALL_TIERS
        .into_iter()
        .filter(|t| {
            stores.role_bindings.get(&ObjectRef::new(&naming::scc_grant(&name, t.as_str())).within(&ns)).is_some()
        })
        .collect();
    let binding = naming::discovery_binding(&ns, &name);
    let mut discovery_bindings: Vec<String> = stores
        .role_bindings
        .state()
        .iter()
        .filter(|rb| rb.metadata.name.as_deref() == Some(binding.as_str()))
        .filter_map(|rb| rb.metadata.namespace.clone())
        .filter(|n| *n != ns)
        .collect();
    discovery_bindings.sort();
    // Where the operator may not read, it may not delete either.
    let copy = match Api::<Secret>::namespaced(ctx.client.clone(), &ns)
        .get_metadata_opt(&naming::kubeconfig_copy(&name))
        .await
    {
        Err(kube::Error::Api(s)) if s.code == 403 => None,
        other => other.during("read the kubeconfig copy")?,
    };
    let kubeconfig_copy = match copy {
        None => None,
        Some(_) => Some(kubeconfig_still_shared(ctx, inst, &ns).await?),
    };
    let deployment = stores.deployments.get(&ObjectRef::new(&naming::fullname(&name)).within(&ns));
    let ollama = stores.deployments.get(&ObjectRef::new(&naming::ollama(&name)).within(&ns));
    let mut running = crate::reconcile::class_policy::Running::default();
    if let Some(ran) = running_of(deployment.as_deref(), "tinycode") {
        running = crate::reconcile::class_policy::Running {
            image: Some(ran.image),
            tinycode: ran.lists,
            git: ran.git,
            replicas: ran.replicas,
            env_secrets: ran.env_secrets,
            open_egress: !ran.proxied,
            ..running
        };
    }
    let ollama = running_of(ollama.as_deref(), "ollama");
    running.ollama_open_egress = ollama.as_ref().is_some_and(|ran| !ran.proxied);
    running.ollama = ollama.map(|ran| ran.lists);
    Ok(Held {
        running,
        cluster_role,
        scc_grants,
        discovery_bindings,
        kubeconfig_copy,
        writable_host_path: inst.spec.storage.host_path.as_ref().is_some_and(|h| !h.read_only),
        workload_running: deployment.as_deref().is_some_and(|d| !scaled_down(d)),
    })
}

/// Whether a revocation scaled the Deployment down (helm's next run takes
/// `spec.replicas` back, and with it this manager's entry).
pub fn scaled_down(d: &Deployment) -> bool {
    d.metadata.managed_fields.iter().flatten().any(|m| m.manager.as_deref() == Some(REVOKE_MANAGER))
}

async fn kubeconfig_still_shared(ctx: &Context, inst: &TinycodeInstance, ns: &str) -> Result<bool, Error> {
    let ca = &inst.spec.cluster_admin;
    let Some(source_ns) = ca.kubeconfig_namespace.as_deref().filter(|n| !n.is_empty() && *n != ns) else {
        return Ok(false);
    };
    let secret = ca.kubeconfig_secret_name.clone().unwrap_or_default();
    match Api::<Secret>::namespaced(ctx.client.clone(), source_ns).get_metadata_opt(&secret).await {
        Ok(Some(s)) => Ok(approval::kubeconfig_shared(s.metadata.annotations.as_ref(), ns)),
        Ok(None) => Ok(false),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(false),
        Err(source) => Err(Error::Kube { during: "read whether the kubeconfig Secret is still shared", source }),
    }
}

/// Withdraws what `inst` holds without approval, stops a workload that used
/// it, and says so in a Warning event; returns what was withdrawn. A call
/// the operator may no longer make (it lost its rights in a namespace) is
/// skipped: the namespace's admin can remove what is left.
pub async fn revoke(ctx: &Context, inst: &TinycodeInstance, why: &str) -> Result<Vec<Withdraw>, Error> {
    let ns = inst.namespace().unwrap_or_default();
    let namespace = ctx.stores.namespaces.get(&ObjectRef::new(&ns));
    let labels = namespace
        .as_ref()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.metadata.labels.clone().unwrap_or_default());
    let held = held(ctx, inst).await?;
    let open = discovery_open(ctx, inst);
    let mut what = withdrawals(inst, labels.as_ref(), &open, &ctx.settings, &held);
    let class = governing_class(ctx, inst);
    for w in class_withdrawals(class.as_ref().map(|(n, s)| (n.as_str(), s)), &held) {
        if !what.contains(&w) {
            what.push(w);
        }
    }
    if what.is_empty() {
        return Ok(what);
    }
    let stop = stops_workload(&what, &held);
    let stop_ollama = stops_ollama(&what, &held);
    let mut skipped = Vec::new();
    for w in &what {
        if let Err(e) = withdraw_one(ctx, inst, w).await {
            tracing::warn!(error = %e, what = %w.describe(), "could not withdraw");
            skipped.push(w.describe());
        }
    }
    if stop && let Err(e) = scale_down(ctx, inst, &naming::fullname(&inst.name_any())).await {
        tracing::warn!(error = %e, "could not scale the workload down");
        skipped.push("the scale-down of the workload".into());
    }
    if stop_ollama && let Err(e) = scale_down(ctx, inst, &naming::ollama(&inst.name_any())).await {
        tracing::warn!(error = %e, "could not scale the bundled Ollama down");
        skipped.push("the scale-down of the bundled Ollama".into());
    }
    let mut note = format!(
        "approval withdrawn ({why}): removed {}",
        what.iter().map(Withdraw::describe).collect::<Vec<_>>().join(", ")
    );
    if stop || stop_ollama {
        note.push_str("; the workload was scaled to zero and starts again once the instance may run");
    }
    if !skipped.is_empty() {
        note.push_str(&format!("; not possible (the operator lacks the rights): {}", skipped.join(", ")));
    }
    ctx.event(inst, EventType::Warning, "ApprovalWithdrawn", "Revoke", note).await;
    Ok(what)
}

/// The class whose limits apply to what runs: the one the spec chooses, else
/// the one it was last rendered under (`status.class`): renaming className
/// to a missing class leaves the release running under its old class.
fn governing_class(ctx: &Context, inst: &TinycodeInstance) -> Option<(String, crate::api::TinycodeClassSpec)> {
    use crate::reconcile::class_policy::Choice;
    match crate::reconcile::stages::observe::class_of(ctx, inst).0 {
        Choice::Found { name, spec, .. } => Some((name, *spec)),
        _ => {
            let last = inst.status.as_ref()?.class.clone()?;
            let class = ctx.stores.classes.get(&ObjectRef::new(&last))?;
            class.metadata.deletion_timestamp.is_none().then(|| (last, class.spec.clone()))
        }
    }
}

/// Namespaces open to this instance's discovery, as far as labels say.
fn discovery_open(ctx: &Context, inst: &TinycodeInstance) -> std::collections::BTreeSet<String> {
    let ns = inst.namespace().unwrap_or_default();
    let mut open = discover::labelled_namespaces(ctx, &ns, &inst.spec);
    if ctx.settings.require_prepared_label {
        open.retain(|n| {
            ctx.stores
                .namespaces
                .get(&ObjectRef::new(n))
                .and_then(|m| m.metadata.labels.clone())
                .is_some_and(|l| prepare::labelled_prepared(&l))
        });
    }
    open
}

pub(crate) async fn withdraw_one(ctx: &Context, inst: &TinycodeInstance, what: &Withdraw) -> Result<(), kube::Error> {
    use crate::reconcile::calls::delete_ignoring_missing;
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let client = ctx.client.clone();
    match what {
        Withdraw::ClusterRoleBinding => {
            delete_ignoring_missing(
                &cluster_api::<ClusterRoleBinding>(&client),
                &naming::cluster_role_binding(&ns, &name),
            )
            .await
        }
        Withdraw::KubeconfigCopy => {
            delete_ignoring_missing(&Api::<Secret>::namespaced(client, &ns), &naming::kubeconfig_copy(&name)).await
        }
        Withdraw::SccGrant(tier) => {
            let api = Api::<RoleBinding>::namespaced(client, &ns);
            delete_ignoring_missing(&api, &naming::scc_grant(&name, tier.as_str())).await
        }
        Withdraw::DiscoveryBinding(other) => {
            let api = Api::<RoleBinding>::namespaced(client, other);
            delete_ignoring_missing(&api, &naming::discovery_binding(&ns, &name)).await
        }
        Withdraw::HostPathWrites | Withdraw::BeyondClass(_) => Ok(()),
    }
}

/// Scales a Deployment of the instance to zero under [`REVOKE_MANAGER`].
pub(crate) async fn scale_down(ctx: &Context, inst: &TinycodeInstance, deployment: &str) -> Result<(), kube::Error> {
    let ns = inst.namespace().unwrap_or_default();
    let api: Api<Deployment> = Api::namespaced(ctx.client.clone(), &ns);
    let params = PatchParams { field_manager: Some(REVOKE_MANAGER.into()), ..Default::default() };
    match api.patch(deployment, &params, &Patch::Merge(json!({"spec": {"replicas": 0}}))).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::TinycodeInstanceSpec;

    fn inst(spec: serde_json::Value) -> TinycodeInstance {
        let mut i = TinycodeInstance::new("dev", serde_json::from_value::<TinycodeInstanceSpec>(spec).unwrap());
        i.metadata.namespace = Some("team".into());
        i
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        let mut l: BTreeMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        l.insert(prepare::PREPARED_LABEL.into(), "true".into());
        l
    }

    fn crb_spec() -> serde_json::Value {
        serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}})
    }

    #[test]
    fn a_cluster_role_stays_while_approved_and_goes_when_the_label_goes() {
        let held = Held { cluster_role: Some("view".into()), ..Default::default() };
        let s = Settings::default();
        let open = Default::default();
        let approved = labels(&[(approval::ALLOW_CLUSTER_ROLE_LABEL, "view")]);
        assert_eq!(withdrawals(&inst(crb_spec()), Some(&approved), &open, &s, &held), vec![]);
        assert_eq!(
            withdrawals(&inst(crb_spec()), Some(&labels(&[])), &open, &s, &held),
            vec![Withdraw::ClusterRoleBinding]
        );
        // Suspending or breaking the spec changes nothing about approval.
        let mut suspended = crb_spec();
        suspended["suspend"] = true.into();
        assert_eq!(
            withdrawals(&inst(suspended), Some(&labels(&[])), &open, &s, &held),
            vec![Withdraw::ClusterRoleBinding]
        );
    }

    #[test]
    fn an_unprepared_or_missing_namespace_withdraws_everything() {
        let held = Held {
            cluster_role: Some("view".into()),
            scc_grants: vec![SccTier::Restricted],
            discovery_bindings: vec!["models".into()],
            kubeconfig_copy: Some(true),
            ..Default::default()
        };
        let s = Settings::default();
        let mut l = labels(&[(approval::ALLOW_CLUSTER_ROLE_LABEL, "view")]);
        l.remove(prepare::PREPARED_LABEL);
        let open = std::collections::BTreeSet::from(["models".to_string()]);
        let mut spec = crb_spec();
        spec["discovery"] = serde_json::json!({"namespaces": ["models"]});
        spec["clusterAdmin"]["kubeconfigNamespace"] = "admins".into();
        let all = vec![
            Withdraw::ClusterRoleBinding,
            Withdraw::KubeconfigCopy,
            Withdraw::SccGrant(SccTier::Restricted),
            Withdraw::DiscoveryBinding("models".into()),
        ];
        assert_eq!(withdrawals(&inst(spec.clone()), Some(&l), &open, &s, &held), all);
        assert_eq!(withdrawals(&inst(spec.clone()), None, &open, &s, &held), all);
        let prepared = labels(&[(approval::ALLOW_CLUSTER_ROLE_LABEL, "view")]);
        assert_eq!(withdrawals(&inst(spec.clone()), Some(&prepared), &open, &s, &held), vec![]);
        // Without the requirement, the label is not needed.
        let lax = Settings { require_prepared_label: false, ..Default::default() };
        assert_eq!(withdrawals(&inst(spec), Some(&l), &open, &lax, &held), vec![]);
    }

    #[test]
    fn privileged_tiers_go_with_their_label_and_stop_the_workload() {
        let s = Settings::default();
        let open = Default::default();
        let shell = serde_json::json!({"shell": {"enabled": true}});
        let held = Held { scc_grants: vec![SccTier::Shell], workload_running: true, ..Default::default() };
        let approved = labels(&[("tinycode.dev/allow-shell", "true")]);
        assert_eq!(withdrawals(&inst(shell.clone()), Some(&approved), &open, &s, &held), vec![]);
        let w = withdrawals(&inst(shell), Some(&labels(&[])), &open, &s, &held);
        assert_eq!(w, vec![Withdraw::SccGrant(SccTier::Shell)]);
        assert!(stops_workload(&w, &held));
        assert!(!stops_workload(&w, &Held { workload_running: false, ..held.clone() }), "already stopped");
        assert!(!stops_workload(&[Withdraw::ClusterRoleBinding], &held), "a binding's rights end with it");
    }

    #[test]
    fn writable_host_directories_need_the_readwrite_approval() {
        let s = Settings::default();
        let open = Default::default();
        let spec = serde_json::json!({"storage": {"hostPath": {"path": "/srv/code"}}});
        let held = Held {
            scc_grants: vec![SccTier::Hostpath],
            writable_host_path: true,
            workload_running: true,
            ..Default::default()
        };
        let rw = labels(&[("tinycode.dev/allow-hostpath", "readwrite")]);
        assert_eq!(withdrawals(&inst(spec.clone()), Some(&rw), &open, &s, &held), vec![]);
        let ro = labels(&[("tinycode.dev/allow-hostpath", "true")]);
        let w = withdrawals(&inst(spec.clone()), Some(&ro), &open, &s, &held);
        assert_eq!(w, vec![Withdraw::HostPathWrites]);
        assert!(stops_workload(&w, &held));
        let none = withdrawals(&inst(spec), Some(&labels(&[])), &open, &s, &held);
        assert_eq!(none, vec![Withdraw::SccGrant(SccTier::Hostpath)], "the grant itself goes");
    }

    #[test]
    fn discovery_bindings_go_with_the_other_namespaces_label() {
        let s = Settings::default();
        let spec = serde_json::json!({"discovery": {"namespaces": ["*"]}});
        let held = Held { discovery_bindings: vec!["a".into(), "b".into()], ..Default::default() };
        let open = std::collections::BTreeSet::from(["a".to_string()]);
        assert_eq!(
            withdrawals(&inst(spec), Some(&labels(&[])), &open, &s, &held),
            vec![Withdraw::DiscoveryBinding("b".into())]
        );
    }

    #[test]
    fn a_kubeconfig_copy_goes_when_no_longer_shared() {
        let s = Settings::default();
        let open = Default::default();
        let spec = serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": "admins"}});
        let shared = Held { kubeconfig_copy: Some(true), ..Default::default() };
        assert_eq!(withdrawals(&inst(spec.clone()), Some(&labels(&[])), &open, &s, &shared), vec![]);
        let unshared = Held { kubeconfig_copy: Some(false), ..Default::default() };
        assert_eq!(withdrawals(&inst(spec), Some(&labels(&[])), &open, &s, &unshared), vec![Withdraw::KubeconfigCopy]);
    }
}

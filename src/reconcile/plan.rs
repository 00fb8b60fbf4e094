//! Stage 3 (pure): from a valid instance and what the cluster holds, the
//! writes the reconcile must make and why. An object the operator applies
//! carries a digest of what it applied; when the cluster's copy still has
//! that digest and nobody else wrote it since, it is not applied again, so a
//! resync of an unchanged instance writes nothing.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;

use crate::api::TinycodeInstance;
use crate::helm::Mode;
use crate::helm::release::{self, Record};
use crate::platform::openshift::Route;
use crate::platform::scc::{self, SccTier};
use crate::reconcile::conditions::{self, Desired};
use crate::reconcile::observe::{Observed, ReleaseFacts};
use crate::reconcile::validate::{PASSWORD_KEY, ValidInstance};
use crate::render::values::{self, Approved, InstanceRef, Values};
use crate::render::{config, ingress, naming, route};
use crate::settings::Settings;
use crate::vllm;

/// Annotation on the Deployment holding the digest of the values it was rendered from.
pub const VALUES_HASH_ANNOTATION: &str = "tinycode.dev/values-hash";
/// Annotation on objects the operator applies itself: a digest of what it applied.
pub const APPLIED_HASH_ANNOTATION: &str = "tinycode.dev/applied-hash";

/// Everything one reconcile writes, in the order [`super::execute`] writes it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub release_name: String,
    pub tier: SccTier,
    /// The generated password Secret, the first time.
    pub password_secret: Option<Secret>,
    /// The SCC grant, when missing or changed (OpenShift).
    pub grant: Option<RoleBinding>,
    /// Grants of other tiers, left from a tier change.
    pub stale_grants: Vec<String>,
    /// The cluster-role binding binds another role: it goes first (roleRef is immutable).
    pub replace_cluster_role_binding: bool,
    pub kubeconfig_copy: Option<Secret>,
    pub values: Values,
    pub helm: Option<HelmRun>,
    /// Records of helm operations that never finished.
    pub pending: Vec<Record>,
    /// The latest revision, when helm does not run.
    pub revision: Option<i64>,
    pub exposure: Exposure,
    /// VllmConfigReady, VllmWarning, ClusterAdminReady, as they apply.
    pub conditions: Vec<Desired>,
    pub warnings: Vec<String>,
    /// The reconcile-request annotation's value, echoed in status once handled.
    pub request: Option<String>,
}

/// Why helm must run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmRun {
    pub reason: String,
    /// Install, upgrade, or move the release from the instance namespace (an
    /// earlier build) to the operator's ([`Mode::Adopt`]).
    pub mode: Mode,
}

/// How the instance is reached: its Route (OpenShift) or Ingress.
#[derive(Debug, Clone)]
pub enum Exposure {
    Route { apply: Option<Route>, live: Option<Arc<Route>> },
    Ingress { apply: Option<Ingress>, delete: bool, live: Option<Arc<Ingress>>, hostname: bool },
}

/// The writes for `valid` given `observed`.
pub fn plan(valid: &ValidInstance, observed: &Observed, inst: &TinycodeInstance, settings: &Settings) -> Plan {
    let spec = &inst.spec;
    let (name, ns) = (valid.name.as_str(), valid.namespace.as_str());
    let owner = owner_reference(inst);
    let mounted: Vec<&str> = valid.mounted.iter().map(String::as_str).filter(|d| !d.is_empty()).collect();
    let approved = Approved {
        cluster_role: valid.cluster_role.clone(),
        discovery_namespaces: valid.discovery_namespaces.clone(),
        secrets_digest: if mounted.is_empty() {
            String::new()
        } else {
            values::sha256_hex(mounted.join("\n").as_bytes())
        },
    };
    let config_json = config::generate(spec, &vllm::served_by_name(&observed.providers));
    let instance = InstanceRef { name, namespace: ns, uid: &valid.uid };
    let values = values::build(&instance, spec, settings, &approved, config_json);
    let request = reconcile_request(inst);
    let handled = inst.status.as_ref().and_then(|s| s.last_handled_reconcile_at.clone());
    let requested = request.is_some() && request != handled;
    let (helm, revision) = helm_run(&observed.release, observed.deployment.as_deref(), &values, requested, &request);
    let mut conditions =
        vllm::conditions_with_skipped(spec, &observed.providers, &observed.discovered, observed.discovery_skipped);
    conditions.extend(valid.cluster_admin_condition.clone());
    Plan {
        release_name: naming::release_name(ns, name),
        tier: valid.tier,
        password_secret: valid
            .generate_password
            .as_ref()
            .map(|(secret, pw)| password_secret(secret, pw, ns, name, &owner)),
        grant: grant(valid, observed, settings, &owner),
        stale_grants: stale_grants(valid, observed),
        replace_cluster_role_binding: valid
            .cluster_role
            .as_ref()
            .is_some_and(|role| observed.bound_cluster_role.as_ref().is_some_and(|bound| bound != role)),
        kubeconfig_copy: kubeconfig_copy(valid, observed, &owner),
        values,
        helm,
        pending: observed.release.records.iter().filter(|r| r.is_pending()).cloned().collect(),
        revision,
        exposure: exposure(valid, observed, inst, settings, owner),
        conditions,
        warnings: valid.warnings.clone(),
        request,
    }
}

/// Whether helm must run (and why), else the deployed revision. Helm runs
/// when the release is missing, not deployed, interrupted, requested, or
/// when the objects it rendered changed: other values, a missing object, or
/// a write by another manager since the release was deployed.
pub fn helm_run(
    release: &ReleaseFacts,
    deployment: Option<&Deployment>,
    values: &Values,
    requested: bool,
    request: &Option<String>,
) -> (Option<HelmRun>, Option<i64>) {
    let run = |reason: String| (Some(HelmRun { reason, mode: Mode::Upgrade }), None);
    let done: Vec<Record> = release.records.iter().filter(|r| !r.is_pending()).cloned().collect();
    let Some(latest) = release::latest(&done) else {
        if release.legacy {
            let reason = "release of an earlier build moves to the operator namespace".to_string();
            return (Some(HelmRun { reason, mode: Mode::Adopt }), None);
        }
        if let Some(old) = &release.renamed_from {
            let reason = format!("release {old} moves to its current name (a shortened name keeps one dot)");
            return (Some(HelmRun { reason, mode: Mode::Adopt }), None);
        }
        if release.records.is_empty() {
            return (Some(HelmRun { reason: "release not installed".into(), mode: Mode::Install }), None);
        }
        return run("release not installed".into());
    };
    if latest.status != "deployed" {
        return run(format!("release is {}", latest.status));
    }
    if release.records.iter().any(Record::is_pending) {
        return run("an interrupted helm operation left the release pending".into());
    }
    if requested {
        return run(format!("reconcile requested ({})", request.clone().unwrap_or_default()));
    }
    match drift(release, deployment, values, latest) {
        Some(reason) => run(reason),
        None => (None, Some(latest.version)),
    }
}

fn drift(release: &ReleaseFacts, deployment: Option<&Deployment>, values: &Values, latest: &Record) -> Option<String> {
    let fullname = naming::fullname(&values.instance.name);
    let Some(deployment) = deployment else { return Some(format!("Deployment {fullname} is missing")) };
    let applied_hash = deployment.metadata.annotations.as_ref().and_then(|a| a.get(VALUES_HASH_ANNOTATION));
    if applied_hash != Some(&values.values_hash) {
        return Some("values, chart or operator version changed".into());
    }
    if let Some(m) = release::foreign_write_after(&deployment.metadata, latest.created) {
        return Some(format!("Deployment {fullname} was changed by {m}"));
    }
    for (obj, meta) in &release.rendered {
        if obj.kind == "Deployment" && obj.name == fullname && obj.namespace == values.instance.namespace {
            continue;
        }
        match meta {
            None => return Some(format!("{} is missing", obj.describe())),
            // PVC specs are immutable and their status churns; only existence matters.
            Some(_) if obj.kind == "PersistentVolumeClaim" => {}
            Some(m) => {
                if let Some(manager) = release::foreign_write_after(m, latest.created) {
                    return Some(format!("{} was changed by {manager}", obj.describe()));
                }
            }
        }
    }
    None
}

fn grant(
    valid: &ValidInstance,
    observed: &Observed,
    settings: &Settings,
    owner: &OwnerReference,
) -> Option<RoleBinding> {
    if !settings.platform.sccs {
        return None;
    }
    let mut desired = scc::grant(&valid.name, &valid.namespace, valid.tier, owner.clone());
    let hash = stamp(&mut desired);
    let name = naming::scc_grant(&valid.name, valid.tier.as_str());
    needs_apply(observed.grants.get(&name), &hash).then_some(desired)
}

fn stale_grants(valid: &ValidInstance, observed: &Observed) -> Vec<String> {
    let current = naming::scc_grant(&valid.name, valid.tier.as_str());
    observed.grants.keys().filter(|g| **g != current).cloned().collect()
}

fn password_secret(secret: &str, password: &str, ns: &str, name: &str, owner: &OwnerReference) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret.into()),
            namespace: Some(ns.into()),
            labels: Some(naming::instance_labels(name, "auth")),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some(BTreeMap::from([(PASSWORD_KEY.to_string(), password.to_string())])),
        ..Default::default()
    }
}

fn kubeconfig_copy(valid: &ValidInstance, observed: &Observed, owner: &OwnerReference) -> Option<Secret> {
    let (key, bytes) = valid.kubeconfig_copy.as_ref()?;
    let mut copy = Secret {
        metadata: ObjectMeta {
            name: Some(naming::kubeconfig_copy(&valid.name)),
            namespace: Some(valid.namespace.clone()),
            labels: Some(naming::instance_labels(&valid.name, "cluster-admin")),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(key.clone(), bytes.clone())])),
        ..Default::default()
    };
    let hash = stamp(&mut copy);
    let live = observed.kubeconfig.as_ref().and_then(|k| k.copy.as_ref());
    needs_apply(live, &hash).then_some(copy)
}

fn exposure(
    valid: &ValidInstance,
    observed: &Observed,
    inst: &TinycodeInstance,
    settings: &Settings,
    owner: OwnerReference,
) -> Exposure {
    let (name, ns) = (valid.name.as_str(), valid.namespace.as_str());
    if settings.platform.routes {
        let mut desired = route::build(name, ns, &inst.spec, owner);
        let hash = stamp(&mut desired);
        let live = observed.route.clone();
        let apply = needs_apply(live.as_ref().map(|r| &r.metadata), &hash).then_some(desired);
        return Exposure::Route { apply, live };
    }
    let class = settings.ingress.class.clone().or_else(|| observed.default_ingress_class.clone());
    let live = observed.ingress.clone();
    match ingress::build(name, ns, &inst.spec, owner, &settings.ingress, class) {
        Some(mut desired) => {
            let hash = stamp(&mut desired);
            let apply = needs_apply(live.as_ref().map(|i| &i.metadata), &hash).then_some(desired);
            Exposure::Ingress { apply, delete: false, live, hostname: true }
        }
        None => Exposure::Ingress { apply: None, delete: live.is_some(), live: None, hostname: false },
    }
}

/// Sets the applied-hash annotation to a digest of the object without it; returns the digest.
pub fn stamp<K: Resource + Serialize>(obj: &mut K) -> String {
    if let Some(a) = obj.meta_mut().annotations.as_mut() {
        a.remove(APPLIED_HASH_ANNOTATION);
    }
    let hash = values::sha256_hex(&serde_json::to_vec(obj).expect("objects serialise"));
    obj.meta_mut().annotations.get_or_insert_with(BTreeMap::new).insert(APPLIED_HASH_ANNOTATION.into(), hash.clone());
    hash
}

/// Whether an object must be applied: it is missing, was applied from
/// something else, or another manager wrote it since.
pub fn needs_apply(live: Option<&ObjectMeta>, hash: &str) -> bool {
    let Some(meta) = live else { return true };
    if meta.annotations.as_ref().and_then(|a| a.get(APPLIED_HASH_ANNOTATION)).map(String::as_str) != Some(hash) {
        return true;
    }
    let ours = meta
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| {
            m.manager.as_deref() == Some(crate::FIELD_MANAGER) && m.subresource.as_deref().unwrap_or("").is_empty()
        })
        .filter_map(|m| m.time.as_ref().map(|t| t.0))
        .max();
    ours.is_none() || release::foreign_write_after(meta, ours).is_some()
}

/// The instance as owner of what the operator creates for it.
pub fn owner_reference(inst: &TinycodeInstance) -> OwnerReference {
    OwnerReference {
        api_version: TinycodeInstance::api_version(&()).into_owned(),
        kind: TinycodeInstance::kind(&()).into_owned(),
        name: inst.metadata.name.clone().unwrap_or_default(),
        uid: inst.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// The value of the reconcile-request annotation, if set.
pub fn reconcile_request(inst: &TinycodeInstance) -> Option<String> {
    inst.metadata.annotations.as_ref().and_then(|a| a.get(conditions::RECONCILE_REQUEST_ANNOTATION)).cloned()
}

#[cfg(test)]
#[path = "plan_tests.rs"]
pub(crate) mod tests;

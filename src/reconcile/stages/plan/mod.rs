//! Stage 3 (pure): from a valid instance and what the cluster holds, the
//! writes the reconcile must make and why. An object the operator applies
//! carries a digest of what it applied; when the cluster's copy still has
//! that digest and nobody else wrote it since, it is not applied again, so a
//! resync of an unchanged instance writes nothing.
//!
//! Whether helm runs is decided in two steps: [`release_state`] says what
//! the release is (absent, of an earlier build, failed, pending, requested,
//! drifted and how, or in sync), and [`next_action`] maps that state to a
//! helm mode. Only [`ValidInstance`] is read of the instance.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::Resource;
use serde::Serialize;

use crate::api::naming;
use crate::helm::release::{self, Record, ReleaseStatus};
use crate::helm::{Mode, manifest};
use crate::platform::openshift::Route;
use crate::platform::scc::{self, SccTier};
use crate::reconcile::conditions::{self, Desired};
use crate::reconcile::stages::observe::{Observed, ReleaseFacts};
use crate::reconcile::stages::validate::{ReconcileRequest, ValidInstance};
use crate::render::values::{self, Approved, InstanceRef, Values};
use crate::render::{config, ingress, route};
use crate::settings::Settings;
use crate::vllm;

use crate::reconcile::marks::{APPLIED_HASH_ANNOTATION, PASSWORD_KEY, VALUES_HASH_ANNOTATION};

/// Everything one reconcile writes, in the order [`super::execute`] writes it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub release_name: String,
    pub tier: SccTier,
    /// The generated password Secret, the first time.
    pub password_secret: Option<Secret>,
    /// Sign-in modes: the sign-in Secret, when missing or out of date.
    pub signin_secret: Option<Secret>,
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
    /// Idle stop, as decided (values.stopped includes it).
    pub idle: crate::reconcile::idle::IdleState,
    /// The rendering waits for the busy agent (helm does not run): set by
    /// `reconcile/rollout.rs` after the plan, never by [`plan`].
    pub held: Option<Held>,
    /// Helm runs while another manager's write is seconds old: look again
    /// soon ([`recent_foreign_write`]).
    pub look_again_soon: bool,
}

/// A rendering that waits for the agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// Digest of the values that run.
    pub current: String,
    pub since: k8s_openapi::jiff::Timestamp,
    pub until: k8s_openapi::jiff::Timestamp,
    /// Why, in words (status.rendering.message).
    pub message: String,
}

/// Helm must run: in which mode, and what state of the release calls for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HelmRun {
    /// Why: the release's state (its [`Display`](fmt::Display) is the message of events and logs).
    pub reason: ReleaseState,
    /// Install, upgrade, or move the release from the instance namespace (an
    /// earlier build) to the operator's ([`Mode::Adopt`]).
    pub mode: Mode,
}

/// The release, against what the instance wants: the first of these that
/// holds, in this order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseState {
    /// No record of the release at all.
    Absent,
    /// The instance's objects belong to a release an earlier build kept in
    /// the instance namespace.
    Legacy,
    /// The release has the name an earlier build shortened it to.
    Renamed { from: String },
    /// Records exist, but only of helm operations that never finished: the
    /// release was never installed.
    Unfinished,
    /// The latest finished revision is not deployed (failed, or being or
    /// already uninstalled).
    NotDeployed { status: ReleaseStatus },
    /// Deployed, but an interrupted helm operation left a pending record.
    Pending,
    /// Deployed, and the reconcile-request annotation asks for a run it has
    /// not had.
    Requested { request: String },
    /// Deployed, and what it rendered is not what the cluster holds.
    Drifted(Drift),
    /// Deployed as wanted, at this revision.
    InSync { revision: i64 },
}

/// What of a deployed release no longer matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Drift {
    /// The Deployment was rendered from other values (or another chart, or
    /// before a change of how helm is run).
    ValuesChanged,
    /// An object of the release is gone.
    Missing(ReleaseObject),
    /// A manager other than the operator's wrote an object after the
    /// release was deployed.
    WrittenBy { object: ReleaseObject, manager: String },
}

/// An object of the release, as drift names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReleaseObject {
    /// The instance's Deployment (in the instance namespace), by name.
    Deployment(String),
    /// Another object the latest deployed revision rendered.
    Rendered(manifest::ObjectRef),
}

impl ReleaseState {
    /// The deployed revision, when helm need not run.
    pub fn revision(&self) -> Option<i64> {
        match self {
            ReleaseState::InSync { revision } => Some(*revision),
            _ => None,
        }
    }
}

impl fmt::Display for ReleaseState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseState::Absent | ReleaseState::Unfinished => f.write_str("release not installed"),
            ReleaseState::Legacy => f.write_str("release of an earlier build moves to the operator namespace"),
            ReleaseState::Renamed { from } => {
                write!(f, "release {from} moves to its current name (a shortened name keeps one dot)")
            }
            ReleaseState::NotDeployed { status } => write!(f, "release is {status}"),
            ReleaseState::Pending => f.write_str("an interrupted helm operation left the release pending"),
            ReleaseState::Requested { request } => write!(f, "reconcile requested ({request})"),
            ReleaseState::Drifted(drift) => drift.fmt(f),
            ReleaseState::InSync { revision } => write!(f, "release deployed at revision {revision}"),
        }
    }
}

impl fmt::Display for Drift {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Drift::ValuesChanged => f.write_str("values or chart changed"),
            Drift::Missing(object) => write!(f, "{object} is missing"),
            Drift::WrittenBy { object, manager } => write!(f, "{object} was changed by {manager}"),
        }
    }
}

impl fmt::Display for ReleaseObject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ReleaseObject::Deployment(name) => write!(f, "Deployment {name}"),
            ReleaseObject::Rendered(obj) => f.write_str(&obj.describe()),
        }
    }
}

/// How the instance is reached: its Route (OpenShift) or Ingress.
#[derive(Debug, Clone)]
pub enum Exposure {
    Route { apply: Option<Route>, live: Option<Arc<Route>> },
    Ingress { apply: Option<Ingress>, delete: bool, live: Option<Arc<Ingress>>, hostname: bool },
}

/// The writes for `valid` given `observed`.
pub fn plan(valid: &ValidInstance, observed: &Observed, settings: &Settings) -> Plan {
    let spec = &valid.spec;
    let (name, ns) = (valid.name.as_str(), valid.namespace.as_str());
    let owner = valid.owner.clone();
    let mounted: Vec<&str> = valid.mounted.iter().map(String::as_str).filter(|d| !d.is_empty()).collect();
    let approved = Approved {
        cluster_role: valid.cluster_role.clone(),
        discovery_namespaces: valid.discovery_namespaces.clone(),
        secrets_digest: if mounted.is_empty() {
            String::new()
        } else {
            // Keyed: the pod template is readable by viewers, who must not
            // be able to test guessed passwords against it.
            values::keyed_hex(&settings.digest_key, mounted.join("\n").as_bytes())
        },
        oidc_endpoints: valid.signin.as_ref().and_then(|s| s.endpoints.clone()),
        idle_stopped: valid.idle.stopped,
        class: valid.from_class.clone(),
    };
    let config_json = config::generate(spec, &vllm::served_by_name(&observed.providers));
    let instance = InstanceRef { name, namespace: ns, uid: &valid.uid };
    let values = values::build(&instance, spec, settings, &approved, config_json);
    let unhandled = valid.request.as_ref().and_then(ReconcileRequest::unhandled);
    let release = release_state(&observed.release, observed.deployment.as_deref(), &values, unhandled);
    let helm = next_action(&release);
    let look_again_soon =
        helm.is_some() && recent_foreign_write(&observed.release, observed.deployment.as_deref(), observed.now);
    let mut conditions =
        conditions::vllm(&vllm::summarize(spec, &observed.providers, &observed.discovered, observed.discovery_skipped));
    conditions.extend(valid.cluster_admin_condition.clone());
    Plan {
        release_name: naming::release_name(ns, name),
        tier: valid.tier,
        password_secret: valid
            .generate_password
            .as_ref()
            .map(|(secret, pw)| password_secret(secret, pw, ns, name, &owner)),
        signin_secret: valid
            .signin
            .as_ref()
            .filter(|s| s.write)
            .map(|s| signin_secret(&s.secret, &s.data, ns, name, &owner)),
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
        revision: release.revision(),
        exposure: exposure(valid, observed, settings, owner),
        conditions,
        warnings: valid.warnings.clone(),
        request: valid.request.as_ref().map(|r| r.value.clone()),
        idle: valid.idle.clone(),
        held: None,
        look_again_soon,
    }
}

/// The state of the release (pure). `request` is the reconcile-request
/// annotation's value when it has not been handled yet.
pub fn release_state(
    release: &ReleaseFacts,
    deployment: Option<&Deployment>,
    values: &Values,
    request: Option<&str>,
) -> ReleaseState {
    let done: Vec<Record> = release.records.iter().filter(|r| !r.is_pending()).cloned().collect();
    let Some(latest) = release::latest(&done) else {
        if release.legacy {
            return ReleaseState::Legacy;
        }
        if let Some(from) = &release.renamed_from {
            return ReleaseState::Renamed { from: from.clone() };
        }
        if release.records.is_empty() {
            return ReleaseState::Absent;
        }
        return ReleaseState::Unfinished;
    };
    if latest.status != ReleaseStatus::Deployed {
        return ReleaseState::NotDeployed { status: latest.status.clone() };
    }
    if release.records.iter().any(Record::is_pending) {
        return ReleaseState::Pending;
    }
    if let Some(request) = request {
        return ReleaseState::Requested { request: request.to_string() };
    }
    match drift(release, deployment, values, latest) {
        Some(drift) => ReleaseState::Drifted(drift),
        None => ReleaseState::InSync { revision: latest.version },
    }
}

/// Whether helm runs for a release in `state`, and how: a release with no
/// record at all is installed, one of an earlier build (another namespace or
/// name) is adopted, anything else but in sync is upgraded.
pub fn next_action(state: &ReleaseState) -> Option<HelmRun> {
    let mode = match state {
        ReleaseState::InSync { .. } => return None,
        ReleaseState::Absent => Mode::Install,
        ReleaseState::Legacy | ReleaseState::Renamed { .. } => Mode::Adopt,
        ReleaseState::Unfinished
        | ReleaseState::NotDeployed { .. }
        | ReleaseState::Pending
        | ReleaseState::Requested { .. }
        | ReleaseState::Drifted(_) => Mode::Upgrade,
    };
    Some(HelmRun { reason: state.clone(), mode })
}

/// What drifted since `latest` was deployed: a missing object, a write by
/// another manager, or other values. Repairs come first: other values may
/// wait for a busy agent (`reconcile/rollout.rs`), a repair never does.
fn drift(release: &ReleaseFacts, deployment: Option<&Deployment>, values: &Values, latest: &Record) -> Option<Drift> {
    let fullname = naming::fullname(&values.instance.name);
    let ours = || ReleaseObject::Deployment(fullname.clone());
    let Some(deployment) = deployment else { return Some(Drift::Missing(ours())) };
    let applied_hash = deployment.metadata.annotations.as_ref().and_then(|a| a.get(VALUES_HASH_ANNOTATION));
    if let Some(repair) = repair(release, deployment, &fullname, values, latest) {
        return Some(repair);
    }
    (applied_hash != Some(&values.values_hash)).then_some(Drift::ValuesChanged)
}

/// An object of the release missing, or written by another manager since
/// `latest` was deployed.
fn repair(
    release: &ReleaseFacts,
    deployment: &Deployment,
    fullname: &str,
    values: &Values,
    latest: &Record,
) -> Option<Drift> {
    let ours = || ReleaseObject::Deployment(fullname.to_string());
    if let Some(manager) = release::foreign_write_after(&deployment.metadata, latest.created) {
        return Some(Drift::WrittenBy { object: ours(), manager });
    }
    for (obj, meta) in &release.rendered {
        if obj.kind == "Deployment" && obj.name == fullname && obj.namespace == values.instance.namespace {
            continue;
        }
        match meta {
            None => return Some(Drift::Missing(ReleaseObject::Rendered(obj.clone()))),
            // PVC specs are immutable and their status churns; only existence matters.
            Some(_) if obj.kind == "PersistentVolumeClaim" => {}
            Some(m) => {
                if let Some(manager) = release::foreign_write_after(m, latest.created) {
                    return Some(Drift::WrittenBy { object: ReleaseObject::Rendered(obj.clone()), manager });
                }
            }
        }
    }
    None
}

/// How far back a foreign write counts as recent: the one second of the
/// times' resolution, and one more for clocks that disagree.
const RECENT: k8s_openapi::jiff::SignedDuration = k8s_openapi::jiff::SignedDuration::from_secs(2);

/// Whether another manager wrote the Deployment or a rendered object within
/// [`RECENT`] of `now`. Written times and the record's creation have
/// one-second resolution, so such a write may fall in the second of the
/// release this helm run writes, which then cannot tell whether it came
/// before the run or after. It counts as after ([`release::foreign_write_after`]),
/// so it is repaired; looking again a little later repairs it by itself, in a
/// later second, rather than with the next change, which could have waited
/// for a busy agent (`reconcile/rollout.rs`) and would not.
pub fn recent_foreign_write(
    release: &ReleaseFacts,
    deployment: Option<&Deployment>,
    now: k8s_openapi::jiff::Timestamp,
) -> bool {
    let since = now.checked_sub(RECENT).ok();
    let rendered = release.rendered.iter().filter(|(obj, _)| obj.kind != "PersistentVolumeClaim");
    deployment
        .map(|d| &d.metadata)
        .into_iter()
        .chain(rendered.filter_map(|(_, meta)| meta.as_ref()))
        .any(|meta| since.is_some() && release::foreign_write_after(meta, since).is_some())
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

/// The sign-in Secret, applied whole (server-side apply drops a key the
/// operator no longer writes, such as the relay credential of a former oidc
/// instance).
fn signin_secret(
    secret: &str,
    data: &BTreeMap<String, String>,
    ns: &str,
    name: &str,
    owner: &OwnerReference,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(secret.into()),
            namespace: Some(ns.into()),
            labels: Some(naming::instance_labels(name, "auth")),
            owner_references: Some(vec![owner.clone()]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        data: Some(data.iter().map(|(k, v)| (k.clone(), k8s_openapi::ByteString(v.clone().into_bytes()))).collect()),
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

fn exposure(valid: &ValidInstance, observed: &Observed, settings: &Settings, owner: OwnerReference) -> Exposure {
    let (name, ns) = (valid.name.as_str(), valid.namespace.as_str());
    if settings.platform.routes {
        let mut desired = route::build(name, ns, &valid.spec, owner);
        let hash = stamp(&mut desired);
        let live = observed.route.clone();
        let apply = needs_apply(live.as_ref().map(|r| &r.metadata), &hash).then_some(desired);
        return Exposure::Route { apply, live };
    }
    let class = settings.ingress.class.clone().or_else(|| observed.default_ingress_class.clone());
    let live = observed.ingress.clone();
    match ingress::build(name, ns, &valid.spec, owner, &settings.ingress, class) {
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

#[cfg(test)]
pub(crate) mod tests;

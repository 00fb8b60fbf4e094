//! Storage that grows (docs/using.md, "Your data"): a larger
//! `spec.storage.dataSize` or `projectsSize` (or `--ollama-models-size`)
//! grows the instance's PVC where its StorageClass allows expansion, and
//! status says so until the volume reports the new size; where it cannot
//! grow, the instance is refused with the reason naming the StorageClass,
//! before anything is applied (helm would otherwise fail half-way with the
//! apiserver's words).
//!
//! A PVC is read only when helm is about to run and the cache of PVC
//! metadata says it asks for another size (the chart writes the size in an
//! annotation), and while status says a volume grows; [`judge`] and
//! [`resized`] are pure. A tenant who edits that annotation only makes the
//! operator read the PVC, or skip the check and let helm meet the
//! apiserver's own refusal.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::{TinycodeInstance, naming};
use crate::reconcile::condition_types::STORAGE_RESIZED;
use crate::reconcile::conditions::Desired;
use crate::reconcile::error::During;
use crate::reconcile::marks::PVC_SIZE_ANNOTATION;
use crate::reconcile::reason::Blocked;
use crate::reconcile::rules::quantity;
use crate::reconcile::{Context, Error};
use crate::render::values::{Values, VolumeSource};

/// A PVC the chart renders, the size it asks for, and the field that sets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub name: String,
    pub size: String,
    pub field: &'static str,
}

/// The PVCs `values` render.
pub fn claims(values: &Values) -> Vec<Claim> {
    let name = &values.instance.name;
    let s = &values.storage;
    let mut out = Vec::new();
    if s.data_volume == VolumeSource::Pvc {
        out.push(Claim { name: naming::data_pvc(name), size: s.data_size.clone(), field: "spec.storage.dataSize" });
    }
    if s.projects_volume == VolumeSource::Pvc {
        let size = s.projects_size.clone();
        out.push(Claim { name: naming::projects_pvc(name), size, field: "spec.storage.projectsSize" });
    }
    if values.ollama.enabled {
        let size = values.ollama.models_size.clone();
        out.push(Claim { name: naming::ollama_models_pvc(name), size, field: "the operator's --ollama-models-size" });
    }
    out
}

/// A PVC that is to grow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Growth {
    pub claim: String,
    pub from: String,
    pub to: String,
}

fn storage(
    q: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Option<String> {
    q.and_then(|m| m.get("storage")).map(|q| q.0.clone())
}

fn requested(pvc: &PersistentVolumeClaim) -> Option<String> {
    storage(pvc.spec.as_ref().and_then(|s| s.resources.as_ref()).and_then(|r| r.requests.as_ref()))
}

/// The claim asks for more than the PVC does.
fn asks_more(claim: &Claim, pvc: &PersistentVolumeClaim) -> bool {
    match (quantity::parse(&claim.size), requested(pvc).as_deref().and_then(quantity::parse)) {
        (Some(want), Some(have)) => want > have,
        _ => false,
    }
}

/// Why a size cannot apply, in words naming the field, the claim and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refused {
    /// Larger, and the PVC cannot grow.
    Grow(String),
    /// Smaller than what the PVC asks for already.
    Shrink(String),
}

/// Whether `claim` grows, given its PVC and that PVC's StorageClass (`None`:
/// it has none, or it does not exist); the refusal's message otherwise.
pub fn judge(
    claim: &Claim,
    pvc: &PersistentVolumeClaim,
    class: Option<&StorageClass>,
    cli: &str,
    ns: &str,
) -> Result<Option<Growth>, Refused> {
    let spec = pvc.spec.as_ref();
    let Some(current) = requested(pvc) else { return Ok(None) };
    let (Some(want), Some(have)) = (quantity::parse(&claim.size), quantity::parse(&current)) else {
        return Ok(None);
    };
    let (name, field, size) = (&claim.name, claim.field, &claim.size);
    if want <= have {
        if want < have {
            return Err(Refused::Shrink(format!(
                "{field}: PersistentVolumeClaim {name} asks for {current}, more than {size} (a PVC never shrinks); set {field} to {current} or more, or re-create the instance for a smaller volume (copy the data first: storage.retainOnDelete keeps the old PVCs, and a new instance of the same name re-uses them)"
            )));
        }
        return Ok(None);
    }
    let back = format!("set {field} back to {current}");
    let sc_name = spec.and_then(|s| s.storage_class_name.clone()).unwrap_or_default();
    if sc_name.is_empty() {
        return Err(Refused::Grow(format!(
            "{field}: PersistentVolumeClaim {name} cannot grow from {current} to {size}: it has no StorageClass (a volume bound by hand cannot be expanded); {back}"
        )));
    }
    let Some(class) = class else {
        return Err(Refused::Grow(format!(
            "{field}: PersistentVolumeClaim {name} cannot grow from {current} to {size}: its StorageClass {sc_name} does not exist; {back}, or ask a cluster-admin to create StorageClass {sc_name} with allowVolumeExpansion: true"
        )));
    };
    if class.allow_volume_expansion != Some(true) {
        return Err(Refused::Grow(format!(
            "{field}: PersistentVolumeClaim {name} cannot grow from {current} to {size}: StorageClass {sc_name} does not allow volume expansion (allowVolumeExpansion is not true); {back}, or ask a cluster-admin to allow it (`{cli} patch storageclass {sc_name} -p '{{\"allowVolumeExpansion\":true}}'`)"
        )));
    }
    let phase = pvc.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "Pending".into());
    if phase != "Bound" {
        return Err(Refused::Grow(format!(
            "{field}: PersistentVolumeClaim {name} cannot grow from {current} to {size} while it is {phase} (only a claim bound to a volume can grow; `{cli} describe pvc -n {ns} {name}`); {back} until it is Bound"
        )));
    }
    Ok(Some(Growth { claim: name.clone(), from: current, to: size.clone() }))
}

/// The StorageResized condition for the instance's PVCs as they are: False
/// while a volume reports less than its claim asks (Resizing, or
/// FileSystemResizePending when the file system waits for the pod to
/// restart), True once every one does.
pub fn resized(pvcs: &[PersistentVolumeClaim], cli: &str) -> Desired {
    let mut waiting = Vec::new();
    let mut restart = false;
    for pvc in pvcs {
        let asked = requested(pvc);
        let status = pvc.status.as_ref();
        // A claim not bound yet has no volume to grow (the rollout's own
        // diagnosis speaks of it).
        if status.and_then(|s| s.phase.as_deref()) != Some("Bound") {
            continue;
        }
        let has = storage(status.and_then(|s| s.capacity.as_ref()));
        let (Some(asked), Some(a)) = (asked.clone(), asked.as_deref().and_then(quantity::parse)) else { continue };
        if has.as_deref().and_then(quantity::parse).is_some_and(|h| h >= a) {
            continue;
        }
        let pending_fs = status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "FileSystemResizePending" && c.status == "True"));
        restart |= pending_fs;
        let has = has.unwrap_or_else(|| "nothing yet".into());
        let how =
            if pending_fs { "its file system grows when the pod restarts" } else { "the volume is being expanded" };
        waiting.push(format!("{} has {has} of {asked} ({how})", pvc.name_any()));
    }
    if waiting.is_empty() {
        return Desired::new(STORAGE_RESIZED, true, "Resized", "every volume has the size its claim asks for");
    }
    let (reason, next) = if restart {
        (
            "FileSystemResizePending",
            format!(
                "; the file system grows at the pod's next start (`{cli} rollout restart deployment` of the instance, or stop and start it)"
            ),
        )
    } else {
        ("Resizing", String::new())
    };
    Desired::new(STORAGE_RESIZED, false, reason, format!("growing: {}{next}", waiting.join("; ")))
}

/// Before a helm run (none: nothing to check): [`check`]. A refusal first
/// withdraws what approvals no longer cover: a size the tenant sets can keep
/// helm from running for as long as they like, and some grants go only with
/// a helm run (a discovery RoleBinding elsewhere).
pub async fn before_helm(
    ctx: &Context,
    inst: &TinycodeInstance,
    plan: &crate::reconcile::stages::plan::Plan,
) -> Result<Vec<Growth>, Error> {
    if plan.helm.is_none() {
        return Ok(Vec::new());
    }
    match check(ctx, inst, &plan.values).await {
        Ok(grown) => Ok(grown),
        Err(refused) => {
            if matches!(refused, Error::Blocked { .. }) {
                crate::reconcile::revoke::revoke(ctx, inst, refused.reason()).await?;
            }
            Err(refused)
        }
    }
}

/// Refuses growth that cannot happen (before anything is applied); returns
/// the PVCs that grow with this helm run.
pub async fn check(ctx: &Context, inst: &TinycodeInstance, values: &Values) -> Result<Vec<Growth>, Error> {
    let ns = inst.namespace().unwrap_or_default();
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let classes: Api<StorageClass> = crate::watch_scope::cluster_api(&ctx.client);
    let cli = ctx.settings.platform.cli();
    let mut out = Vec::new();
    for claim in claims(values) {
        // The cache of PVC metadata answers most runs without a read: no PVC
        // yet (helm creates it), or one that asks for this size already.
        let cached = ctx.stores.pvcs.get(&ObjectRef::new(&claim.name).within(&ns));
        let Some(cached) = cached else { continue };
        if cached.metadata.annotations.as_ref().and_then(|a| a.get(PVC_SIZE_ANNOTATION)) == Some(&claim.size) {
            continue;
        }
        let Some(pvc) = pvcs.get_opt(&claim.name).await.during("read a PVC of the instance")? else { continue };
        // Only a claim asked to grow needs its class.
        let sc = pvc.spec.as_ref().and_then(|s| s.storage_class_name.clone()).unwrap_or_default();
        let class = if asks_more(&claim, &pvc) && !sc.is_empty() {
            classes.get_opt(&sc).await.during("read the StorageClass of a PVC that grows")?
        } else {
            None
        };
        let verdict = judge(&claim, &pvc, class.as_ref(), cli, &ns);
        match verdict {
            Ok(Some(growth)) => out.push(growth),
            Ok(None) => {}
            Err(Refused::Grow(message)) => return Err(Error::blocked(Blocked::StorageCannotGrow, message)),
            Err(Refused::Shrink(message)) => return Err(Error::blocked(Blocked::StorageCannotShrink, message)),
        }
    }
    Ok(out)
}

/// The StorageResized condition after a helm run that grew a PVC, or while
/// status says one grows; None otherwise (no read).
pub async fn condition(ctx: &Context, inst: &TinycodeInstance, values: &Values, grew: bool) -> Option<Desired> {
    let growing = inst
        .status
        .as_ref()
        .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == STORAGE_RESIZED && c.status == "False"));
    if !grew && !growing {
        return None;
    }
    let api: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    let mut pvcs = Vec::new();
    for claim in claims(values) {
        match api.get_opt(&claim.name).await {
            Ok(Some(pvc)) => pvcs.push(pvc),
            Ok(None) => {}
            Err(e) => {
                tracing::debug!(error = %e, "could not read a PVC for its size");
                return after_failed_read(inst, grew);
            }
        }
    }
    Some(resized(&pvcs, ctx.settings.platform.cli()))
}

/// StorageResized when the claims could not be read (pure): what status
/// said stands, and a claim just grown counts as growing, so the next
/// reconcile still follows the volume instead of losing track of it.
fn after_failed_read(inst: &TinycodeInstance, grew: bool) -> Option<Desired> {
    let shown = inst.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == STORAGE_RESIZED));
    match shown {
        Some(c) if !(grew && c.status == "True") => {
            Some(Desired::new(STORAGE_RESIZED, c.status == "True", c.reason.clone(), c.message.clone()))
        }
        _ if grew => Some(Desired::new(
            STORAGE_RESIZED,
            false,
            "Resizing",
            "growing: the claims were resized; their sizes could not be read yet",
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A failed read keeps what status said, and a claim just grown counts
    /// as growing, so the next reconcile follows the volume.
    #[test]
    fn a_failed_read_keeps_track_of_a_growing_volume() {
        let inst = |conditions: serde_json::Value| -> TinycodeInstance {
            serde_json::from_value(json!({"apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
                "metadata": {"name": "dev", "namespace": "team"}, "spec": {},
                "status": {"conditions": conditions}}))
            .unwrap()
        };
        let condition = |status: &str, reason: &str| {
            json!([{"type": STORAGE_RESIZED, "status": status, "reason": reason, "message": "m",
                    "lastTransitionTime": "2026-12-06T00:00:00Z"}])
        };
        let growing = inst(condition("False", "FileSystemResizePending"));
        let kept = after_failed_read(&growing, false).unwrap();
        assert_eq!((kept.status, kept.reason.as_str(), kept.message.as_str()), (false, "FileSystemResizePending", "m"));
        let grown_before = inst(condition("True", "Resized"));
        assert!(!after_failed_read(&grown_before, true).unwrap().status, "grown again: growing");
        assert!(after_failed_read(&grown_before, false).unwrap().status, "nothing new: as status said");
        assert_eq!(after_failed_read(&inst(json!([])), true).unwrap().reason, "Resizing");
        assert_eq!(after_failed_read(&inst(json!([])), false), None);
    }

    fn pvc(
        request: &str,
        class: Option<&str>,
        phase: &str,
        capacity: Option<&str>,
        fs_pending: bool,
    ) -> PersistentVolumeClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "dev-projects"},
            "spec": {"storageClassName": class, "resources": {"requests": {"storage": request}}},
            "status": {"phase": phase, "capacity": capacity.map(|c| json!({"storage": c})),
                       "conditions": if fs_pending { json!([{"type": "FileSystemResizePending", "status": "True"}]) } else { json!([]) }}
        }))
        .unwrap()
    }

    fn sc(expand: Option<bool>) -> StorageClass {
        serde_json::from_value(
            json!({"metadata": {"name": "fast"}, "provisioner": "x", "allowVolumeExpansion": expand}),
        )
        .unwrap()
    }

    fn claim(size: &str) -> Claim {
        Claim { name: "dev-projects".into(), size: size.into(), field: "spec.storage.projectsSize" }
    }

    #[test]
    fn a_claim_grows_only_bound_and_under_a_class_that_allows_it() {
        let bound = pvc("20Gi", Some("fast"), "Bound", Some("20Gi"), false);
        let yes = sc(Some(true));
        assert_eq!(
            judge(&claim("30Gi"), &bound, Some(&yes), "oc", "team"),
            Ok(Some(Growth { claim: "dev-projects".into(), from: "20Gi".into(), to: "30Gi".into() }))
        );
        // The same size, however spelt, is no growth.
        assert_eq!(judge(&claim("20480Mi"), &bound, None, "oc", "team"), Ok(None));
        for class in [sc(None), sc(Some(false))] {
            let Refused::Grow(err) = judge(&claim("30Gi"), &bound, Some(&class), "oc", "team").unwrap_err() else {
                panic!("not a refused growth")
            };
            assert!(
                err.starts_with("spec.storage.projectsSize:")
                    && err.contains("StorageClass fast does not allow volume expansion")
                    && err.contains("set spec.storage.projectsSize back to 20Gi"),
                "{err}"
            );
        }
        let grow = |pvc: &PersistentVolumeClaim, class: Option<&StorageClass>| match judge(
            &claim("30Gi"),
            pvc,
            class,
            "oc",
            "team",
        ) {
            Err(Refused::Grow(m)) => m,
            other => panic!("{other:?}"),
        };
        let err = grow(&bound, None);
        assert!(err.contains("StorageClass fast does not exist"), "{err}");
        let pending = pvc("20Gi", Some("fast"), "Pending", None, false);
        let err = grow(&pending, Some(&yes));
        assert!(err.contains("while it is Pending") && err.contains("oc describe pvc -n team dev-projects"), "{err}");
        let unclassed = pvc("20Gi", Some(""), "Bound", Some("20Gi"), false);
        let err = grow(&unclassed, Some(&yes));
        assert!(err.contains("has no StorageClass"), "{err}");
        match judge(&claim("10Gi"), &bound, Some(&yes), "oc", "team") {
            Err(Refused::Shrink(err)) => assert!(err.contains("never shrinks"), "{err}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn status_says_a_volume_grows_until_it_reports_the_size() {
        let reason = |pvcs: &[PersistentVolumeClaim]| {
            let d = resized(pvcs, "kubectl");
            (d.status, d.reason.to_string(), d.message)
        };
        let (ok, why, _) = reason(&[pvc("30Gi", Some("fast"), "Bound", Some("30Gi"), false)]);
        assert_eq!((ok, why.as_str()), (true, "Resized"));
        let (ok, why, msg) = reason(&[pvc("30Gi", Some("fast"), "Bound", Some("20Gi"), false)]);
        assert_eq!((ok, why.as_str()), (false, "Resizing"));
        assert!(msg.contains("dev-projects has 20Gi of 30Gi"), "{msg}");
        let (ok, why, msg) = reason(&[pvc("30Gi", Some("fast"), "Bound", Some("20Gi"), true)]);
        assert_eq!((ok, why.as_str()), (false, "FileSystemResizePending"));
        assert!(msg.contains("pod restarts") && msg.contains("kubectl rollout restart"), "{msg}");
        // Provisioned larger than asked is as good as asked.
        let (ok, _, _) = reason(&[pvc("30Gi", Some("fast"), "Bound", Some("32Gi"), false)]);
        assert!(ok);
        // A claim still Pending has no volume to grow.
        let (ok, _, _) = reason(&[pvc("30Gi", Some("fast"), "Pending", None, false)]);
        assert!(ok);
    }
}

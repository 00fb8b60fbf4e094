//! Storage that grows (docs/using.md, "Your data") against the real
//! apiserver, its PersistentVolumeClaimResize admission and helm. No volume
//! provisioner or resizer runs here, so the test stands in for them on the
//! PVCs' status subresource (Bound with a capacity, a resize pending, the new
//! capacity), as the harness stands in for the kubelet on Deployments.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tinycode_operator::api::{TinycodeInstance, naming};

use crate::harness::*;
use crate::tenancy::failed_with;

/// A PVC grows under a StorageClass that allows expansion, and status follows
/// the volume (resizing, a file system waiting for a restart, resized); under
/// one that does not, or while the PVC is not bound, the larger size is
/// refused with the reason naming the StorageClass and nothing is applied,
/// and setting the size back runs the instance again; a size below what the
/// PVC holds is refused too.
pub async fn storage_grows_where_its_class_allows(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("grow");
    env.prepare_with_script(&ns)?;
    let (grows, fixed) = (format!("{ns}-grows"), format!("{ns}-fixed"));
    let classes: Api<StorageClass> = Api::all(c.clone());
    for (name, expand) in [(&grows, true), (&fixed, false)] {
        let _ = classes.delete(name, &DeleteParams::default()).await;
        let sc: StorageClass = serde_json::from_value(json!({"metadata": {"name": name},
            "provisioner": "example.test/none", "allowVolumeExpansion": expand}))
        .ctx("storage class")?;
        classes.create(&PostParams::default(), &sc).await.ctx("create a StorageClass")?;
    }
    let storage = |class: &str, size: &str| json!({"storage": {"storageClassName": class, "projectsSize": size}});
    for (name, class) in [("wide", &grows), ("tight", &fixed), ("unbound", &grows)] {
        apply_instance(&c, &ns, name, storage(class, "1Gi")).await.ctx("apply instance")?;
    }
    for name in ["wide", "tight", "unbound"] {
        run_to_running(&c, &ns, name).await?;
    }
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), &ns);
    // The provisioner's part: the claims of two instances are bound.
    for name in ["wide", "tight"] {
        pvc_status(&pvcs, &naming::projects_pvc(name), json!({"phase": "Bound", "capacity": {"storage": "1Gi"}}))
            .await?;
    }
    let revision =
        |name: &str| -> Result<Option<i64>, String> { Ok(env.release(&naming::release_name(&ns, name))?.map(|r| r.0)) };

    // Grows where the class allows it: the PVC asks for more, status says it grows.
    let before = revision("wide")?;
    apply_instance(&c, &ns, "wide", storage(&grows, "2Gi")).await.ctx("grow")?;
    let claim = naming::projects_pvc("wide");
    wait_for("the PVC to ask for 2Gi", WAIT, || async {
        Ok((requested(&pvcs, &claim).await?.as_deref() == Some("2Gi")).then_some(()))
    })
    .await?;
    ensure_eq(revision("wide")?, before.map(|r| r + 1), "one revision for the growth")?;
    let msg = storage_condition(&c, &ns, "wide", "False", "Resizing").await?;
    ensure(msg.contains(&claim) && msg.contains("1Gi of 2Gi"), format!("the message names the claim: {msg}"))?;
    // The resizer's part: the volume grew, its file system waits for the
    // pod's restart (the capacity stays until then).
    let pending = json!([{"type": "FileSystemResizePending", "status": "True"}]);
    pvc_status(&pvcs, &claim, json!({"conditions": pending})).await?;
    let msg = storage_condition(&c, &ns, "wide", "False", "FileSystemResizePending").await?;
    ensure(msg.contains("restart"), format!("the message says a restart grows it: {msg}"))?;
    pvc_status(&pvcs, &claim, json!({"capacity": {"storage": "2Gi"}, "conditions": []})).await?;
    storage_condition(&c, &ns, "wide", "True", "Resized").await?;
    run_to_running(&c, &ns, "wide").await?;

    // Refused where the class does not allow it: nothing applied.
    let before = revision("tight")?;
    apply_instance(&c, &ns, "tight", storage(&fixed, "2Gi")).await.ctx("grow tight")?;
    let msg = failed_with(&c, &ns, "tight", "StorageCannotGrow").await?;
    ensure(
        msg.starts_with("spec.storage.projectsSize:")
            && msg.contains(&format!("StorageClass {fixed} does not allow volume expansion"))
            && msg.contains("back to 1Gi"),
        format!("the message names the field, the StorageClass and the fix: {msg}"),
    )?;
    ensure_eq(revision("tight")?, before, "helm ran for a refused growth")?;
    ensure_eq(requested(&pvcs, &naming::projects_pvc("tight")).await?.as_deref(), Some("1Gi"), "tight's PVC")?;
    // Not bound yet: refused too, saying so.
    apply_instance(&c, &ns, "unbound", storage(&grows, "2Gi")).await.ctx("grow unbound")?;
    let msg = failed_with(&c, &ns, "unbound", "StorageCannotGrow").await?;
    ensure(msg.contains("while it is Pending"), format!("the message says the claim is not bound: {msg}"))?;
    // Back to the size it holds: it runs again.
    apply_instance(&c, &ns, "tight", storage(&fixed, "1Gi")).await.ctx("back to 1Gi")?;
    wait_phase(&c, &ns, "tight", "Running").await?;
    // Below what the PVC holds: refused, nothing applied.
    let before = revision("wide")?;
    apply_instance(&c, &ns, "wide", storage(&grows, "1Gi")).await.ctx("shrink")?;
    let msg = failed_with(&c, &ns, "wide", "StorageCannotShrink").await?;
    ensure(
        msg.starts_with("spec.storage.projectsSize:") && msg.contains("2Gi") && msg.contains("never shrinks"),
        format!("the message names the field and what the PVC holds: {msg}"),
    )?;
    ensure_eq(revision("wide")?, before, "helm ran for a shrink")?;
    ensure_eq(requested(&pvcs, &claim).await?.as_deref(), Some("2Gi"), "wide's PVC after the shrink")?;

    for name in ["wide", "tight", "unbound"] {
        super::delete_and_wait_gone(&c, &ns, name).await?;
    }
    for name in [&grows, &fixed] {
        classes.delete(name, &DeleteParams::default()).await.ctx("delete a StorageClass")?;
    }
    Ok(())
}

/// Merges `status` into the PVC's status (the stand-in for a provisioner or resizer).
async fn pvc_status(pvcs: &Api<PersistentVolumeClaim>, name: &str, status: Value) -> TestResult {
    pvcs.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status})))
        .await
        .map(|_| ())
        .ctx(&format!("status of PVC {name}"))
}

async fn requested(pvcs: &Api<PersistentVolumeClaim>, name: &str) -> Result<Option<String>, String> {
    let pvc = pvcs.get(name).await.ctx("pvc")?;
    let requests: BTreeMap<_, _> = pvc.spec.and_then(|s| s.resources).and_then(|r| r.requests).unwrap_or_default();
    Ok(requests.get("storage").map(|q| q.0.clone()))
}

/// Waits for the StorageResized condition with `status` and `reason`; its message.
async fn storage_condition(c: &Client, ns: &str, name: &str, status: &str, reason: &str) -> Result<String, String> {
    wait_for(&format!("{name}: StorageResized {status} ({reason})"), WAIT, || async {
        let inst: TinycodeInstance = get_instance(c, ns, name).await?.ok_or("gone")?;
        let found = inst.status.unwrap_or_default().conditions.into_iter().find(|c| c.type_ == "StorageResized");
        Ok(found.filter(|c| c.status == status && c.reason == reason).map(|c| c.message))
    })
    .await
}

//! The delete path: Terminating → helm uninstall → grants, Route and
//! copies removed → PVCs deleted only when the user said so. It always
//! completes: where the namespace is being deleted or the operator lost its
//! rights there, namespaced objects are taken as gone (a Warning event names
//! what may be left), while the release records and the instance's objects
//! outside the namespace are still removed. Reads here are live: deletion
//! is rare and must not trust a cache.

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{DeleteParams, ListParams};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

use crate::api::naming;
use crate::api::{Phase, TinycodeInstance};
use crate::platform::openshift::Route;
use crate::platform::scc::ALL_TIERS;
use crate::reconcile::calls::delete_ignoring_missing;
use crate::reconcile::error::During;
use crate::reconcile::stages::observe::prepared_live;
use crate::reconcile::stages::status;
use crate::reconcile::status_writes::write_status;
use crate::reconcile::{Context, Error};
use crate::watch_scope::cluster_api;

/// Delete path: Terminating → helm uninstall → grants, Route and copies
/// removed → PVCs deleted only when the user said so. It always completes:
/// when the namespace is being deleted or the operator lost its rights there,
/// namespaced objects are taken as gone (a Warning event names what may be
/// left), while the release records and the instance's objects outside the
/// namespace are still removed.
pub async fn cleanup(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let name = inst.name_any();
    let ns = inst.namespace().unwrap_or_default();
    if inst.status.as_ref().and_then(|s| s.phase) != Some(Phase::Terminating) {
        let st = status::terminating(inst, &crate::reconcile::basics::now());
        if let Err(e) = write_status(ctx, inst, &st).await {
            tracing::debug!(error = %e, "could not mark the instance Terminating");
        }
    }
    let namespace = cluster_api::<Namespace>(&ctx.client).get_opt(&ns).await.during("read the instance namespace")?;
    let terminating = namespace.as_ref().is_none_or(|n| n.metadata.deletion_timestamp.is_some());
    let degraded = terminating || !matches!(prepared_live(ctx, &ns).await, Ok(missing) if missing.is_empty());
    let mut left: Vec<String> = Vec::new();
    uninstall(ctx, inst, degraded, &mut left).await?;
    remove_own_objects(ctx, &ns, &name, &mut left).await?;
    remove_outside_objects(ctx, &ns, &name, &mut left).await?;
    let kept = if inst.spec.storage.retain_on_delete {
        "the data volumes were kept (storage.retainOnDelete)"
    } else {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
        for pvc in [naming::data_pvc(&name), naming::projects_pvc(&name), naming::ollama_models_pvc(&name)] {
            note_left(delete_namespaced(&pvcs, &pvc).await.during("delete the data volumes")?, &mut left);
        }
        "the data volumes were deleted (storage.retainOnDelete is false)"
    };
    if !left.is_empty() {
        let why = if terminating {
            format!("namespace {ns} is being deleted")
        } else {
            "operator has lost its rights in a namespace of the instance".to_string()
        };
        let note = format!(
            "the {why}; these may remain until their namespace goes or its admin removes them: {}; the release records and cluster-wide bindings were removed",
            left.join(", ")
        );
        ctx.event(inst, EventType::Warning, "CleanupIncomplete", "Cleanup", note).await;
    }
    let release_name = naming::release_name(&ns, &name);
    let note = format!("release {release_name} uninstalled and SCC grant removed; {kept}");
    ctx.event(inst, EventType::Normal, "Deleted", "Cleanup", note).await;
    ctx.metrics.phase(&crate::reconcile::basics::instance_key(inst), None);
    ctx.metrics.rollout_waits(&crate::reconcile::basics::instance_key(inst), false);
    ctx.retries.lock().expect("lock").clear(&ObjectRef::from_obj(inst));
    Ok(Action::await_change())
}

/// `helm uninstall`, then the release records go: they are the operator's
/// own and never left behind, even when the uninstall could not finish.
async fn uninstall(
    ctx: &Context,
    inst: &TinycodeInstance,
    degraded: bool,
    left: &mut Vec<String>,
) -> Result<(), Error> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    // An instance deleted before its release moved to the current name has
    // its records under the name an earlier build gave it.
    let names = std::iter::once(naming::release_name(&ns, &name)).chain(naming::previous_release_name(&ns, &name));
    for release_name in names {
        uninstall_release(ctx, inst, &release_name, degraded, left).await?;
    }
    Ok(())
}

async fn uninstall_release(
    ctx: &Context,
    inst: &TinycodeInstance,
    release_name: &str,
    degraded: bool,
    left: &mut Vec<String>,
) -> Result<(), Error> {
    let storage_ns = &ctx.settings.operator_namespace;
    let records_api: Api<Secret> = Api::namespaced(ctx.client.clone(), storage_ns);
    let selector = ListParams::default().labels(&crate::helm::record_selector(release_name));
    if records_api.list_metadata(&selector).await.during("list the release records")?.items.is_empty() {
        return Ok(());
    }
    match ctx.helm.uninstall(release_name, storage_ns).await {
        Ok(()) => {}
        Err(e) if degraded => {
            tracing::warn!(error = %e, "helm uninstall failed in a namespace the operator cannot manage any more");
            left.push(format!("the objects of release {release_name}"));
        }
        Err(e) => {
            // Another namespace's admin may have revoked the operator's
            // rights there (a discovery namespace): that must not hold this
            // instance's deletion hostage.
            let lost = unprepared_others(ctx, inst).await;
            if lost.is_empty() {
                return Err(e.into());
            }
            tracing::warn!(error = %e, namespaces = ?lost, "helm uninstall failed where the operator lost its rights");
            left.push(format!("the objects of release {release_name} in {}", lost.join(", ")));
        }
    }
    records_api.delete_collection(&DeleteParams::default(), &selector).await.during("delete the release records")?;
    Ok(())
}

/// Namespaces other than the instance's where its release put objects
/// (discovery RoleBindings) and the operator may no longer manage them.
async fn unprepared_others(ctx: &Context, inst: &TinycodeInstance) -> Vec<String> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let binding = naming::discovery_binding(&ns, &name);
    let mut others: std::collections::BTreeSet<String> = ctx
        .stores
        .role_bindings
        .state()
        .iter()
        .filter(|rb| rb.metadata.name.as_deref() == Some(binding.as_str()))
        .filter_map(|rb| rb.metadata.namespace.clone())
        .collect();
    others.extend(inst.spec.discovery.iter().flat_map(|d| d.namespaces.iter()).filter(|n| *n != "*").cloned());
    others.remove(&ns);
    let mut lost = Vec::new();
    for other in others {
        if !matches!(prepared_live(ctx, &other).await, Ok(missing) if missing.is_empty()) {
            lost.push(other);
        }
    }
    lost
}

/// What the operator applied itself in the namespace: SCC grants, the Route
/// or Ingress, the kubeconfig copy.
async fn remove_own_objects(ctx: &Context, ns: &str, name: &str, left: &mut Vec<String>) -> Result<(), Error> {
    let client = &ctx.client;
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    for tier in ALL_TIERS {
        note_left(
            delete_namespaced(&bindings, &naming::scc_grant(name, tier.as_str()))
                .await
                .during("delete the SCC grants")?,
            left,
        );
    }
    if ctx.settings.platform.routes {
        let routes = Api::<Route>::namespaced(client.clone(), ns);
        note_left(delete_namespaced(&routes, &naming::route(name)).await.during("delete the Route")?, left);
    } else {
        let ingresses = Api::<Ingress>::namespaced(client.clone(), ns);
        note_left(delete_namespaced(&ingresses, &naming::route(name)).await.during("delete the Ingress")?, left);
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), ns);
    note_left(
        delete_namespaced(&secrets, &naming::kubeconfig_copy(name)).await.during("delete the kubeconfig copy")?,
        left,
    );
    Ok(())
}

/// Objects of the instance outside its namespace, found by their instance
/// labels: the cluster-role binding and discovery RoleBindings elsewhere
/// (looked for within the watched namespaces only: with one watched, the
/// operator discovers nowhere else, and helm's uninstall removes what an
/// earlier, wider scope put there).
async fn remove_outside_objects(ctx: &Context, ns: &str, name: &str, left: &mut Vec<String>) -> Result<(), Error> {
    let selector = format!("tinycode.dev/instance-namespace={ns},tinycode.dev/instance-name={name}");
    let lp = ListParams::default().labels(&selector);
    let crbs = cluster_api::<ClusterRoleBinding>(&ctx.client);
    for crb in crbs.list_metadata(&lp).await.during("list the instance's ClusterRoleBindings")?.items {
        delete_ignoring_missing(&crbs, &crb.name_any()).await.during("delete the instance's ClusterRoleBindings")?;
    }
    delete_ignoring_missing(&crbs, &naming::cluster_role_binding(ns, name))
        .await
        .during("delete the instance's ClusterRoleBinding")?;
    for rb in ctx
        .settings
        .watch_scope
        .api::<RoleBinding>(&ctx.client)
        .list_metadata(&lp)
        .await
        .during("list the instance's RoleBindings in other namespaces")?
        .items
    {
        let rb_ns = rb.metadata.namespace.clone().unwrap_or_default();
        let api: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &rb_ns);
        note_left(
            delete_namespaced(&api, &rb.name_any())
                .await
                .during("delete the instance's RoleBindings in other namespaces")?
                .map(|o| format!("{o} in {rb_ns}")),
            left,
        );
    }
    Ok(())
}

/// Deletes a namespaced object; `Some(what)` when the operator may not
/// (it lost its rights there), `None` when it is gone.
async fn delete_namespaced<K>(api: &Api<K>, name: &str) -> Result<Option<String>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Some(format!("{} {name}", K::kind(&())))),
        Err(e) => Err(e),
    }
}

fn note_left(what: Option<String>, left: &mut Vec<String>) {
    left.extend(what);
}

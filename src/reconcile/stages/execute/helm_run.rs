//! The helm step of [`super::execute`]: `helm install` or `upgrade --install` within the
//! rendering's retry budget, a rollback to the last good revision when an
//! upgrade fails, the move of a release an earlier build kept in the
//! instance namespace, and discarding records of interrupted runs.

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{DeleteParams, ListParams, Preconditions};
use kube::runtime::events::EventType;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::TinycodeInstance;
use crate::api::naming;
use crate::helm::{Mode, release};
use crate::reconcile::calls::delete_ignoring_missing;
use crate::reconcile::error::During;
use crate::reconcile::reason::Blocked;
use crate::reconcile::stages::plan::{HelmRun, Plan};
use crate::reconcile::status_writes::await_revision;
use crate::reconcile::{Context, Error, conditions};
use crate::watch_scope::cluster_api;

/// Runs helm for `plan`; returns the new revision.
pub async fn run(ctx: &Context, inst: &TinycodeInstance, plan: &Plan, why: &HelmRun) -> Result<i64, Error> {
    let release_name = &plan.release_name;
    let storage_ns = &ctx.settings.operator_namespace;
    discard_pending(ctx, inst, plan).await?;
    let key = ObjectRef::from_obj(inst);
    let attempt = attempt_key(plan);
    {
        let mut retries = ctx.retries.lock().expect("lock");
        if let Some(f) = inst.status.as_ref().and_then(|s| s.helm_failures.as_ref()) {
            retries.seed(&key, &f.attempt, f.count, &f.last_error);
        }
        if !retries.may_run(&key, &attempt) {
            return Err(Error::Stalled(format!(
                "helm failed {} times for this spec and chart and is not run again until the spec, the chart or the annotation {} changes; last error: {}",
                retries.max(),
                conditions::RECONCILE_REQUEST_ANNOTATION,
                retries.last_error(&key).unwrap_or_default()
            )));
        }
    }
    tracing::info!(release = %release_name, reason = %why.reason, "applying helm release");
    let applied = match ctx.helm.apply(release_name, storage_ns, &plan.values, why.mode).await {
        Ok(applied) => applied,
        Err(e) => {
            let failures = ctx.retries.lock().expect("lock").failed(&key, &attempt, &e.to_string());
            // The operator's rights in a namespace of the release may be gone
            // (another namespace's admin can revoke them): ask again next time.
            let own = plan.values.instance.namespace.as_str();
            let others = plan.values.discovery.namespaces.iter().map(String::as_str);
            crate::reconcile::stages::observe::forget_prepared(ctx, std::iter::once(own).chain(others));
            roll_back_to_last_good(ctx, inst, release_name).await;
            let max = ctx.retries.lock().expect("lock").max();
            if failures >= max {
                return Err(Error::Stalled(format!(
                    "helm failed {failures} times for this spec and chart; fix the cause, then change the spec or set the annotation {} to a new value: {e}",
                    conditions::RECONCILE_REQUEST_ANNOTATION
                )));
            }
            return Err(e.into());
        }
    };
    ctx.retries.lock().expect("lock").clear(&key);
    if let Some(objs) = applied.rendered {
        ctx.remember_rendered(&release::record_name(release_name, applied.revision), objs);
    }
    let note = format!(
        "release {release_name} revision {} applied ({}) for {}",
        applied.revision,
        why.reason,
        inst.name_any()
    );
    ctx.event(inst, EventType::Normal, "HelmApplied", "Helm", note).await;
    if why.mode == Mode::Adopt {
        finish_migration(ctx, inst).await?;
    }
    await_revision(ctx, release_name, applied.revision).await;
    Ok(applied.revision)
}

/// What one helm attempt applies: the rendering and the reconcile request
/// (a digest: it is kept in status).
fn attempt_key(plan: &Plan) -> String {
    let text = format!("{}|{}", plan.values.values_hash, plan.request.clone().unwrap_or_default());
    crate::render::values::sha256_hex(text.as_bytes())[..16].to_string()
}

/// The failures `status.helmFailures` records for `inst` (error shortened).
pub fn recorded_failures(ctx: &Context, inst: &TinycodeInstance) -> Option<crate::api::HelmFailures> {
    let retries = ctx.retries.lock().expect("lock");
    let (attempt, count, last_error) = retries.failures(&ObjectRef::from_obj(inst))?;
    let mut end = last_error.len().min(1024);
    while !last_error.is_char_boundary(end) {
        end -= 1;
    }
    Some(crate::api::HelmFailures { attempt: attempt.into(), count, last_error: last_error[..end].into() })
}

/// Records of a helm operation nobody is working on are left from an
/// interrupted run (the operator was killed mid-upgrade): drop them so helm
/// can proceed. A record this process is writing is never touched, nor one
/// younger than the leader lease unless this process wrote it (a previous
/// leader may still be finishing it).
async fn discard_pending(ctx: &Context, inst: &TinycodeInstance, plan: &Plan) -> Result<(), Error> {
    let storage_ns = &ctx.settings.operator_namespace;
    if plan.pending.is_empty() || ctx.helm.is_running(storage_ns, &plan.release_name) {
        return Ok(());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), storage_ns);
    let check = release::PendingCheck::now(&ctx.helm, &ctx.settings, storage_ns, &plan.release_name);
    for r in &plan.pending {
        if !release::may_discard_pending(r, &check) {
            return Err(Error::blocked(Blocked::HelmOperationPending, check.wait_message(r)));
        }
        tracing::warn!(release = %plan.release_name, revision = r.version, status = %r.status, "removing an interrupted helm operation");
        // Only the record as seen: one helm finished since is not pending any more.
        let seen = Preconditions { resource_version: r.resource_version.clone(), uid: None };
        match api.delete(&r.secret_name, &DeleteParams { preconditions: Some(seen), ..Default::default() }).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(source) => return Err(Error::Kube { during: "discard the record of an interrupted helm run", source }),
        }
        let note = format!(
            "revision {} of release {} was left {} by an interrupted run; it was discarded and the release re-applied",
            r.version, plan.release_name, r.status
        );
        ctx.event(inst, EventType::Warning, "HelmRecovered", "Helm", note).await;
    }
    Ok(())
}

/// After a failed upgrade of a release that had worked, goes back to its
/// last good revision, so the instance keeps running what worked. Best
/// effort: a failure here is logged and the next attempt tries again.
async fn roll_back_to_last_good(ctx: &Context, inst: &TinycodeInstance, release_name: &str) {
    let storage_ns = &ctx.settings.operator_namespace;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), storage_ns);
    let Ok(list) = api.list_metadata(&ListParams::default().labels(&crate::helm::record_selector(release_name))).await
    else {
        return;
    };
    let records = release::records(&list.items.into_iter().map(|m| m.metadata).collect::<Vec<_>>());
    let Some(failed) = release::latest(&records).filter(|r| r.status == release::ReleaseStatus::Failed) else { return };
    let Some(good) = release::last_good(&records, failed.version) else { return };
    match ctx.helm.rollback(release_name, storage_ns, good.version).await {
        Ok(()) => {
            let note = format!(
                "revision {} of release {release_name} failed; rolled back to revision {}, the last that worked",
                failed.version, good.version
            );
            ctx.event(inst, EventType::Warning, "HelmRolledBack", "Helm", note).await
        }
        Err(e) => tracing::warn!(release = release_name, error = %e, "rollback failed"),
    }
}

/// After the release was re-created in the operator namespace: the old
/// records go (deleted, never read), and so does the old cluster-wide
/// discovery binding, which the new release replaces with RoleBindings.
async fn finish_migration(ctx: &Context, inst: &TinycodeInstance) -> Result<(), Error> {
    let (ns, name) = (inst.namespace().unwrap_or_default(), inst.name_any());
    let legacy = naming::legacy_release_name(&ns, &name);
    Api::<Secret>::namespaced(ctx.client.clone(), &ns)
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&crate::helm::record_selector(&legacy)),
        )
        .await
        .during("delete the records of the release an earlier build kept")?;
    let old_binding = naming::legacy_discovery_cluster_binding(&ns, &name);
    delete_ignoring_missing(&cluster_api::<ClusterRoleBinding>(&ctx.client), &old_binding)
        .await
        .during("delete the ClusterRoleBinding an earlier build made for discovery")?;
    let current = naming::release_name(&ns, &name);
    let note = match naming::previous_release_name(&ns, &name) {
        // A release under the name an earlier build shortened it to: its
        // records (in the operator namespace) go the same way.
        Some(previous) => {
            Api::<Secret>::namespaced(ctx.client.clone(), &ctx.settings.operator_namespace)
                .delete_collection(
                    &DeleteParams::default(),
                    &ListParams::default().labels(&crate::helm::record_selector(&previous)),
                )
                .await
                .during("delete the records of the release under its earlier name")?;
            format!(
                "release {previous} (or {legacy} in {ns}) of an earlier build now lives as {current}; its old records were deleted"
            )
        }
        None => format!(
            "release {legacy} of an earlier build now lives in the operator namespace as {current}; its old records in {ns} were deleted"
        ),
    };
    ctx.event(inst, EventType::Normal, "HelmMigrated", "Helm", note).await;
    Ok(())
}

//! Status writes, and the wait for a helm revision to reach the record
//! cache: each remembers what it wrote in [`written`] (the caches that trail
//! the operator's own writes).

use std::time::Duration;

use kube::api::Patch;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;

use crate::api::{TinycodeInstance, TinycodeInstanceStatus};
use crate::helm::release;
#[cfg(doc)]
use crate::reconcile::caches::written;
use crate::reconcile::calls::apply_params;
use crate::reconcile::context::Context;

/// Writes the status (server-side apply of the status subresource) and
/// remembers it for reconciles woken before the cache shows it.
pub async fn write_status(
    ctx: &Context,
    inst: &TinycodeInstance,
    status: &TinycodeInstanceStatus,
) -> Result<(), kube::Error> {
    let api: Api<TinycodeInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    let status = &without_last_use(status);
    let patch = json!({
        "apiVersion": TinycodeInstance::api_version(&()),
        "kind": TinycodeInstance::kind(&()),
        "status": status,
    });
    let written = api.patch_status(&inst.name_any(), &apply_params(), &Patch::Apply(&patch)).await?;
    ctx.written.record(inst, status, written.metadata.resource_version);
    Ok(())
}

/// Writes the status unless the instance already has exactly it (condition
/// times are kept when nothing flipped): a resync that changes nothing
/// writes nothing and wakes nobody.
pub async fn write_status_if_changed(
    ctx: &Context,
    inst: &TinycodeInstance,
    status: &TinycodeInstanceStatus,
) -> Result<(), kube::Error> {
    if inst.status.as_ref().map(without_last_use) == Some(without_last_use(status)) {
        return Ok(());
    }
    write_status(ctx, inst, status).await
}

/// The status the reconcile owns: all but `lastUsedBy`, which the relay
/// writes under its own field manager (`signin/used.rs`). Left out of the
/// apply, it is neither taken over nor removed; left out of the comparison,
/// a new user writes no status of the reconcile's.
pub fn without_last_use(status: &TinycodeInstanceStatus) -> TinycodeInstanceStatus {
    TinycodeInstanceStatus { last_used_by: None, ..status.clone() }
}

/// After a helm run the record cache may trail the cluster by a moment: wait
/// (briefly) until it shows the new revision, so the next reconcile does not
/// take the old state for drift.
pub async fn await_revision(ctx: &Context, release_name: &str, revision: i64) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        let metas = ctx.stores.records_of(release_name);
        if release::latest(&release::records(&metas)).is_some_and(|r| r.version >= revision && !r.is_pending()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

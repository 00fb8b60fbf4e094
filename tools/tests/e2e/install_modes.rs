//! OLM's install modes as the operator honours them: restricted to one
//! namespace (SingleNamespace: OLM sets WATCH_NAMESPACE from
//! `olm.targetNamespaces`), it runs the instances there and does not see
//! those anywhere else; back on every namespace, it takes them up.

use k8s_openapi::api::apps::v1::Deployment;
use kube::api::{Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;

use super::{delete_and_wait_gone, deploy};
use crate::harness::*;

/// An operator watching namespace A brings A's instance to Running and
/// leaves B's alone: no finalizer, no status, no release, no Deployment.
/// Restarted on every namespace, it runs B's too.
pub async fn a_single_namespace_operator_leaves_other_namespaces_alone(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let (watched, other) = (env.ns("scope-a"), env.ns("scope-b"));
    prepare(&c, &watched).await?;
    prepare(&c, &other).await?;
    env.extra_env = vec![("WATCH_NAMESPACE".into(), watched.clone())];
    let scoped = match env.start_operator() {
        Ok(()) => scoped(env, &c, &watched, &other).await,
        Err(e) => Err(e),
    };
    // Whatever happened, the scenarios after this one get an operator on every namespace.
    env.extra_env.clear();
    env.start_operator()?;
    scoped?;

    let release = naming::release_name(&other, "dev");
    wait_for("the other namespace's release, once every namespace is watched", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    run_to_running(&c, &other, "dev").await?;
    delete_and_wait_gone(&c, &other, "dev").await?;
    delete_and_wait_gone(&c, &watched, "dev").await
}

async fn scoped(env: &Env, c: &Client, watched: &str, other: &str) -> TestResult {
    // The other namespace's instance first: an operator that saw it would
    // have taken it up by the time the watched one runs.
    apply_instance(c, other, "dev", json!({})).await.ctx("apply the other namespace's instance")?;
    deploy(env, c, watched, "dev", json!({})).await?;
    run_to_running(c, watched, "dev").await?;
    // Ask both for a reconcile, the other first; once the watched one has
    // handled its request, a watch on the other would have delivered its own.
    let request = |at: &str| json!({"metadata": {"annotations": {"tinycode.dev/reconcile-requested-at": at}}});
    let at = "2026-12-03T12:00:00Z";
    for ns in [other, watched] {
        Api::<TinycodeInstance>::namespaced(c.clone(), ns)
            .patch("dev", &PatchParams::default(), &Patch::Merge(&request(at)))
            .await
            .ctx("request a reconcile")?;
    }
    wait_for("the watched instance to handle its reconcile request", WAIT, || async {
        let inst = get_instance(c, watched, "dev").await?;
        Ok(inst.filter(|i| i.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref()) == Some(at)))
    })
    .await?;

    let untouched = get_instance(c, other, "dev").await?.ok_or("the other namespace's instance is gone")?;
    ensure(
        untouched.metadata.finalizers.as_ref().is_none_or(|f| f.is_empty()),
        format!("the other namespace's instance got a finalizer: {:?}", untouched.metadata.finalizers),
    )?;
    ensure(untouched.status.is_none(), format!("the other namespace's instance got a status: {:?}", untouched.status))?;
    ensure_eq(env.release(&naming::release_name(other, "dev"))?, None, "the other namespace's release")?;
    let deployment =
        Api::<Deployment>::namespaced(c.clone(), other).get_opt(&naming::fullname("dev")).await.ctx("get")?;
    ensure(deployment.is_none(), "a Deployment in the namespace the operator does not watch")
}

//! Stage 4: the writes of a [`Plan`], in order, and nothing else. Each
//! write is skipped when the plan left it out (the cluster already holds
//! it), so an unchanged instance costs no request here.

pub(crate) mod helm_run;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{Patch, PostParams};
use kube::runtime::events::EventType;
use kube::{Api, ResourceExt};

use crate::FIELD_MANAGER;
use crate::api::TinycodeInstance;
use crate::api::naming;
use crate::platform::openshift::Route;
use crate::reconcile::calls::{apply_params, delete_ignoring_missing};
use crate::reconcile::error::During;
use crate::reconcile::stages::plan::{Exposure, Plan};
use crate::reconcile::{Context, Error};
use crate::watch_scope::cluster_api;

/// What the writes left: the release revision and the exposure as the cluster reports it.
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    pub revision: i64,
    pub route: Option<Arc<Route>>,
    pub ingress: Option<Arc<Ingress>>,
}

/// Applies `plan` for `inst`.
pub async fn execute(ctx: &Context, inst: &TinycodeInstance, plan: &Plan) -> Result<Outcome, Error> {
    let ns = inst.namespace().unwrap_or_default();
    let name = inst.name_any();
    let client = &ctx.client;
    if let Some(secret) = &plan.password_secret {
        create_password(ctx, inst, secret).await?;
    }
    if let Some(secret) = &plan.signin_secret {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .patch(&secret.name_any(), &apply_params(), &Patch::Apply(secret))
            .await
            .during("apply the sign-in Secret")?;
    }
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    if let Some(grant) = &plan.grant {
        bindings.patch(&grant.name_any(), &apply_params(), &Patch::Apply(grant)).await.during("apply the SCC grant")?;
    }
    for stale in &plan.stale_grants {
        delete_ignoring_missing(&bindings, stale).await.during("delete the grant of the previous SCC tier")?;
    }
    if plan.replace_cluster_role_binding {
        let crbs = cluster_api::<ClusterRoleBinding>(client);
        delete_ignoring_missing(&crbs, &naming::cluster_role_binding(&ns, &name))
            .await
            .during("replace the ClusterRoleBinding (its roleRef cannot change)")?;
    }
    if let Some(copy) = &plan.kubeconfig_copy {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
        secrets
            .patch(&copy.name_any(), &apply_params(), &Patch::Apply(copy))
            .await
            .during("copy the kubeconfig Secret")?;
    }
    let revision = match &plan.helm {
        Some(run) => helm_run::run(ctx, inst, plan, run).await?,
        None => plan.revision.unwrap_or_default(),
    };
    let (route, ingress) = expose(ctx, &ns, &name, &plan.exposure).await?;
    Ok(Outcome { revision, route, ingress })
}

async fn expose(
    ctx: &Context,
    ns: &str,
    name: &str,
    exposure: &Exposure,
) -> Result<(Option<Arc<Route>>, Option<Arc<Ingress>>), Error> {
    Ok(match exposure {
        Exposure::Route { apply: Some(route), .. } => {
            let routes: Api<Route> = Api::namespaced(ctx.client.clone(), ns);
            let live = routes
                .patch(&route.name_any(), &apply_params(), &Patch::Apply(route))
                .await
                .during("apply the Route")?;
            (Some(Arc::new(live)), None)
        }
        Exposure::Route { apply: None, live } => (live.clone(), None),
        Exposure::Ingress { apply: Some(ingress), .. } => {
            let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
            let live = api
                .patch(&ingress.name_any(), &apply_params(), &Patch::Apply(ingress))
                .await
                .during("apply the Ingress")?;
            (None, Some(Arc::new(live)))
        }
        Exposure::Ingress { apply: None, delete, live, .. } => {
            if *delete {
                let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
                delete_ignoring_missing(&api, &naming::route(name)).await.during("delete the Ingress")?;
            }
            (None, live.clone())
        }
    })
}

/// Creates the generated password Secret; another worker or replica that
/// created it first wins, and the next reconcile reads theirs.
async fn create_password(ctx: &Context, inst: &TinycodeInstance, secret: &Secret) -> Result<(), Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    secrets.create(&params, secret).await.during("create the generated password Secret")?;
    let name = secret.name_any();
    let note = format!(
        "no spec.auth.passwordSecret: generated a password in Secret {name}, key {}",
        crate::reconcile::marks::PASSWORD_KEY
    );
    ctx.event(inst, EventType::Normal, "PasswordGenerated", "Reconcile", note).await;
    Ok(())
}

#[cfg(test)]
mod tests;

//! Stage 5 (pure): the status a reconcile reports, from its plan and what
//! the writes left. Conditions keep their transition times (see
//! [`conditions::merge_conditions`]).

use k8s_openapi::api::apps::v1::Deployment;

use crate::api::{Phase, TinycodeInstance, TinycodeInstanceStatus};
use crate::reconcile::conditions::{self, Desired, Workload};
use crate::reconcile::execute::Outcome;
use crate::reconcile::plan::{Exposure, Plan};
use crate::reconcile::{Error, plan};
use crate::render::{ingress, naming, route};

/// Status of an instance whose plan was carried out.
pub fn applied(
    inst: &TinycodeInstance,
    plan: &Plan,
    outcome: &Outcome,
    deployment: Option<&Deployment>,
    now: &str,
) -> TinycodeInstanceStatus {
    let (workload, exposure_condition) = workload(inst, plan, outcome, deployment);
    let (phase, url, ready) = conditions::workload_status(&workload, &plan.warnings);
    let generation = inst.metadata.generation;
    let prev = inst.status.clone().unwrap_or_default();
    let desired: Vec<Desired> = std::iter::once(ready)
        .chain(plan.conditions.iter().cloned())
        .chain(exposure_condition)
        .chain(conditions::progress_ok(phase))
        .collect();
    TinycodeInstanceStatus {
        phase: Some(phase),
        url,
        observed_generation: generation,
        conditions: conditions::merge_conditions(&prev.conditions, &desired, now, generation),
        helm_release: Some(plan.release_name.clone()),
        helm_revision: Some(outcome.revision),
        scc: Some(plan.tier.scc_name()),
        password_secret: Some(plan.values.auth.password_secret.clone()),
        last_handled_reconcile_at: plan.request.clone().or(prev.last_handled_reconcile_at),
    }
}

fn workload(
    inst: &TinycodeInstance,
    plan: &Plan,
    outcome: &Outcome,
    deployment: Option<&Deployment>,
) -> (Workload, Option<Desired>) {
    let status = deployment.and_then(|d| d.status.clone()).unwrap_or_default();
    let generation = deployment.and_then(|d| d.metadata.generation);
    let (exposure, host, tls, condition) = match &plan.exposure {
        Exposure::Route { .. } => {
            let route = outcome.route.as_deref();
            ("Route", route.and_then(route::admitted_host), route.is_some_and(|r| r.spec.tls.is_some()), None)
        }
        Exposure::Ingress { hostname, .. } => {
            let published = outcome.ingress.as_deref().and_then(ingress::published);
            let condition = ingress_condition(inst, *hostname, published.as_ref().map(|(h, _)| h.as_str()));
            let (host, tls) = published.map(|(h, t)| (Some(h), t)).unwrap_or((None, false));
            ("Ingress", host, tls, Some(condition))
        }
    };
    let workload = Workload {
        desired_replicas: inst.spec.replicas,
        available_replicas: status.available_replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        deployment_current: deployment.is_some()
            && status.observed_generation.is_some()
            && status.observed_generation >= generation,
        admitted_host: host,
        tls,
        exposure,
    };
    (workload, condition)
}

/// IngressReady: how to reach an instance where there are no Routes.
fn ingress_condition(inst: &TinycodeInstance, hostname: bool, published: Option<&str>) -> Desired {
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let service = naming::fullname(inst.metadata.name.as_deref().unwrap_or_default());
    match (hostname, published) {
        (false, _) => Desired::new(
            conditions::INGRESS_READY,
            false,
            "NoHostname",
            format!(
                "spec.hostname is empty, so the instance has no Ingress; reach it with `kubectl port-forward -n {ns} svc/{service} 4096:4096` and open http://localhost:4096, or set spec.hostname"
            ),
        ),
        (true, Some(host)) => Desired::new(
            conditions::INGRESS_READY,
            true,
            "AddressPublished",
            format!("the ingress controller serves {host}"),
        ),
        (true, None) => Desired::new(
            conditions::INGRESS_READY,
            false,
            "AddressPending",
            "waiting for an ingress controller to publish an address for the Ingress (check --ingress-class and that a controller runs)",
        ),
    }
}

/// Status of an instance the reconcile could not apply; `message` is the
/// error's text in the cluster's CLI dialect.
pub fn failed(inst: &TinycodeInstance, err: &Error, message: &str, now: &str) -> TinycodeInstanceStatus {
    let mut extra: Vec<Desired> = conditions::progress(err);
    if let Some(type_) = err.condition_type() {
        extra.push(Desired::new(type_, false, err.reason(), message.to_string()));
    }
    let generation = inst.metadata.generation;
    let mut status = conditions::failed(inst.status.as_ref(), err.reason(), message, &extra, now, generation);
    if matches!(err, Error::Helm(_) | Error::Stalled(_)) {
        // A requested reconcile ran helm, even if helm failed.
        status.last_handled_reconcile_at = plan::reconcile_request(inst).or(status.last_handled_reconcile_at.clone());
    }
    status
}

/// Status of a suspended instance: nothing applied, the rest kept.
pub fn suspended(inst: &TinycodeInstance, now: &str) -> TinycodeInstanceStatus {
    let prev = inst.status.clone().unwrap_or_default();
    let generation = inst.metadata.generation;
    let ready = Desired::new(
        conditions::READY,
        false,
        "Suspended",
        "spec.suspend is true: the operator runs no helm and writes nothing for this instance until it is false",
    );
    let desired: Vec<Desired> = std::iter::once(ready).chain(conditions::progress_ok(Phase::Suspended)).collect();
    TinycodeInstanceStatus {
        phase: Some(Phase::Suspended),
        observed_generation: generation,
        conditions: conditions::merge_conditions(&prev.conditions, &desired, now, generation),
        ..prev
    }
}

/// Status while the instance is being deleted.
pub fn terminating(inst: &TinycodeInstance, now: &str) -> TinycodeInstanceStatus {
    let mut st = inst.status.clone().unwrap_or_default();
    st.phase = Some(Phase::Terminating);
    let message = "deleting: uninstalling the Helm release and removing the SCC grant";
    st.conditions = conditions::merge_conditions(
        &st.conditions,
        &[Desired::new(conditions::READY, false, "Terminating", message)],
        now,
        inst.metadata.generation,
    );
    st
}

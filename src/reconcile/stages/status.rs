//! Stage 5 (pure): the status a reconcile reports, from its plan and what
//! the writes left. Conditions keep their transition times (see
//! [`conditions::merge_conditions`]).

use k8s_openapi::api::apps::v1::Deployment;

use crate::api::naming;
use crate::api::{Phase, TinycodeInstance, TinycodeInstanceStatus};
use crate::reconcile::Error;
use crate::reconcile::conditions::{self, Desired, Workload};
use crate::reconcile::diagnose::{Component, Diagnosis};
use crate::reconcile::stages::execute::Outcome;
use crate::reconcile::stages::plan::{Exposure, Plan};
use crate::render::{ingress, route};

/// An instance's Deployments as the cache holds them (None: not there).
#[derive(Clone, Copy, Debug, Default)]
pub struct Deployments<'a> {
    /// tinycode's.
    pub server: Option<&'a Deployment>,
    /// The bundled Ollama's.
    pub ollama: Option<&'a Deployment>,
    /// The front's.
    pub front: Option<&'a Deployment>,
    /// The egress proxy's (the class limits egress).
    pub egress: Option<&'a Deployment>,
}

/// Status of an instance whose plan was carried out. Of `inst` only its
/// metadata's generation and its previous status are read: the rest comes
/// from the plan.
pub fn applied(
    inst: &TinycodeInstance,
    plan: &Plan,
    outcome: &Outcome,
    deployments: Deployments<'_>,
    diagnosis: Option<&Diagnosis>,
    now: &str,
) -> TinycodeInstanceStatus {
    let (mut workload, exposure_condition) = workload(plan, outcome, deployments.server);
    workload.ollama_ready = waits_for_ollama(plan).then(|| rolled_out(deployments.ollama, 1));
    workload.front_ready = waits_for_front(plan).then(|| rolled_out(deployments.front, 1));
    workload.egress_ready = waits_for_egress(plan).then(|| rolled_out(deployments.egress, 1));
    workload.diagnosis = diagnosis.cloned();
    let (phase, url, ready) = conditions::workload_status(&workload, &plan.warnings);
    let generation = inst.metadata.generation;
    let prev = inst.status.clone().unwrap_or_default();
    let desired: Vec<Desired> = std::iter::once(ready)
        .chain(plan.conditions.iter().cloned())
        .chain(exposure_condition)
        .chain(conditions::progress_applied(phase, diagnosis.and_then(Diagnosis::stalled_message)))
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
        // Applied: whatever failed before is behind it.
        helm_failures: None,
        auth: Some(crate::render::signin::status(
            plan.values.auth.mode,
            &plan.values.instance.namespace,
            &plan.values.instance.name,
            &plan.values.auth.password_secret,
        )),
        idle: plan.idle.status.clone(),
        last_activity_time: plan.idle.last_activity_time.clone(),
        class: Some(plan.values.class_name.clone()).filter(|c| !c.is_empty()),
        rendering: Some(crate::reconcile::rollout::status(inst, plan)),
        // The relay's (signin/used.rs), never written by the reconcile.
        last_used_by: None,
    }
}

/// Whether the instance's readiness includes a bundled Ollama's: one is
/// bundled, and the workloads run.
fn waits_for_ollama(plan: &Plan) -> bool {
    plan.values.ollama.enabled && !plan.values.stopped
}

/// Whether the instance's readiness includes its front's: it has one (it
/// answers the URL), while the workloads run (stopped, the front's page is
/// a courtesy, not what the instance waits for).
fn waits_for_front(plan: &Plan) -> bool {
    plan.values.front.enabled && !plan.values.stopped
}

/// Whether the instance's readiness includes its egress proxy's: its class
/// limits egress (the proxy is the agent's only way out), while it runs.
fn waits_for_egress(plan: &Plan) -> bool {
    plan.values.egress.enabled && !plan.values.stopped
}

/// A Deployment whose status reflects its spec, with `desired` replicas
/// updated and available.
fn rolled_out(deployment: Option<&Deployment>, desired: i32) -> bool {
    let Some(d) = deployment else { return false };
    let status = d.status.clone().unwrap_or_default();
    status.observed_generation.is_some()
        && status.observed_generation >= d.metadata.generation
        && status.updated_replicas.unwrap_or(0) >= desired
        && status.available_replicas.unwrap_or(0) >= desired
}

/// The workload the instance still waits for, in the order readiness takes
/// them (the server first): whose pods a diagnosis reads.
pub fn waiting_on(plan: &Plan, deployments: Deployments<'_>) -> Option<Component> {
    if plan.values.stopped {
        return None;
    }
    if !rolled_out(deployments.server, plan.values.replicas) {
        return Some(Component::Server);
    }
    if waits_for_front(plan) && !rolled_out(deployments.front, 1) {
        return Some(Component::Front);
    }
    if waits_for_egress(plan) && !rolled_out(deployments.egress, 1) {
        return Some(Component::Egress);
    }
    (waits_for_ollama(plan) && !rolled_out(deployments.ollama, 1)).then_some(Component::Ollama)
}

fn workload(plan: &Plan, outcome: &Outcome, deployment: Option<&Deployment>) -> (Workload, Option<Desired>) {
    let status = deployment.and_then(|d| d.status.clone()).unwrap_or_default();
    let generation = deployment.and_then(|d| d.metadata.generation);
    let (exposure, host, tls, condition) = match &plan.exposure {
        Exposure::Route { .. } => {
            let route = outcome.route.as_deref();
            ("Route", route.and_then(route::admitted_host), route.is_some_and(|r| r.spec.tls.is_some()), None)
        }
        Exposure::Ingress { hostname, .. } => {
            let published = outcome.ingress.as_deref().and_then(ingress::published);
            let condition = ingress_condition(plan, *hostname, published.as_ref().map(|(h, _)| h.as_str()));
            let (host, tls) = published.map(|(h, t)| (Some(h), t)).unwrap_or((None, false));
            ("Ingress", host, tls, Some(condition))
        }
    };
    let workload = Workload {
        desired_replicas: plan.values.replicas,
        available_replicas: status.available_replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        deployment_current: deployment.is_some()
            && status.observed_generation.is_some()
            && status.observed_generation >= generation,
        admitted_host: host,
        tls,
        exposure,
        stopped: plan.values.stopped,
        idle_message: plan.idle.stopped.then(|| plan.idle.status.as_ref().map(|s| s.message.clone())).flatten(),
        diagnosis: None,
        ollama_ready: None,
        front_ready: None,
        egress_ready: None,
    };
    (workload, condition)
}

/// IngressReady: how to reach an instance where there are no Routes.
fn ingress_condition(plan: &Plan, hostname: bool, published: Option<&str>) -> Desired {
    let ns = &plan.values.instance.namespace;
    let service = naming::fullname(&plan.values.instance.name);
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
pub fn failed(
    inst: &TinycodeInstance,
    err: &Error,
    message: &str,
    helm_failures: Option<crate::api::HelmFailures>,
    now: &str,
) -> TinycodeInstanceStatus {
    let mut extra: Vec<Desired> = conditions::progress(err);
    if let Some(type_) = err.condition_type() {
        extra.push(Desired::new(type_, false, err.reason(), message.to_string()));
    }
    let generation = inst.metadata.generation;
    let mut status = conditions::failed(inst.status.as_ref(), err.reason(), message, &extra, now, generation);
    if matches!(err, Error::Helm(_) | Error::Stalled(_)) {
        // A requested reconcile ran helm, even if helm failed.
        status.last_handled_reconcile_at =
            conditions::reconcile_request(inst).or(status.last_handled_reconcile_at.clone());
        status.helm_failures = helm_failures;
    }
    status
}

/// Status of a suspended instance: nothing applied, the rest kept.
/// `idle`: required idle stop, decided while suspended (None: as it was).
pub fn suspended(
    inst: &TinycodeInstance,
    stopped: bool,
    idle: Option<crate::reconcile::idle::IdleState>,
    now: &str,
) -> TinycodeInstanceStatus {
    let mut prev = inst.status.clone().unwrap_or_default();
    if let Some(idle) = idle {
        prev.idle = idle.status;
        prev.last_activity_time = idle.last_activity_time;
    }
    let generation = inst.metadata.generation;
    let message = if prev.idle.as_ref().is_some_and(|i| i.stopped) {
        "spec.suspend is true: the operator runs no helm for this instance until it is false; idle stop is required here, and the workload was stopped for idleness (status.idle)"
    } else if stopped {
        "spec.suspend is true: the operator runs no helm for this instance until it is false; an approval its workload used was withdrawn, so the workload was scaled to zero (see the ApprovalWithdrawn event)"
    } else {
        "spec.suspend is true: the operator runs no helm for this instance until it is false, and only withdraws what a withdrawn approval granted"
    };
    let ready = Desired::new(conditions::READY, false, "Suspended", message);
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};

    use super::*;
    use crate::platform::openshift::{RouteIngress, RouteIngressCondition, RouteStatus};
    use crate::reconcile::reason::Blocked;
    use crate::reconcile::stages::plan::tests::{instance, observed, plan_for};

    /// Every instance has a front by default (password mode too): Ready here.
    static FRONT: std::sync::LazyLock<Deployment> = std::sync::LazyLock::new(|| deployment(1, true));

    fn server(d: Option<&Deployment>) -> Deployments<'_> {
        Deployments { server: d, ollama: None, front: Some(&FRONT), egress: None }
    }

    fn with_ollama<'a>(server: &'a Deployment, ollama: Option<&'a Deployment>) -> Deployments<'a> {
        Deployments { server: Some(server), ollama, front: Some(&FRONT), egress: None }
    }

    fn deployment(available: i32, current: bool) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.generation = Some(2);
        d.status = Some(DeploymentStatus {
            observed_generation: Some(if current { 2 } else { 1 }),
            available_replicas: Some(available),
            updated_replicas: Some(available),
            ..Default::default()
        });
        d
    }

    fn admitted_route(plan: &Plan) -> Arc<crate::platform::openshift::Route> {
        let Exposure::Route { apply: Some(mut route), .. } = plan.exposure.clone() else { panic!("route") };
        route.status = Some(RouteStatus {
            ingress: vec![RouteIngress {
                host: Some("dev.apps.example.com".into()),
                conditions: vec![RouteIngressCondition {
                    type_: "Admitted".into(),
                    status: "True".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        });
        Arc::new(route)
    }

    #[test]
    fn phase_from_the_rollout_and_the_route() {
        let inst = instance(serde_json::json!({}));
        let plan = plan_for(&inst, &observed());
        let outcome = Outcome { revision: 3, route: Some(admitted_route(&plan)), ingress: None };
        let cases = [
            ("available", Some(deployment(1, true)), Phase::Running, Some("https://dev.apps.example.com")),
            ("rolling out", Some(deployment(1, false)), Phase::Deploying, Some("https://dev.apps.example.com")),
            ("no pods yet", Some(deployment(0, true)), Phase::Deploying, Some("https://dev.apps.example.com")),
            ("no Deployment", None, Phase::Deploying, Some("https://dev.apps.example.com")),
        ];
        for (case, d, phase, url) in cases {
            let st = applied(&inst, &plan, &outcome, server(d.as_ref()), None, "2026-12-02T00:00:00Z");
            assert_eq!(st.phase, Some(phase), "{case}");
            assert_eq!(
                st.url.as_deref(),
                url.map(|u| u.replace("https", if plan_tls(&plan) { "https" } else { "http" })).as_deref(),
                "{case}"
            );
            assert_eq!(st.helm_revision, Some(3), "{case}");
            assert_eq!(st.scc.as_deref(), Some(plan.tier.scc_name().as_str()));
            let ready = st.conditions.iter().find(|c| c.type_ == conditions::READY).unwrap();
            assert_eq!(ready.status == "True", phase == Phase::Running, "{case}");
        }
    }

    #[test]
    fn a_bundled_ollama_counts_toward_ready() {
        let inst = instance(serde_json::json!({"ollama": {"enabled": true, "models": ["llama3"]}}));
        let plan = plan_for(&inst, &observed());
        let outcome = Outcome { revision: 1, route: Some(admitted_route(&plan)), ingress: None };
        let up = deployment(1, true);
        let cases = [
            ("no Ollama Deployment yet", None, Phase::Deploying, Some(Component::Ollama)),
            ("models pulling", Some(deployment(0, true)), Phase::Deploying, Some(Component::Ollama)),
            ("Ready", Some(deployment(1, true)), Phase::Running, None),
        ];
        for (case, ollama, phase, waiting) in cases {
            let st = applied(&inst, &plan, &outcome, with_ollama(&up, ollama.as_ref()), None, "t");
            assert_eq!(st.phase, Some(phase), "{case}");
            assert_eq!(waiting_on(&plan, with_ollama(&up, ollama.as_ref())), waiting, "{case}");
        }
        // The server is waited for first; a stopped instance waits for nothing.
        assert_eq!(waiting_on(&plan, server(Some(&deployment(0, true)))), Some(Component::Server));
        let stopped =
            plan_for(&instance(serde_json::json!({"ollama": {"enabled": true}, "stopped": true})), &observed());
        assert_eq!(waiting_on(&stopped, Deployments::default()), None);
        let without = plan_for(&instance(serde_json::json!({})), &observed());
        assert_eq!(waiting_on(&without, server(Some(&up))), None, "no Ollama bundled: nothing else to wait for");
    }

    #[test]
    fn a_sign_in_front_counts_toward_ready_while_the_agent_runs() {
        let inst = instance(serde_json::json!({"auth": {"mode": "openshift"}}));
        let mut signed = observed();
        signed.signin = Some(crate::reconcile::stages::observe::SigninFacts {
            current: None,
            fresh_cookie: Some("c".repeat(32)),
            relay_credential: None,
            endpoints: None,
        });
        let plan = plan_for(&inst, &signed);
        let outcome = Outcome { revision: 1, route: Some(admitted_route(&plan)), ingress: None };
        let up = deployment(1, true);
        for (case, front, phase, waiting) in [
            ("no front yet", None, Phase::Deploying, Some(Component::Front)),
            ("front starting", Some(deployment(0, true)), Phase::Deploying, Some(Component::Front)),
            ("front Ready", Some(deployment(1, true)), Phase::Running, None),
        ] {
            let deployments = Deployments { server: Some(&up), ollama: None, front: front.as_ref(), egress: None };
            let st = applied(&inst, &plan, &outcome, deployments, None, "t");
            assert_eq!(st.phase, Some(phase), "{case}");
            assert_eq!(waiting_on(&plan, deployments), waiting, "{case}");
            if phase == Phase::Deploying {
                let ready = st.conditions.iter().find(|c| c.type_ == conditions::READY).unwrap();
                assert!(ready.message.contains("waiting for its front"), "{case}: {}", ready.message);
            }
        }
        // Password mode has a front too (the gate asking for the password);
        // a stopped sign-in instance waits for nothing.
        let password = plan_for(&instance(serde_json::json!({})), &observed());
        assert_eq!(waiting_on(&password, server(Some(&up))), None);
        let no_front = Deployments { server: Some(&up), ..Default::default() };
        assert_eq!(waiting_on(&password, no_front), Some(Component::Front));
        let stopped = plan_for(&instance(serde_json::json!({"auth": {"mode": "openshift"}, "stopped": true})), &signed);
        assert_eq!(waiting_on(&stopped, Deployments::default()), None);
    }

    #[test]
    fn an_egress_proxy_counts_toward_ready_while_the_agent_runs() {
        let inst = instance(serde_json::json!({}));
        let mut plan = plan_for(&inst, &observed());
        plan.values.egress.enabled = true;
        let outcome = Outcome { revision: 1, route: Some(admitted_route(&plan)), ingress: None };
        let up = deployment(1, true);
        for (case, egress, phase, waiting) in [
            ("no proxy yet", None, Phase::Deploying, Some(Component::Egress)),
            ("proxy starting", Some(deployment(0, true)), Phase::Deploying, Some(Component::Egress)),
            ("proxy Ready", Some(deployment(1, true)), Phase::Running, None),
        ] {
            let deployments =
                Deployments { server: Some(&up), ollama: None, front: Some(&FRONT), egress: egress.as_ref() };
            let st = applied(&inst, &plan, &outcome, deployments, None, "t");
            assert_eq!(st.phase, Some(phase), "{case}");
            assert_eq!(waiting_on(&plan, deployments), waiting, "{case}");
            if phase == Phase::Deploying {
                let ready = st.conditions.iter().find(|c| c.type_ == conditions::READY).unwrap();
                assert!(ready.message.contains("waiting for its egress proxy"), "{case}: {}", ready.message);
            }
        }
        plan.values.stopped = true;
        assert_eq!(waiting_on(&plan, Deployments::default()), None, "stopped: nothing to wait for");
        assert_eq!(Component::Egress.label(), "egress", "the chart's component label");
    }

    #[test]
    fn a_diagnosis_names_the_cause_and_a_passed_deadline_stalls() {
        use crate::reconcile::diagnose::{Diagnosis, Reason};
        let inst = instance(serde_json::json!({}));
        let plan = plan_for(&inst, &observed());
        let outcome = Outcome { revision: 1, route: None, ingress: None };
        let shape = |st: &TinycodeInstanceStatus| {
            let get = |t: &str| {
                let c = st.conditions.iter().find(|c| c.type_ == t).unwrap();
                (c.status.clone(), c.reason.clone())
            };
            (st.phase, get(conditions::READY), get(conditions::RECONCILING), get(conditions::STALLED))
        };
        let s = |status: &str, reason: &str| (status.to_string(), reason.to_string());
        let mut d = Diagnosis { reason: Reason::CrashLoop, message: "container tinycode ...".into(), stalled: false };
        let st = applied(&inst, &plan, &outcome, server(Some(&deployment(0, true))), Some(&d), "t");
        assert_eq!(
            shape(&st),
            (Some(Phase::Deploying), s("False", "CrashLoop"), s("True", "Progressing"), s("False", "Progressing"))
        );
        d.stalled = true;
        let st = applied(&inst, &plan, &outcome, server(Some(&deployment(0, true))), Some(&d), "t");
        assert_eq!(
            shape(&st),
            (
                Some(Phase::Failed),
                s("False", "CrashLoop"),
                s("False", "ProgressDeadlineExceeded"),
                s("True", "ProgressDeadlineExceeded")
            )
        );
        let stalled = st.conditions.iter().find(|c| c.type_ == conditions::STALLED).unwrap();
        assert!(
            stalled.message.contains("stopped making progress") && stalled.message.contains("container tinycode"),
            "{}",
            stalled.message
        );
    }

    fn plan_tls(plan: &Plan) -> bool {
        matches!(&plan.exposure, Exposure::Route { apply: Some(r), .. } if r.spec.tls.is_some())
    }

    #[test]
    fn an_unchanged_instance_gets_the_same_status_so_nothing_is_written() {
        let mut inst = instance(serde_json::json!({}));
        let plan = plan_for(&inst, &observed());
        let outcome = Outcome { revision: 1, route: Some(admitted_route(&plan)), ingress: None };
        let first = applied(&inst, &plan, &outcome, server(Some(&deployment(1, true))), None, "2026-12-02T00:00:00Z");
        inst.status = Some(first.clone());
        let later = applied(&inst, &plan, &outcome, server(Some(&deployment(1, true))), None, "2026-12-02T01:00:00Z");
        assert_eq!(later, first, "transition times are kept");
    }

    #[test]
    fn failures_name_their_condition() {
        let inst = instance(serde_json::json!({}));
        let err = Error::blocked(Blocked::KubeconfigNotShared, "not shared");
        let st = failed(&inst, &err, "not shared", None, "2026-12-02T00:00:00Z");
        assert_eq!(st.phase, Some(Phase::Failed));
        let find = |t: &str| st.conditions.iter().find(|c| c.type_ == t).cloned().unwrap();
        assert_eq!(
            (find(conditions::READY).status.as_str(), find(conditions::READY).reason.as_str()),
            ("False", "KubeconfigNotShared")
        );
        assert_eq!(find(conditions::CLUSTER_ADMIN_READY).status, "False");
        assert_eq!(find(conditions::STALLED).status, "False", "blocked: the operator keeps checking");
        let missing = failed(&inst, &Error::blocked(Blocked::SccMissing, "x"), "x", None, "t");
        assert!(missing.conditions.iter().all(|c| c.type_ != conditions::CLUSTER_ADMIN_READY));
    }

    #[test]
    fn suspended_and_terminating_keep_the_rest() {
        let mut inst = instance(serde_json::json!({}));
        inst.status = Some(TinycodeInstanceStatus {
            url: Some("https://x".into()),
            helm_revision: Some(4),
            ..Default::default()
        });
        let s = suspended(&inst, false, None, "t");
        assert_eq!((s.phase, s.url.as_deref(), s.helm_revision), (Some(Phase::Suspended), Some("https://x"), Some(4)));
        let t = terminating(&inst, "t");
        assert_eq!((t.phase, t.url.as_deref()), (Some(Phase::Terminating), Some("https://x")));
    }

    #[test]
    fn helm_failures_are_kept_in_status_for_helm_errors_only() {
        let mut inst = instance(serde_json::json!({}));
        let f = crate::api::HelmFailures { attempt: "a1".into(), count: 2, last_error: "boom".into() };
        let stalled = failed(&inst, &Error::Stalled("x".into()), "x", Some(f.clone()), "t");
        assert_eq!(stalled.helm_failures.as_ref(), Some(&f));
        inst.status = Some(stalled);
        // Another kind of failure leaves the count as it was.
        let blocked = failed(&inst, &Error::blocked(Blocked::SccMissing, "x"), "x", None, "t");
        assert_eq!(blocked.helm_failures, Some(f));
    }
}

//! End-to-end tests of the operator against a real kube-apiserver with real
//! helm. One control plane and one operator process serve every scenario;
//! each scenario has its own namespace. Run with `make test` (or
//! `cargo test --test e2e -- [FILTER...]`; libtest's flags such as `--exact`,
//! `--skip` and `--list` work). The scenarios run one at a time, in the order
//! listed: the Kubernetes ones last, since the first of them to run removes
//! the OpenShift APIs (each Kubernetes scenario makes sure that happened).

mod classes;
mod harness;
mod hostile;
mod idle;
mod install_modes;
mod kubernetes;
mod lifecycle;
mod requests;
mod rollouts;
mod signin;
#[path = "../../../tests/support/vllm_standin.rs"]
mod standin;
mod storage;
mod tenancy;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use classes::*;
use harness::*;
use hostile::*;
use idle::*;
use install_modes::*;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use kubernetes::*;
use libtest_mimic::{Arguments, Completion, Failed, Trial};
use lifecycle::*;
use requests::*;
use rollouts::*;
use serde_json::{Value, json};
use signin::*;
use storage::*;
use tenancy::*;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;
use tinycode_operator::platform::openshift::{Route, SecurityContextConstraints, scc_manifest};
use tinycode_operator::platform::scc::ALL_TIERS;

type Scenario = for<'a> fn(&'a mut Env) -> Pin<Box<dyn Future<Output = TestResult> + 'a>>;

macro_rules! scenarios {
    ($($name:ident),* $(,)?) => {
        vec![$((stringify!($name), (|env| Box::pin($name(env))) as Scenario)),*]
    };
}

/// The scenario that removes the OpenShift APIs; every Kubernetes scenario needs it first.
const PLATFORM_SWITCH: &str = "k8s_platform_is_detected_without_openshift_apis";
/// Longest a scenario may take.
const SCENARIO_TIMEOUT: Duration = Duration::from_secs(240);

/// What the scenarios share: one runtime, and one control plane and operator
/// set up by the first scenario that runs.
struct Suite {
    runtime: tokio::runtime::Runtime,
    env: Mutex<Option<Result<Env, String>>>,
    /// The platform switch's result, once it ran.
    switched: Mutex<Option<TestResult>>,
}

impl Suite {
    fn run(&self, name: &str, scenario: Scenario) -> Result<Completion, Failed> {
        let mut env = self.env.lock().unwrap_or_else(PoisonError::into_inner);
        let env = env.get_or_insert_with(|| self.runtime.block_on(setup()));
        let env = env.as_mut().map_err(|e| Failed::from(format!("e2e setup failed: {e}")))?;
        let result = if name == PLATFORM_SWITCH {
            self.switch(env, scenario)
        } else if name.starts_with("k8s_") {
            match self.switch(env, scenario_switch()) {
                Ok(()) => self.run_scenario(env, scenario),
                Err(e) => Err(format!("{PLATFORM_SWITCH} failed first: {e}")),
            }
        } else {
            self.run_scenario(env, scenario)
        };
        match result {
            Ok(()) => Ok(Completion::Completed),
            Err(e) if e.starts_with("SKIP:") => Ok(Completion::ignored_with(e)),
            Err(e) => Err(format!("{e}\n\noperator log (last lines):\n{}", env.operator_log_tail()).into()),
        }
    }

    fn run_scenario(&self, env: &mut Env, scenario: Scenario) -> TestResult {
        // The timer must be made inside the runtime.
        match self.runtime.block_on(async { tokio::time::timeout(SCENARIO_TIMEOUT, scenario(env)).await }) {
            Ok(result) => result,
            Err(_) => Err(format!("scenario took longer than {SCENARIO_TIMEOUT:?}")),
        }
    }

    /// Runs the platform switch once; later callers get its result.
    fn switch(&self, env: &mut Env, scenario: Scenario) -> TestResult {
        let mut switched = self.switched.lock().unwrap_or_else(PoisonError::into_inner);
        switched.get_or_insert_with(|| self.run_scenario(env, scenario)).clone()
    }

    fn finish(&self) {
        if let Some(Ok(env)) = self.env.lock().unwrap_or_else(PoisonError::into_inner).as_mut() {
            env.stop_operator();
        }
    }
}

fn scenario_switch() -> Scenario {
    |env| Box::pin(k8s_platform_is_detected_without_openshift_apis(env))
}

async fn setup() -> Result<Env, String> {
    let started = Instant::now();
    let mut env = Env::setup().await?;
    println!(
        "control plane ready in {:.1}s (OpenShift schemas: {})",
        started.elapsed().as_secs_f64(),
        if env.real_openshift_schemas { "real, from ../shared/openshift-crds" } else { "operator stand-ins" }
    );
    env.start_operator().map_err(|e| format!("cannot start the operator: {e}"))?;
    Ok(env)
}

/// libtest takes one name filter; this suite takes several (any may match),
/// so positional arguments are applied here and the rest go to libtest.
fn split_filters(args: Vec<String>) -> (Vec<String>, Vec<String>) {
    const WITH_VALUE: [&str; 6] = ["--skip", "--test-threads", "--format", "--color", "--logfile", "-Z"];
    let (mut filters, mut rest) = (Vec::new(), Vec::new());
    let mut iter = args.into_iter();
    if let Some(program) = iter.next() {
        rest.push(program);
    }
    while let Some(arg) = iter.next() {
        if WITH_VALUE.contains(&arg.as_str()) {
            rest.push(arg);
            rest.extend(iter.next());
        } else if arg.starts_with('-') {
            rest.push(arg);
        } else {
            filters.push(arg);
        }
    }
    (filters, rest)
}

fn main() {
    let (filters, rest) = split_filters(std::env::args().collect());
    let mut args = Arguments::from_iter(rest);
    // One control plane and one operator: the scenarios run one at a time, in order.
    args.test_threads = Some(1);
    let all = scenarios![
        admission_rejects_invalid_instances,
        basic_instance_converges,
        converged_instances_cost_no_requests,
        spec_change_makes_one_revision_and_resync_none,
        deleted_or_edited_children_are_repaired,
        unprepared_namespace_fails_then_recovers,
        missing_password_secret_fails_then_recovers,
        disallowed_registry_fails_without_applying_then_recovers,
        privileged_tier_needs_namespace_approval,
        delete_keeps_pvcs_and_a_new_instance_adopts_them,
        delete_with_retain_false_removes_pvcs,
        operator_killed_mid_upgrade_converges,
        sigterm_during_helm_upgrade_leaves_no_pending_release,
        health_and_metrics_endpoints_answer_and_move,
        vllm_providers_are_probed_and_misbehaving_ones_only_warn,
        cluster_admin_kubeconfig_is_checked_and_copied,
        every_sample_reaches_running,
        two_replicas_one_leader_and_handover,
        openshift_schemas_accept_operator_objects,
        tenant_forged_helm_records_are_never_trusted,
        tenant_cluster_role_needs_a_cluster_admin_approval,
        tenant_kubeconfig_copy_needs_the_owners_consent,
        tenant_urls_cannot_reach_the_operator_host,
        tenant_instances_are_closed_by_default,
        tenant_deletion_completes_without_the_operators_rights,
        tenant_binding_the_operator_prepares_nothing,
        tenant_failures_write_few_events,
        tenant_viewer_cannot_test_passwords_against_the_pod_template,
        tenant_cannot_keep_grants_by_suspending_or_breaking_the_spec,
        tenant_pods_get_only_the_approved_host_directories,
        tenant_input_cannot_exhaust_the_operator,
        another_namespaces_admin_cannot_hold_an_instance_hostage,
        tenant_names_under_a_silent_zone_do_not_stall_the_operator,
        legacy_release_moves_to_the_operator_namespace,
        a_release_under_its_old_shortened_name_moves_to_the_new_one,
        operator_upgrade_rerenders_untouched_instances,
        rendered_objects_come_back_when_deleted,
        failing_release_stalls_and_recovers_on_request,
        failed_upgrade_rolls_back_to_the_last_good_revision,
        an_install_that_meets_a_record_upgrades_it,
        suspend_stops_helm_and_resume_applies,
        stop_scales_to_zero_and_start_brings_it_back,
        idle_instances_stop_and_busy_or_used_ones_do_not,
        required_idle_stop_holds_while_suspended_or_refused,
        the_relay_starts_only_the_instance_whose_credential_asks,
        rollouts_wait_for_busy_agents_until_their_deadline,
        a_reinstall_adopts_instances_whose_records_were_uninstalled,
        a_63_character_name_runs,
        storage_is_fixed_at_creation,
        storage_grows_where_its_class_allows,
        a_single_namespace_operator_leaves_other_namespaces_alone,
        oidc_sign_in_admits_only_users_allowed_use,
        classes_place_cap_and_withdraw,
        a_class_serves_only_the_namespaces_it_selects,
        a_renamed_instance_still_counts_against_its_class,
        a_stricter_class_stops_what_runs_beyond_it,
        a_class_egress_list_is_checked_and_gives_instances_a_proxy,
        model_keys_are_referenced_never_copied,
        // From here on the control plane has no OpenShift APIs (removed by the first of these).
        k8s_platform_is_detected_without_openshift_apis,
        k8s_basic_instance_gets_an_ingress,
        k8s_a_tenant_cannot_take_another_instances_host,
        k8s_ingress_class_tls_and_route_only_fields,
        k8s_hostpath_needs_both_labels,
        no_permission_errors_in_any_scenario,
    ];
    let matches = |name: &str| {
        filters.is_empty() || filters.iter().any(|f| if args.exact { name == f } else { name.contains(f.as_str()) })
    };
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    let suite = Arc::new(Suite { runtime, env: Mutex::new(None), switched: Mutex::new(None) });
    let trials: Vec<Trial> = all
        .into_iter()
        .filter(|(name, _)| matches(name))
        .map(|(name, scenario)| {
            let suite = suite.clone();
            let kind = if name.starts_with("k8s_") { "kubernetes" } else { "openshift" };
            Trial::ignorable_test(name, move || suite.run(name, scenario)).with_kind(kind)
        })
        .collect();
    let conclusion = libtest_mimic::run(&args, trials);
    suite.finish();
    conclusion.exit();
}

/// The tinycode container's memory limit.
fn memory_limit(d: &Deployment) -> Option<String> {
    let pod = d.spec.template.spec.as_ref()?;
    let limits = pod.containers.iter().find(|c| c.name == "tinycode")?.resources.as_ref()?.limits.as_ref()?;
    limits.get("memory").map(|q| q.0.clone())
}

fn password_spec() -> Value {
    json!({"auth": {"passwordSecret": "tinycode-password"}})
}

/// The values the operator would render for an instance `name` in `ns`
/// with an empty spec, for tests that run helm the way the operator does.
fn default_values(ns: &str, name: &str) -> tinycode_operator::render::values::Values {
    use tinycode_operator::render::values::{self, Approved, InstanceRef};
    let settings = tinycode_operator::settings::Settings::default();
    values::build(
        &InstanceRef { name, namespace: ns, uid: "" },
        &Default::default(),
        &settings,
        &Approved::default(),
        None,
    )
}

/// Applies an instance and waits for its first helm revision.
async fn deploy(env: &Env, c: &Client, ns: &str, name: &str, spec: Value) -> Result<TinycodeInstance, String> {
    apply_instance(c, ns, name, spec).await.ctx("apply instance")?;
    let release = naming::release_name(ns, name);
    wait_for(&format!("release {release} deployed"), WAIT, || async {
        Ok(env.release(&release)?.filter(|(_, s)| s == "deployed"))
    })
    .await?;
    get_instance(c, ns, name).await?.ok_or_else(|| "instance vanished".into())
}

async fn admission_rejects_invalid_instances(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("admission");
    prepare(&c, &ns).await?;
    let cases: Vec<(&str, Value, &str)> = vec![
        ("r1", json!({"replicas": 11}), "spec.replicas"),
        ("r2", json!({"replicas": 3}), "needs a shared workspace"),
        ("g1", json!({"git": {"url": "https://example.com/r.git;reboot"}}), "spec.git.url"),
        ("g2", json!({"git": {"url": "https://example.com/r.git", "branch": "main$(id)"}}), "spec.git.branch"),
        (
            "g3",
            json!({"git": {"url": "https://example.com/r.git"}, "storage": {"hostPath": {"path": "/srv"}}}),
            "mutually exclusive",
        ),
        (
            "s1",
            json!({"shell": {"enabled": true}, "storage": {"hostPath": {"path": "/srv"}}}),
            "no SCC tier allows both",
        ),
        ("h1", json!({"storage": {"hostPath": {"path": "relative/dir"}}}), "spec.storage.hostPath.path"),
        (
            "c1",
            json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "cluster-admin"}}),
            "may not be admin, cluster-admin",
        ),
        (
            "c3",
            json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "tinycode-operator-manager"}}),
            "the operator's own roles",
        ),
        (
            "c4",
            json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "tinycode-scc-shell"}}),
            "SCC use roles",
        ),
        ("c5", json!({"clusterAdmin": {"enabled": false, "clusterRole": "view"}}), "only in cluster-admin mode"),
        ("u1", json!({"vllm": [{"name": "a", "url": "http://user:pw@vllm:8000"}]}), "spec.vllm"),
        ("u2", json!({"git": {"url": "https://user:token@example.com/r.git"}}), "credentialsSecret"),
        ("u3", json!({"ollama": {"host": "http://ollama:11434/?x=1"}}), "spec.ollama.host"),
        ("c2", json!({"clusterAdmin": {"enabled": true}}), "kubeconfigSecretName is required"),
        ("v1", json!({"vllm": [{"name": "a", "url": "http://a"}, {"name": "a", "url": "http://b"}]}), "must be unique"),
        ("v2", json!({"vllm": [{"name": "a", "url": "ftp://a"}]}), "spec.vllm[0].url"),
        (
            "v3",
            json!({"vllm": [{"name": "a", "url": "http://a", "models": {"m": {"contextLimit": 100}}}]}),
            "contextLimit",
        ),
        ("t1", json!({"tlsTermination": "none"}), "spec.tlsTermination"),
        // A duration the operator could not read never reaches it.
        ("d1", json!({"idle": {"timeout": "1d"}}), "spec.idle.timeout"),
        ("d2", json!({"idle": {"timeout": "30m1h"}}), "spec.idle.timeout"),
        ("q1", json!({"resources": {"limits": {"cpu": "two", "memory": "2Gi"}}}), "Kubernetes quantity"),
        (
            "q2",
            json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "2", "memory": "1Gi"}}}),
            "must not exceed",
        ),
        ("i1", json!({"image": "quay.io/team/image:tag;rm"}), "spec.image"),
        ("o1", json!({"ollama": {"enabled": true, "host": "http://x:11434"}}), "set only one of them"),
        ("9lives", json!({}), "metadata.name must start with a letter"),
    ];
    let mut problems = Vec::new();
    for (name, spec, want) in cases {
        match apply_instance(&c, &ns, name, spec.clone()).await {
            Ok(_) => problems.push(format!("{name}: {spec} was admitted")),
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(want) => {}
            Err(e) => problems.push(format!("{name}: expected a 422 mentioning {want:?}, got {e}")),
        }
    }
    ensure(problems.is_empty(), problems.join("\n"))
}

async fn basic_instance_converges(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("basic");
    prepare(&c, &ns).await?;
    let inst = deploy(env, &c, &ns, "dev", password_spec()).await?;
    let uid = inst.metadata.uid.clone().unwrap_or_default();
    let owned = |refs: &Option<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference>>| {
        refs.iter().flatten().any(|r| r.uid == uid && r.kind == "TinycodeInstance" && r.controller == Some(true))
    };

    // Deploying until the (played) kubelet reports the rollout.
    let inst = wait_phase(&c, &ns, "dev", "Deploying").await?;
    ensure_eq(ready(&inst).0.as_str(), "False", "Ready while deploying")?;

    let d = Api::<Deployment>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
    ensure(owned(&d.metadata.owner_references), "Deployment is not owned by the instance")?;
    ensure(
        d.metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.get("tinycode.dev/values-hash").is_some_and(|h| h.len() == 64)),
        "Deployment lacks the values-hash annotation",
    )?;
    let pod = d.spec.template.spec.clone().ok_or("no pod spec")?;
    ensure_eq(pod.service_account_name.as_deref(), Some("dev-tinycode"), "serviceAccountName")?;
    let psc = pod.security_context.clone().unwrap_or_default();
    ensure_eq((psc.run_as_user, psc.run_as_non_root), (Some(1001), Some(true)), "pod security context")?;
    ensure_eq(pod.host_pid.unwrap_or(false), false, "hostPID")?;
    let ctr = pod.containers.iter().find(|c| c.name == "tinycode").ok_or("no tinycode container")?;
    let port = ctr.ports.iter().flatten().find(|p| p.container_port == 4096).ok_or("no port 4096")?;
    ensure_eq(port.name.as_deref(), Some("http"), "port name")?;
    let sc = ctr.security_context.clone().unwrap_or_default();
    ensure_eq(sc.allow_privilege_escalation, Some(false), "allowPrivilegeEscalation")?;
    ensure_eq(sc.capabilities.and_then(|c| c.drop), Some(vec!["ALL".to_string()]), "dropped capabilities")?;
    let env_var = |n: &str| ctr.env.iter().flatten().find(|e| e.name == n).cloned();
    let pw = env_var("TINYCODE_SERVER_PASSWORD")
        .and_then(|e| e.value_from)
        .and_then(|v| v.secret_key_ref)
        .ok_or("password env not from a Secret")?;
    ensure_eq(
        (pw.name.as_str(), pw.key.as_str()),
        ("tinycode-password", "TINYCODE_SERVER_PASSWORD"),
        "password secretKeyRef",
    )?;
    ensure_eq(
        env_var("TINYCODE_DISABLE_LSP_DOWNLOAD").and_then(|e| e.value).as_deref(),
        Some("1"),
        "TINYCODE_DISABLE_LSP_DOWNLOAD",
    )?;
    let claims: Vec<String> = pod
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.persistent_volume_claim.as_ref().map(|p| p.claim_name.clone()))
        .collect();
    ensure(
        claims.contains(&"dev-data".into()) && claims.contains(&"dev-projects".into()),
        format!("pod volumes claim {claims:?}"),
    )?;

    let sa = Api::<ServiceAccount>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("service account")?;
    ensure(owned(&sa.metadata.owner_references), "ServiceAccount is not owned")?;
    let svc = Api::<Service>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("service")?;
    let sp = svc.spec.and_then(|s| s.ports).unwrap_or_default();
    ensure(sp.iter().any(|p| p.port == 4096), "Service does not expose 4096")?;
    for (pvc, size) in [("dev-data", "1Gi"), ("dev-projects", "10Gi")] {
        let p = Api::<PersistentVolumeClaim>::namespaced(c.clone(), &ns).get(pvc).await.ctx(pvc)?;
        ensure(p.metadata.owner_references.is_none(), format!("{pvc} must not be owned (it outlives the instance)"))?;
        ensure_eq(
            p.metadata.annotations.unwrap_or_default().get("helm.sh/resource-policy").cloned(),
            Some("keep".to_string()),
            "PVC keep policy",
        )?;
        let spec = p.spec.unwrap_or_default();
        ensure_eq(spec.access_modes, Some(vec!["ReadWriteOnce".to_string()]), "PVC access mode")?;
        let req = spec.resources.and_then(|r| r.requests).and_then(|r| r.get("storage").cloned()).map(|q| q.0);
        ensure_eq(req.as_deref(), Some(size), "PVC size")?;
    }
    let role = Api::<Role>::namespaced(c.clone(), &ns).get("dev-tinycode-discovery").await.ctx("discovery role")?;
    ensure(
        role.rules
            .iter()
            .flatten()
            .any(|r| r.resources.iter().flatten().any(|x| x == "services") && r.verbs.contains(&"list".into())),
        "discovery Role cannot list services",
    )?;
    Api::<RoleBinding>::namespaced(c.clone(), &ns).get("dev-tinycode-discovery").await.ctx("discovery rolebinding")?;
    // The front's policy, as rules (port, who may reach it): the URL's port
    // for the router and the namespace, the activity report (idle stop) for
    // the operator alone; tinycode's own admits the front alone.
    let np = Api::<NetworkPolicy>::namespaced(c.clone(), &ns).get(&naming::front("dev")).await.ctx("networkpolicy")?;
    let rules: Vec<(String, Vec<String>)> = np
        .spec
        .and_then(|s| s.ingress)
        .unwrap_or_default()
        .iter()
        .map(|r| {
            let ports: Vec<String> =
                r.ports.iter().flatten().filter_map(|p| p.port.clone()).map(|p| format!("{p:?}")).collect();
            let from = r
                .from
                .clone()
                .unwrap_or_default()
                .iter()
                .map(|f| serde_json::to_string(f).unwrap_or_default())
                .collect();
            (ports.join(","), from)
        })
        .collect();
    ensure_eq(
        rules.iter().map(|(p, _)| p.as_str()).collect::<Vec<_>>(),
        vec!["Int(4180)", "Int(4097)"],
        "NetworkPolicy ingress ports",
    )?;
    ensure_eq(
        rules[1].1.clone(),
        vec![json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": tinycode_tools::devcluster::OPERATOR_NAMESPACE}}}).to_string()],
        "who reaches the activity port",
    )?;

    let route = Api::<Route>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("route")?;
    ensure(owned(&route.metadata.owner_references), "Route is not owned by the instance")?;
    ensure_eq(route.spec.to.name.as_str(), "dev-tinycode", "Route target")?;
    let tls = route.spec.tls.clone().ok_or("Route has no TLS")?;
    ensure_eq(
        (tls.termination.as_str(), tls.insecure_edge_termination_policy.as_deref()),
        ("edge", Some("Redirect")),
        "Route TLS",
    )?;

    let grant =
        Api::<RoleBinding>::namespaced(c.clone(), &ns).get("dev-tinycode-scc-restricted").await.ctx("SCC grant")?;
    ensure_eq(grant.role_ref.name.as_str(), "tinycode-scc-restricted", "grant roleRef")?;
    ensure_eq(
        grant.subjects.unwrap_or_default().first().map(|s| s.name.clone()),
        Some("dev-tinycode".into()),
        "grant subject",
    )?;

    mark_workloads(&c, &ns, "dev").await?;
    let host = format!("dev-tinycode-{ns}.apps.e2e.local");
    admit_route(&c, &ns, "dev-tinycode", &host).await?;
    let inst = wait_for("Running with a URL", WAIT, || async {
        let i = wait_phase(&c, &ns, "dev", "Running").await?;
        Ok(i.status.as_ref().and_then(|s| s.url.clone()).is_some().then_some(i))
    })
    .await?;
    let st = inst.status.clone().unwrap_or_default();
    ensure_eq(st.url.as_deref(), Some(format!("https://{host}").as_str()), "status.url")?;
    ensure_eq(ready(&inst).0.as_str(), "True", "Ready")?;
    ensure_eq(st.observed_generation, inst.metadata.generation, "observedGeneration")?;
    ensure_eq(st.helm_release.as_deref(), Some(naming::release_name(&ns, "dev").as_str()), "status.helmRelease")?;
    ensure_eq(st.helm_revision, Some(1), "status.helmRevision")?;
    ensure_eq(st.scc.as_deref(), Some("tinycode-restricted"), "status.scc")?;

    // Steady state: a reconcile of an unchanged instance writes nothing.
    let rv =
        |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| m.resource_version.clone().unwrap_or_default();
    let routes: Api<Route> = Api::namespaced(c.clone(), &ns);
    let grants: Api<RoleBinding> = Api::namespaced(c.clone(), &ns);
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let before = (
        rv(&routes.get("dev-tinycode").await.ctx("route")?.metadata),
        rv(&grants.get("dev-tinycode-scc-restricted").await.ctx("rb")?.metadata),
        rv(&deployments.get("dev-tinycode").await.ctx("d")?.metadata),
    );
    let instances: Api<TinycodeInstance> = Api::namespaced(c.clone(), &ns);
    let poked = instances
        .patch("dev", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"e2e/poke": "1"}}})))
        .await
        .ctx("poke")?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = (
        rv(&routes.get("dev-tinycode").await.ctx("route")?.metadata),
        rv(&grants.get("dev-tinycode-scc-restricted").await.ctx("rb")?.metadata),
        rv(&deployments.get("dev-tinycode").await.ctx("d")?.metadata),
    );
    ensure_eq(after, before, "Route, SCC grant and Deployment resourceVersions after a no-op reconcile")?;
    ensure_eq(
        rv(&instances.get("dev").await.ctx("inst")?.metadata),
        rv(&poked.metadata),
        "instance resourceVersion after a no-op reconcile (status rewritten?)",
    )?;
    ensure_eq(
        env.release(&naming::release_name(&ns, "dev"))?.map(|r| r.0),
        Some(1),
        "helm revision after a no-op reconcile",
    )?;
    Ok(())
}

async fn spec_change_makes_one_revision_and_resync_none(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("change");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    let release = naming::release_name(&ns, "dev");
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(1), "first revision")?;

    let mut spec = password_spec();
    spec["resources"] =
        json!({"limits": {"cpu": "2", "memory": "3Gi"}, "requests": {"cpu": "200m", "memory": "512Mi"}});
    apply_instance(&c, &ns, "dev", spec).await.ctx("change spec")?;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    wait_for("the Deployment to get the new memory limit", WAIT, || async {
        let d = deployments.get("dev-tinycode").await.ctx("deployment")?;
        Ok((memory_limit(&d).as_deref() == Some("3Gi")).then_some(()))
    })
    .await?;
    wait_for("revision 2 deployed", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r == &(2, "deployed".to_string())))
    })
    .await?;

    // Restart the operator (a full resync), then prove it reconciled this
    // instance by deleting its Route, which only the operator re-creates.
    env.stop_operator();
    env.start_operator()?;
    let routes: Api<Route> = Api::namespaced(c.clone(), &ns);
    wait_for("the Route", WAIT, || async { routes.get_opt("dev-tinycode").await.ctx("route") }).await?;
    routes.delete("dev-tinycode", &DeleteParams::default()).await.ctx("delete route")?;
    wait_for("the Route to be re-created", WAIT, || async { routes.get_opt("dev-tinycode").await.ctx("route") })
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure_eq(
        env.release(&release)?,
        Some((2, "deployed".to_string())),
        "release after resync (unchanged spec must not upgrade)",
    )?;
    Ok(())
}

async fn deleted_or_edited_children_are_repaired(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("drift");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    let release = naming::release_name(&ns, "dev");

    let services: Api<Service> = Api::namespaced(c.clone(), &ns);
    let old_uid = services.get("dev-tinycode").await.ctx("service")?.metadata.uid;
    services.delete("dev-tinycode", &DeleteParams::default()).await.ctx("delete service")?;
    wait_for("the Service to be re-created", WAIT, || async {
        Ok(services.get_opt("dev-tinycode").await.ctx("service")?.filter(|s| s.metadata.uid != old_uid))
    })
    .await?;

    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let edit = PatchParams { field_manager: Some("e2e-editor".into()), ..Default::default() };
    deployments
        .patch("dev-tinycode", &edit, &Patch::Merge(json!({"spec": {"replicas": 4, "template": {"spec": {"containers": [{"name": "tinycode", "image": "quay.io/evil/image:latest"}]}}}})))
        .await
        .ctx("edit deployment")?;
    wait_for("the Deployment edit to be reverted", WAIT, || async {
        let d = deployments.get("dev-tinycode").await.ctx("deployment")?;
        let spec = d.spec;
        let image = spec
            .template
            .spec
            .and_then(|p| p.containers.into_iter().find(|c| c.name == "tinycode"))
            .and_then(|c| c.image);
        Ok((spec.replicas == Some(1) && image.as_deref() == Some(tinycode_operator::api::DEFAULT_IMAGE)).then_some(()))
    })
    .await?;

    let policies: Api<NetworkPolicy> = Api::namespaced(c.clone(), &ns);
    policies.delete("dev-tinycode", &DeleteParams::default()).await.ctx("delete networkpolicy")?;
    wait_for("the NetworkPolicy to be re-created", WAIT, || async { policies.get_opt("dev-tinycode").await.ctx("np") })
        .await?;

    // The NetworkPolicy exists as soon as helm created it; the revision finishes after.
    wait_for("each repair to be a deployed helm revision", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed" && r.0 >= 3))
    })
    .await
    .map(drop)
}

async fn unprepared_namespace_fails_then_recovers(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("unprepared");
    Api::<Namespace>::all(c.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .ctx("create namespace")?;
    apply_instance(&c, &ns, "dev", json!({})).await.ctx("apply")?;
    let inst = wait_phase(&c, &ns, "dev", "Failed").await?;
    let (status, reason, message) = ready(&inst);
    ensure_eq((status.as_str(), reason.as_str()), ("False", "NamespaceNotPrepared"), "Ready condition")?;
    let cmd = format!(
        "oc create rolebinding tinycode-operator-admin --clusterrole=admin --serviceaccount=tinycode-operator-system:tinycode-operator-manager -n {ns}"
    );
    ensure(message.contains(&cmd), format!("message does not give the preparation command: {message}"))?;
    prepare(&c, &ns).await?;
    let release = naming::release_name(&ns, "dev");
    wait_for("release deployed after preparation", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    wait_phase(&c, &ns, "dev", "Deploying").await?;
    Ok(())
}

async fn missing_password_secret_fails_then_recovers(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("secret");
    prepare(&c, &ns).await?;
    apply_instance(&c, &ns, "dev", json!({"auth": {"passwordSecret": "team-pw"}})).await.ctx("apply")?;
    let inst = wait_phase(&c, &ns, "dev", "Failed").await?;
    let (_, reason, message) = ready(&inst);
    ensure_eq(reason.as_str(), "PasswordSecretMissing", "reason")?;
    ensure(
        message.contains(&format!(
            "oc create secret generic team-pw --from-literal=TINYCODE_SERVER_PASSWORD=<password> -n {ns}"
        )),
        format!("message lacks the fix: {message}"),
    )?;
    ensure(env.release(&naming::release_name(&ns, "dev"))?.is_none(), "helm ran although the Secret is missing")?;

    let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns);
    let wrong: Secret =
        serde_json::from_value(json!({"metadata": {"name": "team-pw"}, "stringData": {"password": "x"}})).unwrap();
    secrets.create(&PostParams::default(), &wrong).await.ctx("create wrong secret")?;
    wait_for("PasswordSecretInvalid", WAIT, || async {
        let i = get_instance(&c, &ns, "dev").await?.ok_or("gone")?;
        Ok((ready(&i).1 == "PasswordSecretInvalid").then_some(()))
    })
    .await?;
    secrets
        .patch(
            "team-pw",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"TINYCODE_SERVER_PASSWORD": "s3cret-value"}})),
        )
        .await
        .ctx("fix secret")?;
    let release = naming::release_name(&ns, "dev");
    wait_for("release deployed after the Secret exists", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    let inst = wait_phase(&c, &ns, "dev", "Deploying").await?;
    // The secret's value must never surface in status.
    ensure(!serde_json::to_string(&inst.status).unwrap().contains("s3cret-value"), "secret value leaked into status")?;
    Ok(())
}

async fn disallowed_registry_fails_without_applying_then_recovers(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("registry");
    prepare(&c, &ns).await?;
    let mut spec = password_spec();
    spec["image"] = json!("docker.io/someone/tinycode:latest");
    apply_instance(&c, &ns, "dev", spec.clone()).await.ctx("apply")?;
    let inst = wait_phase(&c, &ns, "dev", "Failed").await?;
    let (_, reason, message) = ready(&inst);
    ensure_eq(reason.as_str(), "InvalidSpec", "reason")?;
    ensure(message.contains("spec.image") && message.contains("quay.io, ghcr.io"), format!("message: {message}"))?;
    ensure(env.release(&naming::release_name(&ns, "dev"))?.is_none(), "a release was installed for an invalid spec")?;
    ensure(
        Api::<RoleBinding>::namespaced(c.clone(), &ns)
            .get_opt("dev-tinycode-scc-restricted")
            .await
            .ctx("grant")?
            .is_none(),
        "SCC granted for an invalid spec",
    )?;
    spec["image"] = json!("ghcr.io/someone/tinycode:latest");
    apply_instance(&c, &ns, "dev", spec).await.ctx("fix image")?;
    let release = naming::release_name(&ns, "dev");
    wait_for("release deployed after the fix", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    Ok(())
}

async fn privileged_tier_needs_namespace_approval(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("approval");
    prepare(&c, &ns).await?;
    let mut spec = password_spec();
    spec["storage"] = json!({"hostPath": {"path": "/srv/projects"}});
    apply_instance(&c, &ns, "dev", spec).await.ctx("apply")?;
    let inst = wait_phase(&c, &ns, "dev", "Failed").await?;
    let (_, reason, message) = ready(&inst);
    ensure_eq(reason.as_str(), "SccNotApproved", "reason")?;
    ensure(
        message.contains(&format!("oc label namespace {ns} tinycode.dev/allow-hostpath=true")),
        format!("message: {message}"),
    )?;
    let approve = |value: &'static str| {
        let c = c.clone();
        let ns = ns.clone();
        async move {
            Api::<Namespace>::all(c)
                .patch(
                    &ns,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"metadata": {"labels": {"tinycode.dev/allow-hostpath": value}}})),
                )
                .await
                .map(drop)
                .ctx("approve")
        }
    };
    // Approved for read-only host directories: a writable one is still refused.
    approve("true").await?;
    let m = wait_for("refused for writes", WAIT, || async {
        let Some(i) = get_instance(&c, &ns, "dev").await? else { return Ok(None) };
        let (_, reason, message) = ready(&i);
        Ok((reason == "SccNotApproved" && message.contains("readOnly")).then_some(message))
    })
    .await?;
    ensure(m.contains(&format!("oc label namespace {ns} tinycode.dev/allow-hostpath=readwrite --overwrite")), m)?;
    ensure(env.release(&naming::release_name(&ns, "dev"))?.is_none(), "installed without the write approval")?;
    approve("readwrite").await?;
    let release = naming::release_name(&ns, "dev");
    wait_for("release deployed after approval", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    let grant =
        Api::<RoleBinding>::namespaced(c.clone(), &ns).get("dev-tinycode-scc-hostpath").await.ctx("hostpath grant")?;
    ensure_eq(grant.role_ref.name.as_str(), "tinycode-scc-hostpath", "grant")?;
    let pod = Api::<Deployment>::namespaced(c.clone(), &ns)
        .get("dev-tinycode")
        .await
        .ctx("deployment")?
        .spec
        .template
        .spec
        .ok_or("no pod")?;
    let hp = pod.volumes.iter().flatten().find_map(|v| v.host_path.clone()).ok_or("no hostPath volume")?;
    ensure_eq(hp.path.as_str(), "/srv/projects", "hostPath")?;
    ensure(
        Api::<PersistentVolumeClaim>::namespaced(c.clone(), &ns).get_opt("dev-projects").await.ctx("pvc")?.is_none(),
        "a projects PVC exists with hostPath",
    )?;

    // Back to a PVC workspace: the hostpath grant goes, the restricted one comes.
    apply_instance(&c, &ns, "dev", password_spec()).await.ctx("drop hostPath")?;
    let bindings: Api<RoleBinding> = Api::namespaced(c.clone(), &ns);
    wait_for("the grant to move to restricted", WAIT, || async {
        let hostpath = bindings.get_opt("dev-tinycode-scc-hostpath").await.ctx("rb")?;
        let restricted = bindings.get_opt("dev-tinycode-scc-restricted").await.ctx("rb")?;
        Ok((hostpath.is_none() && restricted.is_some()).then_some(()))
    })
    .await
}

async fn pvc_uids(c: &Client, ns: &str, name: &str) -> Result<BTreeMap<String, Option<String>>, String> {
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(c.clone(), ns);
    let mut out = BTreeMap::new();
    for pvc in [naming::data_pvc(name), naming::projects_pvc(name)] {
        let p = pvcs.get_opt(&pvc).await.ctx("pvc")?;
        out.insert(pvc, p.filter(|p| p.metadata.deletion_timestamp.is_none()).and_then(|p| p.metadata.uid));
    }
    Ok(out)
}

async fn delete_and_wait_gone(c: &Client, ns: &str, name: &str) -> TestResult {
    let api: Api<TinycodeInstance> = Api::namespaced(c.clone(), ns);
    api.delete(name, &DeleteParams::default()).await.ctx("delete instance")?;
    wait_for(&format!("{ns}/{name} to be gone (finalizer removed)"), WAIT, || async {
        Ok(api.get_opt(name).await.ctx("get")?.is_none().then_some(()))
    })
    .await
}

async fn delete_keeps_pvcs_and_a_new_instance_adopts_them(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("retain");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    let inst = get_instance(&c, &ns, "dev").await?.ok_or("gone")?;
    ensure(inst.metadata.finalizers.iter().flatten().any(|f| f == "tinycode.dev/finalizer"), "finalizer not set")?;
    let before = pvc_uids(&c, &ns, "dev").await?;
    ensure(before.values().all(Option::is_some), format!("PVCs missing: {before:?}"))?;

    delete_and_wait_gone(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    ensure(env.release(&release)?.is_none(), "release still installed")?;
    ensure(!secret_exists(&c, &ns, &format!("sh.helm.release.v1.{release}.v1")).await?, "release record left behind")?;
    ensure(
        Api::<Route>::namespaced(c.clone(), &ns).get_opt("dev-tinycode").await.ctx("route")?.is_none(),
        "Route left behind",
    )?;
    ensure(
        Api::<RoleBinding>::namespaced(c.clone(), &ns)
            .get_opt("dev-tinycode-scc-restricted")
            .await
            .ctx("rb")?
            .is_none(),
        "SCC grant left behind",
    )?;
    ensure(
        Api::<Deployment>::namespaced(c.clone(), &ns).get_opt("dev-tinycode").await.ctx("d")?.is_none(),
        "Deployment left behind",
    )?;
    ensure_eq(pvc_uids(&c, &ns, "dev").await?, before.clone(), "PVCs after delete (retainOnDelete)")?;

    deploy(env, &c, &ns, "dev", password_spec()).await?;
    ensure_eq(
        pvc_uids(&c, &ns, "dev").await?,
        before,
        "PVCs after re-creating the instance (must be the same volumes)",
    )?;
    Ok(())
}

async fn delete_with_retain_false_removes_pvcs(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("noretain");
    prepare(&c, &ns).await?;
    let mut spec = password_spec();
    spec["storage"] = json!({"retainOnDelete": false});
    deploy(env, &c, &ns, "dev", spec).await?;
    ensure(pvc_uids(&c, &ns, "dev").await?.values().all(Option::is_some), "PVCs missing")?;
    delete_and_wait_gone(&c, &ns, "dev").await?;
    // Without a kube-controller-manager a deleted PVC may linger with a
    // deletionTimestamp (pvc-protection finalizer); either way it is deleted.
    ensure(
        pvc_uids(&c, &ns, "dev").await?.values().all(Option::is_none),
        "PVCs survived although retainOnDelete is false",
    )
}

async fn operator_killed_mid_upgrade_converges(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("crash");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    let release = naming::release_name(&ns, "dev");

    let wrapper = helm_wait_wrapper(env)?;
    env.start_operator_with(&wrapper.clone())?;
    let mut spec = password_spec();
    spec["resources"] =
        json!({"limits": {"cpu": "2", "memory": "4Gi"}, "requests": {"cpu": "200m", "memory": "512Mi"}});
    apply_instance(&c, &ns, "dev", spec).await.ctx("change spec")?;
    wait_for("the upgrade to be pending", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "pending-upgrade"))
    })
    .await?;
    env.kill_operator();
    tokio::time::sleep(Duration::from_secs(1)).await;
    ensure_eq(env.release(&release)?.map(|r| r.1), Some("pending-upgrade".to_string()), "release after the kill")?;

    env.start_operator()?;
    // The stale pending record is dropped first (the release then reads as
    // revision 1, deployed) and the upgrade runs next: wait for its result.
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    wait_for("the upgrade to be applied after the restart", WAIT, || async {
        let deployed = env.release(&release)?.is_some_and(|r| r.1 == "deployed");
        let d = deployments.get("dev-tinycode").await.ctx("deployment")?;
        Ok((deployed && memory_limit(&d).as_deref() == Some("4Gi")).then_some(()))
    })
    .await
}

fn helm_wait_wrapper(env: &Env) -> Result<std::path::PathBuf, String> {
    // A helm that waits for pods on upgrade: with no kubelet the upgrade stays pending.
    let wrapper = env.work.path().join("helm-wait");
    let helm = env.helm.display();
    std::fs::write(&wrapper, format!("#!/bin/sh\nif [ \"$1\" = upgrade ]; then exec '{helm}' \"$@\" --wait --timeout 10m; fi\nexec '{helm}' \"$@\"\n")).ctx("wrapper")?;
    std::fs::set_permissions(&wrapper, std::os::unix::fs::PermissionsExt::from_mode(0o755)).ctx("chmod")?;
    Ok(wrapper)
}

async fn sigterm_during_helm_upgrade_leaves_no_pending_release(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("sigterm");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    let release = naming::release_name(&ns, "dev");
    let wrapper = helm_wait_wrapper(env)?;
    env.start_operator_with(&wrapper)?;
    let mut spec = password_spec();
    spec["resources"] =
        json!({"limits": {"cpu": "2", "memory": "5Gi"}, "requests": {"cpu": "200m", "memory": "512Mi"}});
    apply_instance(&c, &ns, "dev", spec).await.ctx("change spec")?;
    wait_for("the upgrade to be pending", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "pending-upgrade"))
    })
    .await?;
    let status = env.terminate_operator(Duration::from_secs(40))?;
    ensure(status.success(), format!("the operator exited with {status} on SIGTERM"))?;
    let state = env.release(&release)?.ok_or("release gone")?;
    ensure(!state.1.starts_with("pending"), format!("release left {} after SIGTERM", state.1))?;
    env.start_operator()?;
    wait_for("the release to be deployed again", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    Ok(())
}

async fn health_and_metrics_endpoints_answer_and_move(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let (health, metrics) = MAIN_PORTS;
    let ready = wait_for("/readyz to be ready", WAIT, || async {
        let (code, body) = http_get(health, "/readyz").await?;
        Ok((code == 200 && body.contains("ready")).then_some(body))
    })
    .await?;
    ensure(!ready.contains("standing by"), format!("the only replica stands by: {ready}"))?;
    ensure_eq(http_get(health, "/healthz").await?.0, 200, "/healthz")?;
    // /metrics (--metrics-auth rbac): a TokenReview and a SubjectAccessReview decide.
    let (code, body) = http_get(metrics, "/metrics").await?;
    ensure_eq(code, 401, "/metrics without a token")?;
    ensure(!body.contains("tinycode_operator_"), format!("metrics served without a token: {body}"))?;
    ensure_eq(http_get_bearer(metrics, "/metrics", Some("not-a-token")).await?.0, 401, "/metrics with a forged token")?;
    scraper_service_account(&c, "stranger").await?;
    let stranger = service_account_token(&c, SCRAPER_NAMESPACE, "stranger").await?;
    let (code, body) = http_get_bearer(metrics, "/metrics", Some(&stranger)).await?;
    ensure_eq(code, 403, "/metrics with the token of a ServiceAccount not bound to the metrics-reader role")?;
    ensure(!body.contains("tinycode_operator_"), format!("metrics served to an unbound ServiceAccount: {body}"))?;
    let (code, before) = metrics_get(env).await?;
    ensure_eq(code, 200, "/metrics with the token of a ServiceAccount bound to the metrics-reader role")?;
    let ns = env.ns("metrics");
    prepare(&c, &ns).await?;
    deploy(env, &c, &ns, "dev", password_spec()).await?;
    wait_phase(&c, &ns, "dev", "Deploying").await?;
    let (code, after) = metrics_get(env).await?;
    ensure_eq(code, 200, "/metrics (the allowed token, now from the cache)")?;
    // Checked after a reconcile and a helm run, so that this scenario needs no other before it.
    for name in [
        "tinycode_operator_reconciles",
        "tinycode_operator_reconcile_duration_seconds",
        "tinycode_operator_helm_invocations",
        "tinycode_operator_helm_duration_seconds",
        "tinycode_operator_instances",
    ] {
        ensure(after.contains(&format!("# TYPE {name} ")), format!("/metrics lacks {name}"))?;
    }
    let moved = |series: &str| metric_sum(&after, series) > metric_sum(&before, series);
    ensure(moved("tinycode_operator_reconciles_total{result=\"success\"}"), "successful reconciles did not move")?;
    ensure(
        moved("tinycode_operator_helm_invocations_total{action=\"install\",result=\"success\"}"),
        "helm installs did not move (a new instance's release is installed)",
    )?;
    ensure(
        metric_sum(&after, "tinycode_operator_instances{phase=\"Deploying\"}") >= 1.0,
        "no Deploying instance counted",
    )?;
    Ok(())
}

async fn two_replicas_one_leader_and_handover(env: &mut Env) -> TestResult {
    use k8s_openapi::api::coordination::v1::Lease;
    let c = env.client().await;
    let leases: Api<Lease> = Api::namespaced(c.clone(), "tinycode-operator-system");
    let holder = || async {
        Ok::<_, String>(
            leases
                .get_opt("tinycode-operator-leader")
                .await
                .ctx("lease")?
                .and_then(|l| l.spec)
                .and_then(|s| s.holder_identity),
        )
    };
    wait_for("e2e-operator-a to lead", WAIT, || async {
        Ok((holder().await?.as_deref() == Some("e2e-operator-a")).then_some(()))
    })
    .await?;

    let second_ports = (18082, 18384);
    let log_b = env.work.path().join("operator-b.log");
    let mut b = env.spawn_operator(&env.helm.clone(), "e2e-operator-b", second_ports, &log_b)?;
    let result = async {
        let standby = wait_for("the second replica to answer", WAIT, || async {
            http_get(second_ports.0, "/readyz").await.map(Some)
        })
        .await?;
        ensure(standby.0 == 200 && standby.1.contains("standing by"), format!("second replica /readyz: {standby:?}"))?;

        let ns = env.ns("leader");
        prepare(&c, &ns).await?;
        deploy(env, &c, &ns, "one", password_spec()).await?;
        let (code, m) = metrics_get_at(env, second_ports.1).await?;
        ensure_eq(code, 200, "the standby replica's /metrics")?;
        ensure_eq(metric_sum(&m, "tinycode_operator_reconciles_total"), 0.0, "reconciles by the standby replica")?;
        ensure_eq(holder().await?.as_deref(), Some("e2e-operator-a"), "lease holder")?;

        // The leader dies without releasing the lease: the standby takes over once it expires.
        env.kill_operator();
        let t = Instant::now();
        wait_for("e2e-operator-b to take the lease", Duration::from_secs(40), || async {
            Ok((holder().await?.as_deref() == Some("e2e-operator-b")).then_some(()))
        })
        .await?;
        println!("    handover took {:.1}s (lease duration 6s)", t.elapsed().as_secs_f64());
        deploy(env, &c, &ns, "two", password_spec()).await?;
        let (code, m) = metrics_get_at(env, second_ports.1).await?;
        ensure_eq(code, 200, "the new leader's /metrics")?;
        ensure(metric_sum(&m, "tinycode_operator_helm_invocations_total") >= 1.0, "the new leader ran no helm")?;
        Ok::<(), String>(())
    }
    .await;
    // Hand back: b releases on SIGTERM, a takes over at once.
    let _ = std::process::Command::new("kill").args(["-TERM", &b.id().to_string()]).status();
    let _ = b.wait();
    env.start_operator()?;
    wait_for("e2e-operator-a to lead again", WAIT, || async {
        Ok((holder().await?.as_deref() == Some("e2e-operator-a")).then_some(()))
    })
    .await?;
    result
}

async fn vllm_providers_are_probed_and_misbehaving_ones_only_warn(env: &mut Env) -> TestResult {
    use k8s_openapi::api::core::v1::ConfigMap;
    let c = env.client().await;
    let ns = env.ns("vllm");
    prepare(&c, &ns).await?;
    let good = standin::start(standin::Config {
        models: vec![("small".into(), 8192), ("big".into(), 131072)],
        behaviour: standin::Behaviour::Ok,
        tool_calling: false,
    })
    .await;
    let broken = standin::start(standin::Config {
        models: vec![],
        behaviour: standin::Behaviour::ServerError,
        tool_calling: true,
    })
    .await;
    let slow = standin::start(standin::Config {
        models: vec![],
        behaviour: standin::Behaviour::Slow(Duration::from_secs(60)),
        tool_calling: true,
    })
    .await;
    // A Service annotated for discovery, pointing at a stand-in through the URL annotation.
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "models", "annotations": {
        "tinycode.dev/discover": "vllm", "tinycode.dev/vllm-url": good.url()}},
        "spec": {"ports": [{"name": "http", "port": 8000}]}}))
    .unwrap();
    Api::<Service>::namespaced(c.clone(), &ns).create(&PostParams::default(), &svc).await.ctx("create service")?;
    let mut spec = password_spec();
    spec["model"] = json!("big");
    spec["vllm"] = json!([{"name": "good", "url": good.url()}, {"name": "broken", "url": broken.url()}, {"name": "slow", "url": slow.url()}]);
    let started = Instant::now();
    deploy(env, &c, &ns, "dev", spec.clone()).await?;
    ensure(
        started.elapsed() < Duration::from_secs(20),
        format!("deploying with misbehaving providers took {:?}", started.elapsed()),
    )?;
    let cm = Api::<ConfigMap>::namespaced(c.clone(), &ns).get("dev-tinycode-config").await.ctx("configmap")?;
    let cfg: Value = serde_json::from_str(cm.data.unwrap_or_default().get("config.json").ok_or("no config.json")?)
        .ctx("config json")?;
    ensure_eq(
        &cfg["providers"]["good"]["models"]["small"],
        &json!({"contextLimit": 6553, "outputLimit": 1638}),
        "probed limits for max_model_len 8192",
    )?;
    ensure_eq(
        &cfg["providers"]["good"]["models"]["big"],
        &json!({"contextLimit": 104857, "outputLimit": 4096}),
        "probed limits for 131072",
    )?;
    ensure(
        cfg["providers"].get("broken").is_none() && cfg["providers"].get("slow").is_none(),
        "unreachable providers must be left out",
    )?;
    ensure_eq(&cfg["model"], &json!("big"), "model")?;

    mark_workloads(&c, &ns, "dev").await?;
    admit_route(&c, &ns, "dev-tinycode", "vllm.apps.e2e.local").await?;
    let inst = wait_phase(&c, &ns, "dev", "Running").await?;
    let cond = |t: &str| inst.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == t).cloned());
    let ready = cond("VllmConfigReady").ok_or("no VllmConfigReady")?;
    ensure_eq(ready.status.as_str(), "False", "VllmConfigReady with unreachable providers")?;
    ensure(
        ready.message.contains("broken")
            && ready.message.contains("500")
            && ready.message.contains("slow")
            && ready.message.contains("timed out"),
        format!("VllmConfigReady message: {}", ready.message),
    )?;
    let warning = cond("VllmWarning").ok_or("no VllmWarning")?;
    ensure_eq(warning.status.as_str(), "True", "VllmWarning")?;
    ensure(
        warning.message.contains("--enable-auto-tool-choice") && warning.message.contains("--max-model-len 32768"),
        format!("VllmWarning message: {}", warning.message),
    )?;
    ensure(
        warning.message.contains(&format!("{ns}/models")) || warning.message.matches("--max-model-len").count() >= 2,
        format!("the discovered Service was not checked: {}", warning.message),
    )?;

    // Only the good provider left: the config is complete again.
    spec["vllm"] = json!([{"name": "good", "url": good.url()}]);
    apply_instance(&c, &ns, "dev", spec).await.ctx("drop broken providers")?;
    wait_for("VllmConfigReady True", WAIT, || async {
        let i = get_instance(&c, &ns, "dev").await?.ok_or("gone")?;
        let ok = i
            .status
            .as_ref()
            .is_some_and(|s| s.conditions.iter().any(|c| c.type_ == "VllmConfigReady" && c.status == "True"));
        Ok(ok.then_some(()))
    })
    .await
}

fn kubeconfig(contexts: usize, token: &str) -> String {
    let ctxs: String =
        (0..contexts).map(|i| format!("- name: c{i}\n  context: {{cluster: local, user: agent}}\n")).collect();
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster: {{server: https://127.0.0.1:6443}}\ncontexts:\n{ctxs}current-context: c0\nusers:\n- name: agent\n  user: {{token: {token}}}\n"
    )
}

async fn put_secret(c: &Client, ns: &str, name: &str, data: Value) -> TestResult {
    let secret =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns}, "stringData": data});
    Api::<Secret>::namespaced(c.clone(), ns)
        .patch(name, &PatchParams::apply("e2e-user").force(), &Patch::Apply(&secret))
        .await
        .ctx("secret")?;
    Ok(())
}

async fn cluster_admin_kubeconfig_is_checked_and_copied(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("agent");
    prepare(&c, &ns).await?;
    let mut spec = password_spec();
    spec["clusterAdmin"] = json!({"enabled": true, "kubeconfigSecretName": "kc"});
    apply_instance(&c, &ns, "dev", spec.clone()).await.ctx("apply")?;
    let inst = wait_phase(&c, &ns, "dev", "Failed").await?;
    let cond = |i: &TinycodeInstance| {
        i.status.as_ref().and_then(|s| s.conditions.iter().find(|c| c.type_ == "ClusterAdminReady").cloned())
    };
    let ca = cond(&inst).ok_or("no ClusterAdminReady")?;
    ensure_eq((ca.status.as_str(), ca.reason.as_str()), ("False", "KubeconfigSecretMissing"), "ClusterAdminReady")?;
    ensure(ca.message.contains("oc create secret generic kc --from-file=kubeconfig=<kubeconfig>"), ca.message.clone())?;

    let token = "sha256~very-secret-oauth-token";
    put_secret(&c, &ns, "kc", json!({"kubeconfig": kubeconfig(2, token)})).await?;
    let release = naming::release_name(&ns, "dev");
    wait_for("release deployed once the Secret exists", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    let inst = wait_phase(&c, &ns, "dev", "Deploying").await?;
    let ca = cond(&inst).ok_or("no ClusterAdminReady")?;
    ensure_eq(ca.status.as_str(), "True", "ClusterAdminReady")?;
    ensure(
        ca.message.contains("2 contexts") && ca.message.contains("long-lived ServiceAccount token"),
        ca.message.clone(),
    )?;
    ensure(!serde_json::to_string(&inst.status).unwrap().contains(token), "the token leaked into status")?;
    let events = Api::<k8s_openapi::api::events::v1::Event>::namespaced(c.clone(), &ns)
        .list(&Default::default())
        .await
        .ctx("events")?;
    ensure(!serde_json::to_string(&events.items).unwrap().contains(token), "the token leaked into events")?;
    let d = Api::<Deployment>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
    let pod = d.spec.template.spec.ok_or("no pod")?;
    ensure(
        pod.volumes.iter().flatten().any(|v| v.secret.as_ref().is_some_and(|s| s.secret_name.as_deref() == Some("kc"))),
        "kubeconfig Secret not mounted",
    )?;

    // From another namespace: the operator keeps a copy next to the instance.
    let admins = env.ns("admins");
    prepare(&c, &admins).await?;
    put_secret(&c, &admins, "shared-kc", json!({"config": kubeconfig(1, "eyJhbGciOi.payload.signature")})).await?;
    // Its owner shares it with the instance namespace (without that, nothing is copied: see the tenancy scenarios).
    env.kubectl(&[
        "annotate",
        "secret",
        "shared-kc",
        "-n",
        &admins,
        &format!("tinycode.dev/kubeconfig-share-with={ns}"),
    ])?;
    spec["clusterAdmin"] = json!({"enabled": true, "kubeconfigSecretName": "shared-kc", "kubeconfigSecretKey": "config", "kubeconfigNamespace": admins});
    deploy(env, &c, &ns, "copy", spec).await?;
    let secrets: Api<Secret> = Api::namespaced(c.clone(), &ns);
    let copy = wait_for("the kubeconfig copy", WAIT, || async {
        secrets.get_opt("copy-tinycode-kubeconfig").await.ctx("secret")
    })
    .await?;
    let original = Api::<Secret>::namespaced(c.clone(), &admins).get("shared-kc").await.ctx("original")?;
    ensure_eq(
        copy.data.as_ref().and_then(|d| d.get("config")),
        original.data.as_ref().and_then(|d| d.get("config")),
        "copied kubeconfig",
    )?;
    let d = Api::<Deployment>::namespaced(c.clone(), &ns).get("copy-tinycode").await.ctx("deployment")?;
    ensure(
        d.spec
            .template
            .spec
            .iter()
            .flat_map(|p| p.volumes.iter().flatten())
            .any(|v| v.secret.as_ref().is_some_and(|s| s.secret_name.as_deref() == Some("copy-tinycode-kubeconfig"))),
        "the copy is not mounted",
    )?;
    delete_and_wait_gone(&c, &ns, "copy").await?;
    ensure(
        secrets.get_opt("copy-tinycode-kubeconfig").await.ctx("secret")?.is_none(),
        "the kubeconfig copy outlived the instance",
    )?;
    Ok(())
}

async fn every_sample_reaches_running(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("samples");
    prepare(&c, &ns).await?;
    Api::<Namespace>::all(c.clone())
        .patch(&ns, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"labels": {"tinycode.dev/allow-hostpath": "readwrite", "tinycode.dev/allow-shell": "true"}}})))
        .await
        .ctx("approve tiers")?;
    put_secret(&c, &ns, "tinycode-kubeconfig", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.payload.signature")}))
        .await?;
    let vllm = standin::start(standin::Config {
        models: vec![("qwen/Qwen2.5-Coder-32B-Instruct-AWQ".into(), 32768)],
        behaviour: standin::Behaviour::Ok,
        tool_calling: true,
    })
    .await;
    let dir = repo_root().join("config/samples");
    let mut names = Vec::new();
    for entry in std::fs::read_dir(&dir).ctx("samples")? {
        let path = entry.ctx("entry")?.path();
        // As a user applies it: the file as-is into this namespace (admission
        // only: the server-side dry run stores nothing, so nothing is probed).
        env.kubectl(&["apply", "--dry-run=server", "-n", &ns, "-f", path.to_str().unwrap()])
            .map_err(|e| format!("{}: `kubectl apply -n {ns}` refused it: {e}", path.display()))?;
        let mut inst: Value = serde_saphyr::from_str(&std::fs::read_to_string(&path).ctx("read")?).ctx("parse")?;
        // Model servers are stood in for on loopback: no test traffic leaves the machine.
        if let Some(list) = inst["spec"]["vllm"].as_array_mut() {
            for p in list {
                p["url"] = json!(vllm.url());
            }
        }
        let name = inst["metadata"]["name"].as_str().ok_or("sample without a name")?.to_string();
        apply_instance(&c, &ns, &name, inst["spec"].clone())
            .await
            .map_err(|e| format!("{}: not admitted: {e}", path.display()))?;
        names.push(name);
    }
    ensure(names.len() >= 8, format!("expected a sample per mode, found {names:?}"))?;
    for name in &names {
        let release = naming::release_name(&ns, name);
        wait_for(&format!("release of sample {name}"), WAIT, || async {
            Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
        })
        .await?;
        mark_workloads(&c, &ns, name).await?;
        // A bundled Ollama's readiness is the instance's too.
        let inst = Api::<TinycodeInstance>::namespaced(c.clone(), &ns).get(name).await.ctx("get the sample")?;
        if inst.spec.ollama.enabled {
            mark_available(&c, &ns, &naming::ollama(name)).await?;
        }
        admit_route(&c, &ns, &format!("{name}-tinycode"), &format!("{name}.apps.e2e.local")).await?;
    }
    for name in &names {
        let inst = wait_phase(&c, &ns, name, "Running").await?;
        for cond in inst.status.iter().flat_map(|s| s.conditions.iter()) {
            if cond.type_ == "ClusterAdminReady" || cond.type_ == "VllmConfigReady" {
                ensure_eq(cond.status.as_str(), "True", &format!("{name} {}", cond.type_))?;
            }
        }
    }
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    ensure(
        deployments.get_opt("ollama-tinycode-ollama").await.ctx("ollama")?.is_some(),
        "the Ollama bundle was not deployed",
    )?;
    let team = deployments.get("team-tinycode-tinycode").await.ctx("team")?;
    ensure_eq(team.spec.replicas, Some(3), "shared instance replicas")?;
    let route = Api::<Route>::namespaced(c.clone(), &ns).get("team-tinycode-tinycode").await.ctx("route")?;
    ensure_eq(
        route.metadata.annotations.unwrap_or_default().get("haproxy.router.openshift.io/balance").cloned(),
        Some("source".to_string()),
        "sticky sessions",
    )?;
    let git = deployments.get("git-tinycode-tinycode").await.ctx("git")?;
    ensure(
        git.spec.template.spec.iter().flat_map(|p| p.init_containers.iter().flatten()).any(|c| c.name == "git-clone"),
        "no git-clone init container",
    )?;
    let shell = deployments.get("shell-tinycode-tinycode").await.ctx("shell")?;
    ensure_eq(shell.spec.template.spec.and_then(|p| p.host_pid), Some(true), "shell hostPID")?;
    Ok(())
}

/// The operator ran every scenario under exactly its generated ClusterRole:
/// no reconcile of this run failed on a refused API call or helm step.
async fn no_permission_errors_in_any_scenario(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let events =
        Api::<k8s_openapi::api::events::v1::Event>::all(c.clone()).list(&Default::default()).await.ctx("events")?;
    let suffix = format!("-{}", env.run_id);
    let ours: Vec<_> = events
        .items
        .iter()
        .filter(|e| e.metadata.namespace.as_deref().is_some_and(|n| n.starts_with("e2e-") && n.ends_with(&suffix)))
        .filter(|e| e.reporting_controller.as_deref() == Some("tinycode-operator"))
        .collect();
    ensure(!ours.is_empty(), "no operator events found for this run")?;
    let refused: Vec<String> = ours
        .iter()
        .filter(|e| {
            let note = e.note.as_deref().unwrap_or_default().to_lowercase();
            e.reason.as_deref() == Some("KubernetesApiError") || note.contains("forbidden") || note.contains(" 403")
        })
        .map(|e| {
            format!(
                "{}: {} {}",
                e.metadata.namespace.as_deref().unwrap_or(""),
                e.reason.as_deref().unwrap_or(""),
                e.note.as_deref().unwrap_or("")
            )
        })
        .collect();
    ensure(refused.is_empty(), format!("the operator hit refused calls:\n{}", refused.join("\n")))
}

/// Every field of `want` is in `got` with the same value.
fn contains(got: &Value, want: &Value, path: &str) -> Result<(), String> {
    match (got, want) {
        (Value::Object(g), Value::Object(w)) => {
            for (k, wv) in w {
                let gv = g.get(k).ok_or_else(|| format!("{path}.{k} was pruned"))?;
                contains(gv, wv, &format!("{path}.{k}"))?;
            }
            Ok(())
        }
        (Value::Array(g), Value::Array(w)) if g.len() == w.len() => {
            for (i, (gv, wv)) in g.iter().zip(w).enumerate() {
                contains(gv, wv, &format!("{path}[{i}]"))?;
            }
            Ok(())
        }
        _ if got == want => Ok(()),
        _ => Err(format!("{path}: stored {got}, sent {want}")),
    }
}

async fn openshift_schemas_accept_operator_objects(env: &mut Env) -> TestResult {
    if !env.real_openshift_schemas {
        return Err("SKIP: ../shared/openshift-crds is not in this checkout".into());
    }
    let c = env.client().await;
    let ns = env.ns("schemas");
    prepare(&c, &ns).await?;
    let spec = json!({"auth": {"passwordSecret": "tinycode-password"}, "replicas": 2, "hostname": "code.apps.e2e.local",
                      "tlsTermination": "passthrough", "storage": {"projectsAccessMode": "ReadWriteMany"}});
    let inst = deploy(env, &c, &ns, "dev", spec).await?;
    let routes: Api<Route> = Api::namespaced(c.clone(), &ns);
    let live = wait_for("the Route", WAIT, || async { routes.get_opt("dev-tinycode").await.ctx("route") }).await?;
    let owner = inst.controller_owner_ref(&()).ok_or("owner")?;
    let sent = tinycode_operator::render::route::build("dev", &ns, &inst.spec, owner);
    contains(&serde_json::to_value(&live.spec).unwrap(), &serde_json::to_value(&sent.spec).unwrap(), "route.spec")?;
    contains(
        &serde_json::to_value(&live.metadata.annotations).unwrap(),
        &serde_json::to_value(&sent.metadata.annotations).unwrap(),
        "route.metadata.annotations",
    )?;
    // A Route status as a real router writes it is accepted too.
    admit_route(&c, &ns, "dev-tinycode", "code.apps.e2e.local").await?;

    let sccs: Api<SecurityContextConstraints> = Api::all(c.clone());
    for tier in ALL_TIERS {
        let live = sccs.get(&tier.scc_name()).await.ctx("scc")?;
        let mut sent = scc_manifest(&tier.scc());
        let mut got = serde_json::to_value(&live).unwrap();
        for v in [&mut sent, &mut got] {
            v.as_object_mut().unwrap().remove("metadata");
            v.as_object_mut().unwrap().remove("apiVersion");
            v.as_object_mut().unwrap().remove("kind");
        }
        contains(&got, &sent, &tier.scc_name())?;
    }
    Ok(())
}

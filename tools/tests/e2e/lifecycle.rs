//! Day two: an operator upgrade re-renders untouched instances, drift is
//! judged against what the release rendered, helm failures stall visibly and
//! recover on request, and an instance can be suspended.

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;
use tinycode_operator::platform::openshift::Route;

use super::{delete_and_wait_gone, deploy, kubeconfig, put_secret};
use crate::harness::*;

fn condition(inst: &TinycodeInstance, type_: &str) -> Option<(String, String)> {
    inst.status.as_ref()?.conditions.iter().find(|c| c.type_ == type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn copy_dir(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

/// An operator restarted with a new chart (its Chart.yaml version changed)
/// re-renders an instance nobody touched.
pub async fn operator_upgrade_rerenders_untouched_instances(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("upgrade");
    env.prepare_with_script(&ns)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    let before = env.release(&release)?.ok_or("no release")?.0;

    let original = env.chart.clone();
    let copy = env.work.path().join("chart-next");
    copy_dir(&original, &copy).ctx("copy the chart")?;
    let chart_yaml = std::fs::read_to_string(copy.join("Chart.yaml")).ctx("Chart.yaml")?;
    let bumped: String = chart_yaml
        .lines()
        .map(|l| if l.starts_with("version:") { "version: 99.0.0".to_string() } else { l.to_string() })
        .collect::<Vec<_>>()
        .join("\n");
    std::fs::write(copy.join("Chart.yaml"), bumped + "\n").ctx("write Chart.yaml")?;
    env.chart = copy;
    let result = async {
        env.start_operator()?;
        wait_for("the untouched instance re-rendered", WAIT, || async {
            Ok(env.release(&release)?.filter(|r| r.0 > before && r.1 == "deployed"))
        })
        .await?;
        let d = Api::<Deployment>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
        let chart_label = d.metadata.labels.unwrap_or_default().get("helm.sh/chart").cloned();
        ensure_eq(chart_label.as_deref(), Some("tinycode-99.0.0"), "the Deployment's chart label")
    }
    .await;
    env.chart = original;
    env.start_operator()?;
    result?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// Objects the release rendered come back when deleted: the Ollama
/// Deployment (no Rust list names it) and a cluster-scoped binding.
pub async fn rendered_objects_come_back_when_deleted(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("redrift");
    env.prepare_with_script(&ns)?;
    put_secret(&c, &ns, "kc", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.payload.sig")})).await?;
    env.kubectl(&["label", "namespace", &ns, "tinycode.dev/allow-cluster-role=view"])?;
    let spec = json!({"ollama": {"enabled": true},
                      "clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}});
    deploy(env, &c, &ns, "dev", spec).await?;
    run_to_running(&c, &ns, "dev").await?;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let crbs: Api<ClusterRoleBinding> = Api::all(c.clone());
    let crb = naming::cluster_role_binding(&ns, "dev");
    let old_uid = deployments.get("dev-ollama").await.ctx("ollama deployment")?.metadata.uid;
    deployments.delete("dev-ollama", &DeleteParams::default()).await.ctx("delete ollama")?;
    crbs.delete(&crb, &DeleteParams::default()).await.ctx("delete binding")?;
    // The Deployment's deletion wakes the operator (it watches them); nothing watches bindings.
    wait_for("the Ollama Deployment restored", WAIT, || async {
        Ok(deployments.get_opt("dev-ollama").await.ctx("get")?.filter(|d| d.metadata.uid != old_uid))
    })
    .await?;
    wait_for("the cluster-role binding restored", WAIT, || async { crbs.get_opt(&crb).await.ctx("get") }).await?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// An upgrade the apiserver refuses (an object that exists outside the
/// release) is rolled back, retried up to the budget, then Stalled with no
/// more helm runs; removing the cause and bumping the annotation recovers.
pub async fn failing_release_stalls_and_recovers_on_request(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("stall");
    env.prepare_with_script(&ns)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    // A Service the release would create, made by someone else first.
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "dev-ollama"},
        "spec": {"ports": [{"port": 11434}]}}))
    .unwrap();
    let services: Api<Service> = Api::namespaced(c.clone(), &ns);
    services.create(&PostParams::default(), &svc).await.ctx("conflicting service")?;
    apply_instance(&c, &ns, "dev", json!({"ollama": {"enabled": true}})).await.ctx("enable ollama")?;

    let stalled = wait_for("Stalled", Duration::from_secs(120), || async {
        let Some(i) = get_instance(&c, &ns, "dev").await? else { return Ok(None) };
        Ok((condition(&i, "Stalled").map(|s| s.0).as_deref() == Some("True")).then_some(i))
    })
    .await?;
    ensure_eq(condition(&stalled, "Reconciling").map(|s| s.0), Some("False".into()), "Reconciling")?;
    let (_, reason, message) = ready(&stalled);
    ensure_eq(reason.as_str(), "RetriesExhausted", "Ready reason")?;
    ensure(message.contains("dev-ollama"), format!("the helm error is not in the message: {message}"))?;
    // Helm refused before applying anything: what worked is still deployed.
    let (revision, state) = env.release(&release)?.ok_or("release gone")?;
    ensure_eq(state.as_str(), "deployed", "the release after the failures")?;
    let d = Api::<Deployment>::namespaced(c.clone(), &ns).get_opt("dev-ollama").await.ctx("get")?;
    ensure(d.is_none(), "the failed rendering is not what runs")?;
    // Stalled: no further helm runs while nothing changes.
    tokio::time::sleep(Duration::from_secs(8)).await;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision), "revision while Stalled")?;
    // The count lives in status, so a restarted operator (or a new leader)
    // honours it: no helm run for this release after the restart either.
    let failures = stalled.status.as_ref().and_then(|s| s.helm_failures.clone()).ok_or("no status.helmFailures")?;
    ensure_eq(failures.count, 3, "status.helmFailures.count (TINYCODE_MAX_RETRIES)")?;
    let runs = env.work.path().join("helm-runs");
    let recorder = env.work.path().join("helm-recording");
    std::fs::write(
        &recorder,
        format!(
            "#!/bin/sh
echo \"$*\" >> '{}'\nexec '{}' \"$@\"\n",
            runs.display(),
            env.helm.display()
        ),
    )
    .ctx("wrapper")?;
    std::fs::set_permissions(&recorder, std::os::unix::fs::PermissionsExt::from_mode(0o755)).ctx("chmod")?;
    env.start_operator_with(&recorder)?;
    // Started means synced: every instance is reconciled right away.
    tokio::time::sleep(Duration::from_secs(8)).await;
    let restarted = get_instance(&c, &ns, "dev").await?.ok_or("gone")?;
    ensure_eq(condition(&restarted, "Stalled").map(|s| s.0), Some("True".into()), "Stalled after the restart")?;
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    ensure(!ran.lines().any(|l| l.contains(&release)), format!("helm ran for {release} after the restart: {ran}"))?;
    ensure_eq(
        restarted.status.and_then(|s| s.helm_failures).map(|f| f.count),
        Some(3),
        "status.helmFailures after the restart",
    )?;
    env.start_operator()?;

    services.delete("dev-ollama", &DeleteParams::default()).await.ctx("remove the cause")?;
    let api: Api<TinycodeInstance> = Api::namespaced(c.clone(), &ns);
    let bump = json!({"metadata": {"annotations": {"tinycode.dev/reconcile-requested-at": "2026-12-02T17:00:00Z"}}});
    api.patch("dev", &PatchParams::default(), &Patch::Merge(&bump)).await.ctx("request a reconcile")?;
    wait_for("the upgrade applied", WAIT, || async {
        Api::<Deployment>::namespaced(c.clone(), &ns).get_opt("dev-ollama").await.ctx("get")
    })
    .await?;
    mark_workloads(&c, &ns, "dev").await?;
    mark_available(&c, &ns, "dev-ollama").await?;
    let inst = wait_phase(&c, &ns, "dev", "Running").await?;
    ensure_eq(condition(&inst, "Stalled").map(|s| s.0), Some("False".into()), "Stalled after recovery")?;
    ensure_eq(
        inst.status.and_then(|s| s.last_handled_reconcile_at),
        Some("2026-12-02T17:00:00Z".to_string()),
        "status.lastHandledReconcileAt",
    )?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// `spec.suspend`: spec changes apply nothing (no new revision) until resumed.
pub async fn suspend_stops_helm_and_resume_applies(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("suspend");
    env.prepare_with_script(&ns)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    let before = env.release(&release)?.ok_or("no release")?.0;
    let bigger = json!({"resources": {"limits": {"cpu": "3", "memory": "2Gi"}}});
    let mut suspended = bigger.clone();
    suspended["suspend"] = json!(true);
    apply_instance(&c, &ns, "dev", suspended).await.ctx("suspend")?;
    let inst = wait_phase(&c, &ns, "dev", "Suspended").await?;
    ensure_eq(ready(&inst).1.as_str(), "Suspended", "Ready reason")?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(before), "revision while suspended")?;

    apply_instance(&c, &ns, "dev", bigger).await.ctx("resume")?;
    wait_for("the change applied on resume", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.0 > before && r.1 == "deployed"))
    })
    .await?;
    run_to_running(&c, &ns, "dev").await?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// An upgrade the apiserver refuses mid-way (a pod template it rejects) is
/// rolled back to the last revision that worked, and an event says so.
pub async fn failed_upgrade_rolls_back_to_the_last_good_revision(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("rollback");
    env.prepare_with_script(&ns)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    let good = env.release(&release)?.ok_or("no release")?.0;
    // A label value with a space: admitted by the CRD, refused in the Deployment.
    apply_instance(&c, &ns, "dev", json!({"nodeSelector": {"pool": "gpu nodes"}})).await.ctx("bad upgrade")?;
    let events: Api<Event> = Api::namespaced(c.clone(), &ns);
    wait_for("a rollback event", WAIT, || async {
        let list = events.list(&ListParams::default()).await.ctx("events")?;
        Ok(list.items.into_iter().find(|e| e.reason.as_deref() == Some("HelmRolledBack")))
    })
    .await?;
    let (revision, state) = env.release(&release)?.ok_or("release gone")?;
    ensure(revision > good + 1 && state == "deployed", format!("release after the rollback: {revision} {state}"))?;
    let d = Api::<Deployment>::namespaced(c.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
    let selector = d.spec.template.spec.and_then(|p| p.node_selector).unwrap_or_default();
    ensure(selector.is_empty(), format!("the refused rendering runs: {selector:?}"))?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// A 63-character name (the Kubernetes limit) runs: every derived name fits.
pub async fn a_63_character_name_runs(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("longname");
    env.prepare_with_script(&ns)?;
    let name = format!("long-{}", "x".repeat(58));
    ensure_eq(name.len(), 63, "name length")?;
    let spec = json!({"hostname": format!("long.{ns}.apps.local.test")});
    deploy(env, &c, &ns, &name, spec).await?;
    let inst = run_to_running(&c, &ns, &name).await?;
    let fullname = naming::fullname(&name);
    ensure(fullname.len() <= 63, format!("{fullname} is longer than 63"))?;
    Api::<Service>::namespaced(c.clone(), &ns).get(&fullname).await.ctx("the Service")?;
    ensure_eq(
        inst.status.as_ref().and_then(|s| s.helm_release.clone()),
        Some(naming::release_name(&ns, &name)),
        "status.helmRelease",
    )?;
    delete_and_wait_gone(&c, &ns, &name).await
}

/// Storage fields helm cannot change are refused at admission, with the fix.
pub async fn storage_is_fixed_at_creation(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("immutable");
    env.prepare_with_script(&ns)?;
    let base = json!({"storage": {"storageClassName": "fast", "projectsSize": "20Gi"}});
    apply_instance(&c, &ns, "dev", base).await.ctx("create")?;
    let cases = [
        (json!({"storage": {"storageClassName": "slow", "projectsSize": "20Gi"}}), "spec.storage.storageClassName"),
        (
            json!({"storage": {"storageClassName": "fast", "projectsSize": "20Gi", "projectsAccessMode": "ReadWriteMany"}}),
            "spec.storage.projectsAccessMode",
        ),
    ];
    let mut problems = Vec::new();
    for (spec, want) in cases {
        match apply_instance(&c, &ns, "dev", spec.clone()).await {
            Ok(_) => problems.push(format!("{spec} was admitted")),
            Err(kube::Error::Api(s))
                if s.code == 422 && s.message.contains(want) && s.message.contains("retainOnDelete") => {}
            Err(e) => problems.push(format!("{spec}: expected a 422 naming {want:?} and retainOnDelete, got {e}")),
        }
    }
    // Sizes are the operator's to judge against the PVCs
    // (storage_grows_where_its_class_allows): admission lets them change.
    for size in ["30Gi", "5Gi"] {
        apply_instance(&c, &ns, "dev", json!({"storage": {"storageClassName": "fast", "projectsSize": size}}))
            .await
            .ctx("resize")?;
    }
    ensure(problems.is_empty(), problems.join("\n"))?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// `helm install` of a release whose record exists after all (the
/// operator's watch had not shown it yet) upgrades the release instead of
/// failing: the operator installs with `helm install` whenever its cache
/// holds no record.
pub async fn an_install_that_meets_a_record_upgrades_it(env: &mut Env) -> TestResult {
    use std::sync::Arc;
    use tinycode_operator::helm::{Helm, Mode};
    use tinycode_operator::ops::metrics::Metrics;

    let ns = env.ns("install-race");
    env.prepare_with_script(&ns)?;
    let (_stop, stopped) = tokio::sync::watch::channel(false);
    let chart = repo_root().join("helm-charts/tinycode");
    let helm = Helm::new(env.helm.clone(), chart, Duration::from_secs(120), stopped, Arc::new(Metrics::new()))
        .ctx("helm home")?
        .with_record_lookup(env.client().await);
    let v = super::default_values(&ns, "dev");
    // Records in the test namespace: this test plays the operator's helm, not the operator.
    let release = naming::release_name(&ns, "dev");
    let first = helm.apply(&release, &ns, &v, Mode::Install).await.ctx("first install")?;
    ensure_eq(first.revision, 1, "revision of the first install")?;
    let again = helm.apply(&release, &ns, &v, Mode::Install).await.ctx("install over an existing record")?;
    ensure_eq(again.revision, 2, "revision of the install that met a record")?;
    let rendered = again.rendered.ok_or("helm's output gave no manifest")?;
    ensure(
        rendered.iter().any(|o| o.kind == "Deployment" && o.name == "dev-tinycode" && o.namespace == ns),
        format!("the Deployment is not among what the upgrade rendered: {rendered:?}"),
    )?;
    helm.uninstall(&release, &ns).await.ctx("uninstall")
}

/// `spec.stopped`: both workloads (tinycode and the bundled Ollama) go to zero
/// replicas in one helm revision; the PVCs, the Route and `status.url` stay;
/// no helm runs while it stays stopped; `false` brings it back on the same PVCs.
pub async fn stop_scales_to_zero_and_start_brings_it_back(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("stop");
    env.prepare_with_script(&ns)?;
    let spec = json!({"ollama": {"enabled": true}});
    deploy(env, &c, &ns, "dev", spec.clone()).await?;
    run_to_running(&c, &ns, "dev").await?;
    // The URL follows the Route's admission, which may be seen a moment
    // after the Deployment's readiness.
    let url = wait_for("status.url while running", WAIT, || async {
        Ok(get_instance(&c, &ns, "dev").await?.and_then(|i| i.status?.url))
    })
    .await?;
    let pvcs = crate::pvc_uids(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    let revision = env.release(&release)?.ok_or("no release")?.0;
    let deployments: Api<Deployment> = Api::namespaced(c.clone(), &ns);
    let replicas = |name: &'static str| {
        let deployments = deployments.clone();
        async move { Ok::<_, String>(deployments.get(name).await.ctx("deployment")?.spec.replicas) }
    };

    let mut stopped = spec.clone();
    stopped["stopped"] = json!(true);
    apply_instance(&c, &ns, "dev", stopped).await.ctx("stop")?;
    let inst = wait_phase(&c, &ns, "dev", "Stopped").await?;
    let (ready, reason, _) = ready(&inst);
    ensure_eq((ready.as_str(), reason.as_str()), ("False", "Stopped"), "Ready")?;
    ensure_eq(inst.status.as_ref().and_then(|s| s.url.clone()), Some(url.clone()), "status.url kept")?;
    ensure_eq((replicas("dev-tinycode").await?, replicas("dev-ollama").await?), (Some(0), Some(0)), "replicas")?;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision + 1), "one revision for the stop")?;
    ensure_eq(crate::pvc_uids(&c, &ns, "dev").await?, pvcs.clone(), "PVCs")?;
    let routes: Api<Route> = Api::namespaced(c.clone(), &ns);
    ensure(routes.get_opt("dev-tinycode").await.ctx("route")?.is_some(), "the Route went")?;
    let events = Api::<Event>::namespaced(c.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(events.items.iter().any(|e| e.reason.as_deref() == Some("Stopped")), "no Stopped event")?;

    // Staying stopped costs no helm run.
    crate::tenancy::poke(&c, &ns, "dev", 1).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision + 1), "revision while stopped")?;

    apply_instance(&c, &ns, "dev", spec).await.ctx("start")?;
    wait_for("the start's revision", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.0 == revision + 2 && r.1 == "deployed"))
    })
    .await?;
    ensure_eq((replicas("dev-tinycode").await?, replicas("dev-ollama").await?), (Some(1), Some(1)), "replicas")?;
    run_to_running(&c, &ns, "dev").await?;
    ensure_eq(crate::pvc_uids(&c, &ns, "dev").await?, pvcs, "the same PVCs after the start")?;
    let events = Api::<Event>::namespaced(c.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(events.items.iter().any(|e| e.reason.as_deref() == Some("Started")), "no Started event")?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// hack/uninstall.sh deletes the operator namespace, and with it every
/// release record, while instances keep running. A reinstall picks them up:
/// each release is installed again over the objects it owns (their helm
/// annotations still name it), with no helm failure and the data kept. No
/// namespace controller runs here, so the test plays the namespace's deletion
/// by deleting the records while the operator is down.
pub async fn a_reinstall_adopts_instances_whose_records_were_uninstalled(env: &mut Env) -> TestResult {
    use k8s_openapi::api::core::v1::Secret;
    use tinycode_tools::devcluster::OPERATOR_NAMESPACE;
    let c = env.client().await;
    let ns = env.ns("reinstall");
    env.prepare_with_script(&ns)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let pvcs = crate::pvc_uids(&c, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");

    env.stop_operator();
    let records: Api<Secret> = Api::namespaced(c.clone(), OPERATOR_NAMESPACE);
    let selector = ListParams::default().labels(&tinycode_operator::helm::record_selector(&release));
    records.delete_collection(&DeleteParams::default(), &selector).await.ctx("the uninstall's loss of the records")?;
    ensure(env.release(&release)?.is_none(), "records left")?;
    env.start_operator()?;

    wait_for("the release installed again", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    let inst = run_to_running(&c, &ns, "dev").await?;
    ensure_eq(crate::pvc_uids(&c, &ns, "dev").await?, pvcs, "the data volumes")?;
    let events = Api::<Event>::namespaced(c.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    let failed: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref().is_some_and(|r| r.starts_with("Helm") && r != "HelmApplied"))
        .filter_map(|e| e.note.clone())
        .collect();
    ensure(failed.is_empty(), format!("helm failed on the way: {failed:?}"))?;
    ensure_eq(inst.status.and_then(|s| s.helm_failures), None, "status.helmFailures")?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

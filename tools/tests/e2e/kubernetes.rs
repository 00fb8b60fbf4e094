//! The same operator on a Kubernetes without the OpenShift APIs: they are
//! removed from the control plane, the operator restarted, and it must detect
//! the platform and use an Ingress and Pod Security labels. These scenarios
//! run after the OpenShift ones. The harness plays the ingress controller
//! (it publishes an address in the Ingress status; nothing is dialled).

use std::time::Duration;

use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;

use super::{delete_and_wait_gone, deploy};
use crate::harness::*;

/// Plays an ingress controller: publishes an address for the Ingress.
async fn publish(c: &Client, ns: &str, name: &str) -> TestResult {
    let api: Api<Ingress> = Api::namespaced(c.clone(), ns);
    wait_for(&format!("Ingress {ns}/{name}"), WAIT, || async { api.get_opt(name).await.ctx("get ingress") }).await?;
    let status = json!({"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await.ctx("publish")?;
    Ok(())
}

fn condition(inst: &TinycodeInstance, type_: &str) -> Option<(String, String, String)> {
    inst.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Removes the OpenShift APIs and restarts the operator: it detects Kubernetes.
pub async fn k8s_platform_is_detected_without_openshift_apis(env: &mut Env) -> TestResult {
    let c = env.client().await;
    env.stop_operator();
    let crds: Api<CustomResourceDefinition> = Api::all(c.clone());
    for crd in ["routes.route.openshift.io", "securitycontextconstraints.security.openshift.io"] {
        match crds.delete(crd, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(format!("delete {crd}: {e}")),
        }
    }
    wait_for("the OpenShift API groups to leave discovery", WAIT, || async {
        let groups = c.list_api_groups().await.ctx("discovery")?;
        Ok((!groups.groups.iter().any(|g| g.name.ends_with(".openshift.io"))).then_some(()))
    })
    .await?;
    // hack/install.sh works on such a cluster too (it skips the SCCs, says so, and installs the rest).
    run_script(&env.kubectl, &env.admin_kubeconfig, "install.sh", &["--no-wait", "--image", LOCAL_IMAGE])?;
    env.start_operator()?;
    let (code, metrics) = metrics_get(env).await?;
    ensure_eq(code, 200, "/metrics")?;
    ensure(
        metrics.lines().any(|l| l.starts_with("tinycode_operator_platform_info{platform=\"kubernetes\"} 1")),
        "the operator did not report the kubernetes platform",
    )
}

/// A basic instance: an Ingress owned by the instance, `status.url` from it,
/// no SCC grant, the NetworkPolicy open to the ingress controller's namespace.
pub async fn k8s_basic_instance_gets_an_ingress(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("k8s-basic");
    env.prepare_with_script(&ns)?;
    let host = format!("dev.{ns}.example.test");
    let inst = deploy(env, &c, &ns, "dev", json!({"hostname": host})).await?;
    let uid = inst.metadata.uid.clone().unwrap_or_default();
    publish(&c, &ns, &naming::route("dev")).await?;
    mark_workloads(&c, &ns, "dev").await?;
    let inst = wait_phase(&c, &ns, "dev", "Running").await?;
    ensure_eq(inst.status.as_ref().and_then(|s| s.url.clone()), Some(format!("http://{host}")), "status.url")?;
    ensure_eq(condition(&inst, "IngressReady").map(|c| c.0), Some("True".into()), "IngressReady")?;
    let ing = Api::<Ingress>::namespaced(c.clone(), &ns).get(&naming::route("dev")).await.ctx("ingress")?;
    ensure(ing.metadata.owner_references.iter().flatten().any(|o| o.uid == uid), "Ingress not owned by the instance")?;
    let rule = ing.spec.and_then(|s| s.rules).unwrap_or_default().into_iter().next().ok_or("no rule")?;
    ensure_eq(rule.host.as_deref(), Some(host.as_str()), "Ingress host")?;
    let grant = naming::scc_grant("dev", "restricted");
    ensure(
        Api::<RoleBinding>::namespaced(c.clone(), &ns).get_opt(&grant).await.ctx("get")?.is_none(),
        "an SCC grant on a cluster without SCCs",
    )?;
    let np = Api::<NetworkPolicy>::namespaced(c.clone(), &ns).get(&naming::front("dev")).await.ctx("np")?;
    let from = serde_json::to_value(&np.spec.and_then(|s| s.ingress).unwrap_or_default()[0].from).unwrap();
    ensure_eq(
        from,
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ingress-nginx"}}}, {"podSelector": {}}]),
        "NetworkPolicy sources",
    )?;
    // Drift of the Ingress is repaired (the operator watches its Ingresses).
    let ingresses: Api<Ingress> = Api::namespaced(c.clone(), &ns);
    let old = ing.metadata.uid.clone();
    ingresses.delete(&naming::route("dev"), &DeleteParams::default()).await.ctx("delete ingress")?;
    wait_for("the Ingress re-created", WAIT, || async {
        Ok(ingresses.get_opt(&naming::route("dev")).await.ctx("get")?.filter(|i| i.metadata.uid != old))
    })
    .await?;
    // Deleting the instance removes it.
    delete_and_wait_gone(&c, &ns, "dev").await?;
    ensure(ingresses.get_opt(&naming::route("dev")).await.ctx("get")?.is_none(), "the Ingress outlived the instance")
}

/// TLS from spec.ingress.tlsSecretName, the cluster's default IngressClass,
/// and Route-only fields as warnings; no host name: no Ingress and a hint.
pub async fn k8s_ingress_class_tls_and_route_only_fields(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("k8s-tls");
    env.prepare_with_script(&ns)?;
    let class_name = format!("e2e-default-{}", env.run_id);
    let class: IngressClass = serde_json::from_value(json!({"metadata": {"name": class_name,
        "annotations": {"ingressclass.kubernetes.io/is-default-class": "true"}},
        "spec": {"controller": "example.test/e2e"}}))
    .unwrap();
    let classes: Api<IngressClass> = Api::all(c.clone());
    classes.create(&PostParams::default(), &class).await.ctx("ingress class")?;
    let result = async {
        let host = format!("tls.{ns}.example.test");
        let spec = json!({"hostname": host, "ingress": {"tlsSecretName": "dev-tls"}, "tlsTermination": "passthrough"});
        deploy(env, &c, &ns, "dev", spec).await?;
        publish(&c, &ns, &naming::route("dev")).await?;
        mark_workloads(&c, &ns, "dev").await?;
        let inst = wait_phase(&c, &ns, "dev", "Running").await?;
        ensure_eq(inst.status.as_ref().and_then(|s| s.url.clone()), Some(format!("https://{host}")), "status.url")?;
        let (_, _, message) = ready(&inst);
        ensure(message.contains("OpenShift Routes only"), format!("no warning about tlsTermination: {message}"))?;
        let ing = Api::<Ingress>::namespaced(c.clone(), &ns).get(&naming::route("dev")).await.ctx("ingress")?;
        let spec = ing.spec.unwrap_or_default();
        ensure_eq(spec.ingress_class_name.as_deref(), Some(class_name.as_str()), "ingressClassName")?;
        ensure_eq(spec.tls.unwrap_or_default()[0].secret_name.as_deref(), Some("dev-tls"), "TLS Secret")?;

        deploy(env, &c, &ns, "nohost", json!({})).await?;
        mark_workloads(&c, &ns, "nohost").await?;
        let inst = wait_phase(&c, &ns, "nohost", "Running").await?;
        let (status, reason, message) = condition(&inst, "IngressReady").ok_or("no IngressReady")?;
        ensure_eq((status.as_str(), reason.as_str()), ("False", "NoHostname"), "IngressReady")?;
        ensure(message.contains("kubectl port-forward"), message)?;
        ensure(inst.status.and_then(|s| s.url).is_none(), "a URL without an Ingress")?;
        ensure(
            Api::<Ingress>::namespaced(c.clone(), &ns).get_opt(&naming::route("nohost")).await.ctx("get")?.is_none(),
            "an Ingress without a host",
        )?;
        delete_and_wait_gone(&c, &ns, "nohost").await?;
        delete_and_wait_gone(&c, &ns, "dev").await
    }
    .await;
    classes.delete(&class_name, &DeleteParams::default()).await.ctx("delete class")?;
    result
}

/// A hostPath instance needs the tier approval and the privileged Pod
/// Security level, both set by a cluster-admin; the operator sets neither
/// (prepare-namespace.sh enforces restricted where nothing was set).
pub async fn k8s_hostpath_needs_both_labels(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("k8s-hostpath");
    env.prepare_with_script(&ns)?;
    let api: Api<TinycodeInstance> = Api::namespaced(c.clone(), &ns);
    apply_instance(&c, &ns, "dev", json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}}}))
        .await
        .ctx("apply")?;
    let failed = |reason: &'static str| {
        let api = api.clone();
        async move {
            wait_for(&format!("Failed with {reason}"), WAIT, || async {
                let i = api.get("dev").await.ctx("get")?;
                let (_, r, m) = ready(&i);
                Ok((r == reason).then_some(m))
            })
            .await
        }
    };
    failed("SccNotApproved").await?;
    env.kubectl(&["label", "namespace", &ns, "tinycode.dev/allow-hostpath=true"])?;
    let m = failed("PodSecurityNotAllowed").await?;
    ensure(m.contains(&format!("kubectl label namespace {ns} pod-security.kubernetes.io/enforce=privileged")), m)?;
    let labels = env.kubectl(&["get", "namespace", &ns, "-o", "jsonpath={.metadata.labels}"])?;
    // prepare-namespace.sh set restricted (no tier was approved then); the
    // operator left it as it was.
    ensure(
        labels.contains(r#""pod-security.kubernetes.io/enforce":"restricted""#),
        format!("the operator changed Pod Security labels: {labels}"),
    )?;
    env.kubectl(&["label", "--overwrite", "namespace", &ns, "pod-security.kubernetes.io/enforce=privileged"])?;
    let release = naming::release_name(&ns, "dev");
    wait_for("the release deployed", Duration::from_secs(60), || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    delete_and_wait_gone(&c, &ns, "dev").await
}

/// Attack: bob names, as his instance's host, the host alice's instance
/// serves. He is refused with
/// `HostnameTaken`, gets no Ingress, and alice's Ingress and URL stay as
/// they were; another host works for him.
pub async fn k8s_a_tenant_cannot_take_another_instances_host(env: &mut Env) -> TestResult {
    use super::tenancy::{failed_with, tenant};
    let admin = env.client().await;
    let alice = tenant(env, "alice", "host-a").await?;
    let bob = tenant(env, "bob", "host-b").await?;
    // A host that does not spell alice's namespace, so the refusal can be read for it.
    let host = format!("ide-{}.example.test", env.run_id);
    deploy(env, &alice.client, &alice.ns, "dev", json!({"hostname": host})).await?;
    publish(&admin, &alice.ns, &naming::route("dev")).await?;
    mark_workloads(&admin, &alice.ns, "dev").await?;
    let inst = wait_phase(&admin, &alice.ns, "dev", "Running").await?;
    let url = Some(format!("http://{host}"));
    ensure_eq(inst.status.as_ref().and_then(|s| s.url.clone()), url.clone(), "alice's URL")?;
    let alice_ingress = Api::<Ingress>::namespaced(admin.clone(), &alice.ns);
    let before = alice_ingress.get(&naming::route("dev")).await.ctx("alice's Ingress")?.metadata.resource_version;

    apply_instance(&bob.client, &bob.ns, "dev", json!({"hostname": host})).await.ctx("bob applies")?;
    let message = failed_with(&admin, &bob.ns, "dev", "HostnameTaken").await?;
    ensure(!message.contains(&alice.ns), format!("the refusal names alice's namespace: {message}"))?;
    let bobs = Api::<Ingress>::namespaced(admin.clone(), &bob.ns).list(&Default::default()).await.ctx("ingresses")?;
    ensure(bobs.items.is_empty(), "bob got an Ingress for alice's host")?;
    let after = alice_ingress.get(&naming::route("dev")).await.ctx("alice's Ingress")?.metadata.resource_version;
    ensure_eq(after, before, "alice's Ingress")?;
    let inst = get_instance(&admin, &alice.ns, "dev").await?.ok_or("alice's instance")?;
    ensure_eq(inst.status.as_ref().and_then(|s| s.url.clone()), url, "alice's URL after bob's attempt")?;

    // His own host is his.
    let own = format!("bob-ide-{}.example.test", env.run_id);
    apply_instance(&bob.client, &bob.ns, "dev", json!({"hostname": own})).await.ctx("bob's own host")?;
    wait_for("bob's Ingress for his own host", WAIT, || async {
        let ing = Api::<Ingress>::namespaced(admin.clone(), &bob.ns).get_opt(&naming::route("dev")).await.ctx("get")?;
        let host = ing.and_then(|i| i.spec?.rules?.into_iter().next()?.host);
        Ok((host.as_deref() == Some(own.as_str())).then_some(()))
    })
    .await
}

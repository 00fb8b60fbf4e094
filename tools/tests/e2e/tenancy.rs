//! Tenants are adversaries: each scenario performs an attack as a tenant
//! (impersonated, `kubectl --as alice`, admin of their own namespace only)
//! against the operator running under the RBAC hack/install.sh applies, in
//! namespaces hack/prepare-namespace.sh prepared, and asserts that nothing
//! outside the tenant's namespace changed; then the approved path works.

use std::collections::BTreeMap;

use base64::Engine;
use k8s_openapi::ByteString;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::api::naming;
use tinycode_tools::devcluster::OPERATOR_NAMESPACE;

use super::{delete_and_wait_gone, kubeconfig, put_secret, standin};
use crate::harness::*;

/// A user who is `admin` of one namespace and nothing else.
pub(crate) struct Tenant {
    pub ns: String,
    pub client: Client,
}

pub(crate) async fn tenant(env: &Env, user: &str, base: &str) -> Result<Tenant, String> {
    let ns = env.ns(base);
    env.prepare_with_script(&ns)?;
    env.kubectl(&[
        "create",
        "rolebinding",
        &format!("{user}-admin"),
        "--clusterrole=admin",
        &format!("--user={user}"),
        "-n",
        &ns,
    ])?;
    let client = env.client_as(user).await;
    // The tenant really is confined: no access to the operator's namespace.
    let denied = Api::<Secret>::namespaced(client.clone(), OPERATOR_NAMESPACE).list(&ListParams::default()).await;
    ensure(
        matches!(denied, Err(kube::Error::Api(ref s)) if s.code == 403),
        format!("{user} can read the operator namespace"),
    )?;
    Ok(Tenant { ns, client })
}

/// resourceVersion of everything a tenant must not change through the
/// operator: every cluster role and binding, and every object of interest in
/// `namespaces` (other tenants' namespaces, the operator's Secrets but for
/// the records of `own_release`).
pub(crate) async fn outside(
    c: &Client,
    namespaces: &[&str],
    own_release: &str,
) -> Result<BTreeMap<String, String>, String> {
    async fn add<K>(api: Api<K>, m: &mut BTreeMap<String, String>, skip: impl Fn(&K) -> bool) -> TestResult
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
    {
        for o in api.list(&ListParams::default()).await.ctx("list")?.items {
            if skip(&o) {
                continue;
            }
            let key = format!("{}/{}/{}", K::kind(&()), o.namespace().unwrap_or_default(), o.name_any());
            m.insert(key, o.resource_version().unwrap_or_default());
        }
        Ok(())
    }
    let mut m = BTreeMap::new();
    add(Api::<ClusterRoleBinding>::all(c.clone()), &mut m, |_| false).await?;
    add(Api::<ClusterRole>::all(c.clone()), &mut m, |_| false).await?;
    for ns in namespaces {
        add(Api::<ConfigMap>::namespaced(c.clone(), ns), &mut m, |_| false).await?;
        add(Api::<Secret>::namespaced(c.clone(), ns), &mut m, |s: &Secret| {
            s.labels().get("name").is_some_and(|n| n == own_release)
        })
        .await?;
        add(Api::<RoleBinding>::namespaced(c.clone(), ns), &mut m, |_| false).await?;
        add(Api::<Role>::namespaced(c.clone(), ns), &mut m, |_| false).await?;
        add(Api::<ServiceAccount>::namespaced(c.clone(), ns), &mut m, |_| false).await?;
        add(Api::<Deployment>::namespaced(c.clone(), ns), &mut m, |_| false).await?;
    }
    Ok(m)
}

pub(crate) fn same_world(before: &BTreeMap<String, String>, after: &BTreeMap<String, String>) -> TestResult {
    let mut diffs = Vec::new();
    for (k, v) in before {
        match after.get(k) {
            None => diffs.push(format!("deleted: {k}")),
            Some(w) if w != v => diffs.push(format!("changed: {k}")),
            _ => {}
        }
    }
    for k in after.keys().filter(|k| !before.contains_key(*k)) {
        diffs.push(format!("created: {k}"));
    }
    ensure(diffs.is_empty(), format!("outside the tenant's namespace: {}", diffs.join(", ")))
}

/// Waits until the instance is Failed with `reason` for its current generation; its message.
pub(crate) async fn failed_with(c: &Client, ns: &str, name: &str, reason: &str) -> Result<String, String> {
    wait_for(&format!("{ns}/{name} Failed with {reason}"), WAIT, || async {
        let Some(inst) = get_instance(c, ns, name).await? else { return Ok(None) };
        let st = inst.status.clone().unwrap_or_default();
        let (_, r, message) = ready(&inst);
        let current = st.observed_generation == inst.metadata.generation;
        Ok((current && st.phase.map(|p| p.as_str()) == Some("Failed") && r == reason).then_some(message))
    })
    .await
}

/// Touches the instance so the operator reconciles it now (any watch event does).
pub(crate) async fn poke(c: &Client, ns: &str, name: &str, n: u32) -> TestResult {
    Api::<TinycodeInstance>::namespaced(c.clone(), ns)
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"e2e/poke": n.to_string()}}})),
        )
        .await
        .ctx("poke")?;
    Ok(())
}

/// A release record as helm writes it (base64 of the release JSON), forged.
fn forged_record(release: &str, ns: &str, victim_ns: &str, marker: &str) -> Secret {
    let manifest =
        format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: bob-data\n  namespace: {victim_ns}\n");
    let hook = format!(
        "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: {marker}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: User\n  apiGroup: rbac.authorization.k8s.io\n  name: alice\n"
    );
    let rel = json!({
        "name": release, "namespace": ns, "version": 99,
        "info": {"status": "deployed", "first_deployed": "2026-01-01T00:00:00Z", "last_deployed": "2026-01-01T00:00:00Z"},
        "chart": {"metadata": {"apiVersion": "v2", "name": "tinycode", "version": "0.1.0"}},
        "config": {}, "manifest": manifest,
        "hooks": [{"name": marker, "kind": "ClusterRoleBinding", "path": "tinycode/templates/x.yaml", "manifest": hook,
                   "events": ["pre-install", "pre-upgrade", "post-upgrade", "pre-delete", "post-delete"], "weight": 0}],
    });
    let encoded = base64::engine::general_purpose::STANDARD.encode(serde_json::to_vec(&rel).unwrap());
    serde_json::from_value(json!({
        "metadata": {"name": format!("sh.helm.release.v1.{release}.v99"), "namespace": ns,
                     "labels": {"owner": "helm", "name": release, "status": "deployed", "version": "99"}},
        "type": "helm.sh/release.v1",
        "data": {"release": ByteString(encoded.into_bytes())},
    }))
    .unwrap()
}

/// Attack 1: release records forged in the tenant's namespace (helm's
/// labels, a manifest naming another tenant's ConfigMap, hooks binding
/// cluster-admin) are never read: upgrade and uninstall touch nothing else.
pub async fn tenant_forged_helm_records_are_never_trusted(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "forge-a").await?;
    let bob = tenant(env, "bob", "forge-b").await?;
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bob-data"}, "data": {"work": "precious"}});
    Api::<ConfigMap>::namespaced(bob.client.clone(), &bob.ns)
        .create(&PostParams::default(), &serde_json::from_value(cm).unwrap())
        .await
        .ctx("bob's ConfigMap")?;
    super::deploy(env, &alice.client, &alice.ns, "dev", json!({})).await?;
    let release = naming::release_name(&alice.ns, "dev");
    let before = outside(&admin, &[&bob.ns, OPERATOR_NAMESPACE], &release).await?;

    let marker = format!("e2e-forged-{}", env.run_id);
    let secrets: Api<Secret> = Api::namespaced(alice.client.clone(), &alice.ns);
    for r in [release.clone(), naming::legacy_release_name(&alice.ns, "dev")] {
        secrets.create(&PostParams::default(), &forged_record(&r, &alice.ns, &bob.ns, &marker)).await.ctx("forge")?;
    }
    // An upgrade, then an uninstall, each of which would act on a trusted record.
    tinycode_operator_apply(
        &alice.client,
        &alice.ns,
        "dev",
        json!({"resources": {"limits": {"cpu": "3", "memory": "2Gi"}}}),
    )
    .await?;
    wait_for("revision 2 in the operator namespace", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r == &(2, "deployed".to_string())))
    })
    .await?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await?;

    let bob_data = Api::<ConfigMap>::namespaced(admin.clone(), &bob.ns).get_opt("bob-data").await.ctx("get")?;
    ensure(bob_data.is_some(), "bob's ConfigMap was deleted")?;
    ensure(
        Api::<ClusterRoleBinding>::all(admin.clone()).get_opt(&marker).await.ctx("get")?.is_none(),
        "the forged hook ran",
    )?;
    same_world(&before, &outside(&admin, &[&bob.ns, OPERATOR_NAMESPACE], &release).await?)?;
    ensure(env.release(&release)?.is_none(), "the release outlived the instance")
}

async fn tinycode_operator_apply(c: &Client, ns: &str, name: &str, spec: Value) -> TestResult {
    apply_instance(c, ns, name, spec).await.map(drop).ctx("apply instance")
}

/// Attack 2: a cluster role is bound only when cluster-admin mode is on, the
/// role is in the operator's allow-list and a cluster-admin labelled the
/// namespace for it; taking the label back takes the binding back.
pub async fn tenant_cluster_role_needs_a_cluster_admin_approval(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "role-a").await?;
    put_secret(&alice.client, &alice.ns, "kc", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.payload.sig")})).await?;
    let spec =
        |role: &str| json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": role}});
    let crb_name = naming::cluster_role_binding(&alice.ns, "dev");
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let release = naming::release_name(&alice.ns, "dev");
    let before = outside(&admin, &[OPERATOR_NAMESPACE], &release).await?;

    for role in ["tinycode-operator-manager", "tinycode-scc-shell", "admin", "cluster-admin"] {
        let refused = apply_instance(&alice.client, &alice.ns, "dev", spec(role)).await;
        ensure(matches!(refused, Err(kube::Error::Api(ref s)) if s.code == 422), format!("{role} was admitted"))?;
    }
    apply_instance(&alice.client, &alice.ns, "dev", spec("view")).await.ctx("apply")?;
    let m = failed_with(&admin, &alice.ns, "dev", "ClusterRoleNotApproved").await?;
    ensure(m.contains(&format!("oc label namespace {} tinycode.dev/allow-cluster-role=view", alice.ns)), m)?;
    // A label for another role, on a role outside the allow-list, approves nothing either.
    env.kubectl(&["label", "namespace", &alice.ns, "tinycode.dev/allow-cluster-role=edit"])?;
    apply_instance(&alice.client, &alice.ns, "dev", spec("edit")).await.ctx("apply")?;
    let m = failed_with(&admin, &alice.ns, "dev", "ClusterRoleNotApproved").await?;
    ensure(m.contains("allow-list"), m)?;
    ensure(crbs.get_opt(&crb_name).await.ctx("get")?.is_none(), "bound without approval")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], &release).await?)?;

    // Approved: bound, and the pod gets the token it needs.
    env.kubectl(&["label", "namespace", &alice.ns, "tinycode.dev/allow-cluster-role=view", "--overwrite"])?;
    apply_instance(&alice.client, &alice.ns, "dev", spec("view")).await.ctx("apply")?;
    wait_for("the approved binding", WAIT, || async { crbs.get_opt(&crb_name).await.ctx("get") }).await?;
    run_to_running(&admin, &alice.ns, "dev").await?;
    let crb = crbs.get(&crb_name).await.ctx("get")?;
    ensure_eq(crb.role_ref.name.as_str(), "view", "roleRef")?;
    let subject = crb.subjects.unwrap_or_default().into_iter().next().ok_or("no subject")?;
    ensure_eq(
        (subject.kind.as_str(), subject.name.as_str(), subject.namespace.as_deref()),
        ("ServiceAccount", "dev-tinycode", Some(alice.ns.as_str())),
        "subject",
    )?;
    let d = Api::<Deployment>::namespaced(admin.clone(), &alice.ns).get("dev-tinycode").await.ctx("deployment")?;
    ensure_eq(d.spec.template.spec.and_then(|p| p.automount_service_account_token), Some(true), "token")?;

    // Another allowed role, approved instead: the binding (whose roleRef cannot change) is replaced.
    let reader: ClusterRole = serde_json::from_value(json!({"metadata": {"name": e2e_reader_role()},
        "rules": [{"apiGroups": [""], "resources": ["services"], "verbs": ["get", "list"]}]}))
    .unwrap();
    let roles: Api<ClusterRole> = Api::all(admin.clone());
    if roles.get_opt(e2e_reader_role()).await.ctx("get")?.is_none() {
        roles.create(&PostParams::default(), &reader).await.ctx("reader role")?;
    }
    let label = format!("tinycode.dev/allow-cluster-role={}", e2e_reader_role());
    env.kubectl(&["label", "namespace", &alice.ns, &label, "--overwrite"])?;
    apply_instance(&alice.client, &alice.ns, "dev", spec(e2e_reader_role())).await.ctx("apply")?;
    wait_for("the binding to the other role", WAIT, || async {
        Ok(crbs.get_opt(&crb_name).await.ctx("get")?.filter(|b| b.role_ref.name == e2e_reader_role()))
    })
    .await?;
    let release = naming::release_name(&alice.ns, "dev");
    wait_for("the release deployed", WAIT, || async { Ok(env.release(&release)?.filter(|r| r.1 == "deployed")) })
        .await?;

    // The approval taken back: the binding goes on the next reconcile.
    env.kubectl(&["label", "namespace", &alice.ns, "tinycode.dev/allow-cluster-role-"])?;
    poke(&admin, &alice.ns, "dev", 1).await?;
    wait_for("the binding removed", WAIT, || async {
        Ok(crbs.get_opt(&crb_name).await.ctx("get")?.is_none().then_some(()))
    })
    .await?;
    failed_with(&admin, &alice.ns, "dev", "ClusterRoleNotApproved").await?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await
}

/// Attack 3: a kubeconfig in another namespace is copied only when its owner
/// annotated it for the instance's namespace; the refusal reads the same
/// whether or not the Secret exists, and taking consent back removes the copy.
pub async fn tenant_kubeconfig_copy_needs_the_owners_consent(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "kc-a").await?;
    let bob = tenant(env, "bob", "kc-b").await?;
    put_secret(&bob.client, &bob.ns, "ops-kc", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.bob.secret")})).await?;
    let spec = |secret: &str| json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": secret, "kubeconfigNamespace": bob.ns}});
    let release = naming::release_name(&alice.ns, "dev");
    let before = outside(&admin, &[&bob.ns, OPERATOR_NAMESPACE], &release).await?;

    apply_instance(&alice.client, &alice.ns, "dev", spec("ops-kc")).await.ctx("apply")?;
    apply_instance(&alice.client, &alice.ns, "probe", spec("no-such-kc")).await.ctx("apply")?;
    // A reserved namespace is never a source, whatever it holds.
    let system = json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "admin-kc", "kubeconfigNamespace": "kube-system"}});
    apply_instance(&alice.client, &alice.ns, "system", system).await.ctx("apply")?;
    let m = failed_with(&admin, &alice.ns, "system", "InvalidSpec").await?;
    ensure(m.contains("spec.clusterAdmin.kubeconfigNamespace"), m)?;
    delete_and_wait_gone(&alice.client, &alice.ns, "system").await?;
    let existing = failed_with(&admin, &alice.ns, "dev", "KubeconfigNotShared").await?;
    let missing = failed_with(&admin, &alice.ns, "probe", "KubeconfigNotShared").await?;
    ensure_eq(
        existing.replace("ops-kc", "S"),
        missing.replace("no-such-kc", "S"),
        "the refusal must not tell whether the Secret exists",
    )?;
    ensure(existing.contains(&format!("tinycode.dev/kubeconfig-share-with={}", alice.ns)), existing.clone())?;
    let copies: Api<Secret> = Api::namespaced(admin.clone(), &alice.ns);
    ensure(copies.get_opt("dev-tinycode-kubeconfig").await.ctx("get")?.is_none(), "copied without consent")?;
    ensure(env.release(&release)?.is_none(), "installed without consent")?;
    same_world(&before, &outside(&admin, &[&bob.ns, OPERATOR_NAMESPACE], &release).await?)?;

    // Bob consents: the copy is made and mounted.
    let bob_secrets: Api<Secret> = Api::namespaced(bob.client.clone(), &bob.ns);
    let share = |v: Option<&str>| json!({"metadata": {"annotations": {"tinycode.dev/kubeconfig-share-with": v}}});
    bob_secrets.patch("ops-kc", &PatchParams::default(), &Patch::Merge(share(Some(&alice.ns)))).await.ctx("share")?;
    poke(&admin, &alice.ns, "dev", 1).await?;
    let copy =
        wait_for("the consented copy", WAIT, || async { copies.get_opt("dev-tinycode-kubeconfig").await.ctx("get") })
            .await?;
    let original = bob_secrets.get("ops-kc").await.ctx("get")?;
    ensure_eq(
        copy.data.and_then(|d| d.get("kubeconfig").cloned()),
        original.data.and_then(|d| d.get("kubeconfig").cloned()),
        "copy",
    )?;
    run_to_running(&admin, &alice.ns, "dev").await?;

    // Bob takes it back: the copy goes.
    bob_secrets.patch("ops-kc", &PatchParams::default(), &Patch::Merge(share(None))).await.ctx("unshare")?;
    poke(&admin, &alice.ns, "dev", 2).await?;
    wait_for("the copy removed", WAIT, || async {
        Ok(copies.get_opt("dev-tinycode-kubeconfig").await.ctx("get")?.is_none().then_some(()))
    })
    .await?;
    failed_with(&admin, &alice.ns, "dev", "KubeconfigNotShared").await?;
    delete_and_wait_gone(&alice.client, &alice.ns, "probe").await?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await
}

/// Attack 4: provider URLs and discovery annotations that reach the
/// operator's own host through the unspecified address (which the guard
/// refuses even where loopback stand-ins are allowed, as in these tests)
/// never get a request through.
pub async fn tenant_urls_cannot_reach_the_operator_host(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "ssrf-a").await?;
    let target = standin::start(standin::Config {
        models: vec![("m".into(), 32768)],
        behaviour: standin::Behaviour::Ok,
        tool_calling: true,
    })
    .await;
    let port = target.addr.port();
    let svc: Service = serde_json::from_value(json!({"metadata": {"name": "sneaky", "annotations": {
        "tinycode.dev/discover": "vllm", "tinycode.dev/vllm-url": format!("http://0.0.0.0:{port}")}},
        "spec": {"ports": [{"name": "http", "port": 8000}]}}))
    .unwrap();
    Api::<Service>::namespaced(alice.client.clone(), &alice.ns)
        .create(&PostParams::default(), &svc)
        .await
        .ctx("svc")?;
    let spec = json!({"vllm": [
        {"name": "zero", "url": format!("http://0.0.0.0:{port}")},
        {"name": "mapped", "url": format!("http://[::ffff:0.0.0.0]:{port}")},
        {"name": "metadata", "url": "http://169.254.169.254/latest"},
        {"name": "sixtofour", "url": format!("http://[2002:7f00:1::]:{port}")},
        {"name": "teredo", "url": format!("http://[2001:0:4136:e378:8000:63bf:80ff:fffe]:{port}")},
    ]});
    super::deploy(env, &alice.client, &alice.ns, "dev", spec).await?;
    let inst = wait_for("VllmConfigReady False", WAIT, || async {
        let Some(i) = get_instance(&admin, &alice.ns, "dev").await? else { return Ok(None) };
        let st = i.status.clone().unwrap_or_default();
        Ok(st.conditions.iter().any(|c| c.type_ == "VllmConfigReady" && c.status == "False").then_some(i))
    })
    .await?;
    ensure_eq(target.requests(), 0, "requests that reached the operator's host")?;
    let text = serde_json::to_string(&inst.status).unwrap();
    ensure(text.contains("never probed") || text.contains("not probed") || text.contains("refused"), text)?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await
}

/// Attack 5: an instance with no password named is not open: a generated
/// password (kept across spec changes), a NetworkPolicy that admits only the
/// router and the namespace, and no API token in the pod.
pub async fn tenant_instances_are_closed_by_default(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "closed-a").await?;
    let inst = super::deploy(env, &alice.client, &alice.ns, "dev", json!({})).await?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &alice.ns);
    let secret = wait_for("the generated password", WAIT, || async {
        secrets.get_opt("dev-tinycode-password").await.ctx("get")
    })
    .await?;
    let password = secret.data.clone().unwrap_or_default().get("TINYCODE_SERVER_PASSWORD").cloned().ok_or("no key")?;
    ensure(password.0.len() >= 24, format!("password of {} characters", password.0.len()))?;
    let uid = inst.metadata.uid.clone().unwrap_or_default();
    ensure(secret.metadata.owner_references.iter().flatten().any(|o| o.uid == uid), "password Secret not owned")?;
    let done = run_to_running(&admin, &alice.ns, "dev").await?;
    ensure_eq(
        done.status.as_ref().and_then(|s| s.password_secret.as_deref()),
        Some("dev-tinycode-password"),
        "status.passwordSecret",
    )?;
    let d = Api::<Deployment>::namespaced(admin.clone(), &alice.ns).get("dev-tinycode").await.ctx("deployment")?;
    let pod = d.spec.template.spec.ok_or("no pod")?;
    ensure_eq(pod.automount_service_account_token, Some(false), "automountServiceAccountToken")?;
    let env_ref = pod.containers[0]
        .env
        .iter()
        .flatten()
        .find(|e| e.name == "TINYCODE_SERVER_PASSWORD")
        .and_then(|e| e.value_from.clone())
        .and_then(|v| v.secret_key_ref)
        .ok_or("no password in the pod")?;
    ensure_eq(env_ref.name.as_str(), "dev-tinycode-password", "password Secret in the pod")?;
    let np = Api::<NetworkPolicy>::namespaced(admin.clone(), &alice.ns).get("dev-tinycode").await.ctx("np")?;
    // Egress: every address but link-local and the metadata services.
    let egress = serde_json::to_value(np.spec.as_ref().and_then(|s| s.egress.clone()).unwrap_or_default()).unwrap();
    let blocks: Vec<&Value> =
        egress[0]["to"].as_array().into_iter().flatten().filter_map(|p| p.get("ipBlock")).collect();
    let except = |cidr: &str| blocks.iter().find(|b| b["cidr"] == cidr).map(|b| b["except"].clone());
    ensure(
        except("0.0.0.0/0").is_some_and(|e| e.as_array().is_some_and(|l| l.contains(&json!("169.254.0.0/16")))),
        format!("IPv4 link-local not closed: {egress}"),
    )?;
    ensure(
        except("::/0").is_some_and(|e| {
            e.as_array().is_some_and(|l| l.contains(&json!("fe80::/10")) && l.contains(&json!("fd00:ec2::254/128")))
        }),
        format!("IPv6 link-local or metadata not closed: {egress}"),
    )?;
    // tinycode is the front's alone; the front is the router's and the namespace's.
    let from = serde_json::to_value(&np.spec.and_then(|s| s.ingress).unwrap_or_default()[0].from).unwrap();
    ensure_eq(
        from,
        json!([{"podSelector": {"matchLabels": {"app.kubernetes.io/component": "front", "app.kubernetes.io/instance": "dev", "app.kubernetes.io/name": "tinycode"}}}]),
        "NetworkPolicy sources",
    )?;
    let front =
        Api::<NetworkPolicy>::namespaced(admin.clone(), &alice.ns).get(&naming::front("dev")).await.ctx("np")?;
    let from = serde_json::to_value(&front.spec.and_then(|s| s.ingress).unwrap_or_default()[0].from).unwrap();
    ensure_eq(
        from,
        json!([{"namespaceSelector": {"matchLabels": {"policy-group.network.openshift.io/ingress": ""}}}, {"podSelector": {}}]),
        "the front's NetworkPolicy sources",
    )?;
    // A spec change keeps the password.
    apply_instance(&alice.client, &alice.ns, "dev", json!({"resources": {"limits": {"cpu": "3", "memory": "2Gi"}}}))
        .await
        .ctx("apply")?;
    let release = naming::release_name(&alice.ns, "dev");
    wait_for("revision 2", WAIT, || async { Ok(env.release(&release)?.filter(|r| r.0 == 2)) }).await?;
    let again = secrets.get("dev-tinycode-password").await.ctx("get")?;
    ensure_eq(
        again.data.unwrap_or_default().get("TINYCODE_SERVER_PASSWORD").cloned(),
        Some(password),
        "password kept",
    )?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await
}

/// Attack 6: deletion completes when the operator has lost its rights in the
/// namespace or the namespace is being deleted; the cluster-scoped binding
/// and the release records go all the same.
pub async fn tenant_deletion_completes_without_the_operators_rights(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "revoked-a").await?;
    put_secret(&alice.client, &alice.ns, "kc", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.payload.sig")})).await?;
    env.kubectl(&["label", "namespace", &alice.ns, "tinycode.dev/allow-cluster-role=view"])?;
    let spec = json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}});
    super::deploy(env, &alice.client, &alice.ns, "dev", spec).await?;
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    let crb_name = naming::cluster_role_binding(&alice.ns, "dev");
    wait_for("the binding", WAIT, || async { crbs.get_opt(&crb_name).await.ctx("get") }).await?;

    // The cluster-admin revokes the operator's grant; then the tenant deletes.
    Api::<RoleBinding>::namespaced(admin.clone(), &alice.ns)
        .delete("tinycode-operator-admin", &DeleteParams::default())
        .await
        .ctx("revoke")?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await?;
    ensure(crbs.get_opt(&crb_name).await.ctx("get")?.is_none(), "the cluster-role binding outlived the instance")?;
    let release = naming::release_name(&alice.ns, "dev");
    ensure(env.release(&release)?.is_none(), "release records left in the operator namespace")?;
    let events = Api::<Event>::namespaced(admin.clone(), &alice.ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(
        events.items.iter().any(|e| e.reason.as_deref() == Some("CleanupIncomplete")),
        "no Warning event says what may remain",
    )?;

    // A namespace being deleted. No namespace controller runs here, so the
    // test plays it: the namespace is marked for deletion, then its objects are deleted.
    let gone = tenant(env, "alice", "doomed-a").await?;
    super::deploy(env, &gone.client, &gone.ns, "dev", json!({})).await?;
    Api::<Namespace>::all(admin.clone()).delete(&gone.ns, &DeleteParams::default()).await.ctx("delete ns")?;
    delete_and_wait_gone(&admin, &gone.ns, "dev").await?;
    ensure(env.release(&naming::release_name(&gone.ns, "dev"))?.is_none(), "release left behind")
}

/// An instance installed by an earlier build (records in its own namespace,
/// objects annotated with it) moves to the operator namespace on its first
/// reconcile: objects adopted, data kept, old records deleted after.
pub async fn legacy_release_moves_to_the_operator_namespace(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let ns = env.ns("legacy");
    env.prepare_with_script(&ns)?;
    let legacy = naming::legacy_release_name(&ns, "dev");
    let v = super::default_values(&ns, "dev");
    let file = env.work.path().join(format!("legacy-{ns}.json"));
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).ctx("values file")?;
    let chart = repo_root().join("helm-charts/tinycode");
    env.helm_json(&[
        "upgrade",
        "--install",
        &legacy,
        chart.to_str().unwrap(),
        "--namespace",
        &ns,
        "-f",
        file.to_str().unwrap(),
    ])?;
    let records = ListParams::default().labels(&format!("owner=helm,name={legacy}"));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    ensure(!secrets.list_metadata(&records).await.ctx("list")?.items.is_empty(), "no legacy record to migrate")?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), &ns);
    let pvc_uid = pvcs.get("dev-projects").await.ctx("pvc")?.uid();

    apply_instance(&admin, &ns, "dev", json!({})).await.ctx("apply")?;
    let release = naming::release_name(&ns, "dev");
    wait_for("the release in the operator namespace", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    wait_for("the old records deleted", WAIT, || async {
        Ok(secrets.list_metadata(&records).await.ctx("list")?.items.is_empty().then_some(()))
    })
    .await?;
    let d = Api::<Deployment>::namespaced(admin.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
    let a = d.metadata.annotations.clone().unwrap_or_default();
    ensure_eq(a.get("meta.helm.sh/release-namespace").map(String::as_str), Some(OPERATOR_NAMESPACE), "release ns")?;
    ensure_eq(a.get("meta.helm.sh/release-name"), Some(&release), "release name")?;
    ensure_eq(pvcs.get("dev-projects").await.ctx("pvc")?.uid(), pvc_uid, "the projects PVC (the user's data)")?;
    run_to_running(&admin, &ns, "dev").await?;
    delete_and_wait_gone(&admin, &ns, "dev").await
}

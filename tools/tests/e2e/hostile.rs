//! Tenants, round two (README.md, "Security model"): each scenario is an attack run as a tenant
//! (impersonated, admin of their own namespace only) against the operator
//! under its generated RBAC: input meant to exhaust it, timing meant to keep
//! a grant a cluster-admin took back, a namespace the tenant prepared
//! themselves, and another tenant's namespace holding an instance hostage.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleBinding};
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tinycode_operator::api::naming;
use tinycode_tools::devcluster::OPERATOR_NAMESPACE;

use super::tenancy::{failed_with, outside, same_world, tenant};
use super::{delete_and_wait_gone, kubeconfig, put_secret, standin};
use crate::harness::*;

/// The operator's peak resident memory must stay this far inside the
/// manager's 512 MiB limit whatever tenants send it.
const RSS_CEILING_MIB: u64 = 160;

async fn events_with_reason(c: &Client, ns: &str, reason: &str) -> Result<Vec<Event>, String> {
    let all = Api::<Event>::namespaced(c.clone(), ns).list(&ListParams::default()).await.ctx("events")?;
    Ok(all.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).collect())
}

async fn replicas(c: &Client, ns: &str, deployment: &str) -> Result<Option<i32>, String> {
    Ok(Api::<Deployment>::namespaced(c.clone(), ns).get(deployment).await.ctx("deployment")?.spec.replicas)
}

/// A viewer of a namespace reads its instances' pod templates. Their
/// `checksum/secrets` is keyed with the operator's own key, so a guessed
/// password (here the right one) cannot be tested against it offline; a
/// changed password still changes it (the pods roll).
pub async fn tenant_viewer_cannot_test_passwords_against_the_pod_template(env: &mut Env) -> TestResult {
    use k8s_openapi::api::core::v1::Secret;
    use tinycode_operator::ops::digest_key;
    use tinycode_operator::reconcile::stages::observe::secret_digest;
    use tinycode_operator::render::values::sha256_hex;
    let admin = env.client().await;
    let alice = tenant(env, "alice", "digest").await?;
    let ns = alice.ns.clone();
    env.kubectl(&["create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol", "-n", &ns])?;
    super::deploy(env, &alice.client, &ns, "dev", json!({})).await?;
    let carol = env.client_as("carol").await;
    let deployments: Api<Deployment> = Api::namespaced(carol.clone(), &ns);
    let checksum = || async {
        let d = deployments.get(&naming::fullname("dev")).await.ctx("carol reads the Deployment")?;
        let annotations = d.spec.template.metadata.and_then(|m| m.annotations).unwrap_or_default();
        annotations.get("checksum/secrets").cloned().ok_or_else(|| "no checksum/secrets".to_string())
    };
    let seen = checksum().await?;
    // The password Secret the pod mounts (the namespace's, or the one the
    // operator generated).
    let d = Api::<Deployment>::namespaced(admin.clone(), &ns).get(&naming::fullname("dev")).await.ctx("deployment")?;
    let pod = d.spec.template.spec.ok_or("no pod spec")?;
    let env_ref =
        pod.containers.iter().flat_map(|c| c.env.iter().flatten()).find(|e| e.name == "TINYCODE_SERVER_PASSWORD");
    let secret_name = env_ref
        .and_then(|e| e.value_from.as_ref())
        .and_then(|v| v.secret_key_ref.as_ref())
        .map(|r| r.name.clone())
        .ok_or("no password Secret in the pod")?;
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let password = secrets.get(&secret_name).await.ctx("the password Secret")?;
    // What anyone could compute from a guess, were the digest unkeyed.
    let guessed = secret_digest(&password);
    ensure(!seen.is_empty(), "the pod template carries a checksum")?;
    for unkeyed in [sha256_hex(guessed.as_bytes()), guessed.clone()] {
        ensure(seen != unkeyed, "the checksum is the unkeyed digest of the password: a guess can be tested")?;
    }
    // The key is the operator's alone.
    for tenant in [&alice.client, &carol] {
        let read = Api::<Secret>::namespaced(tenant.clone(), OPERATOR_NAMESPACE).get(digest_key::SECRET_NAME).await;
        ensure(matches!(read, Err(kube::Error::Api(ref s)) if s.code == 403), "a tenant read the digest key")?;
    }
    // A new password still rolls the pods: the checksum follows it.
    let patch = json!({"stringData": {"TINYCODE_SERVER_PASSWORD": "a-new-password-for-dev"}});
    secrets
        .patch(&secret_name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
        .await
        .ctx("rotate the password")?;
    super::tenancy::poke(&admin, &ns, "dev", 1).await?;
    wait_for("checksum/secrets to follow the new password", WAIT, || async {
        let now = checksum().await?;
        Ok((now != seen).then_some(()))
    })
    .await?;
    Ok(())
}

/// A namespace nobody prepared, with alice as its admin: her client.
async fn unprepared_namespace_of_alice(env: &Env, admin: &Client, ns: &str) -> Result<Client, String> {
    Api::<Namespace>::all(admin.clone())
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": ns}})).unwrap())
        .await
        .ctx("namespace")?;
    env.kubectl(&["create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", ns])?;
    Ok(env.client_as("alice").await)
}

/// A tenant whose instances cannot run (here: a namespace nobody prepared)
/// makes the operator write one Warning event per namespace and reason a
/// window, however many instances fail (and however often they requeue:
/// `noise.rs`'s test); each instance's status still says why.
pub async fn tenant_failures_write_few_events(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let ns = env.ns("noise");
    let alice = unprepared_namespace_of_alice(env, &admin, &ns).await?;
    let names: Vec<String> = (0..6).map(|i| format!("dev{i}")).collect();
    for name in &names {
        apply_instance(&alice, &ns, name, json!({})).await.ctx("apply as alice")?;
    }
    for name in &names {
        failed_with(&admin, &ns, name, "NamespaceNotPrepared").await?;
    }
    let events = events_with_reason(&admin, &ns, "NamespaceNotPrepared").await?;
    let series: i32 = events.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum();
    ensure_eq(
        (events.len(), series),
        (1, 1),
        "NamespaceNotPrepared events (and their repeats) for 6 failing instances",
    )?;
    // Six instances failing every requeue would load the scenarios after this one.
    for name in &names {
        delete_and_wait_gone(&admin, &ns, name).await?;
    }
    Ok(())
}

/// Attack: a tenant binds the operator's ServiceAccount as `admin` in their
/// own namespace (RBAC allows it: they hold admin there). Without the
/// cluster-admin's preparation label nothing is granted or installed; the
/// label, set by a cluster-admin, then prepares it.
pub async fn tenant_binding_the_operator_prepares_nothing(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let ns = env.ns("selfprep-a");
    let alice = unprepared_namespace_of_alice(env, &admin, &ns).await?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": "tinycode-operator-admin"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "tinycode-operator-manager", "namespace": OPERATOR_NAMESPACE}],
    }))
    .unwrap();
    Api::<RoleBinding>::namespaced(alice.clone(), &ns)
        .create(&PostParams::default(), &binding)
        .await
        .ctx("alice binds the operator herself")?;
    let release = naming::release_name(&ns, "dev");
    let before = outside(&admin, &[OPERATOR_NAMESPACE], &release).await?;
    apply_instance(&alice, &ns, "dev", json!({})).await.ctx("apply")?;
    let m = failed_with(&admin, &ns, "dev", "NamespaceNotPrepared").await?;
    ensure(m.contains(&format!("oc label namespace {ns} tinycode.dev/prepared=true")), m)?;
    let bindings: Vec<String> = Api::<RoleBinding>::namespaced(admin.clone(), &ns)
        .list(&ListParams::default())
        .await
        .ctx("rolebindings")?
        .items
        .into_iter()
        .filter_map(|b| b.metadata.name)
        .collect();
    ensure_eq(bindings, vec!["alice-admin".to_string(), "tinycode-operator-admin".to_string()], "RoleBindings")?;
    ensure(!secret_exists(&admin, &ns, "dev-tinycode-password").await?, "a password Secret was created")?;
    ensure(env.release(&release)?.is_none(), "installed in a namespace nobody prepared")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], &release).await?)?;

    // The cluster-admin's act: the label (the label change wakes the instance).
    env.kubectl(&["label", "namespace", &ns, "tinycode.dev/prepared=true"])?;
    wait_for("the release after the cluster-admin's label", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    run_to_running(&admin, &ns, "dev").await?;
    delete_and_wait_gone(&alice, &ns, "dev").await
}

/// Attack: hold on to a shell tier and a cluster role while a cluster-admin
/// takes the approvals back, first by suspending the instance, then by
/// breaking its spec. Both are withdrawn at once and the workload that used
/// them stops; approved again, helm brings it back.
pub async fn tenant_cannot_keep_grants_by_suspending_or_breaking_the_spec(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "revoke-a").await?;
    let ns = alice.ns.clone();
    put_secret(&alice.client, &ns, "kc", json!({"kubeconfig": kubeconfig(1, "eyJhbGciOi.payload.sig")})).await?;
    let approve = || {
        env.kubectl(&[
            "label",
            "namespace",
            &ns,
            "tinycode.dev/allow-shell=true",
            "tinycode.dev/allow-cluster-role=view",
            "--overwrite",
        ])
    };
    let withdraw =
        || env.kubectl(&["label", "namespace", &ns, "tinycode.dev/allow-shell-", "tinycode.dev/allow-cluster-role-"]);
    approve()?;
    let spec = json!({"shell": {"enabled": true},
        "clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}});
    super::deploy(env, &alice.client, &ns, "dev", spec.clone()).await?;
    run_to_running(&admin, &ns, "dev").await?;
    let grant = naming::scc_grant("dev", "shell");
    let crb = naming::cluster_role_binding(&ns, "dev");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
    let crbs: Api<ClusterRoleBinding> = Api::all(admin.clone());
    ensure(bindings.get_opt(&grant).await.ctx("grant")?.is_some(), "no shell grant")?;
    ensure(crbs.get_opt(&crb).await.ctx("crb")?.is_some(), "no cluster-role binding")?;
    let withdrawn = || async {
        let gone =
            bindings.get_opt(&grant).await.ctx("grant")?.is_none() && crbs.get_opt(&crb).await.ctx("crb")?.is_none();
        Ok((gone && replicas(&admin, &ns, "dev-tinycode").await? == Some(0)).then_some(()))
    };

    // Suspended first, then the approvals go: withdrawn all the same.
    let mut suspended = spec.clone();
    suspended["suspend"] = json!(true);
    apply_instance(&alice.client, &ns, "dev", suspended).await.ctx("suspend")?;
    wait_phase(&admin, &ns, "dev", "Suspended").await?;
    let release = naming::release_name(&ns, "dev");
    let revision = env.release(&release)?.ok_or("no release")?.0;
    withdraw()?;
    wait_for("grants withdrawn from the suspended instance", WAIT, withdrawn).await?;
    ensure(!events_with_reason(&admin, &ns, "ApprovalWithdrawn").await?.is_empty(), "no ApprovalWithdrawn event")?;
    wait_for("status saying the workload was stopped", WAIT, || async {
        let Some(i) = get_instance(&admin, &ns, "dev").await? else { return Ok(None) };
        Ok(ready(&i).2.contains("scaled to zero").then_some(()))
    })
    .await?;
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision), "helm ran while suspended")?;

    // Resumed without approval: refused, and it stays stopped.
    apply_instance(&alice.client, &ns, "dev", spec.clone()).await.ctx("resume")?;
    failed_with(&admin, &ns, "dev", "SccNotApproved").await?;
    ensure_eq(replicas(&admin, &ns, "dev-tinycode").await?, Some(0), "replicas while refused")?;

    // Approved again: helm takes the replicas back.
    approve()?;
    wait_for("the workload back at one replica", WAIT, || async {
        Ok((replicas(&admin, &ns, "dev-tinycode").await? == Some(1)).then_some(()))
    })
    .await?;
    run_to_running(&admin, &ns, "dev").await?;

    // A spec broken on purpose keeps nothing either.
    let mut broken = spec.clone();
    broken["image"] = json!("docker.io/library/busybox:1");
    apply_instance(&alice.client, &ns, "dev", broken).await.ctx("break the spec")?;
    failed_with(&admin, &ns, "dev", "InvalidSpec").await?;
    withdraw()?;
    wait_for("grants withdrawn from the invalid instance", WAIT, withdrawn).await?;
    delete_and_wait_gone(&alice.client, &ns, "dev").await
}

/// `a: &x "<scalar>"`, then `scalar`-sized aliases `count` times as contexts.
fn alias_bomb(scalar: usize, count: usize) -> String {
    let aliases = vec!["*x"; count].join(",");
    format!("apiVersion: v1\nkind: Config\na: &x \"{}\"\ncontexts: [{aliases}]\n", "y".repeat(scalar))
}

/// Connects to the health port from `source` and asks for /healthz.
async fn healthz_from(source: std::net::IpAddr, port: u16) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let socket = tokio::net::TcpSocket::new_v4().ctx("socket")?;
    socket.bind(std::net::SocketAddr::new(source, 0)).ctx("bind")?;
    let mut stream = socket.connect(([127, 0, 0, 1], port).into()).await.ctx("connect")?;
    stream.write_all(b"GET /healthz HTTP/1.0\r\nHost: x\r\n\r\n").await.ctx("write")?;
    let mut buf = String::new();
    tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut buf)).await.ctx("read")?.ctx("read")?;
    buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or(format!("no status line in {buf:?}"))
}

/// Attacks on the operator's memory and connection slots: a kubeconfig
/// alias bomb, model servers listing 15 000 models behind 20 providers and
/// 40 discovery Services, and one peer holding health-port connections.
/// The operator stays up and well inside its memory limit, says in status
/// what it cut, and another tenant's instance reconciles meanwhile.
pub async fn tenant_input_cannot_exhaust_the_operator(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "dos-a").await?;
    let bob = tenant(env, "bob", "dos-b").await?;

    // The alias bomb: about 300 KB that would expand to 250 MB.
    let bomb = alias_bomb(50_000, 5_000);
    ensure(bomb.len() < 400_000, format!("bomb of {} bytes", bomb.len()))?;
    put_secret(&alice.client, &alice.ns, "bomb", json!({"kubeconfig": bomb})).await?;
    apply_instance(
        &alice.client,
        &alice.ns,
        "bomb",
        json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "bomb"}}),
    )
    .await
    .ctx("apply")?;
    let m = failed_with(&admin, &alice.ns, "bomb", "KubeconfigInvalid").await?;
    ensure(m.contains("anchors and aliases"), m)?;

    // The model flood: 15 000 models, just under the 1 MiB the operator reads of an answer.
    let models: Vec<(String, i64)> = (0..15_000).map(|i| (format!("m{i}"), 32768)).collect();
    let flood = standin::start(standin::Config { models, behaviour: standin::Behaviour::Ok, tool_calling: true }).await;
    let providers: Vec<Value> = (0..20).map(|i| json!({"name": format!("p{i}"), "url": flood.url()})).collect();
    let services: Api<Service> = Api::namespaced(alice.client.clone(), &alice.ns);
    for i in 0..40 {
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("flood-{i}"), "annotations": {
            "tinycode.dev/discover": "vllm", "tinycode.dev/vllm-url": flood.url()}},
            "spec": {"ports": [{"name": "http", "port": 8000}]}}))
        .unwrap();
        services.create(&PostParams::default(), &svc).await.ctx("discovery service")?;
    }
    super::deploy(env, &alice.client, &alice.ns, "flood", json!({"vllm": providers})).await?;
    let warning = wait_for("the cut reported in status", Duration::from_secs(120), || async {
        let Some(i) = get_instance(&admin, &alice.ns, "flood").await? else { return Ok(None) };
        let st = i.status.unwrap_or_default();
        Ok(st
            .conditions
            .iter()
            .find(|c| c.type_ == "VllmWarning" && c.message.contains("more models not listed"))
            .map(|c| c.message.clone()))
    })
    .await?;
    ensure(warning.len() <= 4096 + 64, format!("a warning of {} bytes", warning.len()))?;
    ensure(
        warning.contains("discovered Service"),
        format!("the skipped discovery Services are not reported: {warning}"),
    )?;
    let config = Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(admin.clone(), &alice.ns)
        .get(&naming::config_map("flood"))
        .await
        .ctx("config map")?;
    let size: usize = config.data.unwrap_or_default().values().map(String::len).sum();
    ensure(size < 512 * 1024, format!("a generated config of {size} bytes"))?;

    // Meanwhile another tenant's instance reconciles.
    super::deploy(env, &bob.client, &bob.ns, "dev", json!({})).await?;
    run_to_running(&admin, &bob.ns, "dev").await?;

    // One peer holds as many health-port connections as it can; another is still answered.
    let port = MAIN_PORTS.0;
    let mut held = Vec::new();
    for _ in 0..70 {
        if let Ok(s) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
            held.push(s);
        }
    }
    ensure_eq(healthz_from([127, 0, 0, 2].into(), port).await?, 200, "/healthz from another address")?;
    drop(held);

    let (rss, peak) = env.operator_rss_mib()?;
    println!("    operator RSS {rss} MiB, peak {peak} MiB (ceiling {RSS_CEILING_MIB} MiB)");
    ensure(peak < RSS_CEILING_MIB, format!("the operator's peak RSS reached {peak} MiB"))?;
    for (c, ns, name) in
        [(&alice.client, &alice.ns, "bomb"), (&alice.client, &alice.ns, "flood"), (&bob.client, &bob.ns, "dev")]
    {
        delete_and_wait_gone(c, ns, name).await?;
    }
    Ok(())
}

/// Attack: the admin of a discovery namespace revokes the operator's rights
/// there after another tenant's instance discovered it. That instance still
/// upgrades (the namespace is skipped with a warning) and is still deleted
/// (what cannot be removed is named in a CleanupIncomplete event).
pub async fn another_namespaces_admin_cannot_hold_an_instance_hostage(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "hostage-a").await?;
    let bob = tenant(env, "bob", "hostage-b").await?;
    env.kubectl(&["label", "namespace", &bob.ns, "tinycode.dev/vllm-discovery=true"])?;
    let spec = |cpu: &str| json!({"discovery": {"namespaces": [bob.ns]}, "resources": {"limits": {"cpu": cpu, "memory": "2Gi"}}});
    super::deploy(env, &alice.client, &alice.ns, "dev", spec("2")).await?;
    let binding = naming::discovery_binding(&alice.ns, "dev");
    let in_bob: Api<RoleBinding> = Api::namespaced(admin.clone(), &bob.ns);
    ensure(in_bob.get_opt(&binding).await.ctx("binding")?.is_some(), "no discovery RoleBinding in bob's namespace")?;
    run_to_running(&admin, &alice.ns, "dev").await?;

    // Bob, admin of his namespace, takes the operator's rights there away.
    Api::<RoleBinding>::namespaced(bob.client.clone(), &bob.ns)
        .delete("tinycode-operator-admin", &DeleteParams::default())
        .await
        .ctx("bob revokes the operator")?;
    let release = naming::release_name(&alice.ns, "dev");
    let before = env.release(&release)?.ok_or("no release")?.0;
    apply_instance(&alice.client, &alice.ns, "dev", spec("3")).await.ctx("upgrade")?;
    wait_for("an upgrade that skips bob's namespace", Duration::from_secs(120), || async {
        Ok(env.release(&release)?.filter(|r| r.0 > before && r.1 == "deployed"))
    })
    .await?;
    let running = run_to_running(&admin, &alice.ns, "dev").await?;
    let (_, _, message) = ready(&running);
    ensure(message.contains(&format!("discovery namespace {} is skipped", bob.ns)), message)?;
    let d = Api::<Deployment>::namespaced(admin.clone(), &alice.ns).get("dev-tinycode").await.ctx("deployment")?;
    let cpu = d.spec.template.spec.map(|p| p.containers[0].resources.clone());
    ensure(format!("{cpu:?}").contains("\"3\""), format!("the upgrade did not apply: {cpu:?}"))?;

    // Deletion completes and says what stays behind in bob's namespace.
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await?;
    ensure(env.release(&release)?.is_none(), "release records left behind")?;
    let incomplete = events_with_reason(&admin, &alice.ns, "CleanupIncomplete").await?;
    let notes: Vec<String> = incomplete.iter().filter_map(|e| e.note.clone()).collect();
    ensure(notes.iter().any(|n| n.contains(&bob.ns)), format!("no CleanupIncomplete event names {}: {notes:?}", bob.ns))
}

/// A release an earlier build named with a two-dot shortened name (one an
/// instance could be named after) moves to the one-dot form on the first
/// reconcile: objects adopted, data kept, the old records deleted.
pub async fn a_release_under_its_old_shortened_name_moves_to_the_new_one(env: &mut Env) -> TestResult {
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Secret};
    use kube::ResourceExt;
    let admin = env.client().await;
    let ns = env.ns("rename");
    env.prepare_with_script(&ns)?;
    let name = "workspace-with-a-long-name-that-gets-shortened";
    let old = naming::previous_release_name(&ns, name).ok_or("the name is not one that moves")?;
    let v = super::default_values(&ns, name);
    let file = env.work.path().join(format!("rename-{ns}.json"));
    std::fs::write(&file, serde_json::to_vec(&v).unwrap()).ctx("values file")?;
    let chart = repo_root().join("helm-charts/tinycode");
    env.helm_json(&[
        "upgrade",
        "--install",
        &old,
        chart.to_str().unwrap(),
        "--namespace",
        OPERATOR_NAMESPACE,
        "-f",
        file.to_str().unwrap(),
    ])?;
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(admin.clone(), &ns);
    let pvc = naming::projects_pvc(name);
    let pvc_uid = pvcs.get(&pvc).await.ctx("pvc")?.uid();

    apply_instance(&admin, &ns, name, json!({})).await.ctx("apply")?;
    let release = naming::release_name(&ns, name);
    wait_for("the release under its current name", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    let records = ListParams::default().labels(&format!("owner=helm,name={old}"));
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), OPERATOR_NAMESPACE);
    wait_for("the old records deleted", WAIT, || async {
        Ok(secrets.list_metadata(&records).await.ctx("list")?.items.is_empty().then_some(()))
    })
    .await?;
    let d = Api::<Deployment>::namespaced(admin.clone(), &ns).get(&naming::fullname(name)).await.ctx("deployment")?;
    ensure_eq(d.annotations().get("meta.helm.sh/release-name"), Some(&release), "owner release")?;
    ensure_eq(pvcs.get(&pvc).await.ctx("pvc")?.uid(), pvc_uid, "the projects PVC (the user's data)")?;
    run_to_running(&admin, &ns, name).await?;
    delete_and_wait_gone(&admin, &ns, name).await
}

/// Attack: provider URLs and discovery Services naming hosts under a zone
/// whose name server never answers. Lookups are bounded in number and time
/// (a timed-out one frees its slot), so the instance gets its warnings and
/// another tenant's instance deploys meanwhile. The operator is restarted
/// with a name server on loopback that reads queries and never replies.
pub async fn tenant_names_under_a_silent_zone_do_not_stall_the_operator(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let silent = tokio::net::UdpSocket::bind("127.0.0.1:0").await.ctx("bind the silent name server")?;
    let server = silent.local_addr().ctx("address")?;
    let queries = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = queries.clone();
    let listener = tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while silent.recv_from(&mut buf).await.is_ok() {
            counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    });
    env.extra_env = vec![("TINYCODE_DNS_NAMESERVERS".into(), server.to_string())];
    env.start_operator()?;
    let result = silent_zone(env, &admin).await;
    listener.abort();
    env.extra_env.clear();
    env.start_operator()?;
    let quiet = env.records_quiet(6).await;
    result?;
    quiet?;
    ensure(queries.load(std::sync::atomic::Ordering::Relaxed) > 0, "no lookup reached the silent name server")
}

async fn silent_zone(env: &mut Env, admin: &Client) -> TestResult {
    let alice = tenant(env, "alice", "dns-a").await?;
    let bob = tenant(env, "bob", "dns-b").await?;
    let providers: Vec<Value> =
        (0..20).map(|i| json!({"name": format!("p{i}"), "url": format!("http://m{i}.silent.example:8000")})).collect();
    let services: Api<Service> = Api::namespaced(alice.client.clone(), &alice.ns);
    for i in 0..40 {
        let svc: Service = serde_json::from_value(json!({"metadata": {"name": format!("silent-{i}"), "annotations": {
            "tinycode.dev/discover": "vllm", "tinycode.dev/vllm-url": format!("http://s{i}.silent.example:8000")}},
            "spec": {"ports": [{"name": "http", "port": 8000}]}}))
        .unwrap();
        services.create(&PostParams::default(), &svc).await.ctx("discovery service")?;
    }
    apply_instance(&alice.client, &alice.ns, "dev", json!({"vllm": providers})).await.ctx("apply")?;
    // Meanwhile another tenant's instance deploys and runs.
    super::deploy(env, &bob.client, &bob.ns, "dev", json!({})).await?;
    run_to_running(admin, &bob.ns, "dev").await?;
    let message = wait_for("the lookups reported as failed", Duration::from_secs(120), || async {
        let Some(i) = get_instance(admin, &alice.ns, "dev").await? else { return Ok(None) };
        let st = i.status.unwrap_or_default();
        Ok(st
            .conditions
            .iter()
            .find(|c| c.type_ == "VllmConfigReady" && c.status == "False")
            .map(|c| c.message.clone()))
    })
    .await?;
    ensure(message.contains("m0.silent.example"), format!("the unreachable provider is not named: {message}"))?;
    let (status, _) = http_get(MAIN_PORTS.0, "/healthz").await?;
    ensure_eq(status, 200, "/healthz")?;
    let (_, peak) = env.operator_rss_mib()?;
    ensure(peak < RSS_CEILING_MIB, format!("the operator's peak RSS reached {peak} MiB"))?;
    delete_and_wait_gone(&alice.client, &alice.ns, "dev").await?;
    delete_and_wait_gone(&bob.client, &bob.ns, "dev").await
}

/// A pod alice creates herself, as JSON, with one hostPath volume mounted by
/// `mounts` (container kind, readOnly) and the instance's ServiceAccount.
fn host_pod(name: &str, sa: &str, path: &str, mounts: &[(&str, bool)]) -> Value {
    let container = |n: &str, read_only: bool| {
        json!({"name": n, "image": "quay.io/alice/tool:1",
               "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": read_only}]})
    };
    let mut spec =
        json!({"serviceAccountName": sa, "containers": [], "volumes": [{"name": "host", "hostPath": {"path": path}}]});
    for (i, (kind, ro)) in mounts.iter().enumerate() {
        let c = container(&format!("c{i}"), *ro);
        let key = if *kind == "init" { "initContainers" } else { "containers" };
        spec[key].as_array_mut().map(|a| a.push(c.clone())).unwrap_or_else(|| spec[key] = json!([c]));
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
}

/// Creates `pod` as `c`: Ok, or the apiserver's refusal message.
async fn create_pod(c: &Client, ns: &str, pod: &Value, dry_run: bool) -> Result<Result<(), String>, String> {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(pod.clone()).ctx("pod")?;
    let params = PostParams { dry_run, ..Default::default() };
    match Api::<k8s_openapi::api::core::v1::Pod>::namespaced(c.clone(), ns).create(&params, &pod).await {
        Ok(_) => Ok(Ok(())),
        Err(kube::Error::Api(s)) => Ok(Err(s.message)),
        Err(e) => Err(format!("create pod: {e}")),
    }
}

/// Attack: in a namespace approved for read-only host directories, alice
/// creates pods of her own naming the instance's ServiceAccount (the one
/// holding the hostPath grant) that mount `/`, a path escaping the allowed
/// prefix, or an allowed directory writable (from an init container too).
/// The apiserver refuses each at admission (the host-directory policy, fed
/// by the operator's --hostpath-allowed-prefixes) while the instance's own
/// pod template passes; readwrite approval allows writable mounts under the
/// prefixes, never `/`. Nothing is created, nothing outside changes.
pub async fn tenant_pods_get_only_the_approved_host_directories(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "hostdir").await?;
    let ns = alice.ns.clone();
    // The cluster-admin's approval, and a Pod Security level that lets the
    // tier's pods mount host directories at all (as on Kubernetes).
    env.kubectl(&[
        "label",
        "namespace",
        &ns,
        "tinycode.dev/allow-hostpath=true",
        "pod-security.kubernetes.io/enforce=privileged",
        "--overwrite",
    ])?;
    let spec = json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}}});
    super::deploy(env, &alice.client, &ns, "dev", spec).await?;
    run_to_running(&admin, &ns, "dev").await?;
    let sa = naming::fullname("dev");
    // The instance's own pod passes the policy (created as a dry run).
    let template = Api::<Deployment>::namespaced(admin.clone(), &ns).get(&sa).await.ctx("deployment")?.spec.template;
    let own = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "own"}, "spec": template.spec});
    ensure_eq(create_pod(&alice.client, &ns, &own, true).await?, Ok(()), "the instance's own pod")?;

    let before = outside(&admin, &[OPERATOR_NAMESPACE], "none").await?;
    let attacks = [
        ("root", "/", vec![("main", false)], "under a host directory"),
        ("root-ro", "/", vec![("main", true)], "under a host directory"),
        // ("/srv/../etc" the apiserver refuses itself; these it does not.)
        ("dot", "/srv/./code", vec![("main", true)], "under a host directory"),
        ("double-slash", "/srv//code", vec![("main", true)], "under a host directory"),
        ("sibling", "/srvx", vec![("main", true)], "under a host directory"),
        ("writable", "/srv/code", vec![("main", false)], "readOnly: true"),
        ("init-writes", "/srv/code", vec![("main", true), ("init", false)], "readOnly: true"),
    ];
    for (name, path, mounts, says) in &attacks {
        let pod = host_pod(name, &sa, path, mounts);
        match create_pod(&alice.client, &ns, &pod, false).await? {
            Ok(()) => return Err(format!("alice's pod {name} ({path}) was admitted")),
            Err(m) => ensure(m.contains(says), format!("{name}: the refusal says why ({says}): {m}"))?,
        }
    }
    // Within the approval: a read-only mount of an allowed directory.
    let fine = host_pod("fine", &sa, "/srv/code/sub", &[("main", true), ("init", true)]);
    ensure_eq(create_pod(&alice.client, &ns, &fine, true).await?, Ok(()), "a read-only mount under /srv")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], "none").await?)?;

    // Approved readwrite: writable under the prefixes, still never `/`.
    env.kubectl(&["label", "namespace", &ns, "tinycode.dev/allow-hostpath=readwrite", "--overwrite"])?;
    wait_for("the readwrite approval admits a writable mount", WAIT, || async {
        let pod = host_pod("rw", &sa, "/srv/code", &[("main", false)]);
        Ok(create_pod(&alice.client, &ns, &pod, true).await?.ok())
    })
    .await?;
    let root = host_pod("root-rw", &sa, "/", &[("main", false)]);
    ensure(create_pod(&alice.client, &ns, &root, false).await?.is_err(), "`/` admitted under readwrite")?;
    delete_and_wait_gone(&admin, &ns, "dev").await?;
    Ok(())
}

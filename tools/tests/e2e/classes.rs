//! Platform policy (`TinycodeClass`) against the real apiserver and helm:
//! a class fills in and places both workloads, caps what tenants ask for
//! and how many instances a namespace runs, withdraws a mode it stops
//! permitting, and a model server's API key reaches the probe and the
//! config by reference only. The tenant (alice) acts impersonated, as admin
//! of her namespace alone; classes are the cluster-admin's.
//!
//! The classes here are never marked default: one control plane serves
//! every scenario, and a default class would apply to them all.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, PodSpec};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{Value, json};
use tinycode_operator::api::naming;
use tinycode_operator::api::{TinycodeClass, TinycodeInstance};
use tinycode_tools::devcluster::OPERATOR_NAMESPACE;

use super::{delete_and_wait_gone, put_secret};
use crate::harness::*;
use crate::tenancy::{failed_with, outside, same_world, tenant};

async fn create_class(c: &Client, name: &str, spec: Value) -> TestResult {
    let class: TinycodeClass =
        serde_json::from_value(json!({"apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeClass",
            "metadata": {"name": name}, "spec": spec}))
        .ctx("class")?;
    let api: Api<TinycodeClass> = Api::all(c.clone());
    if api.get_opt(name).await.ctx("class")?.is_some() {
        api.delete(name, &DeleteParams::default()).await.ctx("delete old class")?;
    }
    api.create(&PostParams::default(), &class).await.ctx("create class")?;
    Ok(())
}

async fn pod(c: &Client, ns: &str, deployment: &str) -> Result<PodSpec, String> {
    Api::<Deployment>::namespaced(c.clone(), ns)
        .get(deployment)
        .await
        .ctx(deployment)?
        .spec
        .template
        .spec
        .ok_or_else(|| format!("{deployment} has no pod template"))
}

fn quantities(
    r: Option<&std::collections::BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> Value {
    json!(r.map(|m| m.iter().map(|(k, v)| (k.clone(), v.0.clone())).collect::<std::collections::BTreeMap<_, _>>()))
}

/// A class with a GPU limit and node placement renders both Deployments as
/// asked; a spec above the limit and the fourth instance in a namespace
/// limited to three are refused with nothing applied and nothing outside the
/// namespace changed; tightening the class withdraws the shell tier, and
/// deleting it leaves its instance Failed, never half-rendered.
pub async fn classes_place_cap_and_withdraw(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "class-a").await?;
    let ns = alice.ns.clone();
    let gpu = format!("{ns}-gpu");
    let dev = format!("{ns}-dev");
    create_class(&admin, &gpu, json!({
        "description": "GPU pool: Ollama on GPU nodes, three instances per namespace",
        "tinycode": {"defaults": {"limits": {"cpu": "3", "memory": "6Gi"}, "requests": {"cpu": "500m", "memory": "1Gi"}},
                     "max": {"cpu": "4", "memory": "8Gi"}},
        "ollama": {"defaults": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
                   "max": {"nvidia.com/gpu": "1", "memory": "32Gi"},
                   "nodeSelector": {"nvidia.com/gpu.present": "true"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "runtimeClassName": "nvidia"},
        "idle": {"timeout": "2h", "maxTimeout": "4h"},
        "permittedModes": ["ollama", "git"],
        "maxInstancesPerNamespace": 3
    }))
    .await?;
    // The tenant cannot write a class (cluster-scoped, the cluster-admin's).
    let forged = Api::<TinycodeClass>::all(alice.client.clone())
        .patch(&gpu, &PatchParams::default(), &Patch::Merge(json!({"spec": {"maxInstancesPerNamespace": 100}})))
        .await;
    ensure(
        matches!(forged, Err(kube::Error::Api(ref s)) if s.code == 403),
        format!("alice patched the class: {forged:?}"),
    )?;

    // 1. Both Deployments as the class asks; the IDE stays off the GPU nodes.
    let spec = json!({"className": gpu, "ollama": {"enabled": true}, "nodeSelector": {"zone": "a"}});
    super::deploy(env, &alice.client, &ns, "gpu1", spec.clone()).await?;
    let inst = run_to_running(&admin, &ns, "gpu1").await?;
    ensure_eq(inst.status.as_ref().and_then(|s| s.class.clone()), Some(gpu.clone()), "status.class")?;
    let idle = inst.status.as_ref().and_then(|s| s.idle.clone()).ok_or("no status.idle")?;
    ensure_eq(idle.timeout.as_str(), "2h", "the class's idle timeout")?;
    ensure(idle.message.contains("class"), format!("status.idle.message names the class: {}", idle.message))?;
    let ollama = pod(&admin, &ns, "gpu1-ollama").await?;
    ensure_eq(
        ollama.node_selector.clone().unwrap_or_default().get("nvidia.com/gpu.present").cloned(),
        Some("true".into()),
        "Ollama's node selector",
    )?;
    ensure_eq(ollama.runtime_class_name.as_deref(), Some("nvidia"), "Ollama's runtime class")?;
    ensure_eq(
        ollama.tolerations.iter().flatten().map(|t| t.key.clone().unwrap_or_default()).collect::<Vec<_>>(),
        vec!["nvidia.com/gpu".to_string()],
        "Ollama's tolerations",
    )?;
    let r = ollama.containers[0].resources.clone().unwrap_or_default();
    ensure_eq(quantities(r.limits.as_ref()), json!({"memory": "16Gi", "nvidia.com/gpu": "1"}), "Ollama's limits")?;
    ensure_eq(quantities(r.requests.as_ref()), json!({"cpu": "2", "memory": "8Gi"}), "Ollama's requests")?;
    let ide = pod(&admin, &ns, "gpu1-tinycode").await?;
    ensure_eq(
        ide.node_selector.clone(),
        Some([("zone".to_string(), "a".to_string())].into()),
        "the IDE's node selector",
    )?;
    ensure(ide.runtime_class_name.is_none() && ide.tolerations.is_none(), "the IDE got the GPU placement")?;
    let tc = ide.containers.iter().find(|c| c.name == "tinycode").ok_or("no tinycode container")?;
    let tr = tc.resources.clone().unwrap_or_default();
    ensure_eq(
        quantities(tr.limits.as_ref()),
        json!({"cpu": "3", "memory": "6Gi"}),
        "the IDE's limits (class defaults)",
    )?;

    // 2. Above the limit: refused, nothing applied, nothing outside changed.
    let before = outside(&admin, &[OPERATOR_NAMESPACE], "none").await?;
    let big = json!({"className": gpu, "ollama": {"enabled": true, "resources": {"limits": {"nvidia.com/gpu": "2"}}}});
    apply_instance(&alice.client, &ns, "big", big).await.ctx("apply big")?;
    let m = failed_with(&admin, &ns, "big", "ExceedsPolicy").await?;
    ensure(
        m.contains("spec.ollama.resources.limits.nvidia.com/gpu") && m.contains("exceeds 1") && m.contains(&gpu),
        format!("the message names the field, the limit and the class: {m}"),
    )?;
    ensure(env.release(&naming::release_name(&ns, "big"))?.is_none(), "a release was installed above the limit")?;
    ensure(
        Api::<Deployment>::namespaced(admin.clone(), &ns).get_opt("big-tinycode").await.ctx("deployment")?.is_none(),
        "a Deployment exists for the refused instance",
    )?;
    // A shell under a class that does not permit it: refused the same way.
    apply_instance(&alice.client, &ns, "sh", json!({"className": gpu, "shell": {"enabled": true}})).await.ctx("sh")?;
    let m = failed_with(&admin, &ns, "sh", "ExceedsPolicy").await?;
    ensure(m.contains("spec.shell.enabled") && m.contains("permittedModes"), format!("message: {m}"))?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], "none").await?)?;
    // Refused instances hold a place like any other (the limit counts
    // instances, as an object-count quota does): they go first.
    for name in ["big", "sh"] {
        delete_and_wait_gone(&admin, &ns, name).await?;
    }

    // 3. Three instances per namespace: the fourth is refused.
    for name in ["gpu2", "gpu3"] {
        super::deploy(env, &alice.client, &ns, name, json!({"className": gpu})).await?;
    }
    let before = outside(&admin, &[OPERATOR_NAMESPACE], "none").await?;
    apply_instance(&alice.client, &ns, "gpu4", json!({"className": gpu})).await.ctx("apply gpu4")?;
    let m = failed_with(&admin, &ns, "gpu4", "ExceedsPolicy").await?;
    ensure(m.contains("maxInstancesPerNamespace: 3"), format!("message: {m}"))?;
    ensure(env.release(&naming::release_name(&ns, "gpu4"))?.is_none(), "the fourth instance was installed")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], "none").await?)?;
    // One goes: the fourth takes its place.
    delete_and_wait_gone(&admin, &ns, "gpu3").await?;
    let release = naming::release_name(&ns, "gpu4");
    wait_for("the fourth instance installed once a place is free", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;

    // 4. A class made stricter takes back the shell tier it permitted.
    env.kubectl(&["label", "namespace", &ns, "tinycode.dev/allow-shell=true", "--overwrite"])?;
    create_class(&admin, &dev, json!({"permittedModes": ["shell", "git"]})).await?;
    super::deploy(env, &alice.client, &ns, "shell", json!({"className": dev, "shell": {"enabled": true}})).await?;
    run_to_running(&admin, &ns, "shell").await?;
    let grant = naming::scc_grant("shell", "shell");
    let bindings: Api<RoleBinding> = Api::namespaced(admin.clone(), &ns);
    ensure(bindings.get_opt(&grant).await.ctx("grant")?.is_some(), "no shell grant")?;
    let shell_release = naming::release_name(&ns, "shell");
    let revision = env.release(&shell_release)?.ok_or("no release")?.0;
    Api::<TinycodeClass>::all(admin.clone())
        .patch(&dev, &PatchParams::default(), &Patch::Merge(json!({"spec": {"permittedModes": ["git"]}})))
        .await
        .ctx("tighten the class")?;
    let m = failed_with(&admin, &ns, "shell", "ExceedsPolicy").await?;
    ensure(m.contains("spec.shell.enabled"), format!("message: {m}"))?;
    wait_for("the shell grant withdrawn and the workload stopped", WAIT, || async {
        let gone = bindings.get_opt(&grant).await.ctx("grant")?.is_none();
        let replicas = Api::<Deployment>::namespaced(admin.clone(), &ns)
            .get("shell-tinycode")
            .await
            .ctx("deployment")?
            .spec
            .replicas;
        Ok((gone && replicas == Some(0)).then_some(()))
    })
    .await?;
    let events = Api::<Event>::namespaced(admin.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    ensure(
        events.items.iter().any(|e| e.reason.as_deref() == Some("ApprovalWithdrawn")),
        "no ApprovalWithdrawn event",
    )?;
    ensure_eq(env.release(&shell_release)?.map(|r| r.0), Some(revision), "helm ran for the refused instance")?;

    // 5. The class deleted while in use: Failed with ClassNotFound, the
    // release left as it was.
    let gpu1_release = naming::release_name(&ns, "gpu1");
    let gpu1_revision = env.release(&gpu1_release)?.ok_or("no release")?.0;
    Api::<TinycodeClass>::all(admin.clone()).delete(&gpu, &DeleteParams::default()).await.ctx("delete class")?;
    let m = failed_with(&admin, &ns, "gpu1", "ClassNotFound").await?;
    ensure(m.contains(&gpu), format!("message: {m}"))?;
    ensure_eq(env.release(&gpu1_release)?.map(|r| r.0), Some(gpu1_revision), "helm ran without the class")?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&dev, &DeleteParams::default()).await.ctx("delete class")?;
    Ok(())
}

/// What the key stand-in saw: the Authorization headers of its requests.
type Seen = Arc<Mutex<Vec<String>>>;

async fn keyed_models(State((seen, key)): State<(Seen, String)>, headers: HeaderMap) -> axum::response::Response {
    use axum::response::IntoResponse;
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    seen.lock().unwrap().push(auth.clone());
    if auth != format!("Bearer {key}") {
        return (StatusCode::UNAUTHORIZED, "missing or wrong API key").into_response();
    }
    axum::Json(json!({"object": "list", "data": [{"id": "keyed-model", "object": "model", "max_model_len": 32768}]}))
        .into_response()
}

/// Attack: alice names a class a cluster-admin keeps for other namespaces
/// (its namespaceSelector), and tries to label her namespace into it. She
/// cannot label it (namespaces are the cluster's); the instance is refused
/// with `ClassNotPermitted` and nothing is installed; once a cluster-admin
/// labels the namespace, it runs, its Ollama (requests only in the spec)
/// limited by the class's cap.
pub async fn a_class_serves_only_the_namespaces_it_selects(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "class-sel").await?;
    let ns = alice.ns.clone();
    let class = format!("{ns}-gpu");
    let label = format!("tinycode.dev/{ns}");
    create_class(
        &admin,
        &class,
        json!({"namespaceSelector": {"matchLabels": {label.clone(): "true"}}, "ollama": {"max": {"memory": "2Gi"}}}),
    )
    .await?;
    let release = naming::release_name(&ns, "dev");
    let before = outside(&admin, &[OPERATOR_NAMESPACE], &release).await?;
    // Requests only for the bundled Ollama, under a class that caps its memory.
    let spec = json!({"className": class, "ollama": {"enabled": true, "resources": {"requests": {"memory": "256Mi"}}}});
    apply_instance(&alice.client, &ns, "dev", spec).await.ctx("apply as alice")?;
    let message = failed_with(&admin, &ns, "dev", "ClassNotPermitted").await?;
    ensure(message.contains(&class) && message.contains("spec.className"), message)?;
    ensure(env.release(&release)?.is_none(), "installed with a class not meant for the namespace")?;
    let labelled = env.kubectl(&["label", "namespace", &ns, &format!("{label}=true"), "--as", "alice"]);
    ensure(labelled.is_err(), "alice labelled her own namespace into the class")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], &release).await?)?;

    // The cluster-admin's act.
    env.kubectl(&["label", "namespace", &ns, &format!("{label}=true")])?;
    wait_for("the release once the namespace is labelled", WAIT, || async {
        Ok(env.release(&release)?.filter(|r| r.1 == "deployed"))
    })
    .await?;
    // Under the class's cap, the limit the spec left out is there.
    let ollama = pod(&admin, &ns, "dev-ollama").await?;
    let limits = ollama.containers[0].resources.as_ref().and_then(|r| r.limits.as_ref());
    ensure_eq(quantities(limits), json!({"memory": "2Gi"}), "the bundled Ollama's limits under the class's max")?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&class, &DeleteParams::default()).await.ctx("delete class")?;
    Ok(())
}

/// Attack: alice runs the one instance a class allows her namespace, renames
/// its className to a class that does not exist (its release keeps running,
/// `ClassNotFound`), and asks for a second one under the class. What runs is
/// counted, not what the spec says now: the second is refused.
pub async fn a_renamed_instance_still_counts_against_its_class(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "class-count").await?;
    let ns = alice.ns.clone();
    let class = format!("{ns}-one");
    create_class(&admin, &class, json!({"maxInstancesPerNamespace": 1})).await?;
    super::deploy(env, &alice.client, &ns, "dev1", json!({"className": class})).await?;
    wait_for("dev1's status.class", WAIT, || async {
        let inst = get_instance(&admin, &ns, "dev1").await?;
        Ok(inst.and_then(|i| i.status?.class).filter(|c| *c == class).map(drop))
    })
    .await?;
    apply_instance(&alice.client, &ns, "dev1", json!({"className": format!("{ns}-missing")})).await.ctx("rename")?;
    failed_with(&admin, &ns, "dev1", "ClassNotFound").await?;
    let release = naming::release_name(&ns, "dev1");
    ensure(env.release(&release)?.is_some_and(|r| r.1 == "deployed"), "dev1's release still runs")?;
    apply_instance(&alice.client, &ns, "dev2", json!({"className": class})).await.ctx("dev2")?;
    let message = failed_with(&admin, &ns, "dev2", "ExceedsPolicy").await?;
    ensure(message.contains("maxInstancesPerNamespace: 1"), message)?;
    ensure(env.release(&naming::release_name(&ns, "dev2"))?.is_none(), "a second instance of the class was installed")?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&class, &DeleteParams::default()).await.ctx("delete class")?;
    Ok(())
}

/// A model server's API key, from a Secret: the probe sends it as a bearer
/// token (a loopback stand-in refuses requests without it); the generated
/// config points the agent at the model-key proxy beside it, whose container
/// alone mounts the key; and the value is nowhere in status, events, the
/// ConfigMap, the release's values or the operator's log. spec.env entries
/// reach the agent's container by reference, and a class with
/// `allowEnvSecrets: false` refuses them.
pub async fn model_keys_are_referenced_never_copied(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "keys-a").await?;
    let ns = alice.ns.clone();
    let key = format!("sk-e2e-{}", std::process::id());
    let openrouter = format!("or-e2e-{}", std::process::id());
    let seen: Seen = Arc::default();
    let app = axum::Router::new()
        .route("/v1/models", axum::routing::get(keyed_models))
        .with_state((seen.clone(), key.clone()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ctx("bind")?;
    let addr = listener.local_addr().ctx("addr")?;
    tokio::spawn(async move { axum::serve(listener, app).await });
    put_secret(&alice.client, &ns, "model-keys", json!({"vllm": key, "openrouter": openrouter})).await?;
    let spec = json!({
        "model": "keyed-model",
        "vllm": [{"name": "keyed", "url": format!("http://{addr}"), "apiKeySecret": {"name": "model-keys", "key": "vllm"}}],
        "env": [{"name": "OPENROUTER_API_KEY", "secretKeyRef": {"name": "model-keys", "key": "openrouter"}}]
    });
    // Under a class that keeps Secrets out of the agent's environment, spec.env is refused.
    let closed = format!("{ns}-closed");
    create_class(&admin, &closed, json!({"allowEnvSecrets": false})).await?;
    let mut under_closed = spec.clone();
    under_closed["className"] = json!(closed);
    apply_instance(&alice.client, &ns, "closed", under_closed).await.ctx("apply under the closed class")?;
    let m = failed_with(&admin, &ns, "closed", "ExceedsPolicy").await?;
    ensure(m.contains("spec.env") && m.contains("allowEnvSecrets: false"), format!("message: {m}"))?;
    ensure(env.release(&naming::release_name(&ns, "closed"))?.is_none(), "installed with env under the closed class")?;
    delete_and_wait_gone(&admin, &ns, "closed").await?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&closed, &DeleteParams::default()).await.ctx("delete class")?;
    // A missing key is named, not half-applied.
    let mut wrong = spec.clone();
    wrong["env"][0]["secretKeyRef"]["key"] = json!("nope");
    apply_instance(&alice.client, &ns, "dev", wrong).await.ctx("apply")?;
    let m = failed_with(&admin, &ns, "dev", "SecretReferenceMissing").await?;
    ensure(m.contains("spec.env[0]") && m.contains("nope"), format!("message: {m}"))?;
    ensure(env.release(&naming::release_name(&ns, "dev"))?.is_none(), "installed with a missing key")?;

    super::deploy(env, &alice.client, &ns, "dev", spec).await?;
    let inst = run_to_running(&admin, &ns, "dev").await?;
    ensure(
        seen.lock().unwrap().iter().any(|a| *a == format!("Bearer {key}")),
        "the probe did not send the key as a bearer token",
    )?;
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns).get("dev-tinycode-config").await.ctx("configmap")?;
    let text = cm.data.unwrap_or_default().get("config.json").cloned().ok_or("no config.json")?;
    let cfg: Value = serde_json::from_str(&text).ctx("config json")?;
    // The agent reaches the keyed server through the model-key proxy and holds no key.
    ensure_eq(&cfg["providers"]["keyed"]["url"], &json!("http://127.0.0.1:4099/keyed/v1"), "keyed provider's URL")?;
    ensure(cfg["providers"]["keyed"].get("apiKey").is_none(), format!("the config names a key: {cfg}"))?;
    ensure(cfg["providers"]["keyed"]["models"]["keyed-model"].is_object(), format!("the probe's models: {cfg}"))?;
    let ide = pod(&admin, &ns, "dev-tinycode").await?;
    let c = ide.containers.iter().find(|c| c.name == "tinycode").ok_or("no tinycode container")?;
    let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    ensure(!names.iter().any(|n| n.contains("VLLM")), format!("a model key in the agent's environment: {names:?}"))?;
    let e = c.env.iter().flatten().find(|e| e.name == "OPENROUTER_API_KEY").ok_or("no OPENROUTER_API_KEY")?;
    let r =
        e.value_from.as_ref().and_then(|v| v.secret_key_ref.as_ref()).ok_or("OPENROUTER_API_KEY not from a Secret")?;
    ensure_eq((r.name.as_str(), r.key.as_str(), e.value.is_none()), ("model-keys", "openrouter", true), "spec.env")?;
    ensure(
        c.volume_mounts.iter().flatten().all(|m| m.name != "model-keys"),
        "the agent's container mounts the model keys",
    )?;
    let proxy = ide.containers.iter().find(|c| c.name == "model-keys").ok_or("no model-keys container")?;
    ensure(
        proxy.args.iter().flatten().any(|a| *a == format!("--provider=keyed=http://{addr}/v1")),
        format!("{:?}", proxy.args),
    )?;
    let volume = ide.volumes.iter().flatten().find(|v| v.name == "model-keys").ok_or("no model-keys volume")?;
    let sources = volume.projected.as_ref().and_then(|p| p.sources.clone()).unwrap_or_default();
    let items: Vec<(String, String, String)> = sources
        .iter()
        .filter_map(|s| s.secret.as_ref())
        .flat_map(|s| s.items.iter().flatten().map(|i| (s.name.clone(), i.key.clone(), i.path.clone())))
        .collect();
    ensure_eq(items, vec![("model-keys".into(), "vllm".into(), "keyed".into())], "the key's file")?;
    // The values are nowhere else.
    let values =
        env.helm_json(&["get", "values", "--all", "-n", OPERATOR_NAMESPACE, &naming::release_name(&ns, "dev")])?;
    let events = Api::<Event>::namespaced(admin.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    let deployment = Api::<Deployment>::namespaced(admin.clone(), &ns).get("dev-tinycode").await.ctx("deployment")?;
    let log = std::fs::read_to_string(env.operator_log()).unwrap_or_default();
    for (what, text) in [
        ("status", serde_json::to_string(&inst.status).ctx("status")?),
        ("events", serde_json::to_string(&events.items).ctx("events")?),
        ("release values", values.to_string()),
        ("config", text),
        ("Deployment", serde_json::to_string(&deployment).ctx("deployment")?),
        ("operator log", log),
    ] {
        ensure(!text.contains(&key) && !text.contains(&openrouter), format!("a key appears in the {what}"))?;
    }
    Ok(())
}

/// Attack: alice runs within a class (a custom image, git, Ollama, 3 CPUs),
/// suspends the instance so no new rendering touches it, and waits for the
/// cluster-admin to tighten the class. What the class no longer permits
/// stops anyway: the IDE (its image and CPU beyond the class) and the
/// bundled Ollama (a mode the class withdrew) are scaled to zero, the event
/// names the field, the limit and the class, no helm runs, nothing outside
/// her namespace changes.
pub async fn a_stricter_class_stops_what_runs_beyond_it(env: &mut Env) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice", "class-strict").await?;
    let ns = alice.ns.clone();
    let class = format!("{ns}-team");
    create_class(
        &admin,
        &class,
        json!({
            "tinycode": {"max": {"cpu": "4", "memory": "8Gi"}},
            "permittedModes": ["ollama", "git"]
        }),
    )
    .await?;
    let spec = json!({
        "className": class,
        "image": "quay.io/alice/tinycode:mine",
        "resources": {"limits": {"cpu": "3", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}},
        "ollama": {"enabled": true}
    });
    super::deploy(env, &alice.client, &ns, "dev", spec).await?;
    run_to_running(&admin, &ns, "dev").await?;
    let release = naming::release_name(&ns, "dev");
    let revision = env.release(&release)?.ok_or("no release")?.0;
    Api::<TinycodeInstance>::namespaced(alice.client.clone(), &ns)
        .patch("dev", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .ctx("suspend")?;
    wait_phase(&admin, &ns, "dev", "Suspended").await?;
    let before = outside(&admin, &[OPERATOR_NAMESPACE], "none").await?;

    // The class tightens: its own image only, 2 CPUs, no Ollama.
    Api::<TinycodeClass>::all(admin.clone())
        .patch(
            &class,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {
                "image": "quay.io/tinycode/tinycode:1", "allowCustomImage": false,
                "tinycode": {"max": {"cpu": "2", "memory": "8Gi"}},
                "permittedModes": ["git"]
            }})),
        )
        .await
        .ctx("tighten the class")?;
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    wait_for("both workloads stopped", WAIT, || async {
        let replicas = |d: Deployment| d.spec.replicas;
        let ide = replicas(deployments.get(&naming::fullname("dev")).await.ctx("deployment")?);
        let ollama = replicas(deployments.get(&naming::ollama("dev")).await.ctx("ollama deployment")?);
        Ok((ide == Some(0) && ollama == Some(0)).then_some(()))
    })
    .await?;
    let events = Api::<Event>::namespaced(admin.clone(), &ns).list(&ListParams::default()).await.ctx("events")?;
    let notes: Vec<String> = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("ApprovalWithdrawn"))
        .filter_map(|e| e.note.clone())
        .collect();
    let said = notes.join("\n");
    for part in ["spec.image", "spec.resources.limits.cpu", "exceeds 2", "spec.ollama.enabled", &class] {
        ensure(said.contains(part), format!("the event names {part}: {said}"))?;
    }
    ensure_eq(env.release(&release)?.map(|r| r.0), Some(revision), "helm ran for the suspended instance")?;
    same_world(&before, &outside(&admin, &[OPERATOR_NAMESPACE], "none").await?)?;
    delete_and_wait_gone(&admin, &ns, "dev").await?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&class, &DeleteParams::default()).await.ctx("delete class")?;
    Ok(())
}

/// A class's egress list is checked at admission (an IP address as a host,
/// a range that is none, a host in capitals: each refused with the field
/// named), and a class that has one gives its instances an egress proxy:
/// the proxy's Deployment, Service and list, and a NetworkPolicy that
/// leaves the agent DNS and that proxy; the instance is Running only once
/// the proxy is. Taking `egress` out of the class takes them away again.
pub async fn a_class_egress_list_is_checked_and_gives_instances_a_proxy(env: &mut Env) -> TestResult {
    use k8s_openapi::api::networking::v1::NetworkPolicy;
    let admin = env.client().await;
    let alice = tenant(env, "alice", "egress").await?;
    let ns = alice.ns.clone();
    let class = format!("{ns}-locked");
    for (egress, says) in [
        (json!({"hosts": [{"host": "10.0.0.1"}]}), "an IP address is allowed by cidrs"),
        (json!({"cidrs": [{"cidr": "10.0.0.0/33"}]}), "cidr: an address range"),
        (json!({"hosts": [{"host": "GitHub.com"}]}), "spec.egress.hosts[0].host"),
        (json!({"hosts": [{"host": "git.example.com", "ports": [70000]}]}), "ports[0]"),
    ] {
        let refused = create_class(&admin, &class, json!({"egress": egress})).await;
        ensure(
            refused.as_ref().is_err_and(|e| e.contains(says)),
            format!("the class with {egress} was not refused naming {says:?}: {refused:?}"),
        )?;
    }
    let egress = json!({"hosts": [{"host": "git.example.com"}, {"host": "*.pypi.org", "ports": [443, 80]}],
                        "cidrs": [{"cidr": "10.96.0.1/32"}]});
    create_class(&admin, &class, json!({"egress": egress})).await?;
    super::deploy(env, &alice.client, &ns, "dev", json!({"className": class})).await?;
    let proxy = naming::egress("dev");
    let deployments = Api::<Deployment>::namespaced(admin.clone(), &ns);
    wait_for("the egress proxy's Deployment", WAIT, || async { deployments.get_opt(&proxy).await.ctx("get") }).await?;
    // Not Running while the proxy is not Ready (the agent's only way out).
    mark_workloads(&admin, &ns, "dev").await?;
    admit_route(&admin, &ns, &naming::route("dev"), &format!("dev-{ns}.apps.local.test")).await?;
    wait_for("status to wait for the egress proxy", WAIT, || async {
        let inst = get_instance(&admin, &ns, "dev").await?.ok_or("gone")?;
        Ok(ready(&inst).2.contains("waiting for its egress proxy").then_some(()))
    })
    .await?;
    run_to_running(&admin, &ns, "dev").await?;
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns).get(&proxy).await.ctx("the list")?;
    let list: Value = serde_json::from_str(cm.data.unwrap_or_default().get("policy.json").ok_or("no policy.json")?)
        .ctx("policy.json")?;
    ensure_eq(list["hosts"][1]["host"].clone(), json!("*.pypi.org"), "the list's second host")?;
    let nps = Api::<NetworkPolicy>::namespaced(admin.clone(), &ns);
    let np = nps.get(&naming::fullname("dev")).await.ctx("the agent's NetworkPolicy")?;
    let rules = np.spec.and_then(|s| s.egress).unwrap_or_default();
    ensure_eq(rules.len(), 2, "egress rules of the agent's pod: DNS and the proxy")?;
    let to_proxy = serde_json::to_value(&rules[1]).ctx("rule")?;
    ensure_eq(
        to_proxy["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"].clone(),
        json!("egress"),
        "the second rule",
    )?;
    let server = pod(&admin, &ns, &naming::fullname("dev")).await?;
    let env_of =
        |n: &str| server.containers[0].env.iter().flatten().find(|e| e.name == n).and_then(|e| e.value.clone());
    ensure_eq(env_of("HTTPS_PROXY"), Some(format!("http://{proxy}:3128")), "the agent's HTTPS_PROXY")?;

    // Alice narrows the list for her instance; a host beyond the class's is refused, nothing applied.
    let instances = Api::<TinycodeInstance>::namespaced(alice.client.clone(), &ns);
    let narrow = json!({"spec": {"egress": {"hosts": [{"host": "git.example.com"}]}}});
    instances.patch("dev", &PatchParams::default(), &Patch::Merge(narrow)).await.ctx("narrow")?;
    wait_for("the narrower list in the proxy's ConfigMap", WAIT, || async {
        let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns).get(&proxy).await.ctx("the list")?;
        let list: Value =
            serde_json::from_str(cm.data.unwrap_or_default().get("policy.json").map(String::as_str).unwrap_or("{}"))
                .ctx("policy.json")?;
        Ok((list["hosts"].as_array().map(Vec::len) == Some(1)).then_some(()))
    })
    .await?;
    let wider = json!({"spec": {"egress": {"hosts": [{"host": "git.example.com"}, {"host": "evil.test"}]}}});
    instances.patch("dev", &PatchParams::default(), &Patch::Merge(wider)).await.ctx("widen")?;
    let m = failed_with(&admin, &ns, "dev", "ExceedsPolicy").await?;
    ensure(m.contains("spec.egress.hosts[1]") && m.contains("evil.test"), format!("the refusal names the entry: {m}"))?;
    let cm = Api::<ConfigMap>::namespaced(admin.clone(), &ns).get(&proxy).await.ctx("the list")?;
    ensure(
        !cm.data.unwrap_or_default().get("policy.json").is_some_and(|p| p.contains("evil.test")),
        "evil.test reached the list",
    )?;
    instances
        .patch("dev", &PatchParams::default(), &Patch::Merge(json!({"spec": {"egress": null}})))
        .await
        .ctx("drop")?;
    run_to_running(&admin, &ns, "dev").await?;

    // Without egress in the class: the proxy goes, the agent's egress opens again.
    Api::<TinycodeClass>::all(admin.clone())
        .patch(&class, &PatchParams::default(), &Patch::Merge(json!({"spec": {"egress": null}})))
        .await
        .ctx("the class without egress")?;
    wait_for("the egress proxy removed", WAIT, || async {
        Ok(deployments.get_opt(&proxy).await.ctx("get")?.is_none().then_some(()))
    })
    .await?;
    let np = nps.get(&naming::fullname("dev")).await.ctx("the agent's NetworkPolicy")?;
    let open = serde_json::to_value(np.spec.and_then(|s| s.egress).unwrap_or_default()).ctx("rules")?;
    ensure(
        open[0]["to"].as_array().is_some_and(|t| t.iter().any(|t| t["ipBlock"]["cidr"] == "0.0.0.0/0")),
        format!("{open}"),
    )?;

    // Attack: alice suspends the instance (no rendering touches it), then the
    // class limits egress again. Her agent runs without a proxy, beyond the
    // class: it is stopped at once, suspended or not.
    run_to_running(&admin, &ns, "dev").await?;
    instances
        .patch("dev", &PatchParams::default(), &Patch::Merge(json!({"spec": {"suspend": true}})))
        .await
        .ctx("suspend")?;
    wait_phase(&admin, &ns, "dev", "Suspended").await?;
    Api::<TinycodeClass>::all(admin.clone())
        .patch(&class, &PatchParams::default(), &Patch::Merge(json!({"spec": {"egress": egress}})))
        .await
        .ctx("the class limits egress again")?;
    wait_for("the agent without a proxy stopped", WAIT, || async {
        let d = deployments.get(&naming::fullname("dev")).await.ctx("deployment")?;
        Ok((d.spec.replicas == Some(0)).then_some(()))
    })
    .await?;
    ensure(deployments.get_opt(&proxy).await.ctx("get")?.is_none(), "a suspended instance got a rendering")?;
    delete_and_wait_gone(&alice.client, &ns, "dev").await?;
    Api::<TinycodeClass>::all(admin.clone()).delete(&class, &DeleteParams::default()).await.ctx("delete the class")?;
    Ok(())
}

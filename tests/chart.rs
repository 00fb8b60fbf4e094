//! Chart tests: the operator's values for representative specs, rendered by
//! the real `helm template`, asserted on the parsed objects.

use std::path::PathBuf;
use std::process::Command;
use std::sync::OnceLock;

use serde_json::{Value, json};
use tinycode_operator::api::TinycodeInstanceSpec;
use tinycode_operator::api::naming;
use tinycode_operator::render::config;
use tinycode_operator::render::values::{self, Approved, InstanceRef, Values};
use tinycode_operator::settings::Settings;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The helm 3 binary: $TINYCODE_HELM, else the one hack/local-cluster.sh builds.
fn helm() -> &'static PathBuf {
    static HELM: OnceLock<PathBuf> = OnceLock::new();
    HELM.get_or_init(|| {
        if let Some(h) = std::env::var_os("TINYCODE_HELM") {
            return PathBuf::from(h);
        }
        let out = Command::new("bash")
            .arg(root().join("hack/local-cluster.sh"))
            .arg("tools")
            .output()
            .expect("run hack/local-cluster.sh tools");
        assert!(out.status.success(), "hack/local-cluster.sh tools failed: {}", String::from_utf8_lossy(&out.stderr));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        PathBuf::from(text.lines().find_map(|l| l.strip_prefix("TINYCODE_HELM=")).expect("TINYCODE_HELM line"))
    })
}

fn values_for(spec: Value) -> Values {
    values_approved(spec, &Approved::default())
}

fn values_approved(spec: Value, approved: &Approved) -> Values {
    values_of("dev", spec, approved)
}

fn values_of(name: &str, spec: Value, approved: &Approved) -> Values {
    let spec: TinycodeInstanceSpec = serde_json::from_value(spec).expect("spec");
    let cfg = config::generate(&spec, &Default::default());
    let inst = InstanceRef { name, namespace: "team", uid: "uid-123" };
    values::build(&inst, &spec, &Settings::default(), approved, cfg)
}

fn helm_cmd(args: &[&str], values: &impl serde::Serialize) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("values.json");
    std::fs::write(&file, serde_json::to_vec(values).unwrap()).unwrap();
    Command::new(helm())
        .args(args)
        .arg(root().join("helm-charts/tinycode"))
        .args(["-f", file.to_str().unwrap()])
        .env("HELM_CACHE_HOME", dir.path().join("c"))
        .env("HELM_CONFIG_HOME", dir.path().join("f"))
        .env("HELM_DATA_HOME", dir.path().join("d"))
        .output()
        .expect("run helm")
}

/// Renders the chart with the operator's values for `spec`.
fn render(spec: Value) -> (Values, Vec<Value>) {
    render_approved(spec, &Approved::default())
}

/// Renders as the operator runs helm: the release (its records) in the
/// operator's namespace, every object in the instance namespace by name.
fn render_approved(spec: Value, approved: &Approved) -> (Values, Vec<Value>) {
    render_values(values_approved(spec, approved))
}

fn render_values(v: Values) -> (Values, Vec<Value>) {
    let release = naming::release_name(&v.instance.namespace, &v.instance.name);
    let out = helm_cmd(&["template", &release, "--namespace", "tinycode-operator-system"], &v);
    assert!(out.status.success(), "helm template failed: {}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let docs = serde_saphyr::from_multiple::<Value>(&text).expect("helm template renders YAML");
    (v, docs)
}

/// Renders an empty spec (instance team/dev) under operator `settings`.
fn render_default_spec(settings: &Settings) -> Vec<Value> {
    let spec: TinycodeInstanceSpec = serde_json::from_value(json!({})).unwrap();
    let instance = InstanceRef { name: "dev", namespace: "team", uid: "u" };
    render_values(values::build(&instance, &spec, settings, &Approved::default(), None)).1
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} among {:?}", kinds(docs)))
}

fn kinds(docs: &[Value]) -> Vec<String> {
    let mut k: Vec<String> = docs
        .iter()
        .map(|d| format!("{}/{}", d["kind"].as_str().unwrap_or(""), d["metadata"]["name"].as_str().unwrap_or("")))
        .collect();
    k.sort();
    k
}

fn container<'a>(deploy: &'a Value, name: &str) -> &'a Value {
    deploy["spec"]["template"]["spec"]["containers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .expect("container")
}

fn env_of<'a>(ctr: &'a Value, name: &str) -> Option<&'a Value> {
    ctr["env"].as_array().and_then(|e| e.iter().find(|x| x["name"] == name))
}

#[test]
fn basic_instance_objects() {
    let (v, docs) = render(json!({"auth": {"passwordSecret": "pw"}}));
    assert_eq!(
        kinds(&docs),
        vec![
            "Deployment/dev-tinycode",
            "Deployment/dev-tinycode-front",
            "NetworkPolicy/dev-tinycode",
            "NetworkPolicy/dev-tinycode-front",
            "PersistentVolumeClaim/dev-data",
            "PersistentVolumeClaim/dev-projects",
            "Role/dev-tinycode-discovery",
            "RoleBinding/dev-tinycode-discovery",
            "Service/dev-tinycode",
            "Service/dev-tinycode-agent",
            "ServiceAccount/dev-tinycode",
        ]
    );
    for d in &docs {
        let labels = &d["metadata"]["labels"];
        assert_eq!(labels["app.kubernetes.io/name"], "tinycode", "{d}");
        assert_eq!(labels["app.kubernetes.io/instance"], "dev");
        assert_eq!(labels["app.kubernetes.io/part-of"], "tinycode-operator", "the operator watches by this label");
        assert_eq!(d["metadata"]["namespace"], "team");
        let owners = &d["metadata"]["ownerReferences"];
        if d["kind"] == "PersistentVolumeClaim" {
            assert!(owners.is_null(), "PVCs must outlive the instance");
            assert_eq!(d["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
        } else {
            assert_eq!(owners[0]["uid"], "uid-123", "{}", d["kind"]);
            assert_eq!(owners[0]["controller"], true);
        }
    }
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(dep["metadata"]["annotations"]["tinycode.dev/values-hash"], v.values_hash);
    assert_eq!(dep["spec"]["strategy"]["type"], "Recreate", "RWO volumes cannot be shared by a surge pod");
    assert_eq!(dep["spec"]["progressDeadlineSeconds"], 600, "the operator's --progress-deadline-seconds");
    let pod = &dep["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "dev-tinycode");
    assert_eq!(pod["securityContext"]["runAsUser"], 1001);
    assert_eq!(pod["securityContext"]["runAsGroup"], 0);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
    assert!(pod["hostPID"].is_null() || pod["hostPID"] == false);
    assert_eq!(dep["spec"]["template"]["metadata"]["annotations"]["openshift.io/required-scc"], "tinycode-restricted");
    let c = container(dep, "tinycode");
    assert_eq!(c["image"], "quay.io/bjohns/tinycode-container:latest");
    assert_eq!(c["ports"][0], json!({"containerPort": 4096, "name": "http", "protocol": "TCP"}));
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    assert!(c["securityContext"]["capabilities"]["add"].is_null());
    assert_eq!(
        c["resources"],
        json!({"limits": {"cpu": "2", "memory": "2Gi"}, "requests": {"cpu": "200m", "memory": "512Mi"}})
    );
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/global/health");
    assert_eq!(c["readinessProbe"]["initialDelaySeconds"], 5);
    assert_eq!(c["livenessProbe"]["initialDelaySeconds"], 15);
    assert_eq!(
        env_of(c, "TINYCODE_SERVER_PASSWORD").unwrap()["valueFrom"]["secretKeyRef"],
        json!({"name": "pw", "key": "TINYCODE_SERVER_PASSWORD"})
    );
    assert_eq!(env_of(c, "TINYCODE_DISABLE_LSP_DOWNLOAD").unwrap()["value"], "1");
    assert!(env_of(c, "TINYCODE_CONFIG_CONTENT").is_none());
    assert!(env_of(c, "KUBECONFIG").is_none());
    let mounts: Vec<(String, String)> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["mountPath"].as_str().unwrap().to_string(), m["subPath"].as_str().unwrap_or("").to_string()))
        .collect();
    assert!(mounts.contains(&("/home/tinycode/.local/share/tinycode".into(), "data".into())), "{mounts:?}");
    assert!(mounts.contains(&("/home/tinycode/.config/tinycode".into(), "config".into())));
    assert!(mounts.iter().any(|m| m.0 == "/projects"));
    // A read-only root: what the agent writes outside its volumes goes to the
    // pod's bounded scratch emptyDir.
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    for (path, sub) in [("/tmp", "tmp"), ("/home/tinycode/.cache", "cache"), ("/home/tinycode/.local/state", "state")] {
        assert!(mounts.contains(&(path.into(), sub.into())), "{path} writable: {mounts:?}");
    }
    let scratch = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "scratch").expect("scratch volume");
    assert_eq!(scratch["emptyDir"]["sizeLimit"], "2Gi");
    let pvc = find(&docs, "PersistentVolumeClaim", "dev-projects");
    assert_eq!(pvc["spec"]["accessModes"], json!(["ReadWriteOnce"]));
    assert_eq!(pvc["spec"]["resources"]["requests"]["storage"], "10Gi");
    assert!(pvc["spec"]["storageClassName"].is_null(), "no class means the cluster default");
    let svc = find(&docs, "Service", "dev-tinycode");
    assert_eq!(svc["spec"]["ports"][0]["port"], 4096);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], "front");
    // The activity report (idle stop): its own Service port, which the Route
    // and Ingress do not name, served by the front's gate (which joins the
    // image's own report, on 4098, to the requests it let through).
    assert_eq!(
        svc["spec"]["ports"][1],
        json!({"name": "activity", "port": 4097, "targetPort": "activity", "protocol": "TCP"})
    );
    let tinycode = &find(&docs, "Deployment", "dev-tinycode")["spec"]["template"]["spec"]["containers"][0];
    assert!(tinycode["env"].as_array().unwrap().contains(&json!({"name": "TINYCODE_ACTIVITY_PORT", "value": "4098"})));
    let gate = container(find(&docs, "Deployment", "dev-tinycode-front"), "gate");
    assert!(
        gate["ports"]
            .as_array()
            .unwrap()
            .contains(&json!({"name": "activity", "containerPort": 4097, "protocol": "TCP"}))
    );
    let np = find(&docs, "NetworkPolicy", "dev-tinycode-front");
    assert_eq!(np["spec"]["ingress"].as_array().unwrap().len(), 2);
    // Only the operator's namespace reaches the activity port.
    assert_eq!(
        np["spec"]["ingress"][1],
        json!({"from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "tinycode-operator-system"}}}],
               "ports": [{"port": 4097, "protocol": "TCP"}]})
    );
    assert_eq!(np["spec"]["ingress"][0]["ports"], json!([{"port": 4180, "protocol": "TCP"}]));
    assert_eq!(
        np["spec"]["ingress"][0]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"policy-group.network.openshift.io/ingress": ""}}}, {"podSelector": {}}]),
        "only the router's namespaces and the instance's own namespace reach the UI"
    );
    // tinycode itself: the front's pods alone.
    let np = find(&docs, "NetworkPolicy", "dev-tinycode");
    assert_eq!(np["spec"]["ingress"].as_array().unwrap().len(), 1);
    assert_eq!(
        np["spec"]["ingress"][0]["ports"],
        json!([{"port": 4096, "protocol": "TCP"}, {"port": 4098, "protocol": "TCP"}])
    );
    assert_eq!(dep["spec"]["template"]["spec"]["automountServiceAccountToken"], false, "no cluster role: no token");
}

#[test]
fn no_password_named_means_the_generated_secret() {
    let (_, docs) = render(json!({}));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let c = container(dep, "tinycode");
    assert_eq!(
        env_of(c, "TINYCODE_SERVER_PASSWORD").unwrap()["valueFrom"]["secretKeyRef"],
        json!({"name": "dev-tinycode-password", "key": "TINYCODE_SERVER_PASSWORD"})
    );
}

#[test]
fn host_path_replaces_the_projects_pvc() {
    let (_, docs) =
        render(json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}, "storageClassName": "fast"}}));
    assert!(!kinds(&docs).iter().any(|k| k.starts_with("PersistentVolumeClaim")), "{:?}", kinds(&docs));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let vols = dep["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    assert!(vols.iter().any(|v| v["hostPath"]["path"] == "/srv/code"));
    assert!(vols.iter().any(|v| v["emptyDir"].is_object()), "the data volume is an emptyDir with hostPath");
    let c = container(dep, "tinycode");
    let projects = c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/projects").unwrap();
    assert_eq!(projects["readOnly"], true);
    assert_eq!(dep["spec"]["template"]["metadata"]["annotations"]["openshift.io/required-scc"], "tinycode-hostpath");
}

#[test]
fn shell_tier_gets_host_pid_and_only_sys_ptrace() {
    let (_, docs) = render(json!({"shell": {"enabled": true}}));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(dep["spec"]["template"]["spec"]["hostPID"], true);
    let caps = &container(dep, "tinycode")["securityContext"]["capabilities"];
    assert_eq!(caps["add"], json!(["SYS_PTRACE"]));
    assert_eq!(container(dep, "tinycode")["securityContext"]["privileged"], false);
    assert_eq!(dep["spec"]["template"]["metadata"]["annotations"]["openshift.io/required-scc"], "tinycode-shell");
}

#[test]
fn shared_workspace_uses_rwx_and_no_sqlite_pvc() {
    let (_, docs) =
        render(json!({"replicas": 3, "storage": {"projectsAccessMode": "ReadWriteMany", "retainOnDelete": false}}));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(dep["spec"]["replicas"], 3);
    assert!(
        !kinds(&docs).contains(&"PersistentVolumeClaim/dev-data".to_string()),
        "SQLite is not shareable: the data volume is an emptyDir"
    );
    let pvc = find(&docs, "PersistentVolumeClaim", "dev-projects");
    assert_eq!(pvc["spec"]["accessModes"], json!(["ReadWriteMany"]));
    assert!(
        pvc["metadata"]["annotations"]["helm.sh/resource-policy"].is_null(),
        "retainOnDelete false: helm uninstall removes it"
    );
}

#[test]
fn generated_config_reaches_the_pod_through_one_config_map() {
    let (v, docs) = render(
        json!({"model": "qwen", "vllm": [{"name": "q", "url": "http://vllm:8000", "models": {"qwen": {"contextLimit": 32768, "outputLimit": 4096}}}],
                                  "discovery": {"namespaces": ["models", "ai"]}}),
    );
    let cm = find(&docs, "ConfigMap", "dev-tinycode-config");
    let cfg: Value = serde_json::from_str(cm["data"]["config.json"].as_str().unwrap()).unwrap();
    assert_eq!(cfg["model"], "qwen");
    assert_eq!(cfg["providers"]["q"]["url"], "http://vllm:8000/v1");
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let c = container(dep, "tinycode");
    assert_eq!(
        env_of(c, "TINYCODE_CONFIG_CONTENT").unwrap()["valueFrom"]["configMapKeyRef"],
        json!({"name": "dev-tinycode-config", "key": "config.json"})
    );
    assert_eq!(dep["spec"]["template"]["metadata"]["annotations"]["checksum/config"], v.config.checksum);
    assert!(env_of(c, "TINYCODE_DISCOVERY_NAMESPACES").is_none(), "no namespace approved discovery");
    assert!(!kinds(&docs).iter().any(|k| k.starts_with("Cluster")), "{:?}", kinds(&docs));
    assert!(docs.iter().all(|d| d["metadata"]["namespace"] == "team"), "nothing outside the instance namespace");
}

#[test]
fn discovery_binds_the_shared_role_only_in_approved_namespaces() {
    let approved = Approved { discovery_namespaces: vec!["models".into()], ..Default::default() };
    let (_, docs) = render_approved(json!({"discovery": {"namespaces": ["models", "ai"]}}), &approved);
    let rb: Vec<&Value> = docs.iter().filter(|d| d["metadata"]["name"] == "tinycode:team:dev-discovery").collect();
    assert_eq!(rb.len(), 1, "one RoleBinding, in the approved namespace only");
    assert_eq!(
        (rb[0]["kind"].as_str(), rb[0]["metadata"]["namespace"].as_str()),
        (Some("RoleBinding"), Some("models"))
    );
    assert_eq!(
        rb[0]["roleRef"],
        json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "tinycode-discovery"})
    );
    assert_eq!(rb[0]["subjects"][0], json!({"kind": "ServiceAccount", "name": "dev-tinycode", "namespace": "team"}));
    assert_eq!(rb[0]["metadata"]["labels"]["tinycode.dev/instance-namespace"], "team");
    let c = container(find(&docs, "Deployment", "dev-tinycode"), "tinycode");
    assert_eq!(env_of(c, "TINYCODE_DISCOVERY_NAMESPACES").unwrap()["value"], "models");
    assert!(!kinds(&docs).iter().any(|k| k.starts_with("Cluster")), "no cluster-scoped object for discovery");
}

#[test]
fn a_cluster_role_is_bound_and_the_token_mounted_only_when_approved() {
    let spec = json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}});
    let (_, docs) = render(spec.clone());
    assert!(!kinds(&docs).iter().any(|k| k.starts_with("ClusterRoleBinding")), "not approved: not bound");
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(dep["spec"]["template"]["spec"]["automountServiceAccountToken"], false);
    let approved = Approved { cluster_role: Some("view".into()), ..Default::default() };
    let (_, docs) = render_approved(spec, &approved);
    let crb = find(&docs, "ClusterRoleBinding", "tinycode:team:dev-cluster-role");
    assert_eq!(crb["roleRef"]["name"], "view");
    assert_eq!(crb["subjects"][0], json!({"kind": "ServiceAccount", "name": "dev-tinycode", "namespace": "team"}));
    assert_eq!(crb["metadata"]["labels"]["tinycode.dev/instance-name"], "dev");
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(dep["spec"]["template"]["spec"]["automountServiceAccountToken"], true);
}

#[test]
fn cluster_admin_mode_mounts_the_kubeconfig_read_only() {
    let (_, docs) =
        render(json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "ocVersion": "4.17"}}));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let c = container(dep, "tinycode");
    assert_eq!(env_of(c, "KUBECONFIG").unwrap()["value"], "/home/tinycode/.kube/config");
    assert_eq!(env_of(c, "TINYCODE_CLUSTER_ADMIN").unwrap()["value"], "true");
    assert_eq!(env_of(c, "TINYCODE_OC_VERSION").unwrap()["value"], "4.17");
    assert_eq!(c["readinessProbe"]["initialDelaySeconds"], 60);
    assert_eq!(c["livenessProbe"]["initialDelaySeconds"], 90);
    let vol = dep["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == "kc")
        .expect("kubeconfig volume");
    assert_eq!(vol["secret"]["defaultMode"], 256);
    assert!(
        find(&docs, "ConfigMap", "dev-tinycode-config")["data"]["config.json"]
            .as_str()
            .unwrap()
            .contains("cluster-admin")
    );
}

#[test]
fn git_values_reach_the_init_container_only_as_env() {
    let url = "https://example.com/team/repo.git";
    let (_, docs) = render(
        json!({"git": {"url": url, "branch": "release/1.2", "depth": 3, "pullOnRestart": true, "credentialsSecret": "git-creds"}}),
    );
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let init = dep["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "git-clone")
        .expect("git-clone");
    assert_eq!(env_of(init, "TINYCODE_GIT_REPO").unwrap()["value"], url);
    assert_eq!(env_of(init, "TINYCODE_GIT_BRANCH").unwrap()["value"], "release/1.2");
    assert_eq!(env_of(init, "TINYCODE_GIT_DEPTH").unwrap()["value"], "3");
    let script = init["command"].to_string() + &init["args"].to_string();
    assert!(
        !script.contains("example.com") && !script.contains("release/1.2"),
        "values must not be spliced into shell text"
    );
    let creds = dep["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["secret"]["secretName"] == "git-creds")
        .expect("credentials volume");
    assert_eq!(creds["secret"]["defaultMode"], 256);
}

#[test]
fn ollama_bundle_lives_in_the_same_release() {
    let (_, docs) = render(json!({"ollama": {"enabled": true, "models": ["qwen2.5-coder:7b", "llama3"]}}));
    let od = find(&docs, "Deployment", "dev-ollama");
    assert_eq!(od["spec"]["progressDeadlineSeconds"], 600, "a model pull that never ends stalls too");
    find(&docs, "Service", "dev-ollama");
    let pvc = find(&docs, "PersistentVolumeClaim", "dev-ollama-models");
    assert_eq!(pvc["metadata"]["annotations"]["helm.sh/resource-policy"], "keep");
    // The Ollama pods run under the same tier SCC as tinycode, pinned like its pods.
    assert_eq!(od["spec"]["template"]["metadata"]["annotations"]["openshift.io/required-scc"], "tinycode-restricted");
    let c = &od["spec"]["template"]["spec"]["containers"][0];
    // Models are positional arguments after the fixed script, never spliced into it.
    let argv: Vec<String> = c["command"]
        .as_array()
        .unwrap()
        .iter()
        .chain(c["args"].as_array().into_iter().flatten())
        .map(|x| x.as_str().unwrap().to_string())
        .collect();
    let script = &argv[2];
    assert!(!script.contains("qwen2.5-coder") && !script.contains("llama3"));
    assert_eq!(&argv[argv.len() - 2..], ["qwen2.5-coder:7b", "llama3"]);
    // Ready only once the script marked every pull done, in a volume of its
    // own (in memory, fresh per start, never on the models volume).
    assert_eq!(c["readinessProbe"]["exec"]["command"][2], "test -e /run/tinycode-ollama/ready");
    assert!(script.contains("ready=/run/tinycode-ollama/ready") && script.contains(r#": >"$ready""#));
    let mount =
        c["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == "/run/tinycode-ollama").unwrap();
    let volumes = od["spec"]["template"]["spec"]["volumes"].as_array().unwrap();
    let state = volumes.iter().find(|v| v["name"] == mount["name"]).unwrap();
    assert_eq!(state["emptyDir"]["medium"], "Memory");
    assert_eq!(c["terminationMessagePolicy"], "FallbackToLogsOnError");
    let dep = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(env_of(container(dep, "tinycode"), "TINYCODE_OLLAMA_HOST").unwrap()["value"], "http://dev-ollama:11434");
}

#[test]
fn a_gpu_class_places_ollama_on_gpu_nodes_and_leaves_the_ide_where_it_was() {
    use tinycode_operator::reconcile::class_policy::{Choice, apply};
    let class = json!({
        "tinycode": {"defaults": {"limits": {"cpu": "3", "memory": "6Gi"}}, "max": {"cpu": "4"}, "runtimeClassName": "kata"},
        "ollama": {"defaults": {"requests": {"cpu": "2", "memory": "8Gi"}, "limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
                   "max": {"nvidia.com/gpu": "1"}, "nodeSelector": {"nvidia.com/gpu.present": "true"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "runtimeClassName": "nvidia"},
        "imagePullSecrets": [{"name": "team-pull"}]
    });
    let choice =
        Choice::Found { name: "gpu".into(), spec: Box::new(serde_json::from_value(class).unwrap()), warning: None };
    let spec: TinycodeInstanceSpec = serde_json::from_value(json!({
        "ollama": {"enabled": true}, "nodeSelector": {"zone": "a"},
        "env": [{"name": "OPENROUTER_API_KEY", "secretKeyRef": {"name": "keys", "key": "openrouter"}}],
        "vllm": [{"name": "big-model", "url": "http://vllm.models.svc:8000", "apiKeySecret": {"name": "keys", "key": "vllm"}}]
    }))
    .unwrap();
    let applied = apply(&choice, &spec, &Settings::default(), 0).expect("within the class");
    let approved = Approved { class: applied.from_class, ..Approved::default() };
    let cfg = config::generate(&applied.spec, &Default::default());
    let inst = InstanceRef { name: "dev", namespace: "team", uid: "uid-123" };
    let (v, docs) = render_values(values::build(&inst, &applied.spec, &Settings::default(), &approved, cfg));
    let ide = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(ide["metadata"]["annotations"]["tinycode.dev/class"], "gpu");
    let pod = &ide["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"zone": "a"}), "the IDE is not forced onto GPU nodes");
    assert_eq!(pod["runtimeClassName"], "kata");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "team-pull"}]));
    assert!(pod["tolerations"].is_null());
    assert_eq!(container(ide, "tinycode")["resources"]["limits"], json!({"cpu": "3", "memory": "6Gi"}));
    let ollama = find(&docs, "Deployment", "dev-ollama");
    let opod = &ollama["spec"]["template"]["spec"];
    assert_eq!(opod["nodeSelector"], json!({"nvidia.com/gpu.present": "true"}));
    assert_eq!(opod["tolerations"][0]["key"], "nvidia.com/gpu");
    assert_eq!(opod["runtimeClassName"], "nvidia");
    let r = &opod["containers"][0]["resources"];
    assert_eq!(r["limits"], json!({"memory": "16Gi", "nvidia.com/gpu": "1"}));
    assert_eq!(r["requests"], json!({"cpu": "2", "memory": "8Gi"}));
    // Keys are references: spec.env is set from the Secret in the agent's
    // container; the model server's key is a file of the model-key proxy's
    // container alone, placed with the pod (no GPU placement of its own).
    let c = container(ide, "tinycode");
    let or = env_of(c, "OPENROUTER_API_KEY").unwrap();
    assert_eq!(or["valueFrom"]["secretKeyRef"], json!({"name": "keys", "key": "openrouter"}));
    assert!(or.get("value").is_none());
    assert_eq!(v.secret_env.len(), 1);
    assert!(env_of(c, "TINYCODE_VLLM_BIG_MODEL_API_KEY").is_none());
    let mounts = |c: &Value| -> Vec<String> {
        c["volumeMounts"].as_array().unwrap().iter().map(|m| m["name"].as_str().unwrap().to_string()).collect()
    };
    assert!(!mounts(c).contains(&"model-keys".to_string()), "the agent mounts the keys");
    let proxy = container(ide, "model-keys");
    assert_eq!(mounts(proxy), vec!["model-keys"]);
    assert!(proxy["args"].as_array().unwrap().contains(&json!("--provider=big-model=http://vllm.models.svc:8000/v1")));
    assert!(proxy["args"].as_array().unwrap().contains(&json!("--class=gpu")));
    let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "model-keys").unwrap();
    assert_eq!(
        volume["projected"]["sources"],
        json!([{"secret": {"name": "keys", "items": [{"key": "vllm", "path": "big-model"}]}}])
    );
    // The proxy's port is for the monitoring namespaces alone.
    let policy = find(&docs, "NetworkPolicy", "dev-tinycode");
    let metrics = policy["spec"]["ingress"].as_array().unwrap().iter().find(|r| r["ports"][0]["port"] == 4100).unwrap();
    assert_eq!(metrics["from"].as_array().unwrap().len(), 2);
    assert!(
        metrics["from"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f.get("namespaceSelector").is_some() && f.get("podSelector").is_none())
    );
}

#[test]
fn without_placement_of_its_own_ollama_keeps_the_instances() {
    let (_, docs) = render(json!({"ollama": {"enabled": true}, "nodeSelector": {"zone": "a"}}));
    let opod = &find(&docs, "Deployment", "dev-ollama")["spec"]["template"]["spec"];
    assert_eq!(opod["nodeSelector"], json!({"zone": "a"}));
    assert_eq!(opod["containers"][0]["resources"], json!({"requests": {"cpu": "100m", "memory": "256Mi"}}));
    assert!(opod["runtimeClassName"].is_null() && opod["imagePullSecrets"].is_null());
}

/// Every mode that adds objects: Ollama and its PVC, a config, discovery
/// elsewhere, an approved cluster role.
fn everything() -> (Value, Approved) {
    let spec = json!({"ollama": {"enabled": true}, "model": "ollama/qwen",
                      "clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"},
                      "discovery": {"namespaces": ["models"]}});
    let approved = Approved {
        cluster_role: Some("view".into()),
        discovery_namespaces: vec!["models".into()],
        ..Approved::default()
    };
    (spec, approved)
}

#[test]
fn a_63_character_name_keeps_every_object_name_within_its_limit() {
    let name = format!("a{}z", "-long-instance-name".repeat(4))[..62].to_string() + "z";
    assert_eq!(name.len(), 63);
    let (spec, approved) = everything();
    let (v, docs) = render_values(values_of(&name, spec, &approved));
    let dns1035 = regex::Regex::new(r"^[a-z]([-a-z0-9]*[a-z0-9])?$").unwrap();
    let mut kinds_seen = vec![];
    for d in &docs {
        let (kind, obj) = (d["kind"].as_str().unwrap(), d["metadata"]["name"].as_str().unwrap());
        // RBAC objects keep the names a 45-character instance already had (up
        // to 253 allowed; see naming::OBJECT_NAME_MAX); every other name is a
        // DNS label.
        let max = if kind.contains("RoleBinding") || kind == "Role" { 253 } else { 63 };
        assert!(obj.len() <= max, "{kind} {obj} is {} characters long", obj.len());
        if kind == "Service" {
            assert!(dns1035.is_match(obj), "Service {obj} must be a DNS-1035 label");
        }
        assert_eq!(d["metadata"]["labels"]["app.kubernetes.io/instance"], name.as_str(), "{kind} {obj}");
        kinds_seen.push(kind.to_string());
    }
    for kind in ["ClusterRoleBinding", "ConfigMap", "Deployment", "PersistentVolumeClaim", "Role", "Service"] {
        assert!(kinds_seen.iter().any(|k| k == kind), "no {kind} rendered: {kinds_seen:?}");
    }
    // The names the operator looks up are the ones the chart created.
    let dep = find(&docs, "Deployment", &naming::fullname(&name));
    find(&docs, "Service", &naming::fullname(&name));
    find(&docs, "ServiceAccount", &naming::service_account(&name));
    find(&docs, "Service", &naming::ollama(&name));
    find(&docs, "ConfigMap", &naming::config_map(&name));
    find(&docs, "PersistentVolumeClaim", &naming::data_pvc(&name));
    find(&docs, "PersistentVolumeClaim", &naming::projects_pvc(&name));
    find(&docs, "PersistentVolumeClaim", &naming::ollama_models_pvc(&name));
    find(&docs, "Role", &naming::discovery_role(&name));
    find(&docs, "RoleBinding", &naming::discovery_role(&name));
    find(&docs, "ClusterRoleBinding", &naming::cluster_role_binding("team", &name));
    find(&docs, "RoleBinding", &naming::discovery_binding("team", &name));
    assert_eq!(dep["spec"]["template"]["spec"]["serviceAccountName"], v.names.fullname.as_str());
    assert_eq!(
        env_of(container(dep, "tinycode"), "TINYCODE_OLLAMA_HOST").unwrap()["value"],
        format!("http://{}:11434", naming::ollama(&name)).as_str()
    );
    assert!(naming::fullname(&name).ends_with("-tinycode") && naming::fullname(&name) != format!("{name}-tinycode"));
}

#[test]
fn short_names_render_exactly_as_before() {
    let (spec, approved) = everything();
    let (_, docs) = render_values(values_of("dev", spec, &approved));
    assert_eq!(
        kinds(&docs),
        vec![
            "ClusterRoleBinding/tinycode:team:dev-cluster-role",
            "ConfigMap/dev-tinycode-config",
            "Deployment/dev-ollama",
            "Deployment/dev-tinycode",
            "Deployment/dev-tinycode-front",
            "NetworkPolicy/dev-ollama",
            "NetworkPolicy/dev-tinycode",
            "NetworkPolicy/dev-tinycode-front",
            "PersistentVolumeClaim/dev-data",
            "PersistentVolumeClaim/dev-ollama-models",
            "PersistentVolumeClaim/dev-projects",
            "Role/dev-tinycode-discovery",
            "RoleBinding/dev-tinycode-discovery",
            "RoleBinding/tinycode:team:dev-discovery",
            "Service/dev-ollama",
            "Service/dev-tinycode",
            "Service/dev-tinycode-agent",
            "ServiceAccount/dev-tinycode",
        ]
    );
}

#[test]
fn the_chart_refuses_values_without_names() {
    let mut v = serde_json::to_value(values_for(json!({}))).unwrap();
    v["names"]["fullname"] = json!("");
    let out = helm_cmd(&["template", "x"], &v);
    assert!(!out.status.success(), "an empty name must be refused");
}

#[test]
fn lint_is_clean_for_every_sample() {
    let dir = root().join("config/samples");
    let mut n = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let inst: tinycode_operator::api::TinycodeInstance =
            serde_saphyr::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let spec = serde_json::to_value(&inst.spec).unwrap();
        let v = values_for(spec);
        let out = helm_cmd(&["lint", "--strict"], &v);
        assert!(
            out.status.success(),
            "helm lint --strict failed for {}: {}{}",
            path.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        n += 1;
    }
    assert!(n >= 8, "expected a sample per mode, found {n}");
}

#[test]
fn values_schema_rejects_what_the_operator_would_never_emit() {
    let mut v = serde_json::to_value(values_for(json!({}))).unwrap();
    v["replicas"] = json!(0);
    v["unknownKey"] = json!(true);
    let out = helm_cmd(&["template", "x"], &v);
    assert!(!out.status.success(), "the schema must reject replicas 0 and unknown keys");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("replicas") || err.contains("unknownKey"), "{err}");
}

/// The chart's own values.yaml has exactly the keys the operator emits.
#[test]
fn chart_defaults_have_the_operator_values_shape() {
    fn shape(v: &Value, path: &str, out: &mut Vec<String>) {
        if let Value::Object(m) = v {
            for (k, x) in m {
                // Maps keyed by user data (nodeSelector, vllm models) or by the platform are open.
                if ["nodeSelector", "ingressNamespaceLabels"].contains(&k.as_str()) {
                    out.push(format!("{path}.{k}"));
                    continue;
                }
                shape(x, &format!("{path}.{k}"), out);
            }
        } else {
            out.push(path.to_string());
        }
    }
    let chart: Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join("helm-charts/tinycode/values.yaml")).unwrap())
            .unwrap();
    let ours = serde_json::to_value(values_for(json!({}))).unwrap();
    let (mut a, mut b) = (vec![], vec![]);
    shape(&chart, "", &mut a);
    shape(&ours, "", &mut b);
    a.sort();
    b.sort();
    assert_eq!(a, b);
}

/// The init container's script, run for real with hostile values: git gets
/// them as arguments, the shell never evaluates them.
#[test]
fn git_clone_script_never_executes_its_inputs() {
    let (_, docs) = render(json!({"git": {"url": "https://example.com/team/repo.git"}}));
    let dep = find(&docs, "Deployment", "dev-tinycode");
    let init = dep["spec"]["template"]["spec"]["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "git-clone")
        .unwrap();
    let argv: Vec<String> =
        init["command"].as_array().unwrap().iter().map(|x| x.as_str().unwrap().to_string()).collect();
    assert_eq!(&argv[..2], ["/bin/sh", "-c"]);
    let work = tempfile::tempdir().unwrap();
    let w = work.path();
    // The script clones into /projects; point it at a scratch directory instead.
    assert_eq!(argv[2].matches("dest=/projects\n").count(), 1);
    let script = argv[2].replace("dest=/projects\n", &format!("dest={}\n", w.join("projects").display()));

    // A local repository to clone (no network involved).
    let git = |args: &[&str], dir: &std::path::Path| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("HOME", w)
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap();
        assert!(ok.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&ok.stderr));
    };
    let src = w.join("src");
    std::fs::create_dir_all(&src).unwrap();
    git(&["init", "-q", "-b", "main"], &src);
    std::fs::write(src.join("README"), "hello").unwrap();
    git(&["add", "README"], &src);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "init"], &src);

    let run = |repo: &str, branch: &str| {
        let projects = w.join("projects");
        let _ = std::fs::remove_dir_all(&projects);
        std::fs::create_dir_all(&projects).unwrap();
        Command::new("/bin/sh")
            .args(["-c", &script])
            .current_dir(w)
            .env("TINYCODE_GIT_REPO", repo)
            .env("TINYCODE_GIT_BRANCH", branch)
            .env("TINYCODE_GIT_DEPTH", "1")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .unwrap()
    };
    let good = run(&format!("file://{}", src.display()), "main");
    assert!(good.status.success(), "a plain clone must work: {}", String::from_utf8_lossy(&good.stderr));
    assert!(w.join("projects/README").is_file(), "the clone did not land in /projects");

    let marker = w.join("pwned");
    let m = marker.display().to_string();
    for (repo, branch) in [
        (format!("$(touch {m})"), String::new()),
        (format!("x; touch {m}"), String::new()),
        (format!("`touch {m}`"), String::new()),
        (format!("--upload-pack=touch {m}"), String::new()),
        (format!("file://{}", src.display()), format!("main; touch {m}")),
        (format!("file://{}", src.display()), format!("$(touch {m})")),
        (format!("file://{}", src.display()), format!("--upload-pack=touch {m}")),
    ] {
        let out = run(&repo, &branch);
        assert!(!out.status.success(), "hostile input cloned: repo {repo:?} branch {branch:?}");
        assert!(!marker.exists(), "repo {repo:?} branch {branch:?} executed a command");
    }
}

/// Without OpenShift's router, the UI is open to the ingress controller's namespace only.
#[test]
fn kubernetes_network_policy_admits_the_ingress_controller_namespace() {
    let settings = Settings {
        platform: tinycode_operator::platform::Platform::KUBERNETES,
        ingress_namespace: "traefik".into(),
        ..Settings::default()
    };
    let docs = render_default_spec(&settings);
    let np = find(&docs, "NetworkPolicy", "dev-tinycode-front");
    let from = json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "traefik"}}}, {"podSelector": {}}]);
    assert_eq!(np["spec"]["ingress"][0]["from"], from);
    // Fronts off: tinycode's own policy admits them.
    let docs = render_default_spec(&Settings { signin: no_fronts(), ..settings });
    assert_eq!(find(&docs, "NetworkPolicy", "dev-tinycode")["spec"]["ingress"][0]["from"], from);
}

fn no_fronts() -> tinycode_operator::settings::SigninSettings {
    tinycode_operator::settings::SigninSettings { front: false, ..Default::default() }
}

/// Egress: the cluster's pods and every address but link-local, the cloud
/// metadata services and what the cluster-admin closes besides.
#[test]
fn egress_closes_link_local_metadata_and_the_admins_cidrs() {
    let settings =
        Settings { egress_deny_cidrs: vec!["10.20.0.0/16".into(), "fd12::/16".into()], ..Settings::default() };
    let docs = render_default_spec(&settings);
    let np = find(&docs, "NetworkPolicy", "dev-tinycode");
    assert_eq!(np["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    let to = &np["spec"]["egress"][0]["to"];
    assert_eq!(to[0], json!({"namespaceSelector": {}}), "the cluster's pods (DNS, model servers) stay reachable");
    assert_eq!(
        to[1],
        json!({"ipBlock": {"cidr": "0.0.0.0/0", "except": ["169.254.0.0/16", "100.100.100.200/32", "168.63.129.16/32", "10.20.0.0/16"]}})
    );
    assert_eq!(
        to[2],
        json!({"ipBlock": {"cidr": "::/0", "except": ["fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128", "fd12::/16"]}})
    );
    assert_eq!(np["spec"]["egress"].as_array().unwrap().len(), 1, "no other egress rule opens more");
}

/// spec.stopped renders every workload at zero replicas and changes nothing else.
#[test]
fn stopped_renders_both_workloads_at_zero_replicas_and_keeps_the_rest() {
    let (_, running) = render(json!({"ollama": {"enabled": true}, "replicas": 1}));
    let (_, stopped) = render(json!({"ollama": {"enabled": true}, "replicas": 1, "stopped": true}));
    assert_eq!(find(&stopped, "Deployment", "dev-tinycode")["spec"]["replicas"], 0);
    assert_eq!(find(&stopped, "Deployment", "dev-ollama")["spec"]["replicas"], 0);
    assert_eq!(find(&running, "Deployment", "dev-tinycode")["spec"]["replicas"], 1);
    assert_eq!(find(&running, "Deployment", "dev-ollama")["spec"]["replicas"], 1);
    assert_eq!(kinds(&stopped), kinds(&running), "PVCs, Services, the NetworkPolicy... all kept");
}

/// Operator settings with an OpenID Connect provider, and the endpoints it
/// would have read.
fn signin_settings() -> (Settings, Approved) {
    use tinycode_operator::render::signin::OidcEndpoints;
    use tinycode_operator::settings::{OidcSettings, SigninSettings, UsernameClaim};
    let oidc = OidcSettings {
        issuer_url: "https://idp.example.com".into(),
        client_id: "tinycode".into(),
        client_secret_file: "/etc/tinycode-operator/oidc/client-secret".into(),
        scopes: "openid email profile groups".into(),
        username_claim: UsernameClaim::Email,
        username_prefix: String::new(),
        groups_prefix: String::new(),
        groups_claim: "groups".into(),
    };
    let settings = Settings { signin: SigninSettings { oidc: Some(oidc), ..Default::default() }, ..Default::default() };
    let approved = Approved {
        oidc_endpoints: Some(OidcEndpoints {
            issuer: "https://idp.example.com".into(),
            authorization: "https://idp.example.com/auth".into(),
            token: "https://idp.example.com/token".into(),
            jwks: "https://idp.example.com/keys".into(),
        }),
        ..Default::default()
    };
    (settings, approved)
}

fn render_mode(mode: &str) -> (Values, Vec<Value>) {
    render_mode_with(mode, json!({}))
}

/// [`render_mode`] with more of the spec.
fn render_mode_with(mode: &str, more: Value) -> (Values, Vec<Value>) {
    let (settings, approved) = signin_settings();
    let mut spec = json!({"auth": {"mode": mode}});
    spec.as_object_mut().unwrap().extend(more.as_object().unwrap().clone());
    let spec: TinycodeInstanceSpec = serde_json::from_value(spec).unwrap();
    let instance = InstanceRef { name: "dev", namespace: "team", uid: "u" };
    render_values(values::build(&instance, &spec, &settings, &approved, None))
}

#[test]
fn every_container_has_a_read_only_root() {
    let (spec, approved) = everything();
    let mut spec = spec;
    spec["git"] = json!({"url": "https://git.example.com/team/app.git"});
    let (_, everything) = render_approved(spec, &approved);
    let (_, oidc) = render_mode("oidc");
    let (_, openshift) = render_mode("openshift");
    let mut seen = Vec::new();
    for docs in [&everything, &oidc, &openshift] {
        for d in docs.iter().filter(|d| d["kind"] == "Deployment") {
            let pod = &d["spec"]["template"]["spec"];
            for c in pod["containers"]
                .as_array()
                .unwrap()
                .iter()
                .chain(pod["initContainers"].as_array().into_iter().flatten())
            {
                assert_eq!(
                    c["securityContext"]["readOnlyRootFilesystem"], true,
                    "{}: {}",
                    c["name"], c["securityContext"]
                );
                seen.push(c["name"].as_str().unwrap().to_string());
            }
        }
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen, ["gate", "git-clone", "ollama", "signin-proxy", "tinycode"]);
}

fn mounts(ctr: &Value) -> Vec<String> {
    ctr["volumeMounts"].as_array().into_iter().flatten().map(|m| m["name"].as_str().unwrap().to_string()).collect()
}

fn args(ctr: &Value) -> Vec<String> {
    ctr["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap().to_string()).collect()
}

/// Password mode: the front is the gate alone, on the public port, asking
/// for the password; the agent's Deployment is tinycode alone, reachable
/// from the front only.
#[test]
fn password_mode_fronts_tinycode_with_the_gate_alone() {
    let (v, docs) = render_mode("password");
    let deploy = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(deploy["spec"]["template"]["spec"]["containers"].as_array().unwrap().len(), 1);
    let tinycode = container(deploy, "tinycode");
    assert_eq!(env_of(tinycode, "TINYCODE_ACTIVITY_PORT").unwrap()["value"], "4098", "the gate serves 4097");
    let front = find(&docs, "Deployment", "dev-tinycode-front");
    let pod = &front["spec"]["template"]["spec"];
    let names: Vec<&str> = pod["containers"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["gate"]);
    let gate = container(front, "gate");
    assert_eq!(gate["ports"][0], json!({"name": "front", "containerPort": 4180, "protocol": "TCP"}));
    assert_eq!(gate["readinessProbe"]["httpGet"], json!({"path": "/tinycode-gate/healthz", "port": "front"}));
    assert!(args(gate).contains(&"--mode=password".to_string()));
    assert!(args(gate).contains(&format!("--password-secret={}", v.auth.password_secret)));
    assert_eq!(gate["lifecycle"]["preStop"]["sleep"]["seconds"], 5);
    // The gate's volume: the start credential of the front's Secret and the
    // password (no CA, no relay credential).
    let sources = pod["volumes"][0]["projected"]["sources"].as_array().unwrap();
    assert_eq!(sources.len(), 2, "{sources:?}");
    assert_eq!(
        sources[0]["secret"],
        json!({"name": "dev-tinycode-signin",
        "items": [{"key": "start-credential", "path": "start-credential"}]})
    );
    assert_eq!(sources[1]["secret"]["name"], v.auth.password_secret.as_str());
    assert!(
        args(gate).contains(&"--start-credential-file=/var/run/secrets/tinycode/gate/start-credential".to_string())
    );
    assert!(
        args(gate).contains(
            &"--start-url=http://tinycode-operator-oidc-relay.tinycode-operator-system.svc:8484/start/team/dev"
                .to_string()
        ),
        "{:?}",
        args(gate)
    );
    assert_eq!(pod["volumes"].as_array().unwrap().len(), 1);
    let service = find(&docs, "Service", "dev-tinycode");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "front");
    assert_eq!(service["spec"]["selector"]["app.kubernetes.io/component"], "front");
    let server_policy = find(&docs, "NetworkPolicy", "dev-tinycode");
    assert_eq!(
        server_policy["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "front"
    );
    let front_policy = find(&docs, "NetworkPolicy", "dev-tinycode-front");
    assert_eq!(front_policy["spec"]["ingress"][0]["ports"][0]["port"], 4180);
    assert!(!kinds(&docs).iter().any(|k| k.contains("signin") || k.contains("access-review")), "{:?}", kinds(&docs));
}

/// The cluster-admin turned fronts off: a password instance's URL reaches
/// tinycode itself (and its own activity report), and a stopped sign-in
/// instance's front goes to zero with it.
#[test]
fn fronts_off_expose_tinycode_itself_in_password_mode() {
    let settings = Settings { signin: no_fronts(), ..Settings::default() };
    let docs = render_default_spec(&settings);
    assert!(!kinds(&docs).iter().any(|k| k.contains("front") || k.contains("agent")), "{:?}", kinds(&docs));
    let deploy = find(&docs, "Deployment", "dev-tinycode");
    assert_eq!(env_of(container(deploy, "tinycode"), "TINYCODE_ACTIVITY_PORT").unwrap()["value"], "4097");
    assert_eq!(find(&docs, "Service", "dev-tinycode")["spec"]["ports"][0]["targetPort"], "http");
    assert_eq!(find(&docs, "NetworkPolicy", "dev-tinycode")["spec"]["ingress"][0]["ports"][0]["port"], 4096);

    let (mut settings, approved) = signin_settings();
    settings.signin.front = false;
    let spec: TinycodeInstanceSpec =
        serde_json::from_value(json!({"auth": {"mode": "oidc"}, "stopped": true})).unwrap();
    let instance = InstanceRef { name: "dev", namespace: "team", uid: "u" };
    let (_, docs) = render_values(values::build(&instance, &spec, &settings, &approved, None));
    assert_eq!(find(&docs, "Deployment", "dev-tinycode-front")["spec"]["replicas"], 0);
}

#[test]
fn oidc_mode_fronts_tinycode_with_the_proxy_and_the_gate() {
    let (v, docs) = render_mode("oidc");
    // The agent's Deployment holds tinycode alone; the sign-in proxy and the
    // gate are the front's, which stays up (one replica) while it is stopped.
    let deploy = find(&docs, "Deployment", "dev-tinycode");
    let names: Vec<&Value> = deploy["spec"]["template"]["spec"]["containers"].as_array().unwrap().iter().collect();
    assert_eq!(names.iter().map(|c| c["name"].as_str().unwrap()).collect::<Vec<_>>(), vec!["tinycode"]);
    let front = find(&docs, "Deployment", "dev-tinycode-front");
    assert_eq!(front["spec"]["replicas"], 1);
    assert_eq!(
        front["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"], 0,
        "the old front serves until the new one is Ready"
    );
    let pod = &front["spec"]["template"]["spec"];
    assert_eq!(front["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/component"], "front");
    // Only the front's port (the gate's, before the proxy) is reachable from
    // outside: the Service (so the Route or Ingress) selects the front and
    // names that port.
    let service = find(&docs, "Service", "dev-tinycode");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "front");
    assert_eq!(service["spec"]["selector"]["app.kubernetes.io/component"], "front");
    let ports_of = |policy: &Value| -> Vec<Value> {
        policy["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|r| r["ports"].as_array().unwrap().clone())
            .map(|p| p["port"].clone())
            .collect()
    };
    // The front: its public port, the activity report for the operator alone,
    // the gate's counters for the monitoring namespaces alone.
    let front_policy = find(&docs, "NetworkPolicy", "dev-tinycode-front");
    assert_eq!(front_policy["spec"]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "front");
    assert_eq!(ports_of(front_policy), vec![json!(4180), json!(4097), json!(4101)]);
    // The agent: tinycode and its activity report, for the front's pods only.
    let policy = find(&docs, "NetworkPolicy", "dev-tinycode");
    assert_eq!(ports_of(policy), vec![json!(4096), json!(4098)]);
    let from = &policy["spec"]["ingress"][0]["from"];
    assert_eq!(from.as_array().unwrap().len(), 1, "{from}");
    assert_eq!(from[0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "front");
    assert!(from[0].get("namespaceSelector").is_none(), "only this namespace's front: {from}");
    let agent = find(&docs, "Service", "dev-tinycode-agent");
    assert_eq!(agent["spec"]["selector"]["app.kubernetes.io/component"], "server");
    let agent_ports: Vec<_> =
        agent["spec"]["ports"].as_array().unwrap().iter().map(|p| p["targetPort"].clone()).collect();
    assert_eq!(agent_ports, vec![json!(4096), json!(4098)]);
    // The public port is the gate's front; the proxy listens on loopback
    // behind it, and its probes reach it through the front as the router does.
    let proxy = container(front, "signin-proxy");
    assert_eq!(proxy["image"], "quay.io/oauth2-proxy/oauth2-proxy:v7.15.6");
    assert!(proxy.get("ports").is_none(), "{proxy}");
    assert!(args(proxy).contains(&"--http-address=127.0.0.1:4182".to_string()));
    assert_eq!(proxy["readinessProbe"]["httpGet"], json!({"path": "/ping", "port": 4180}));
    assert_eq!(proxy["livenessProbe"]["httpGet"], json!({"path": "/ping", "port": 4180}));
    assert_eq!(args(proxy), v.auth.proxy.args);
    assert!(
        args(proxy).contains(
            &"--redeem-url=http://tinycode-operator-oidc-relay.tinycode-operator-system.svc:8484/oidc/token/team/dev"
                .to_string()
        )
    );
    let gate = container(front, "gate");
    assert_eq!(args(gate)[0], "gate");
    assert!(args(gate).contains(&"--mode=oidc".to_string()));
    assert!(args(gate).contains(&"--upstream=http://dev-tinycode-agent.team.svc:4096".to_string()));
    assert!(args(gate).contains(&"--agent=runs".to_string()));
    // The gate serves the activity report (the requests it lets through,
    // joined with the image's own report, moved to 4098).
    assert!(args(gate).contains(&"--activity-listen=0.0.0.0:4097".to_string()));
    assert!(args(gate).contains(&"--activity-report=http://dev-tinycode-agent.team.svc:4098/activity".to_string()));
    assert_eq!(
        gate["ports"],
        json!([{"name": "front", "containerPort": 4180, "protocol": "TCP"},
               {"name": "activity", "containerPort": 4097, "protocol": "TCP"},
               {"name": "gate-metrics", "containerPort": 4101, "protocol": "TCP"}])
    );
    assert!(args(gate).contains(&"--front-listen=0.0.0.0:4180".to_string()));
    assert!(args(gate).contains(&"--signin-upstream=http://127.0.0.1:4182".to_string()));
    assert_eq!(gate["readinessProbe"]["httpGet"], json!({"path": "/tinycode-gate/healthz", "port": "front"}));
    let tc = container(deploy, "tinycode");
    assert!(tc["env"].as_array().unwrap().contains(&json!({"name": "TINYCODE_ACTIVITY_PORT", "value": "4098"})));
    assert!(!tc["ports"].as_array().unwrap().iter().any(|p| p["name"] == "activity"));
    // Volumes only where they belong: the relay credential, CA and password
    // in the gate, the cookie secret and relay credential in the proxy, none
    // of them in tinycode's pod.
    assert_eq!(mounts(gate), vec!["gate"]);
    assert_eq!(mounts(proxy), vec!["signin", "signin-pages"]);
    let agent_volumes: Vec<&str> = deploy["spec"]["template"]["spec"]["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert!(!agent_volumes.iter().any(|m| *m == "gate" || *m == "signin"), "{agent_volumes:?}");
    assert_eq!(pod["automountServiceAccountToken"], false);
    let volume = |name: &str| pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == name).cloned().unwrap();
    let sources = volume("gate")["projected"]["sources"].as_array().unwrap().clone();
    assert!(sources.iter().any(|s| s["secret"]["name"] == "dev-tinycode-password"));
    assert!(sources.iter().any(|s| s["secret"]["name"] == "dev-tinycode-signin"
        && s["secret"]["items"] == json!([{"key": "relay-credential", "path": "relay-credential"}])));
    assert_eq!(volume("signin")["secret"]["secretName"], "dev-tinycode-signin");
    // The gate asks the operator's relay about this instance: no API token,
    // and no right to review anyone's access anywhere.
    assert!(!sources.iter().any(|s| s.get("serviceAccountToken").is_some()));
    assert!(!kinds(&docs).iter().any(|k| k.starts_with("ClusterRoleBinding")), "{:?}", kinds(&docs));
    assert!(
        args(gate).contains(
            &"--review-url=http://tinycode-operator-oidc-relay.tinycode-operator-system.svc:8484/oidc/review/team/dev"
                .to_string()
        )
    );
    assert!(
        args(gate).contains(&"--relay-credential-file=/var/run/secrets/tinycode/gate/relay-credential".to_string())
    );
    // An idle-stopped instance is started through the relay, as itself.
    assert!(args(gate).contains(
        &"--start-url=http://tinycode-operator-oidc-relay.tinycode-operator-system.svc:8484/start/team/dev".to_string()
    ));
    assert!(sources.iter().any(|s| s["secret"]["items"][0]["key"] == "start-credential"), "{sources:?}");
}

/// The sign-in proxy's error page names the instance and uses only what
/// both proxies fill in (oauth2-proxy's and OpenShift's oauth-proxy's error
/// templates share Title and Message).
#[test]
fn a_failed_sign_in_gets_the_instances_own_page() {
    for mode in ["oidc", "openshift"] {
        let (v, docs) = render_mode(mode);
        let pages = find(&docs, "ConfigMap", "dev-tinycode-signin-pages");
        let page = pages["data"]["error.html"].as_str().unwrap();
        assert!(page.contains("<h1 id=\"instance\">dev</h1>"), "{page}");
        assert!(page.contains("namespace team"), "{page}");
        assert!(!page.contains('@'), "every placeholder filled: {page}");
        let actions: std::collections::BTreeSet<&str> =
            page.split("{{").skip(1).map(|a| a.split("}}").next().unwrap().trim()).collect();
        assert_eq!(actions, [".Message", ".Title"].into(), "{mode}");
        // The proxy's words, where the gate's front finds them for clients
        // that are not browsers.
        // (src/gate/tests.rs reads them from this file as the proxy fills it in).
        assert!(page.contains("<meta name=\"tinycode-error\" content=\"{{.Title}}: {{.Message}}\">"), "{page}");
        assert!(v.auth.proxy.args.contains(&"--custom-templates-dir=/etc/tinycode/signin-pages".to_string()));
    }
    let (_, docs) = render_mode("password");
    assert!(!kinds(&docs).iter().any(|k| k.contains("signin-pages")));
}

/// Stopped (by spec.stopped or for idleness), tinycode runs no replica and
/// the front stays up, its gate told why, so the URL can say it.
#[test]
fn a_stopped_sign_in_instance_keeps_its_front() {
    let (_, docs) = render_mode_with("oidc", json!({"stopped": true}));
    assert_eq!(find(&docs, "Deployment", "dev-tinycode")["spec"]["replicas"], 0);
    let front = find(&docs, "Deployment", "dev-tinycode-front");
    assert_eq!(front["spec"]["replicas"], 1);
    assert!(args(container(front, "gate")).contains(&"--agent=stopped".to_string()));
}

#[test]
fn openshift_mode_uses_the_service_account_as_oauth_client() {
    let (v, docs) = render_mode("openshift");
    let deploy = find(&docs, "Deployment", "dev-tinycode-front");
    assert_eq!(deploy["spec"]["template"]["spec"]["serviceAccountName"], "dev-tinycode");
    let proxy = container(deploy, "signin-proxy");
    assert_eq!(proxy["image"], "quay.io/openshift/origin-oauth-proxy:4.16");
    assert_eq!(proxy["readinessProbe"]["httpGet"]["path"], "/oauth/healthz");
    assert_eq!(mounts(proxy), vec!["signin", "signin-pages", "signin-client"]);
    let gate = container(deploy, "gate");
    assert!(args(gate).contains(&"--mode=openshift".to_string()));
    // The gate asks with the user's token: no ServiceAccount token of its own.
    let pod = &deploy["spec"]["template"]["spec"];
    let gate_volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "gate").unwrap();
    assert!(
        !gate_volume["projected"]["sources"].as_array().unwrap().iter().any(|s| s.get("serviceAccountToken").is_some())
    );
    assert!(!kinds(&docs).iter().any(|k| k.contains("access-review")));
    let sa = find(&docs, "ServiceAccount", "dev-tinycode");
    let reference: Value = serde_json::from_str(
        sa["metadata"]["annotations"]["serviceaccounts.openshift.io/oauth-redirectreference.primary"].as_str().unwrap(),
    )
    .unwrap();
    assert_eq!(reference["reference"], json!({"kind": "Route", "name": naming::route("dev")}));
    assert_eq!(args(proxy), v.auth.proxy.args);
}

/// Every flag the OpenShift mode gives oauth-proxy is one that proxy defines
/// (tools/tests/data/openshift-oauth-proxy-flags.txt, read from its source).
#[test]
fn openshift_proxy_arguments_are_flags_oauth_proxy_defines() {
    let known: std::collections::BTreeSet<String> =
        std::fs::read_to_string(root().join("tools/tests/data/openshift-oauth-proxy-flags.txt"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("--"))
            .map(str::to_string)
            .collect();
    assert!(known.len() > 40, "the flag list was read");
    let (v, _) = render_mode("openshift");
    for arg in &v.auth.proxy.args {
        let flag = arg.split('=').next().unwrap();
        assert!(known.contains(flag), "{flag} is not a flag of OpenShift's oauth-proxy");
    }
    assert!(!known.contains("--no-such-flag"));
}

/// The copy of the chart the operator installs (`helm::installed_copy`, without
/// the schema and `ci/`, its templates' comments emptied) renders exactly what
/// the chart renders, for the
/// values of every scenario in `ci/`: leaving those files out of the release
/// records changes no object. Every object is of an API group the templates
/// name, the groups the operator's `/apis` shows helm.
#[test]
fn the_installed_copy_renders_what_the_chart_renders() {
    let chart = root().join("helm-charts/tinycode");
    let dir = tempfile::tempdir().unwrap();
    let copy = tinycode_operator::helm::installed_copy(&chart, &dir.path().join("chart")).unwrap();
    assert!(copy.join("Chart.yaml").is_file() && copy.join("templates/deployment.yaml").is_file());
    assert!(!copy.join("values.schema.json").exists() && !copy.join("ci").exists());
    // The templates' comments are emptied: what the records keep is smaller.
    let size = |dir: &std::path::Path| -> u64 {
        std::fs::read_dir(dir.join("templates")).unwrap().map(|e| e.unwrap().metadata().unwrap().len()).sum()
    };
    assert!(size(&copy) * 10 < size(&chart) * 9, "templates {} -> {} bytes", size(&chart), size(&copy));
    let helpers = std::fs::read_to_string(copy.join("templates/_helpers.tpl")).unwrap();
    assert_eq!(tinycode_operator::helm::without_comments(&helpers), helpers, "no comment text is left");
    let template = |chart: &std::path::Path, values: &std::path::Path| {
        let out = Command::new(helm())
            .args(["template", "r", chart.to_str().unwrap(), "--namespace", "team", "--skip-schema-validation", "-f"])
            .arg(values)
            .env("HELM_CACHE_HOME", dir.path().join("c"))
            .env("HELM_CONFIG_HOME", dir.path().join("f"))
            .env("HELM_DATA_HOME", dir.path().join("d"))
            .output()
            .expect("run helm");
        assert!(out.status.success(), "helm template: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    // What helm is told of the cluster's API groups (the operator's /apis).
    let groups = tinycode_operator::helm::api_proxy::chart_api_groups(&copy).unwrap();
    assert!(groups.contains("apps") && !groups.contains("batch"), "{groups:?}");
    let mut scenarios = 0;
    for entry in std::fs::read_dir(chart.join("ci")).unwrap() {
        let values = entry.unwrap().path();
        let rendered = template(&chart, &values);
        assert!(rendered.contains("kind: Deployment"), "{}", values.display());
        assert_eq!(rendered, template(&copy, &values), "{}", values.display());
        for doc in serde_saphyr::from_multiple::<Value>(&rendered).expect("YAML") {
            let Some((group, _)) = doc["apiVersion"].as_str().and_then(|v| v.split_once('/')) else { continue };
            assert!(
                groups.contains(group),
                "{}: a {} of API group {group}, which the /apis helm is shown leaves out (helm::api_proxy::chart_api_groups)",
                values.display(),
                doc["kind"]
            );
        }
        scenarios += 1;
    }
    assert!(scenarios >= 5, "the scenarios of ci/: {scenarios}");
}

/// A class that limits egress: the egress proxy and its allow-list (read
/// back by the proxy's own parser), the agent's pod left with DNS, the proxy
/// and its Ollama, and every program of the pod pointed at the proxy.
#[test]
fn a_class_that_limits_egress_leaves_the_agent_dns_and_its_proxy() {
    use tinycode_operator::api::EgressPolicy;
    let policy: EgressPolicy = serde_json::from_value(json!({
        "hosts": [{"host": "git.example.test"}, {"host": "*.pypi.org", "ports": [443, 80]}],
        "cidrs": [{"cidr": "10.96.0.1/32", "ports": [443]}]
    }))
    .unwrap();
    let approved = Approved {
        class: values::FromClass { name: Some("locked".into()), egress: Some(policy), ..Default::default() },
        ..Approved::default()
    };
    let spec = json!({"ollama": {"enabled": true}, "git": {"url": "https://git.example.test/team/repo.git"},
                      "vllm": [{"name": "hosted", "url": "https://models.example.test/v1",
                                "apiKeySecret": {"name": "k", "key": "hosted"}, "models": {"coder": {}}}]});
    let (v, docs) = render_approved(spec.clone(), &approved);
    let name = "dev-tinycode-egress";
    assert_eq!(v.names.egress, name);

    // The allow-list, as the proxy reads it.
    let cm = find(&docs, "ConfigMap", name);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("policy.json");
    std::fs::write(&file, cm["data"]["policy.json"].as_str().unwrap()).unwrap();
    let p = tinycode_operator::egress::load_policy(&file).expect("the proxy reads the chart's list");
    assert!(p.allows_name("git.example.test", 443) && !p.allows_name("git.example.test", 80));
    assert!(p.allows_name("files.pypi.org", 80) && !p.allows_name("pypi.org", 443));
    assert!(p.allows_address("10.96.0.1".parse().unwrap(), 443));

    // The proxy: the operator's image, its own pod, the list mounted, labelled for metrics.
    let d = find(&docs, "Deployment", name);
    let proxy = container(d, "egress-proxy");
    assert_eq!(proxy["args"][0], "egress-proxy");
    assert!(proxy["args"].as_array().unwrap().iter().any(|a| a == "--class=locked"));
    assert_eq!(d["spec"]["template"]["spec"]["volumes"][0]["configMap"]["name"], name);
    assert_eq!(d["spec"]["replicas"], 1);
    assert_eq!(find(&docs, "Service", name)["spec"]["ports"][0]["port"], 3128);

    // The agent's pod: DNS, the proxy, its Ollama; nothing else.
    let np = find(&docs, "NetworkPolicy", "dev-tinycode");
    let egress = np["spec"]["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 3, "{egress:#?}");
    let dns_ports: Vec<i64> =
        egress[0]["ports"].as_array().unwrap().iter().map(|p| p["port"].as_i64().unwrap()).collect();
    assert!(dns_ports.iter().all(|p| *p == 53 || *p == 5353), "{dns_ports:?}");
    assert!(egress[0]["to"].as_array().unwrap().iter().all(|t| t["ipBlock"].is_null()), "DNS only to DNS pods");
    assert_eq!(egress[1]["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"], "egress");
    assert_eq!(egress[1]["ports"], json!([{"protocol": "TCP", "port": 3128}]));
    assert_eq!(egress[2]["ports"], json!([{"protocol": "TCP", "port": 11434}]));
    // The proxy's own pod: reached by the agent's pods alone, out to anything but metadata.
    let pnp = find(&docs, "NetworkPolicy", name);
    assert_eq!(
        pnp["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "server"
    );
    assert_eq!(pnp["spec"]["egress"], np_default_egress());

    // Every program of the agent's pod goes through the proxy: the agent and
    // the git clone by their environment, the model-key proxy (which heeds no
    // environment) by its flag.
    let server = find(&docs, "Deployment", "dev-tinycode");
    let url = format!("http://{name}:3128");
    let keys = container(server, "model-keys");
    assert!(keys["args"].as_array().unwrap().iter().any(|a| *a == json!(format!("--egress-proxy={url}"))), "{keys}");
    let init = &server["spec"]["template"]["spec"]["initContainers"][0];
    for ctr in [container(server, "tinycode"), init] {
        for var in ["HTTPS_PROXY", "HTTP_PROXY", "https_proxy", "http_proxy"] {
            assert_eq!(env_of(ctr, var).map(|e| &e["value"]), Some(&json!(url)), "{} {var}", ctr["name"]);
        }
        assert_eq!(env_of(ctr, "NO_PROXY").map(|e| &e["value"]), Some(&json!("localhost,127.0.0.1,::1,dev-ollama")));
    }
    // Ollama, which the agent reaches and which pulls from (or pushes to)
    // any registry it is told, is held to DNS and the proxy too.
    let ollama = find(&docs, "Deployment", "dev-ollama");
    assert_eq!(env_of(container(ollama, "ollama"), "HTTPS_PROXY").map(|e| &e["value"]), Some(&json!(url)));
    let onp = find(&docs, "NetworkPolicy", "dev-ollama");
    assert_eq!(onp["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
    assert_eq!(onp["spec"]["egress"].as_array().unwrap().len(), 2, "DNS and the proxy");
    assert_eq!(onp["spec"]["egress"][1], egress[1], "the same rule to the proxy");
    assert_eq!(
        pnp["spec"]["ingress"][0]["from"][1]["podSelector"]["matchLabels"]["app.kubernetes.io/component"],
        "ollama"
    );
    // DNS: the DNS pods of kube-system and openshift-dns, nothing else by default.
    let dns = &egress[0]["to"];
    assert_eq!(dns.as_array().unwrap().len(), 2, "{dns}");
    assert_eq!(dns[0]["podSelector"]["matchLabels"]["k8s-app"], "kube-dns");
    assert_eq!(dns[1]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"], "openshift-dns");

    // Stopped: the proxy too. Without the class's egress: nothing of it.
    let mut stopped = spec.clone();
    stopped["stopped"] = json!(true);
    let (_, docs) = render_approved(stopped, &approved);
    assert_eq!(find(&docs, "Deployment", name)["spec"]["replicas"], 0);
    let (_, open) = render(spec);
    assert!(kinds(&open).iter().all(|k| !k.ends_with("egress")), "{:?}", kinds(&open));
    assert_eq!(find(&open, "NetworkPolicy", "dev-tinycode")["spec"]["egress"], np_default_egress());
    assert!(env_of(container(find(&open, "Deployment", "dev-tinycode"), "tinycode"), "HTTPS_PROXY").is_none());
}

/// The NetworkPolicy egress of an instance pod when its class says nothing.
fn np_default_egress() -> Value {
    let docs = render_default_spec(&Settings::default());
    find(&docs, "NetworkPolicy", "dev-tinycode")["spec"]["egress"].clone()
}

/// With fronts on, the egress proxy names its refusals through the relay
/// with the start credential alone of the front's Secret.
#[test]
fn the_egress_proxy_reports_refusals_with_the_start_credential_alone() {
    use tinycode_operator::api::EgressPolicy;
    let policy: EgressPolicy = serde_json::from_value(json!({"hosts": [{"host": "git.example.test"}]})).unwrap();
    let approved = Approved {
        class: values::FromClass { name: Some("locked".into()), egress: Some(policy), ..Default::default() },
        ..Approved::default()
    };
    let (v, docs) = render_approved(json!({}), &approved);
    assert!(v.egress.reports, "fronts are on by default");
    let d = find(&docs, "Deployment", "dev-tinycode-egress");
    let args = container(d, "egress-proxy")["args"].as_array().unwrap().clone();
    assert!(args.iter().any(|a| a.as_str().unwrap().ends_with("/egress-refused/team/dev")), "{args:?}");
    let relay =
        d["spec"]["template"]["spec"]["volumes"].as_array().unwrap().iter().find(|v| v["name"] == "relay").unwrap();
    assert_eq!(relay["secret"]["secretName"], v.names.signin_secret);
    assert_eq!(relay["secret"]["items"], json!([{"key": "start-credential", "path": "start-credential"}]));
}

/// Sign-in fronts count their audit decisions on a port of the gate's that
/// only the monitoring namespaces reach; password fronts have none.
#[test]
fn sign_in_gates_serve_their_counters_to_monitoring_alone() {
    for mode in ["oidc", "openshift"] {
        let (_, docs) = render_mode(mode);
        let front = find(&docs, "Deployment", "dev-tinycode-front");
        let gate = container(front, "gate");
        assert!(gate["args"].as_array().unwrap().iter().any(|a| a == "--metrics-listen=0.0.0.0:4101"), "{mode}");
        assert!(gate["ports"].as_array().unwrap().iter().any(|p| p["containerPort"] == 4101), "{mode}");
        let np = find(&docs, "NetworkPolicy", "dev-tinycode-front");
        let rule = np["spec"]["ingress"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["ports"][0]["port"] == 4101)
            .expect("a rule for 4101");
        let from: Vec<&Value> = rule["from"].as_array().unwrap().iter().collect();
        assert!(from.iter().all(|f| f["namespaceSelector"].to_string().contains("monitoring")), "{mode}: {from:?}");
    }
    let (_, docs) = render_mode("password");
    let gate = container(find(&docs, "Deployment", "dev-tinycode-front"), "gate");
    assert!(!gate["args"].as_array().unwrap().iter().any(|a| a.as_str().unwrap().starts_with("--metrics-listen")));
}

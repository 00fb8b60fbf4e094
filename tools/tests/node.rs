//! The product on a real node (hack/local-cluster.sh --node: kubelet,
//! containerd and runc, kube-scheduler, kube-controller-manager, kube-proxy,
//! CoreDNS, a local-path provisioner, kube-router's NetworkPolicy and a
//! registry, in a network namespace of their own). Nothing here writes a
//! Deployment's status: every pod is scheduled, pulled, started and probed by
//! the real components, and each assertion reads what they did.
//!
//! The operator runs as a pod from the image `make image` built, pushed to
//! the node's registry by `make push` and installed by hack/install.sh; the
//! tinycode image is the stand-in of tools/standins (CONTAINER.md's contract),
//! served under the samples' own image name. Scenarios run in order on one
//! node (libtest-mimic, one at a time).

#[path = "support/local_cluster.rs"]
mod local_cluster;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{ApiResource, DeleteParams, DynamicObject, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use libtest_mimic::{Arguments, Failed, Trial};
use local_cluster::{local_cluster, value_of};
use serde_json::{Value, json};
use tinycode_operator::api::{TinycodeClass, TinycodeInstance};

const OPERATOR_NS: &str = "tinycode-operator-system";
const VERSION: &str = env!("CARGO_PKG_VERSION");
const PASSWORD: &str = "node-test password";
const WAIT: Duration = Duration::from_secs(180);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

struct Node {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
    registry: String,
    standin_image: String,
    metadata_url: String,
    private_image: String,
    private_auth: PathBuf,
    git_url: String,
    oidc_issuer: String,
    oidc_client_id: String,
    oidc_secret_file: PathBuf,
    oidc_queue_url: String,
    /// The ingress controller, published on this machine: its port, the CA
    /// that signed its certificate, that certificate's files, its namespace.
    ingress_port: u16,
    ingress_ca: PathBuf,
    ingress_cert: PathBuf,
    ingress_key: PathBuf,
    ingress_namespace: String,
    /// The node's network namespace (a browser that must reach the OIDC
    /// provider runs there).
    netns: PathBuf,
}

static NODE: OnceLock<Node> = OnceLock::new();

fn node() -> &'static Node {
    NODE.get_or_init(|| {
        let tools = local_cluster("tools --node");
        let started = local_cluster("start --node");
        Node {
            kubeconfig: value_of(&started, "export KUBECONFIG="),
            kubectl: value_of(&tools, "TINYCODE_KUBECTL="),
            helm: value_of(&tools, "TINYCODE_HELM="),
            registry: value_of(&started, "TINYCODE_NODE_REGISTRY=").display().to_string(),
            standin_image: value_of(&started, "TINYCODE_STANDIN_IMAGE=").display().to_string(),
            metadata_url: value_of(&started, "TINYCODE_METADATA_URL=").display().to_string(),
            private_image: value_of(&started, "TINYCODE_PRIVATE_IMAGE=").display().to_string(),
            private_auth: value_of(&started, "TINYCODE_PRIVATE_REGISTRY_AUTH="),
            git_url: value_of(&started, "TINYCODE_GIT_URL=").display().to_string(),
            oidc_issuer: value_of(&started, "TINYCODE_OIDC_ISSUER_URL=").display().to_string(),
            oidc_client_id: value_of(&started, "TINYCODE_OIDC_CLIENT_ID=").display().to_string(),
            oidc_secret_file: value_of(&started, "TINYCODE_OIDC_CLIENT_SECRET_FILE="),
            oidc_queue_url: value_of(&started, "TINYCODE_OIDC_QUEUE_URL=").display().to_string(),
            ingress_port: value_of(&started, "TINYCODE_INGRESS_URL=")
                .display()
                .to_string()
                .trim_start_matches("https://localhost:")
                .trim_end_matches('/')
                .parse()
                .expect("TINYCODE_INGRESS_URL=https://localhost:PORT/"),
            ingress_ca: value_of(&started, "TINYCODE_INGRESS_CA="),
            ingress_cert: value_of(&started, "TINYCODE_INGRESS_TLS_CERT="),
            ingress_key: value_of(&started, "TINYCODE_INGRESS_TLS_KEY="),
            ingress_namespace: value_of(&started, "TINYCODE_INGRESS_NAMESPACE=").display().to_string(),
            netns: value_of(&started, "TINYCODE_NODE_NETNS="),
        }
    })
}

impl Node {
    /// The image `make image` built, tagged with its digest: a node that
    /// pulled an earlier build under the same tag would run that one
    /// (IfNotPresent).
    fn operator_image(&self) -> String {
        static DIGEST: OnceLock<String> = OnceLock::new();
        let digest = DIGEST.get_or_init(|| {
            let out = Command::new(root().join("hack/image.sh")).arg("digest").output().expect("hack/image.sh digest");
            assert!(out.status.success(), "hack/image.sh digest: {}", String::from_utf8_lossy(&out.stderr));
            String::from_utf8(out.stdout).unwrap().trim().trim_start_matches("sha256:")[..12].to_string()
        });
        format!("{}/tinycode-operator:{VERSION}-{digest}", self.registry)
    }

    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("read the admin kubeconfig");
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
        Client::try_from(config).expect("client")
    }

    fn script(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("hack").join(script))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECTL", &self.kubectl)
            .env("HELM", &self.helm)
            .env_remove("OPERATOR_IMAGE")
            .env_remove("INSTALL_WAIT")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let out = cmd.output().expect("run the script");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "hack/{script} {args:?} failed:\n{text}");
        text
    }

    fn kubectl(&self, args: &[&str]) -> Output {
        Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    /// `standin ARGS` in the tinycode container of `pod` (the stand-in image
    /// has no shell).
    fn standin(&self, ns: &str, pod: &str, args: &[&str]) -> Output {
        let mut all = vec!["exec", "-n", ns, pod, "-c", "tinycode", "--", "/usr/local/bin/standin"];
        all.extend_from_slice(args);
        self.kubectl(&all)
    }

    fn standin_ok(&self, ns: &str, pod: &str, args: &[&str]) -> String {
        let out = self.standin(ns, pod, args);
        assert!(out.status.success(), "standin {args:?} in {ns}/{pod}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }

    fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(out.status.success(), "kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap()
}

/// Polls `check` until it returns Some, or panics with `what` after `limit`.
async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out after {limit:?} waiting for {what}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn condition<'a>(conditions: &'a [Value], kind: &str) -> Option<&'a Value> {
    conditions.iter().find(|c| c["type"] == kind)
}

fn pod_ready_since(pod: &Pod) -> Option<Time> {
    let status = pod.status.as_ref()?;
    let ready = status.conditions.as_ref()?.iter().find(|c| c.type_ == "Ready" && c.status == "True")?;
    ready.last_transition_time.clone()
}

/// The operator's image in the node's registry, installed by hack/install.sh,
/// its pod Ready by its own probes.
async fn install_operator(node: &Node) {
    static INSTALLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if INSTALLED.load(std::sync::atomic::Ordering::SeqCst) {
        return; // by an earlier scenario of this run
    }
    let out = Command::new(root().join("hack/image.sh"))
        .args(["push", &node.operator_image()])
        .env("PUSH_TLS_VERIFY", "false")
        .output()
        .unwrap();
    assert!(out.status.success(), "make push to the node's registry: {}", String::from_utf8_lossy(&out.stderr));
    // install.sh waits for the rollout now that the cluster has a node.
    let text = node.script("install.sh", &["--timeout", "180s"], &[("OPERATOR_IMAGE", &node.operator_image())]);
    assert!(!text.contains("no nodes"), "install.sh found no node:\n{text}");
    INSTALLED.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn basic_instance(name: &str) -> Value {
    let text = std::fs::read_to_string(root().join("config/samples/tinycode_v1alpha1_basic.yaml")).unwrap();
    let mut v: Value = serde_saphyr::from_str(&text).unwrap();
    v["metadata"]["name"] = name.into();
    // Small enough for a node on a 2-core machine.
    v["spec"]["resources"] =
        json!({"requests": {"cpu": "50m", "memory": "64Mi"}, "limits": {"cpu": "500m", "memory": "256Mi"}});
    v["spec"]["storage"] = json!({"dataSize": "64Mi", "projectsSize": "64Mi"});
    v
}

async fn fresh_namespace(node: &Node, ns: &str) {
    let client = node.client().await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    if namespaces.get_opt(ns).await.unwrap().is_some() {
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
        wait_for(&format!("namespace {ns} deleted"), WAIT, || {
            let namespaces = namespaces.clone();
            async move { namespaces.get_opt(ns).await.unwrap().is_none().then_some(()) }
        })
        .await;
    }
    node.kubectl_ok(&["create", "namespace", ns]);
    let out = node.script("prepare-namespace.sh", &[ns, "--password-from-env"], &[("TINYCODE_PASSWORD", PASSWORD)]);
    assert!(!out.contains(PASSWORD), "prepare-namespace.sh printed the password");
}

async fn apply_instance(client: &Client, ns: &str, instance: &Value) {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
    let name = instance["metadata"]["name"].as_str().unwrap();
    let mut obj = instance.clone();
    obj["metadata"]["namespace"] = ns.into();
    api.patch(name, &PatchParams::apply("node-test").force(), &Patch::Apply(&obj)).await.expect("apply the instance");
}

/// Waits until the instance is Running with its current generation, and
/// returns its status.
async fn wait_running(client: &Client, ns: &str, name: &str) -> Value {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
    wait_for(&format!("{ns}/{name} Running"), WAIT, || {
        let api = api.clone();
        async move {
            let obj = api.get(name).await.ok()?;
            let status = obj.data.get("status")?.clone();
            let current = status["observedGeneration"].as_i64() == obj.metadata.generation;
            (status["phase"] == "Running" && current).then_some(status)
        }
    })
    .await
}

/// The instance's server pods (the chart's `server` component).
async fn server_pods(client: &Client, ns: &str, name: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp =
        ListParams::default().labels(&format!("app.kubernetes.io/instance={name},app.kubernetes.io/component=server"));
    pods.list(&lp).await.unwrap().items.into_iter().filter(|p| p.metadata.deletion_timestamp.is_none()).collect()
}

/// Waits until no manager pod is left (scaled to zero).
fn wait_manager_pods_gone(node: &Node) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let selector = "app.kubernetes.io/name=tinycode-operator";
        let left = node.kubectl_ok(&["get", "pods", "-n", OPERATOR_NS, "-l", selector, "-o", "name"]);
        if left.trim().is_empty() {
            return;
        }
        assert!(Instant::now() < deadline, "manager pods left after 120 s: {left}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The instance's sign-in front pods, once exactly one runs, Ready, with its
/// gate told `--agent=<agent>` (an earlier rendering's pods gone).
async fn wait_front(client: &Client, ns: &str, name: &str, agent: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let lp =
        ListParams::default().labels(&format!("app.kubernetes.io/instance={name},app.kubernetes.io/component=front"));
    let flag = format!("--agent={agent}");
    wait_for(&format!("{ns}/{name}'s front with {flag}"), WAIT, || {
        let (pods, lp, flag) = (pods.clone(), lp.clone(), flag.clone());
        async move {
            let all = pods.list(&lp).await.ok()?.items;
            let told = |p: &Pod| {
                let containers = p.spec.as_ref().map(|s| s.containers.clone()).unwrap_or_default();
                containers.iter().any(|c| c.name == "gate" && c.args.iter().flatten().any(|a| *a == flag))
            };
            (all.len() == 1 && told(&all[0]) && pod_ready_since(&all[0]).is_some()).then_some(all)
        }
    })
    .await
}

/// The instance's Service (the one with the `http` port 4096).
async fn ui_service(client: &Client, ns: &str, name: &str) -> String {
    let services: Api<Service> = Api::namespaced(client.clone(), ns);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={name}"));
    services
        .list(&lp)
        .await
        .unwrap()
        .items
        .into_iter()
        .find(|s| {
            s.spec.as_ref().and_then(|s| s.ports.as_ref()).is_some_and(|ports| ports.iter().any(|p| p.port == 4096))
        })
        .and_then(|s| s.metadata.name)
        .unwrap_or_else(|| panic!("no Service with port 4096 for {ns}/{name}"))
}

/// How long a client keeps trying: NetworkPolicy (kube-router) admits a new
/// pod's address a moment after it starts, so "reachable" waits for that, and
/// "unreachable" is said only after the same wait (not yet is not never).
const ALLOWED: Duration = Duration::from_secs(25);
const REFUSED: Duration = Duration::from_secs(12);

/// Runs the stand-in client (`standin get`) in a pod of `ns` that passes Pod
/// Security's restricted profile, trying for `retry_for` until an HTTP answer
/// comes; its output (`status N` and the body, or `unreachable ...`).
async fn get_from_pod(
    node: &Node,
    client: &Client,
    ns: &str,
    url: &str,
    password: Option<&str>,
    retry_for: Duration,
) -> String {
    let mut args = vec![
        "get".to_string(),
        "-timeout".into(),
        "3s".into(),
        "-retry-for".into(),
        format!("{}s", retry_for.as_secs()),
    ];
    if let Some(p) = password {
        args.extend(["-password".to_string(), p.to_string()]);
    }
    args.push(url.to_string());
    let (phase, logs) = client_pod(node, client, ns, &args).await;
    assert!(phase == "Succeeded" || logs.starts_with("unreachable"), "client pod {phase}: {logs}");
    logs
}

/// Runs `standin ARGS` in a pod of `ns` that passes Pod Security's restricted
/// profile, to its end: its phase and its output.
async fn client_pod(node: &Node, client: &Client, ns: &str, args: &[String]) -> (String, String) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let name = format!("client-{}", CLIENTS.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "node-test-client"}},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": false,
            "securityContext": {"runAsNonRoot": true, "runAsUser": 1001, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "client", "image": node.standin_image,
                "command": ["/usr/local/bin/standin"], "args": args,
                "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true},
                "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}
            }]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.expect("create the client pod");
    let phase = wait_for(&format!("client pod {ns}/{name} to finish"), WAIT, || {
        let pods = pods.clone();
        let name = name.clone();
        async move {
            let p = pods.get(&name).await.ok()?;
            let phase = p.status?.phase?;
            (phase == "Succeeded" || phase == "Failed").then_some(phase)
        }
    })
    .await;
    let logs = pods.logs(&name, &LogParams::default()).await.unwrap_or_default();
    let _ = pods.delete(&name, &DeleteParams::default().grace_period(0)).await;
    (phase, logs)
}

static CLIENTS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// GET `url` (an https URL with a host name, no port) from this machine as a
/// person's browser would: through the port the node publishes, trusting
/// only the cluster's CA, the name resolved to loopback (as *.localhost names
/// are). Retries for `retry_for` while the controller has no route yet (404)
/// or no endpoint (502, 503); returns the last status and body.
async fn get_through_ingress(node: &Node, url: &str, password: Option<&str>, retry_for: Duration) -> (u16, String) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let parsed = reqwest::Url::parse(url).expect("an instance URL");
    let host = parsed.host_str().expect("a host name").to_string();
    let ca = reqwest::Certificate::from_pem(&std::fs::read(&node.ingress_ca).unwrap()).unwrap();
    let http = reqwest::Client::builder()
        .tls_certs_only([ca])
        .resolve(&host, std::net::SocketAddr::from(([127, 0, 0, 1], node.ingress_port)))
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let query = parsed.query().map(|q| format!("?{q}")).unwrap_or_default();
    let target = format!("https://{host}:{}{}{query}", node.ingress_port, parsed.path());
    let deadline = Instant::now() + retry_for;
    loop {
        let mut req = http.get(&target);
        if let Some(p) = password {
            req = req.basic_auth("tinycode", Some(p));
        }
        let last = match req.send().await {
            Ok(resp) => {
                let status = resp.status().as_u16();
                (status, resp.text().await.unwrap_or_default())
            }
            Err(e) => (0, format!("{e:?}")),
        };
        if !matches!(last.0, 0 | 404 | 502 | 503) || Instant::now() > deadline {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

// ---------------------------------------------------------------------------
// scenarios
// ---------------------------------------------------------------------------

/// The operator as a pod: pulled from the node's registry, started by
/// containerd, Ready by its probes, leader by its Lease.
fn operator_runs_as_a_pod() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
        let pod = wait_for("the manager pod Ready", WAIT, || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find(|p| pod_ready_since(p).is_some())
            }
        })
        .await;
        let spec = pod.spec.clone().unwrap();
        assert_eq!(spec.containers[0].image.as_deref(), Some(node.operator_image().as_str()));
        assert!(spec.containers[0].readiness_probe.is_some(), "the manager has a readiness probe");
        let status = pod.status.unwrap();
        let cs = &status.container_statuses.unwrap()[0];
        assert!(cs.image_id.contains("sha256:"), "pulled by digest: {}", cs.image_id);
        let lease =
            node.kubectl_ok(&["get", "lease", "-n", OPERATOR_NS, "-o", "jsonpath={.items[*].spec.holderIdentity}"]);
        assert!(lease.contains(pod.metadata.name.as_deref().unwrap()), "the pod holds the leader Lease: {lease:?}");
    });
    Ok(())
}

/// The basic sample: PVCs provisioned, the pod started and Ready by the
/// kubelet's probes before status says Running; the UI answers through its
/// Service with the password and refuses without; the containers run as
/// 1001 with no capabilities and a read-only root.
fn basic_instance_runs() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-basic";
        fresh_namespace(node, ns).await;
        apply_instance(&client, ns, &basic_instance("my-tinycode")).await;
        let status = wait_running(&client, ns, "my-tinycode").await;

        let pods = server_pods(&client, ns, "my-tinycode").await;
        assert_eq!(pods.len(), 1, "one server pod");
        let pod = &pods[0];
        let ready_since = pod_ready_since(pod).expect("Running only with a Ready pod");
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let ready = condition(&conditions, "Ready").expect("a Ready condition");
        let running_since: Time = serde_json::from_value(ready["lastTransitionTime"].clone()).unwrap();
        assert!(
            running_since.0 >= ready_since.0,
            "status said Ready at {:?}, before the pod was Ready at {:?}",
            running_since.0,
            ready_since.0
        );
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        for pvc in pvcs.list(&ListParams::default()).await.unwrap() {
            assert_eq!(pvc.status.and_then(|s| s.phase).as_deref(), Some("Bound"), "PVC bound by the provisioner");
        }

        let svc = ui_service(&client, ns, "my-tinycode").await;
        let url = format!("http://{svc}.{ns}.svc.cluster.local:4096/");
        let with = get_from_pod(node, &client, ns, &url, Some(PASSWORD), ALLOWED).await;
        assert!(with.starts_with("status 200"), "with the password: {with}");
        assert!(with.contains("<title>tinycode stand-in</title>"), "{with}");
        let pod_name = pod.metadata.name.clone().unwrap();
        assert!(with.contains(&pod_name), "the page names the pod that answered: {with}");
        let without = get_from_pod(node, &client, ns, &url, None, ALLOWED).await;
        assert!(without.starts_with("status 401"), "without the password: {without}");

        // What the runtime granted the agent, read from the kernel inside it.
        let self_report = node.standin_ok(ns, &pod_name, &["self"]);
        let me: Value = serde_json::from_str(&self_report).unwrap();
        assert_eq!(me["uid"], 1001, "{me}");
        assert_eq!(me["capEff"], "0000000000000000", "no capabilities: {me}");
        assert_eq!(me["capPrm"], "0000000000000000", "{me}");
        assert_eq!(me["noNewPrivs"], "1", "{me}");
        assert_eq!(me["seccomp"], "2", "seccomp filter mode: {me}");
        assert_eq!(me["rootWritable"], false, "read-only root: {me}");
        assert_eq!(me["rootReadOnly"], true, "the root filesystem is mounted read-only: {me}");
        // What the agent may write outside its volumes: the pod's scratch.
        for path in
            ["/tmp/scratch-check", "/home/tinycode/.cache/scratch-check", "/home/tinycode/.local/state/scratch-check"]
        {
            node.standin_ok(ns, &pod_name, &["put-file", path, "x"]);
        }
    });
    Ok(())
}

/// Pod Security holds on the node: a tenant's privileged pod in a prepared
/// namespace is refused at admission.
fn tenant_privileged_pod_refused() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        let client = node.client().await;
        let ns = "node-basic";
        if Api::<Namespace>::all(client.clone()).get_opt(ns).await.unwrap().is_none() {
            fresh_namespace(node, ns).await;
        }
        let labels = Api::<Namespace>::all(client.clone()).get(ns).await.unwrap().metadata.labels.unwrap_or_default();
        let enforce = labels.get("pod-security.kubernetes.io/enforce").cloned();
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "wants-root"},
            "spec": {"containers": [{"name": "c", "image": node.standin_image, "args": ["pause"],
                "securityContext": {"privileged": true}}]}
        }))
        .unwrap();
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let err = pods.create(&PostParams::default(), &pod).await;
        let _ = pods.delete("wants-root", &DeleteParams::default().grace_period(0)).await;
        match err {
            Err(kube::Error::Api(e)) => {
                assert_eq!(e.code, 403, "{e:?}");
                assert!(e.message.contains("violates PodSecurity"), "{e:?}");
            }
            other => panic!("a privileged pod was admitted (enforce={enforce:?}): {other:?}"),
        }
    });
    Ok(())
}

/// Attack on the real node: in a namespace approved for read-only host
/// directories (and a Pod Security level that lets such pods run), tenant
/// alice creates a pod of her own mounting `/` writable, and one mounting an
/// allowed directory writable. The host-directory admission policy (installed
/// by install.sh, fed by the operator's --hostpath-allowed-prefixes) refuses
/// both; a read-only mount under the prefix is admitted and runs on the node.
fn tenant_host_directory_pods_refused() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        set_manager_env(node, &["TINYCODE_HOSTPATH_ALLOWED_PREFIXES=/srv"]);
        let ns = "node-hostdir";
        fresh_namespace(node, ns).await;
        node.kubectl_ok(&[
            "label",
            "namespace",
            ns,
            "tinycode.dev/allow-hostpath=true",
            "pod-security.kubernetes.io/enforce=privileged",
            "--overwrite",
        ]);
        node.kubectl_ok(&["create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", ns]);
        let kubeconfig = Kubeconfig::read_from(&node.kubeconfig).expect("read the admin kubeconfig");
        let mut config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
        config.auth_info.impersonate = Some("alice".into());
        let alice: Api<Pod> = Api::namespaced(Client::try_from(config).expect("client"), ns);
        let pod = |name: &str, path: &str, read_only: bool| -> Pod {
            serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                "spec": {"containers": [{"name": "c", "image": node.standin_image, "args": ["pause"],
                    "volumeMounts": [{"name": "host", "mountPath": "/host", "readOnly": read_only}]}],
                    "volumes": [{"name": "host", "hostPath": {"path": path}}]}
            }))
            .unwrap()
        };
        for (name, path, says) in [("root", "/", "under a host directory"), ("writes", "/srv", "readOnly: true")] {
            match alice.create(&PostParams::default(), &pod(name, path, false)).await {
                Err(kube::Error::Api(e)) => assert!(e.message.contains(says), "{name}: {e:?}"),
                other => panic!("alice's pod {name} ({path}, writable) was admitted: {other:?}"),
            }
        }
        // Read-only under the prefix: admitted once the restarted operator
        // wrote its prefix, and it runs.
        wait_for("a read-only pod under /srv admitted", WAIT, || {
            let alice = alice.clone();
            let fine = pod("fine", "/srv", true);
            async move { alice.create(&PostParams::default(), &fine).await.ok().map(drop) }
        })
        .await;
        wait_for("the read-only pod running", WAIT, || {
            let alice = alice.clone();
            async move {
                let p = alice.get("fine").await.ok()?;
                (p.status?.phase.as_deref() == Some("Running")).then_some(())
            }
        })
        .await;
        let _ = Api::<Namespace>::all(node.client().await).delete(ns, &DeleteParams::default()).await;
    });
    Ok(())
}

/// ClusterRole aggregation is the controller-manager's: a tenant bound to
/// `admin` may manage TinycodeInstances (tinycode-user-role), one bound to
/// `view` may read them only (tinycode-user-view-role).
fn tenant_roles_aggregate() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let ns = "node-roles";
        fresh_namespace(node, ns).await;
        node.kubectl_ok(&["create", "rolebinding", "alice-admin", "--clusterrole=admin", "--user=alice", "-n", ns]);
        node.kubectl_ok(&["create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob", "-n", ns]);
        let can = |user: &str, verb: &str| {
            let out = node.kubectl(&["auth", "can-i", verb, "tinycodeinstances.tinycode.dev", "-n", ns, "--as", user]);
            String::from_utf8_lossy(&out.stdout).trim() == "yes"
        };
        // Aggregation runs in the background: wait for it.
        wait_for("admin to aggregate tinycode-user-role", WAIT, || async { can("alice", "create").then_some(()) })
            .await;
        assert!(can("alice", "delete"), "admin may delete instances");
        wait_for("view to aggregate tinycode-user-view-role", WAIT, || async { can("bob", "list").then_some(()) })
            .await;
        assert!(!can("bob", "create"), "view may not create instances");
    });
    Ok(())
}

/// A file written through the agent survives stop and start, an operator
/// upgrade (another image, its pod replaced) and the instance deleted and
/// created again (the data volumes are kept by default).
fn data_survives_stop_start() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-basic";
        if server_pods(&client, ns, "my-tinycode").await.is_empty() {
            fresh_namespace(node, ns).await;
            apply_instance(&client, ns, &basic_instance("my-tinycode")).await;
        }
        wait_running(&client, ns, "my-tinycode").await;
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let pod_name = pod.metadata.name.clone().unwrap();
        let marker = format!("written at {:?}", std::time::SystemTime::now());
        // Through the agent's own API, inside its pod (the workspace PVC).
        let out = node.standin(ns, &pod_name, &["put-file", "/projects/keep.txt", &marker]);
        assert!(out.status.success(), "writing into the workspace: {}", String::from_utf8_lossy(&out.stderr));

        let mut stopped = basic_instance("my-tinycode");
        stopped["spec"]["stopped"] = true.into();
        apply_instance(&client, ns, &stopped).await;
        wait_for("the server pod gone", WAIT, || {
            let client = client.clone();
            async move { server_pods(&client, ns, "my-tinycode").await.is_empty().then_some(()) }
        })
        .await;
        apply_instance(&client, ns, &basic_instance("my-tinycode")).await;
        wait_running(&client, ns, "my-tinycode").await;
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let new_name = pod.metadata.name.clone().unwrap();
        assert_ne!(new_name, pod_name, "a new pod after the start");
        let read = node.standin_ok(ns, &new_name, &["cat", "/projects/keep.txt"]);
        assert_eq!(read, marker, "the workspace kept the file across stop and start");

        // An operator upgrade: the same build under a new tag, installed over
        // the running one.
        let next = format!("{}-next", node.operator_image());
        let out = Command::new(root().join("hack/image.sh"))
            .args(["push", &next])
            .env("PUSH_TLS_VERIFY", "false")
            .output()
            .unwrap();
        assert!(out.status.success(), "push {next}: {}", String::from_utf8_lossy(&out.stderr));
        node.script("install.sh", &["--timeout", "180s"], &[("OPERATOR_IMAGE", &next)]);
        let operator = node.kubectl_ok(&[
            "get",
            "pods",
            "-n",
            OPERATOR_NS,
            "-o",
            "jsonpath={range .items[*]}{.spec.containers[0].image} {.status.phase}{\"\\n\"}{end}",
        ]);
        assert!(operator.lines().any(|l| l == format!("{next} Running")), "the upgraded operator runs: {operator}");
        wait_running(&client, ns, "my-tinycode").await;
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let name = pod.metadata.name.clone().unwrap();
        let read = node.standin_ok(ns, &name, &["cat", "/projects/keep.txt"]);
        assert_eq!(read, marker, "the workspace kept the file across an operator upgrade");

        // Deleted and created again: the PVCs stay and are used again.
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
        api.delete("my-tinycode", &DeleteParams::default()).await.unwrap();
        wait_for("the instance gone", WAIT, || {
            let api = api.clone();
            async move { api.get_opt("my-tinycode").await.unwrap().is_none().then_some(()) }
        })
        .await;
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        assert!(!pvcs.list(&ListParams::default()).await.unwrap().items.is_empty(), "the data volumes were kept");
        apply_instance(&client, ns, &basic_instance("my-tinycode")).await;
        wait_running(&client, ns, "my-tinycode").await;
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let name = pod.metadata.name.clone().unwrap();
        let read = node.standin_ok(ns, &name, &["cat", "/projects/keep.txt"]);
        assert_eq!(read, marker, "the re-created instance found the file on its kept volume");
    });
    Ok(())
}

/// NetworkPolicy is enforced: a pod of another namespace does not reach the
/// instance's UI, while one in the instance's namespace does.
fn network_policy_enforced() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-basic";
        if server_pods(&client, ns, "my-tinycode").await.is_empty() {
            fresh_namespace(node, ns).await;
            apply_instance(&client, ns, &basic_instance("my-tinycode")).await;
        }
        wait_running(&client, ns, "my-tinycode").await;
        // The URL's Service leads to the front (its gate answers its own
        // health without a password).
        let svc = ui_service(&client, ns, "my-tinycode").await;
        let url = format!("http://{svc}.{ns}.svc.cluster.local:4096/tinycode-gate/healthz");
        let inside = get_from_pod(node, &client, ns, &url, None, ALLOWED).await;
        assert!(inside.starts_with("status 200"), "from the instance's namespace: {inside}");
        let other = "node-other";
        if Api::<Namespace>::all(client.clone()).get_opt(other).await.unwrap().is_none() {
            node.kubectl_ok(&["create", "namespace", other]);
        }
        let outside = get_from_pod(node, &client, other, &url, None, REFUSED).await;
        assert!(outside.starts_with("unreachable"), "from another namespace: {outside}");
        // tinycode itself is the front's alone: not even the instance's own
        // namespace reaches it past the front (by the pod's address).
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let ip = pod.status.and_then(|s| s.pod_ip).expect("the pod's address");
        let direct = format!("http://{ip}:4096/global/health");
        let bypass = get_from_pod(node, &client, ns, &direct, None, REFUSED).await;
        assert!(bypass.starts_with("unreachable"), "tinycode past the front: {bypass}");
        // The activity report is the operator's alone: the front's (4097) and
        // the image's own behind it (4098), not from another namespace.
        let fronts: Api<Pod> = Api::namespaced(client.clone(), ns);
        let lp =
            ListParams::default().labels("app.kubernetes.io/instance=my-tinycode,app.kubernetes.io/component=front");
        let front = fronts.list(&lp).await.unwrap().items.remove(0);
        let front_ip = front.status.and_then(|s| s.pod_ip).expect("the front's address");
        for activity in [format!("http://{front_ip}:4097/activity"), format!("http://{ip}:4098/activity")] {
            let outside = get_from_pod(node, &client, other, &activity, None, REFUSED).await;
            assert!(outside.starts_with("unreachable"), "{activity} from another namespace: {outside}");
        }

        // Egress: the metadata stand-in answers a pod that no policy holds,
        // and not the instance (its policy excludes link-local addresses).
        let metadata = &node.metadata_url;
        let control = get_from_pod(node, &client, other, metadata, None, ALLOWED).await;
        assert!(control.contains("metadata stand-in"), "the stand-in answers unconfined pods: {control}");
        let pod = server_pods(&client, ns, "my-tinycode").await.remove(0);
        let out = node.standin(
            ns,
            pod.metadata.name.as_deref().unwrap(),
            &["get", "-timeout", "2s", "-retry-for", "8s", metadata],
        );
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("unreachable"), "the instance reached the metadata address: {text}");
    });
    Ok(())
}

/// The operator's namespace admits what its NetworkPolicy says: the metrics
/// port from the monitoring namespace only, the health port from no pod.
fn operator_network_policy_enforced() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
        let pod = wait_for("the manager pod Ready", WAIT, || {
            let pods = pods.clone();
            async move {
                // Not one an earlier scenario's restart is still stopping:
                // it stays Ready for a moment after its listeners closed.
                let items = pods.list(&ListParams::default()).await.ok()?.items.into_iter();
                items.filter(|p| p.metadata.deletion_timestamp.is_none()).find(|p| pod_ready_since(p).is_some())
            }
        })
        .await;
        let ip = pod.status.and_then(|s| s.pod_ip).expect("the manager pod's address");
        for ns in ["monitoring", "node-other"] {
            if Api::<Namespace>::all(client.clone()).get_opt(ns).await.unwrap().is_none() {
                node.kubectl_ok(&["create", "namespace", ns]);
            }
        }
        let metrics = format!("http://{ip}:8383/metrics");
        let health = format!("http://{ip}:8081/healthz");
        let scrape = get_from_pod(node, &client, "monitoring", &metrics, None, ALLOWED).await;
        assert!(scrape.starts_with("status "), "monitoring reaches the metrics port: {scrape}");
        let probe = get_from_pod(node, &client, "monitoring", &health, None, REFUSED).await;
        assert!(probe.starts_with("unreachable"), "no pod reaches the health port: {probe}");
        let tenant = get_from_pod(node, &client, "node-other", &metrics, None, REFUSED).await;
        assert!(tenant.starts_with("unreachable"), "a tenant's pod reached the metrics port: {tenant}");
    });
    Ok(())
}

/// A person's path in a real browser (tools/tests/browser/browser.py:
/// Debian's Chromium driven by Playwright, both set up by hack/browser.sh),
/// scenario `scenario` with `args`, on this machine or (`in_node`) inside the
/// node's network namespace: its report, one entry per step. Screenshots go
/// to target/e2e-screenshots/NAME-STEP.png (files for people, never compared).
fn browser(node: &Node, scenario: &str, name: &str, args: &[String], in_node: bool) -> Vec<Value> {
    static TOOLS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (python, chromium) = TOOLS.get_or_init(|| {
        let out = Command::new(root().join("hack/browser.sh")).stdin(Stdio::null()).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "hack/browser.sh: {}", String::from_utf8_lossy(&out.stderr));
        (value_of(&text, "TINYCODE_BROWSER_PYTHON="), value_of(&text, "TINYCODE_CHROMIUM="))
    });
    let mut cmd = if in_node {
        let mut c = Command::new("nsenter");
        c.arg(format!("--net={}", node.netns.display())).arg("--").arg(python);
        c
    } else {
        Command::new(python)
    };
    let out = cmd
        .arg(root().join("tools/tests/browser/browser.py"))
        .arg(scenario)
        .args(args)
        .args(["--name", name, "--cert"])
        .arg(&node.ingress_cert)
        .arg("--screenshots")
        .arg(root().join("target/e2e-screenshots"))
        .arg("--chromium")
        .arg(chromium)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "browser {scenario}: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("the browser's JSON report");
    report["steps"].as_array().cloned().unwrap_or_default()
}

/// Stops `name` (its agent pod `pod` first leaves a hold file, so the next
/// one waits before it listens), opens its URL in the browser (`base` says
/// how: sign-in or password) for the stopped page, starts it again and opens
/// it while held: the browser reports the starting page, the test releases
/// the hold once it saw it, and the same page turns into the UI by itself.
/// Returns the stopped, starting and started steps and the new agent pod.
#[allow(clippy::too_many_arguments)]
async fn stop_and_start_through_the_front(
    node: &'static Node,
    client: &Client,
    ns: &str,
    name: &str,
    pod: &str,
    screenshots: &str,
    base: &[String],
    in_node: bool,
) -> (Value, Value, Value, String) {
    let hold = "/projects/.standin-hold";
    node.standin_ok(ns, pod, &["put-file", hold, "held by the node test"]);
    let stop = |stopped: bool| {
        let patch = json!({"spec": {"stopped": stopped}}).to_string();
        node.kubectl_ok(&["patch", "tinycodeinstance", name, "-n", ns, "--type", "merge", "-p", &patch]);
    };
    stop(true);
    wait_for(&format!("{name}'s agent pod gone"), WAIT, || {
        let client = client.clone();
        async move { server_pods(&client, ns, name).await.is_empty().then_some(()) }
    })
    .await;
    wait_front(client, ns, name, "stopped").await;
    let mut stopped_args = base.to_vec();
    stopped_args.extend(["--step".to_string(), "stopped".to_string()]);
    let steps = browser(node, "page", screenshots, &stopped_args, in_node);
    let stopped = step(&steps, "stopped").clone();

    stop(false);
    wait_front(client, ns, name, "runs").await;
    let agent = wait_for(&format!("{name}'s new agent pod running"), WAIT, || {
        let client = client.clone();
        async move {
            let pods = server_pods(&client, ns, name).await;
            let running = |p: &Pod| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            pods.into_iter().find(running)
        }
    })
    .await;
    let agent = agent.metadata.name.clone().unwrap();
    let mark = root().join(format!("target/e2e-screenshots/{screenshots}-starting.mark"));
    let _ = std::fs::remove_file(&mark);
    let release = {
        let (mark, agent, node_ns) = (mark.clone(), agent.clone(), ns.to_string());
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(180);
            while !mark.exists() {
                assert!(Instant::now() < deadline, "the browser never saw its first page");
                std::thread::sleep(Duration::from_millis(200));
            }
            node.standin_ok(&node_ns, &agent, &["rm", hold]);
        })
    };
    let mut starting_args = base.to_vec();
    starting_args.extend(["--mark".to_string(), mark.display().to_string(), "--until".into(), "#secret".into()]);
    let steps = browser(node, "starting", screenshots, &starting_args, in_node);
    release.join().expect("the hold released");
    (stopped, step(&steps, "starting").clone(), step(&steps, "started").clone(), agent)
}

/// A stopped instance's page: 503, the instance named, why, and the command
/// that starts it.
fn assert_stopped_page(stopped: &Value, ns: &str, name: &str) {
    assert_eq!(stopped["status"], 503, "{stopped}");
    assert_eq!(stopped["elements"]["#instance"], name, "{stopped}");
    assert!(stopped["elements"]["#message"].as_str().unwrap_or_default().contains("spec.stopped is true"), "{stopped}");
    let start =
        format!(r#"kubectl patch tinycodeinstance {name} -n {ns} --type merge -p '{{"spec":{{"stopped":false}}}}'"#);
    assert_eq!(stopped["elements"]["#command"], start.as_str(), "{stopped}");
}

/// A starting page (503, reloading itself) that turned into the UI of `agent`.
fn assert_starting_then_ui(first: &Value, started: &Value, agent: &str) {
    assert_eq!(first["status"], 503, "{first}");
    assert!(first["elements"]["#message"].as_str().unwrap_or_default().contains("is starting"), "{first}");
    assert!(first["elements"]["#retry"].is_string(), "the page reloads itself: {first}");
    assert_eq!(started["status"], 200, "{started}");
    assert_eq!(started["title"], "tinycode stand-in", "{started}");
    assert_eq!(started["elements"]["#pod"], agent, "the new agent pod answered: {started}");
}

/// Stops `name` for idleness (the operator checks every 2 s; a 15 s timeout)
/// after its agent pod `agent` wrote a marker to its data: the marker, once
/// the agent pod is gone and the front says idle.
async fn idle_stop(node: &Node, client: &Client, ns: &str, name: &str, agent: &str) -> String {
    let marker = format!("kept across the idle stop {}", std::process::id());
    node.standin_ok(ns, agent, &["put-file", "/projects/keep.txt", &marker]);
    let patch = json!({"spec": {"idle": {"timeout": "15s"}}}).to_string();
    node.kubectl_ok(&["patch", "tinycodeinstance", name, "-n", ns, "--type", "merge", "-p", &patch]);
    let ready = wait_reason(client, ns, name, "Idle").await;
    assert_eq!(ready["status"], "False", "{ready}");
    wait_for(&format!("{name}'s idle agent pod gone"), WAIT, || {
        let client = client.clone();
        async move { server_pods(&client, ns, name).await.is_empty().then_some(()) }
    })
    .await;
    wait_front(client, ns, name, "idle").await;
    marker
}

/// `name`'s start annotation, if any.
async fn start_requested(client: &Client, ns: &str, name: &str) -> Option<String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
    let now = api.get(name).await.unwrap();
    now.metadata.annotations.unwrap_or_default().remove("tinycode.dev/start-requested-at")
}

/// The browser's `steps` woke idle-stopped `name`: a starting page that
/// turned into the UI of the new agent pod, which has the data of the last
/// one (`marker`); the start came from the annotation the relay writes.
async fn assert_woken(node: &Node, client: &Client, ns: &str, name: &str, steps: &[Value], marker: &str) {
    let first = step(steps, "starting");
    assert_eq!(first["status"], 503, "{first}");
    assert!(first["elements"]["#message"].as_str().unwrap_or_default().contains("is starting"), "{first}");
    let woken = step(steps, "started");
    assert_eq!(woken["status"], 200, "{woken}");
    assert_eq!(woken["title"], "tinycode stand-in", "{woken}");
    let agent = server_pods(client, ns, name).await.remove(0).metadata.name.unwrap();
    assert_eq!(woken["elements"]["#pod"], agent.as_str(), "{woken}");
    let read = node.standin_ok(ns, &agent, &["cat", "/projects/keep.txt"]);
    assert_eq!(read, marker, "the woken instance has its data");
    assert!(start_requested(client, ns, name).await.is_some(), "started by the annotation");
}

/// The step's hops, after asserting its first answer sent the browser to the
/// provider's authorization endpoint with `host`'s own callback.
fn sent_to_provider(node: &Node, step: &Value, host: &str) -> Vec<Value> {
    let hops = step["hops"].as_array().cloned().unwrap_or_default();
    let first = hops.first().cloned().unwrap_or_default();
    assert_eq!(first["status"], 302, "sent on at once: {step}");
    let location = first["location"].as_str().unwrap_or_default();
    assert!(location.starts_with(&format!("{}/authorize", node.oidc_issuer)), "sent to the provider: {step}");
    let callback = format!("redirect_uri=https%3A%2F%2F{host}%2Foauth2%2Fcallback");
    assert!(location.contains(&callback), "with {host}'s own callback: {step}");
    hops
}

fn step<'a>(steps: &'a [Value], name: &str) -> &'a Value {
    steps.iter().find(|s| s["step"] == name).unwrap_or_else(|| panic!("no step {name}: {steps:?}"))
}

/// The instance's URL opens from this machine: the node's ingress controller
/// (Traefik, a pod) serves the instance's Ingress with the certificate of its
/// TLS Secret, through the port the node publishes on loopback, to the real
/// pod behind it (a value only that pod knows). The password guards it on
/// that path too, and the Ingress's address was published by the controller.
fn ingress_serves_the_url() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        // The instances' NetworkPolicy admits the ingress controller's namespace.
        let ingress_ns = format!("TINYCODE_INGRESS_NAMESPACE={}", node.ingress_namespace);
        // Idle checks every 2 s, for the idle stop below.
        set_manager_env(node, &[ingress_ns.as_str(), "TINYCODE_ACTIVITY_CHECK_SECONDS=2"]);
        let client = node.client().await;
        let ns = "node-ingress";
        fresh_namespace(node, ns).await;
        let (cert, key) = (node.ingress_cert.display().to_string(), node.ingress_key.display().to_string());
        node.kubectl_ok(&["create", "secret", "tls", "web-tls", "-n", ns, "--cert", &cert, "--key", &key]);
        let mut instance = basic_instance("web");
        instance["spec"]["hostname"] = "web-node-ingress.apps.localhost".into();
        instance["spec"]["ingress"] = json!({"tlsSecretName": "web-tls"});
        apply_instance(&client, ns, &instance).await;
        let status = wait_running(&client, ns, "web").await;
        let url = status["url"].as_str().expect("status.url").to_string();
        assert_eq!(url, "https://web-node-ingress.apps.localhost", "{status}");

        let (code, page) = get_through_ingress(node, &url, Some(PASSWORD), ALLOWED).await;
        assert_eq!(code, 200, "with the password through the ingress: {page}");
        assert!(page.contains("<title>tinycode stand-in</title>"), "{page}");
        let pod = server_pods(&client, ns, "web").await.remove(0).metadata.name.unwrap();
        assert!(page.contains(&format!("<span id=\"pod\">{pod}</span>")), "the real pod answered: {page}");
        let (code, page) = get_through_ingress(node, &url, None, ALLOWED).await;
        assert_eq!(code, 401, "without the password: {page}");

        // As a person: the browser is asked for a password, a wrong one gets
        // no page, the right one gets the UI of the pod (a value made by the
        // process at its start, read here from inside the pod).
        let open = format!("{url}:{}/", node.ingress_port);
        let dir = tempfile::tempdir().unwrap();
        let password_file = dir.path().join("password");
        std::fs::write(&password_file, PASSWORD).unwrap();
        let args = ["--url".to_string(), open, "--password-file".into(), password_file.display().to_string()];
        let steps = browser(node, "password", "password-mode", &args, false);
        let prompt = step(&steps, "prompt");
        assert_eq!(prompt["status"], 401, "{prompt}");
        // The front's gate asks, for this instance.
        let realm = format!("Basic realm=\"tinycode {ns}/web\"");
        assert!(prompt["authenticate"].as_str().unwrap_or_default().starts_with(&realm), "{prompt}");
        let wrong = step(&steps, "wrong-password");
        assert_eq!(wrong["status"], 401, "{wrong}");
        assert_ne!(wrong["title"], "tinycode stand-in", "{wrong}");
        let inside = node.standin_ok(ns, &pod, &["get", "-password", PASSWORD, "http://127.0.0.1:4096/"]);
        let secret = inside.split("<span id=\"secret\">").nth(1).and_then(|r| r.split('<').next()).unwrap();
        let signed_in = step(&steps, "signed-in");
        assert_eq!(signed_in["status"], 200, "{signed_in}");
        assert_eq!(signed_in["title"], "tinycode stand-in", "{signed_in}");
        assert_eq!(signed_in["elements"]["#pod"], pod.as_str(), "{signed_in}");
        assert_eq!(signed_in["elements"]["#secret"], secret, "the page came from the pod's process: {signed_in}");

        // Stopped, the password front stays: with the password, the page says
        // so and how to start it; started again, the starting page turns into
        // the UI by itself.
        let (stopped, first, started, agent) =
            stop_and_start_through_the_front(node, &client, ns, "web", &pod, "password-mode", &args, false).await;
        assert_stopped_page(&stopped, ns, "web");
        assert_starting_then_ui(&first, &started, &agent);

        // Stopped for idleness, the password front starts it for whoever
        // has the password, on the same data (through the operator's relay,
        // with the instance's start credential); a request without the
        // password, or with a wrong one, starts nothing.
        let marker = idle_stop(node, &client, ns, "web", &agent).await;
        for wrong in [None, Some("not-the-password")] {
            let (code, page) = get_through_ingress(node, &url, wrong, ALLOWED).await;
            assert_eq!(code, 401, "{wrong:?}: {page}");
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(start_requested(&client, ns, "web").await, None, "started without the password");
        assert!(server_pods(&client, ns, "web").await.is_empty(), "an agent pod without the password");
        let mark = root().join("target/e2e-screenshots/password-mode-woken.mark");
        let mut wake_args = args.to_vec();
        wake_args.extend(["--mark".to_string(), mark.display().to_string(), "--until".into(), "#secret".into()]);
        let steps = browser(node, "starting", "password-woken", &wake_args, false);
        assert_woken(node, &client, ns, "web", &steps, &marker).await;

        let ingress: k8s_openapi::api::networking::v1::Ingress =
            Api::namespaced(client.clone(), ns).get("web-tinycode").await.expect("the instance's Ingress");
        let published = ingress.status.and_then(|s| s.load_balancer).and_then(|l| l.ingress).unwrap_or_default();
        assert_eq!(published.first().and_then(|i| i.ip.as_deref()), Some("127.0.0.1"), "published by Traefik");
        assert_eq!(ingress.spec.and_then(|s| s.ingress_class_name).as_deref(), Some("traefik"), "the default class");

        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
        set_manager_env(node, &["TINYCODE_INGRESS_NAMESPACE-", "TINYCODE_ACTIVITY_CHECK_SECONDS-"]);
    });
    Ok(())
}

/// The README's first command: `make run-local` on the node ends with the
/// sample Running and the URL that opens it from this machine, through the
/// node's ingress controller to the real pod. The default platform
/// (OpenShift's APIs, the Route served by an Ingress of the same controller)
/// only: a second run for `PLATFORM=kubernetes` costs a minute of a suite that
/// must stay short, and `ingress_serves_the_url` covers the Ingress path.
fn run_local_main_job() -> Result<(), Failed> {
    let out = Command::new("bash")
        .arg(root().join("hack/run-local.sh"))
        .env("RUN_LOCAL_EXIT", "1")
        .env_remove("PLATFORM")
        .env_remove("KUBECONFIG")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "run-local failed:\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let url = stdout.lines().find_map(|l| l.strip_prefix("URL: ")).unwrap_or_else(|| panic!("no URL line: {stdout}"));
    // The Route's default host (the stand-in router's domain).
    assert_eq!(url, "https://my-tinycode-tinycode-tinycode-dev.apps.localhost", "{stdout}");
    assert!(stdout.contains("Ready=True (Available)"), "{stdout}");
    let open =
        stdout.lines().find_map(|l| l.strip_prefix("Open: ")).unwrap_or_else(|| panic!("no Open line: {stdout}"));
    let node = node();
    assert!(open.starts_with(&format!("{url}:{}/ ", node.ingress_port)), "{open}");
    // The password as the printed command shows it.
    let password = node.kubectl_ok(&[
        "get",
        "secret",
        "tinycode-password",
        "-n",
        "tinycode-dev",
        "-o",
        "jsonpath={.data.TINYCODE_SERVER_PASSWORD}",
    ]);
    use base64::Engine;
    let password =
        String::from_utf8(base64::engine::general_purpose::STANDARD.decode(password.trim()).unwrap()).unwrap();
    rt().block_on(async {
        let (code, page) = get_through_ingress(node, url, Some(&password), Duration::ZERO).await;
        assert_eq!(code, 200, "the printed URL, with the password: {page}");
        assert!(page.contains("<title>tinycode stand-in</title>"), "{page}");
    });
    Ok(())
}

/// The instance's Ready condition once its reason is `reason`.
async fn wait_reason(client: &Client, ns: &str, name: &str, reason: &str) -> Value {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
    wait_for(&format!("{ns}/{name} Ready reason {reason}"), WAIT, || {
        let api = api.clone();
        async move {
            let obj = api.get(name).await.ok()?;
            let conditions = obj.data.get("status")?.get("conditions")?.as_array()?.clone();
            let ready = condition(&conditions, "Ready")?.clone();
            (ready["reason"] == reason).then_some(ready)
        }
    })
    .await
}

/// A private registry: an instance naming the pull Secret starts, one without
/// it says ImagePullFailed, naming the image and that no pull secret was used.
fn pull_secrets() -> Result<(), Failed> {
    rt().block_on(async {
        use base64::Engine;
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        // The cluster-admin allows the registry (the operator's setting).
        let registry = node.private_image.split('/').next().unwrap().to_string();
        node.kubectl_ok(&[
            "set",
            "env",
            "-n",
            OPERATOR_NS,
            "deployment/tinycode-operator-manager",
            &format!("TINYCODE_ALLOWED_REGISTRIES=quay.io,ghcr.io,{registry}"),
        ]);
        node.kubectl_ok(&[
            "rollout",
            "status",
            "-n",
            OPERATOR_NS,
            "deployment/tinycode-operator-manager",
            "--timeout=180s",
        ]);

        let ns = "node-private";
        fresh_namespace(node, ns).await;
        let auth = std::fs::read_to_string(&node.private_auth).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let config = json!({"auths": {registry.clone(): {"auth": b64.encode(auth.trim())}}});
        let secret: k8s_openapi::api::core::v1::Secret = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "private-registry"},
            "type": "kubernetes.io/dockerconfigjson",
            "data": {".dockerconfigjson": b64.encode(config.to_string())}
        }))
        .unwrap();
        Api::<k8s_openapi::api::core::v1::Secret>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &secret)
            .await
            .unwrap();

        let mut with = basic_instance("with-secret");
        with["spec"]["image"] = node.private_image.clone().into();
        with["spec"]["imagePullSecrets"] = json!([{"name": "private-registry"}]);
        apply_instance(&client, ns, &with).await;
        let mut without = basic_instance("without-secret");
        without["spec"]["image"] = node.private_image.clone().into();
        apply_instance(&client, ns, &without).await;

        wait_running(&client, ns, "with-secret").await;
        let ready = wait_reason(&client, ns, "without-secret", "ImagePullFailed").await;
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains(&node.private_image), "the message names the image: {message}");
        assert!(message.contains("pull secret"), "the message says no pull secret was used: {message}");
        let status = &ready["status"];
        assert_eq!(status, "False", "{ready}");
    });
    Ok(())
}

/// Status names what keeps a pod from running, each produced for real on the
/// node: a crash loop, no node matching, a volume that cannot be provisioned,
/// a ResourceQuota that forbids the pod (image pulls: `pull_secrets`).
fn status_names_pod_failures() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-failures";
        fresh_namespace(node, ns).await;
        let mut crash = basic_instance("crash");
        crash["spec"]["image"] = "quay.io/bjohns/tinycode-container:crash".into();
        let mut nowhere = basic_instance("nowhere");
        nowhere["spec"]["nodeSelector"] = json!({"tinycode.dev/no-such-node": "true"});
        let mut novolume = basic_instance("novolume");
        novolume["spec"]["storage"]["storageClassName"] = "no-such-class".into();
        for i in [&crash, &nowhere, &novolume] {
            apply_instance(&client, ns, i).await;
        }
        let quota_ns = "node-quota";
        fresh_namespace(node, quota_ns).await;
        node.kubectl_ok(&["create", "quota", "no-pods", "--hard=pods=0", "-n", quota_ns]);
        apply_instance(&client, quota_ns, &basic_instance("quota")).await;

        let r = wait_reason(&client, ns, "crash", "CrashLoop").await;
        let m = r["message"].as_str().unwrap_or_default();
        assert!(m.contains("container tinycode") && m.contains("exited with code 1"), "{m}");
        let r = wait_reason(&client, ns, "nowhere", "PodUnschedulable").await;
        let m = r["message"].as_str().unwrap_or_default();
        assert!(m.contains("node(s) didn't match"), "the scheduler's words: {m}");
        let r = wait_reason(&client, ns, "novolume", "VolumeNotBound").await;
        let m = r["message"].as_str().unwrap_or_default();
        assert!(m.contains("StorageClass no-such-class"), "{m}");
        let r = wait_reason(&client, quota_ns, "quota", "QuotaExceeded").await;
        let m = r["message"].as_str().unwrap_or_default();
        assert!(m.contains("exceeded quota"), "{m}");
        let api: Api<Namespace> = Api::all(client.clone());
        for n in [ns, quota_ns] {
            api.delete(n, &DeleteParams::default()).await.unwrap();
        }
    });
    Ok(())
}

/// A rollout that makes no progress for the operator's progress deadline
/// (`--progress-deadline-seconds`, set here as a cluster-admin would) is
/// `Stalled`, said by the real Deployment controller and named with its
/// cause; the instance is Failed, not Deploying forever.
fn a_rollout_without_progress_stalls() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        set_manager_env(node, &["TINYCODE_PROGRESS_DEADLINE_SECONDS=15"]);
        let ns = "node-stalled";
        fresh_namespace(node, ns).await;
        let mut crash = basic_instance("crash");
        crash["spec"]["image"] = "quay.io/bjohns/tinycode-container:crash".into();
        apply_instance(&client, ns, &crash).await;
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
        // Stalled, and its cause named: on a loaded node the deadline can pass
        // before the container's first exit; the operator diagnoses again
        // every 15 s while the rollout waits, so the cause follows.
        let status = wait_for("crash Stalled with its cause", WAIT, || {
            let api = api.clone();
            async move {
                let status = api.get("crash").await.ok()?.data.get("status")?.clone();
                let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
                let stalled = condition(&conditions, "Stalled")?.clone();
                let named = stalled["message"].as_str().is_some_and(|m| m.contains("container tinycode"));
                (stalled["status"] == "True" && named).then_some(status)
            }
        })
        .await;
        assert_eq!(status["phase"], "Failed", "{status}");
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let stalled = condition(&conditions, "Stalled").unwrap();
        assert_eq!(stalled["reason"], "ProgressDeadlineExceeded", "{stalled}");
        let message = stalled["message"].as_str().unwrap_or_default();
        assert!(message.contains("stopped making progress") && message.contains("container tinycode"), "{message}");
        assert_eq!(condition(&conditions, "Ready").unwrap()["reason"], "CrashLoop", "{status}");
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), ns);
        let d = deployments.get("crash-tinycode").await.unwrap();
        assert_eq!(d.spec.progress_deadline_seconds, Some(15));
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
        set_manager_env(node, &["TINYCODE_PROGRESS_DEADLINE_SECONDS-"]);
    });
    Ok(())
}

/// Idle stop judged from the stand-in's real `/activity`, read by the
/// operator's pod through the Service and the NetworkPolicy: a busy agent
/// keeps running past its timeout; once it is idle, it stops.
fn idle_stop_from_real_activity() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        // Checks every 2 s instead of a minute (the operator's setting).
        node.kubectl_ok(&[
            "set",
            "env",
            "-n",
            OPERATOR_NS,
            "deployment/tinycode-operator-manager",
            "TINYCODE_ACTIVITY_CHECK_SECONDS=2",
        ]);
        node.kubectl_ok(&[
            "rollout",
            "status",
            "-n",
            OPERATOR_NS,
            "deployment/tinycode-operator-manager",
            "--timeout=180s",
        ]);
        let ns = "node-idle";
        fresh_namespace(node, ns).await;
        let mut idler = basic_instance("idler");
        idler["spec"]["idle"] = json!({"timeout": "15s"});
        apply_instance(&client, ns, &idler).await;
        wait_running(&client, ns, "idler").await;
        let pod = server_pods(&client, ns, "idler").await.remove(0);
        let pod_name = pod.metadata.name.clone().unwrap();
        let busy = |value: &'static str| {
            let url = format!("http://127.0.0.1:4096/busy?busy={value}");
            let out = node.standin(ns, &pod_name, &["get", "-method", "POST", "-password", PASSWORD, &url]);
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            assert!(text.starts_with("status 204"), "setting busy={value}: {text}");
        };
        busy("true");
        // Three timeouts' worth of checks: a busy agent is never stopped.
        tokio::time::sleep(Duration::from_secs(45)).await;
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
        let status = api.get("idler").await.unwrap().data["status"].clone();
        assert_eq!(status["phase"], "Running", "a busy agent was stopped: {status}");
        assert!(!status["idle"].is_null(), "status.idle reports the checks: {status}");
        assert_eq!(server_pods(&client, ns, "idler").await.len(), 1);

        busy("false");
        let ready = wait_reason(&client, ns, "idler", "Idle").await;
        assert_eq!(ready["status"], "False", "{ready}");
        wait_for("the idle instance's pod gone", WAIT, || {
            let client = client.clone();
            async move { server_pods(&client, ns, "idler").await.is_empty().then_some(()) }
        })
        .await;
        let status = api.get("idler").await.unwrap().data["status"].clone();
        assert_eq!(status["phase"], "Stopped", "{status}");
        // The front's gate joins the image's report to the requests it let through.
        assert_eq!(status["idle"]["judgedBy"], "requests and activity report", "{status}");
    });
    Ok(())
}

/// Deleting a namespace with a running instance completes: the real
/// namespace controller and the operator's finalizer together.
fn namespace_deletion_completes() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-delete";
        fresh_namespace(node, ns).await;
        apply_instance(&client, ns, &basic_instance("doomed")).await;
        wait_running(&client, ns, "doomed").await;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        namespaces.delete(ns, &DeleteParams::default()).await.unwrap();
        wait_for(&format!("namespace {ns} gone"), WAIT, || {
            let namespaces = namespaces.clone();
            async move { namespaces.get_opt(ns).await.unwrap().is_none().then_some(()) }
        })
        .await;
    });
    Ok(())
}

/// The git init container: the chart's clone script, run by the stand-in
/// image's shell and git as 1001, clones from the git server in the node's
/// network into the projects volume before tinycode starts, and the clone is
/// what tinycode sees.
fn git_init_container_clones() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-git";
        fresh_namespace(node, ns).await;
        let mut inst = basic_instance("cloned");
        inst["spec"]["git"] = json!({"url": node.git_url, "branch": "main"});
        apply_instance(&client, ns, &inst).await;
        wait_running(&client, ns, "cloned").await;

        let pods = server_pods(&client, ns, "cloned").await;
        let pod = &pods[0];
        let init = pod.status.as_ref().and_then(|s| s.init_container_statuses.clone()).unwrap_or_default();
        let clone = init.iter().find(|c| c.name == "git-clone").expect("a git-clone init container");
        let done = clone.state.as_ref().and_then(|s| s.terminated.as_ref()).expect("the init container finished");
        assert_eq!(done.exit_code, 0, "{clone:?}");
        let name = pod.metadata.name.clone().unwrap();
        let read = |path: &str| node.standin_ok(ns, &name, &["cat", path]);
        assert_eq!(read("/projects/README.md"), "cloned by the git init container\n");
        assert_eq!(read("/projects/.git/HEAD"), "ref: refs/heads/main\n", "a checkout of the branch asked for");
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    });
    Ok(())
}

/// The bundled Ollama counts toward Ready: its pod is Ready only once the
/// model is pulled, the instance Running only after that, and tinycode
/// reaches it through its Service. A model that cannot be pulled is named in
/// status.
fn bundled_ollama_counts_toward_ready() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-ollama";
        fresh_namespace(node, ns).await;
        let small = json!({"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"cpu": "500m", "memory": "128Mi"}});
        let mut inst = basic_instance("models");
        inst["spec"]["ollama"] = json!({"enabled": true, "models": ["qwen-standin:1b"], "resources": small});
        apply_instance(&client, ns, &inst).await;
        let mut bad = basic_instance("bad-model");
        bad["spec"]["ollama"] = json!({"enabled": true, "models": ["missing-model"], "resources": small});
        apply_instance(&client, ns, &bad).await;

        let status = wait_running(&client, ns, "models").await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels("app.kubernetes.io/instance=models,app.kubernetes.io/component=ollama");
        let ollama = pods.list(&lp).await.unwrap().items.into_iter().next().expect("the Ollama pod");
        let ollama_ready = pod_ready_since(&ollama).expect("Running only with the Ollama pod Ready");
        let name = ollama.metadata.name.clone().unwrap();
        // When the model landed, by the Ollama stand-in's own account.
        let list = node.kubectl_ok(&["exec", "-n", ns, &name, "-c", "ollama", "--", "ollama", "list"]);
        let line = list.lines().find(|l| l.starts_with("qwen-standin:1b")).unwrap_or_else(|| panic!("{list}"));
        let pulled: k8s_openapi::jiff::Timestamp = line.rsplit('\t').next().unwrap().parse().unwrap();
        assert!(
            ollama_ready.0.as_second() >= pulled.as_second(),
            "the Ollama pod was Ready at {:?}, before its model was pulled at {pulled}",
            ollama_ready.0
        );
        let conditions = status["conditions"].as_array().cloned().unwrap_or_default();
        let ready = condition(&conditions, "Ready").expect("a Ready condition");
        let running_since: Time = serde_json::from_value(ready["lastTransitionTime"].clone()).unwrap();
        assert!(running_since.0 >= ollama_ready.0, "status said Ready before the Ollama pod was");

        // tinycode reaches its Ollama by the URL the chart gives it.
        let server = server_pods(&client, ns, "models").await[0].metadata.name.clone().unwrap();
        let models =
            node.standin_ok(ns, &server, &["get", "-retry-for", "25s", "http://models-ollama:11434/v1/models"]);
        assert!(models.starts_with("status 200") && models.contains("qwen-standin:1b"), "{models}");

        let ready = wait_reason(&client, ns, "bad-model", "CrashLoop").await;
        let message = ready["message"].as_str().unwrap_or_default();
        assert!(message.contains("container ollama"), "{message}");
        assert!(message.contains("could not pull model missing-model"), "its last words name the model: {message}");
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    });
    Ok(())
}

/// A model server that needs a key, in the tenant's namespace: the stand-in
/// (`standin provider`) behind a Service, its key from a Secret.
async fn keyed_provider(client: &Client, ns: &str, image: &str) {
    let deployments: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()));
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "provider"},
        "spec": {
            "selector": {"matchLabels": {"app": "provider"}},
            "template": {
                "metadata": {"labels": {"app": "provider"}},
                "spec": {
                    "automountServiceAccountToken": false,
                    "securityContext": {"runAsNonRoot": true, "runAsUser": 1001, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [{
                        "name": "provider", "image": image,
                        "command": ["/usr/local/bin/standin"], "args": ["provider", ":8000"],
                        "env": [{"name": "PROVIDER_KEY", "valueFrom": {"secretKeyRef": {"name": "model-keys", "key": "vllm"}}}],
                        "ports": [{"containerPort": 8000}],
                        "readinessProbe": {"tcpSocket": {"port": 8000}, "periodSeconds": 2},
                        "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}, "readOnlyRootFilesystem": true},
                        "resources": {"limits": {"cpu": "100m", "memory": "32Mi"}}
                    }]
                }
            }
        }
    });
    deployments.patch("provider", &PatchParams::apply("node-test").force(), &Patch::Apply(&deployment)).await.unwrap();
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "provider"},
        "spec": {"selector": {"app": "provider"}, "ports": [{"port": 8000, "targetPort": 8000}]}
    });
    Api::<Service>::namespaced(client.clone(), ns)
        .patch("provider", &PatchParams::apply("node-test").force(), &Patch::Apply(&service))
        .await
        .unwrap();
    wait_for("the provider stand-in ready", WAIT, || {
        let deployments = deployments.clone();
        async move {
            let d = deployments.get("provider").await.ok()?;
            (d.data["status"]["availableReplicas"].as_i64() == Some(1)).then_some(())
        }
    })
    .await;
}

/// Keys the agent uses but never holds: a model server that needs a key is
/// probed by the operator with it and reached by the agent only through
/// the model-key proxy beside it on the pod's loopback. From inside the
/// agent's container the key is in no file, environment or command line
/// (the same search finds a file that holds it), the server refuses the
/// agent's own requests, the proxy refuses providers it does not serve,
/// and it counts the tokens of the answer it passed on.
fn model_keys_stay_out_of_the_agent() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let ns = "node-keys";
        fresh_namespace(node, ns).await;
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos();
        let key = format!("sk-node-{}-{nanos}", std::process::id());
        node.kubectl_ok(&["create", "secret", "generic", "model-keys", "-n", ns, &format!("--from-literal=vllm={key}")]);
        keyed_provider(&client, ns, &node.standin_image).await;
        // Its Service answers (DNS and kube-proxy caught up) before the
        // instance comes: the operator keeps a failed probe five minutes
        // (CI run 28 waited that out).
        let url = format!("http://provider.{ns}.svc:8000/v1/models");
        let answer = get_from_pod(node, &client, ns, &url, None, Duration::from_secs(60)).await;
        assert!(answer.starts_with("status 401"), "the provider's Service: {answer}");
        let mut inst = basic_instance("keys");
        inst["spec"]["model"] = json!("keyed-standin");
        inst["spec"]["vllm"] = json!([{"name": "keyed", "url": format!("http://provider.{ns}.svc:8000"),
                                        "apiKeySecret": {"name": "model-keys", "key": "vllm"}}]);
        apply_instance(&client, ns, &inst).await;
        wait_running(&client, ns, "keys").await;
        // The operator's probe reached the server with the key: its model is in the config.
        // Past the five minutes a failed probe is kept, should one still
        // come first: then the next probe's answer counts.
        let config = wait_for("the probed model in the config", Duration::from_secs(360), || {
            let client = client.clone();
            async move {
                let cms: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(client, ns);
                let cm = cms.get_opt("keys-tinycode-config").await.ok()??;
                let cfg: Value = serde_json::from_str(cm.data?.get("config.json")?).ok()?;
                cfg["providers"]["keyed"]["models"].get("keyed-standin").is_some().then_some(cfg)
            }
        })
        .await;
        assert_eq!(config["providers"]["keyed"]["url"], "http://127.0.0.1:4099/keyed/v1", "{config}");

        let pod = server_pods(&client, ns, "keys").await[0].metadata.name.clone().unwrap();
        let found = node.standin_ok(ns, &pod, &["find-text", &key]);
        assert!(!found.contains("found "), "the agent's container holds the key:\n{found}");
        // It read files and at least the agent's own process (PID 1).
        let counts: Vec<u64> =
            found.lines().last().unwrap_or_default().split_whitespace().filter_map(|w| w.parse().ok()).collect();
        assert!(counts.len() == 2 && counts[0] > 0 && counts[1] > 0, "{found}");
        // The search finds the key where it is.
        node.standin_ok(ns, &pod, &["put-file", "/tmp/planted", &key]);
        let planted = node.standin_ok(ns, &pod, &["find-text", &key]);
        assert!(planted.contains("found /tmp/planted"), "the search missed a planted key:\n{planted}");
        node.standin_ok(ns, &pod, &["rm", "/tmp/planted"]);

        let direct = node.standin_ok(ns, &pod, &["get", "-retry-for", "20s", &format!("http://provider.{ns}.svc:8000/v1/models")]);
        assert!(direct.starts_with("status 401"), "the server answered the agent without a key: {direct}");
        let proxied = node.standin_ok(ns, &pod, &["get", "-retry-for", "20s", "http://127.0.0.1:4099/keyed/v1/models"]);
        assert!(proxied.starts_with("status 200") && proxied.contains("keyed-standin"), "{proxied}");
        let chat = node.standin_ok(
            ns,
            &pod,
            &["get", "-method", "POST", "http://127.0.0.1:4099/keyed/v1/chat/completions"],
        );
        assert!(chat.starts_with("status 200") && chat.contains("\"completion_tokens\":13"), "{chat}");
        let other = node.standin_ok(ns, &pod, &["get", "http://127.0.0.1:4099/other/v1/models"]);
        assert!(other.starts_with("status 404"), "{other}");
        let metrics = node.standin_ok(ns, &pod, &["get", "http://127.0.0.1:4100/metrics"]);
        let tokens = format!(
            "tinycode_model_tokens_total{{namespace=\"{ns}\",instance=\"keys\",class=\"\",provider=\"keyed\",kind=\"completion\"}} 13"
        );
        assert!(metrics.contains(&tokens), "{metrics}");
        assert!(!metrics.contains(&key), "the key in the metrics");
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
    });
    Ok(())
}

/// `kubectl set env` on the manager's Deployment (`NAME=value`, or `NAME-`
/// to remove), as a cluster-admin changes a setting, and waits out the rollout.
fn set_manager_env(node: &Node, vars: &[&str]) {
    let deployment = "deployment/tinycode-operator-manager";
    let mut args = vec!["set", "env", deployment, "-n", OPERATOR_NS];
    args.extend_from_slice(vars);
    node.kubectl_ok(&args);
    node.kubectl_ok(&["rollout", "status", deployment, "-n", OPERATOR_NS, "--timeout=180s"]);
    // The rollout is complete while the old pod is still stopping; a scenario
    // that reads "the manager pod" must find only the new one.
    let stopping = r#"jsonpath={range .items[?(@.metadata.deletionTimestamp)]}{.metadata.name}{"\n"}{end}"#;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let selector = "app.kubernetes.io/name=tinycode-operator";
        let left = node.kubectl_ok(&["get", "pods", "-n", OPERATOR_NS, "-l", selector, "-o", stopping]);
        if left.trim().is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the manager's old pods still stopping after 120 s: {left}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Sign-in (auth.mode oidc) in one real pod: oauth2-proxy (the real binary,
/// pulled under the operator's default image name), the gate (the operator's
/// image) and the tinycode stand-in, each Ready by its own probe; the OIDC
/// provider in the node's network; the operator's relay (in its pod, behind
/// its Service and NetworkPolicy) redeeming codes with the client secret only
/// it holds. The cluster-admin's steps are README's (Sign-in). In a real
/// browser, through the node's ingress controller to each instance's own URL:
/// the namespace's admin gets through to tinycode, the session of one
/// instance does not open another, and a viewer gets the gate's page naming
/// the command that would let them in.
fn oidc_sign_in_on_a_pod() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        let client = node.client().await;
        let _ = node.kubectl(&["delete", "secret", "tinycode-operator-oidc", "-n", OPERATOR_NS, "--ignore-not-found"]);
        node.kubectl_ok(&[
            "create",
            "secret",
            "generic",
            "tinycode-operator-oidc",
            "-n",
            OPERATOR_NS,
            &format!("--from-file=client-secret={}", node.oidc_secret_file.display()),
        ]);
        set_manager_env(
            node,
            &[
                &format!("TINYCODE_OIDC_ISSUER_URL={}", node.oidc_issuer),
                &format!("TINYCODE_OIDC_CLIENT_ID={}", node.oidc_client_id),
                // The instances' NetworkPolicy admits the ingress controller.
                &format!("TINYCODE_INGRESS_NAMESPACE={}", node.ingress_namespace),
            ],
        );

        let ns = "node-signin";
        fresh_namespace(node, ns).await;
        node.kubectl_ok(&[
            "create",
            "rolebinding",
            "alice-admin",
            "--clusterrole=admin",
            "--user=alice@example.com",
            "-n",
            ns,
        ]);
        node.kubectl_ok(&[
            "create",
            "rolebinding",
            "carol-view",
            "--clusterrole=view",
            "--user=carol@example.com",
            "-n",
            ns,
        ]);
        // Two instances behind the node's ingress controller, each with its
        // host name and the node's certificate (the Ingress's TLS Secret).
        let (cert, key) = (node.ingress_cert.display().to_string(), node.ingress_key.display().to_string());
        node.kubectl_ok(&["create", "secret", "tls", "apps-tls", "-n", ns, "--cert", &cert, "--key", &key]);
        for name in ["dev", "other"] {
            let mut instance = basic_instance(name);
            instance["spec"]["auth"] = json!({"mode": "oidc"});
            instance["spec"]["tlsTermination"] = json!("edge");
            instance["spec"]["hostname"] = json!(format!("{name}-{ns}.apps.localhost"));
            instance["spec"]["ingress"] = json!({"tlsSecretName": "apps-tls"});
            apply_instance(&client, ns, &instance).await;
        }
        let mut urls = Vec::new();
        for name in ["dev", "other"] {
            // status.url once the controller (Traefik) published the Ingress.
            let status = wait_running(&client, ns, name).await;
            urls.push(status["url"].as_str().expect("status.url").to_string());
        }
        let host = format!("dev-{ns}.apps.localhost");
        assert_eq!(urls, [format!("https://{host}"), format!("https://other-{ns}.apps.localhost")], "the URLs");

        // The agent's pod holds tinycode alone; the front's pod the proxy
        // and the gate; each container Ready by its own probe.
        let ready_containers = |pod: &Pod| {
            let containers = pod.status.as_ref().and_then(|s| s.container_statuses.clone()).unwrap_or_default();
            let mut ready: Vec<(String, bool)> = containers.iter().map(|c| (c.name.clone(), c.ready)).collect();
            ready.sort();
            (ready, containers)
        };
        let pods = server_pods(&client, ns, "dev").await;
        assert_eq!(pods.len(), 1, "one server pod");
        assert_eq!(ready_containers(&pods[0]).0, [("tinycode".to_string(), true)]);
        let fronts = wait_front(&client, ns, "dev", "runs").await;
        let (ready, containers) = ready_containers(&fronts[0]);
        assert_eq!(ready, [("gate".to_string(), true), ("signin-proxy".to_string(), true)], "{containers:?}");
        let proxy = containers.iter().find(|c| c.name == "signin-proxy").unwrap();
        assert!(
            proxy.image.ends_with("oauth2-proxy/oauth2-proxy:v7.15.6"),
            "the operator's default proxy image: {}",
            proxy.image
        );

        // A person in a browser, inside the node's network (where the OIDC
        // provider is), through the ingress controller to the instance's own
        // URL. The namespace's admin (tinycode-user-role by aggregation, so
        // `use`) is sent to the provider, back to the instance's own
        // callback, and through the gate to tinycode.
        let ingress_ip = node.kubectl_ok(&[
            "get",
            "service",
            "traefik",
            "-n",
            &node.ingress_namespace,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ]);
        let args: Vec<String> = [
            "--url",
            &urls[0],
            "--other-url",
            &urls[1],
            "--queue",
            &node.oidc_queue_url,
            "--allowed",
            "alice@example.com",
            "--refused",
            "carol@example.com",
            "--issuer",
            &node.oidc_issuer,
            "--map",
            ingress_ip.trim(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let steps = browser(node, "oidc", "oidc-mode", &args, true);
        let alice = step(&steps, "allowed");
        // No session yet: sent to the provider with the instance's own callback.
        let hops = sent_to_provider(node, alice, &host);
        assert!(
            hops.iter()
                .any(|h| h["url"].as_str().unwrap_or_default().starts_with(&format!("https://{host}/oauth2/callback"))),
            "the provider sent the browser back to the instance: {alice}"
        );
        assert_eq!(alice["status"], 200, "alice is through: {alice}");
        assert_eq!(alice["title"], "tinycode stand-in", "tinycode answered alice: {alice}");
        let pod = pods[0].metadata.name.clone().unwrap();
        assert_eq!(alice["elements"]["#pod"], pod.as_str(), "the instance's own pod: {alice}");
        // Who used it: the front's gate named alice to the operator's relay
        // (in its pod, through its Service), which wrote her into the status.
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
        let last = wait_for("status.lastUsedBy naming alice", Duration::from_secs(60), || {
            let api = api.clone();
            async move {
                let inst = api.get("dev").await.ok()?;
                let last = inst.data["status"]["lastUsedBy"].clone();
                (last["user"] == "alice@example.com").then_some(last)
            }
        })
        .await;
        assert!(last["at"].as_str().is_some_and(|t| t.parse::<k8s_openapi::jiff::Timestamp>().is_ok()), "{last}");

        // Signed in at dev, the same browser opens other: its sign-in starts
        // over at the provider (dev's session cookie is not other's).
        let other = step(&steps, "other-instance");
        let hops = sent_to_provider(node, other, &format!("other-{ns}.apps.localhost"));
        assert!(hops.iter().all(|h| h["status"] != 200), "nothing of other was served: {other}");

        // A viewer signs in and gets the gate's page: the instance, and the
        // command an admin of the namespace runs to let them in.
        let carol = step(&steps, "refused");
        assert_eq!(carol["status"], 403, "carol (view) is refused: {carol}");
        assert_ne!(carol["title"], "tinycode stand-in", "{carol}");
        assert_eq!(carol["elements"]["#instance"], "dev", "{carol}");
        let command = carol["elements"]["#command"].as_str().unwrap_or_default();
        assert_eq!(
            command,
            format!(
                "kubectl create rolebinding tinycode-use-carol-example-com --clusterrole=tinycode-instance-user \
                 --user='carol@example.com' -n {ns}"
            ),
            "{carol}"
        );

        // A client that is not a browser meeting the proxy's own error (here
        // it calls the callback with the provider's refusal itself) gets it
        // from the gate's front as text naming the instance, not the page.
        let callback = format!("{}/oauth2/callback?error=access_denied&state=x", urls[0]);
        let (status, body) = get_through_ingress(node, &callback, None, Duration::from_secs(60)).await;
        assert!(status >= 400, "{status} {body}");
        assert!(
            body.starts_with(&format!("tinycode dev in namespace {ns}: the sign-in did not complete: ")),
            "{status} {body}"
        );
        assert!(body.contains("access_denied") && body.contains(&format!("({status}).")), "{body}");
        assert!(!body.contains('<'), "no HTML: {body}");

        let pages: Vec<String> = [
            "--url",
            &urls[0],
            "--queue",
            &node.oidc_queue_url,
            "--allowed",
            "alice@example.com",
            "--issuer",
            &node.oidc_issuer,
            "--map",
            ingress_ip.trim(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        // Without the operator's relay the code cannot be redeemed: the
        // proxy's error page names the instance and says what to do.
        let manager = "deployment/tinycode-operator-manager";
        node.kubectl_ok(&["scale", manager, "-n", OPERATOR_NS, "--replicas=0"]);
        wait_manager_pods_gone(node);
        let mut error_args = pages.clone();
        error_args.extend(["--step".to_string(), "relay-down".to_string()]);
        let steps = browser(node, "page", "oidc-mode", &error_args, true);
        node.kubectl_ok(&["scale", manager, "-n", OPERATOR_NS, "--replicas=1"]);
        node.kubectl_ok(&["rollout", "status", manager, "-n", OPERATOR_NS, "--timeout=180s"]);
        let failed = step(&steps, "relay-down");
        sent_to_provider(node, failed, &host);
        assert_eq!(failed["status"], 500, "{failed}");
        assert_eq!(failed["elements"]["#instance"], "dev", "{failed}");
        let message = failed["elements"]["#message"].as_str().unwrap_or_default();
        assert!(message.starts_with("Sign-in did not complete"), "{failed}");
        assert!(failed["elements"]["#next"].as_str().unwrap_or_default().contains("cluster-admin"), "{failed}");

        // Stopped, the front stays and says so to alice: how to start it.
        // Started again, and held before tinycode listens: alice's page says
        // it is starting and reloads itself until tinycode answers, on the
        // same data (its pod found the hold file where the last one left it).
        let (stopped, first, started, agent) =
            stop_and_start_through_the_front(node, &client, ns, "dev", &pod, "oidc-mode", &pages, true).await;
        assert_stopped_page(&stopped, ns, "dev");
        assert_starting_then_ui(&first, &started, &agent);

        // Stopped for idleness (checks every 2 s, a 15 s timeout), the
        // instance is started by the first allowed user who opens it, on the
        // same data; a user not allowed `use` starts nothing.
        set_manager_env(node, &["TINYCODE_ACTIVITY_CHECK_SECONDS=2"]);
        let marker = idle_stop(node, &client, ns, "dev", &agent).await;
        let mut carol_args = pages.clone();
        let alice_at = carol_args.iter().position(|a| a == "alice@example.com").unwrap();
        carol_args[alice_at] = "carol@example.com".into();
        carol_args.extend(["--step".to_string(), "refused-idle".to_string()]);
        let steps = browser(node, "page", "oidc-mode", &carol_args, true);
        let refused = step(&steps, "refused-idle");
        assert_eq!(refused["status"], 403, "{refused}");
        tokio::time::sleep(Duration::from_secs(5)).await;
        let api: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
        let now = api.get("dev").await.unwrap();
        assert_eq!(now.data["status"]["phase"], "Stopped", "carol started it: {:?}", now.data["status"]);
        assert_eq!(start_requested(&client, ns, "dev").await, None, "carol asked for a start");
        // Who used it: the front's gate wrote carol's refusal to its output,
        // where the platform's log collector reads it.
        let front = wait_front(&client, ns, "dev", "idle").await.remove(0).metadata.name.unwrap();
        let logs = node.kubectl_ok(&["logs", &front, "-c", "gate", "-n", ns]);
        let audit: Vec<Value> = logs
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
            .filter(|l| l["audit"] == "tinycode.dev/access")
            .collect();
        assert!(
            audit.iter().any(|l| l["event"] == "access"
                && l["user"] == "carol@example.com"
                && l["outcome"] == "forbidden"
                && l["instance"] == "dev"
                && l["namespace"] == ns),
            "carol's refusal in the gate's audit lines: {audit:?}"
        );

        let mark = root().join("target/e2e-screenshots/oidc-mode-woken.mark");
        let mut wake_args = pages.clone();
        wake_args.extend(["--mark".to_string(), mark.display().to_string(), "--until".into(), "#secret".into()]);
        let steps = browser(node, "starting", "oidc-woken", &wake_args, true);
        assert_woken(node, &client, ns, "dev", &steps, &marker).await;

        // The operator as it was, for the scenarios after this one.
        let _ = Api::<Namespace>::all(client.clone()).delete(ns, &DeleteParams::default()).await;
        set_manager_env(
            node,
            &["TINYCODE_OIDC_ISSUER_URL-", "TINYCODE_OIDC_CLIENT_ID-", "TINYCODE_ACTIVITY_CHECK_SECONDS-"],
        );
    });
    Ok(())
}

/// The class's TinycodeClass that limits egress to `allowed.egress.test`
/// (the node's peer, a host outside the cluster) on the OIDC provider's
/// port, and to Services of the two test namespaces on that port.
fn egress_class(ns: &str, other: &str) -> Value {
    json!({
        "apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeClass",
        "metadata": {"name": "node-egress"},
        "spec": {"egress": {"hosts": [
            {"host": "allowed.egress.test", "ports": [5556]},
            {"host": format!("*.{ns}.svc.cluster.local"), "ports": [5556, 8000]},
            {"host": format!("*.{other}.svc.cluster.local"), "ports": [5556]}
        ]}}
    })
}

/// Egress only where the class allows, with NetworkPolicy enforced by
/// kube-router: an agent whose class sets `egress` reaches the allowed host
/// through its egress proxy, and nothing else: not the same address under
/// another name, not an IP literal (CONNECT or plain), not the metadata
/// stand-in, not an ExternalName Service aliasing a denied host, not
/// another tenant's egress proxy, and not any of them directly with the
/// proxy ignored. A refusal is an event on the instance (through the
/// operator's relay) and a count on the proxy's metrics port.
fn egress_only_where_the_class_allows() -> Result<(), Failed> {
    rt().block_on(async {
        let node = node();
        install_operator(node).await;
        // The node's own ranges (pods, Services, the node), so the peer is
        // outside the cluster as a git host or registry would be.
        // Its DNS is CoreDNS on the node's address, outside any pod.
        set_manager_env(
            node,
            &["TINYCODE_CLUSTER_CIDRS=198.18.128.0/20,198.19.0.0/16,198.18.0.10/32", "TINYCODE_CLUSTER_DNS_CIDRS=198.18.0.10/32"],
        );
        let client = node.client().await;
        let (ns, other) = ("node-egress", "node-egress-b");
        fresh_namespace(node, ns).await;
        fresh_namespace(node, other).await;
        let classes: Api<DynamicObject> = Api::all_with(client.clone(), &ApiResource::erase::<TinycodeClass>(&()));
        let class = egress_class(ns, other);
        classes.patch("node-egress", &PatchParams::apply("node-test").force(), &Patch::Apply(&class)).await.unwrap();
        // A tenant's Service aliasing a host the class does not allow.
        let alias = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "alias"},
                           "spec": {"type": "ExternalName", "externalName": "denied.egress.test"}});
        Api::<Service>::namespaced(client.clone(), ns)
            .patch("alias", &PatchParams::apply("node-test").force(), &Patch::Apply(&alias))
            .await
            .unwrap();
        // A model server that wants a key, which the model-key proxy beside
        // the agent must reach through the egress proxy.
        node.kubectl_ok(&["create", "secret", "generic", "model-keys", "-n", ns, "--from-literal=vllm=sk-node-egress"]);
        keyed_provider(&client, ns, &node.standin_image).await;
        for (n, name) in [(ns, "locked"), (other, "neighbour")] {
            let mut inst = basic_instance(name);
            inst["spec"]["className"] = json!("node-egress");
            if name == "locked" {
                inst["spec"]["vllm"] = json!([{"name": "keyed", "url": format!("http://provider.{ns}.svc:8000"),
                                                "apiKeySecret": {"name": "model-keys", "key": "vllm"}}]);
            }
            apply_instance(&client, n, &inst).await;
        }
        for (n, name) in [(ns, "locked"), (other, "neighbour")] {
            wait_running(&client, n, name).await;
            let deployments: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), n);
            let proxy = format!("{name}-tinycode-egress");
            wait_for(&format!("{n}/{proxy} Ready by its probe"), WAIT, || {
                let deployments = deployments.clone();
                let proxy = proxy.clone();
                async move {
                    let d = deployments.get(&proxy).await.ok()?;
                    (d.status?.available_replicas == Some(1)).then_some(())
                }
            })
            .await;
        }
        let pod = server_pods(&client, ns, "locked").await[0].metadata.name.clone().unwrap();
        let issuer_path = node.oidc_issuer.splitn(4, '/').nth(3).map(|p| format!("/{p}")).unwrap_or_default();
        let discovery = format!("{issuer_path}/.well-known/openid-configuration");
        let get = |args: &[&str]| String::from_utf8_lossy(&node.standin(ns, &pod, args).stdout).into_owned();

        // Allowed: by name, through the proxy (the NetworkPolicy may take a
        // moment to admit the new pod's address).
        let allowed = get(&["get", "-retry-for", "30s", &format!("http://allowed.egress.test:5556{discovery}")]);
        assert!(allowed.starts_with("status 200") && allowed.contains("issuer"), "the allowed host: {allowed}");
        // The same address under a name the class does not hold: the proxy's refusal.
        let denied = get(&["get", &format!("http://denied.egress.test:5556{discovery}")]);
        assert!(denied.starts_with("status 403") && denied.contains("denied.egress.test"), "{denied}");
        assert!(denied.contains("not in the class's egress allow-list"), "{denied}");
        // Named on the instance, for the tenant: the proxy told the relay,
        // with the start credential of the front's Secret.
        let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), ns);
        let note = wait_for("an EgressRefused event on the instance", Duration::from_secs(60), || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.ok()?;
                list.items.into_iter().find_map(|e| {
                    let on = e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("locked");
                    (on && e.reason.as_deref() == Some("EgressRefused")).then_some(e.note.unwrap_or_default())
                })
            }
        })
        .await;
        assert!(note.contains("denied.egress.test:5556") && note.contains("spec.egress"), "{note}");
        // An IP literal, in plain HTTP and by CONNECT (https).
        let literal = get(&["get", "http://198.18.0.11:5556/"]);
        assert!(literal.starts_with("status 403"), "an IP literal: {literal}");
        let connect = get(&["get", "-timeout", "5s", "https://198.18.0.11:5556/"]);
        assert!(connect.starts_with("unreachable") && connect.contains("Forbidden"), "CONNECT to an IP: {connect}");
        // The metadata stand-in.
        let metadata = get(&["get", &node.metadata_url]);
        assert!(metadata.starts_with("status 403"), "the metadata address through the proxy: {metadata}");
        // The model-key proxy reaches its provider (by the Service's short
        // name) through the egress proxy, with the key; the agent itself
        // cannot reach it directly.
        let models = get(&["get", "-retry-for", "30s", "http://127.0.0.1:4099/keyed/v1/models"]);
        assert!(models.starts_with("status 200") && models.contains("keyed-standin"), "through both proxies: {models}");
        let direct = get(&["get", "-direct", "-timeout", "2s", "-retry-for", "6s", &format!("http://provider.{ns}.svc:8000/v1/models")]);
        assert!(direct.starts_with("unreachable"), "the provider directly: {direct}");
        // An ExternalName Service of an allowed namespace aliasing a denied host.
        let aliased = get(&["get", &format!("http://alias.{ns}.svc.cluster.local:5556{discovery}")]);
        assert!(aliased.starts_with("status 403") && aliased.contains("alias of denied.egress.test"), "{aliased}");

        // With the proxy ignored, nothing answers: the allowed host, the
        // metadata stand-in, the neighbour's egress proxy. (A pod no policy
        // holds reaches the first two: the policy is what stops the agent.)
        for url in [format!("http://198.18.0.11:5556{discovery}"), node.metadata_url.clone()] {
            let control = get_from_pod(node, &client, other, &url, None, ALLOWED).await;
            assert!(control.starts_with("status 200"), "{url} from an unconfined pod: {control}");
        }
        let neighbour_proxy = format!("http://neighbour-tinycode-egress.{other}.svc.cluster.local:3128/healthz");
        for url in [format!("http://198.18.0.11:5556{discovery}"), node.metadata_url.clone(), neighbour_proxy.clone()] {
            let direct = get(&["get", "-direct", "-timeout", "2s", "-retry-for", "6s", &url]);
            assert!(direct.starts_with("unreachable"), "{url} directly: {direct}");
        }
        // The neighbour's proxy admits its own agent and no other pod of its namespace.
        let neighbour = server_pods(&client, other, "neighbour").await[0].metadata.name.clone().unwrap();
        let own = String::from_utf8_lossy(&node.standin(other, &neighbour, &["get", "-direct", "-retry-for", "30s", &neighbour_proxy]).stdout).into_owned();
        assert!(own.starts_with("status 200"), "the neighbour's agent to its proxy: {own}");
        let stranger = get_from_pod(node, &client, other, &neighbour_proxy, None, REFUSED).await;
        assert!(stranger.starts_with("unreachable"), "another pod to the neighbour's proxy: {stranger}");

        // The refusals, counted by reason (the monitoring namespace scrapes).
        if Api::<Namespace>::all(client.clone()).get_opt("monitoring").await.unwrap().is_none() {
            node.kubectl_ok(&["create", "namespace", "monitoring"]);
        }
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let lp = ListParams::default().labels("app.kubernetes.io/instance=locked,app.kubernetes.io/component=egress");
        let proxy_ip = pods.list(&lp).await.unwrap().items[0].status.as_ref().and_then(|s| s.pod_ip.clone()).unwrap();
        let metrics =
            get_from_pod(node, &client, "monitoring", &format!("http://{proxy_ip}:3129/metrics"), None, ALLOWED).await;
        for kind in ["host_not_allowed", "address_not_allowed", "alias_not_allowed"] {
            let series = format!("tinycode_egress_refused_total{{namespace=\"{ns}\",instance=\"locked\",class=\"node-egress\",kind=\"{kind}\"}}");
            assert!(metrics.contains(&series), "{series} in:\n{metrics}");
        }
        for n in [ns, other] {
            let _ = Api::<Namespace>::all(client.clone()).delete(n, &DeleteParams::default()).await;
        }
        let _ = classes.delete("node-egress", &DeleteParams::default()).await;
        set_manager_env(node, &["TINYCODE_CLUSTER_CIDRS-", "TINYCODE_CLUSTER_DNS_CIDRS-"]);
    });
    Ok(())
}

fn main() {
    let mut args = Arguments::from_args();
    // One node, one scenario at a time, in this order.
    args.test_threads = Some(1);
    type Scenario = fn() -> Result<(), Failed>;
    let scenarios: Vec<(&str, Scenario)> = vec![
        ("operator_runs_as_a_pod", operator_runs_as_a_pod),
        ("basic_instance_runs", basic_instance_runs),
        ("tenant_privileged_pod_refused", tenant_privileged_pod_refused),
        ("tenant_host_directory_pods_refused", tenant_host_directory_pods_refused),
        ("tenant_roles_aggregate", tenant_roles_aggregate),
        ("data_survives_stop_start", data_survives_stop_start),
        ("network_policy_enforced", network_policy_enforced),
        ("operator_network_policy_enforced", operator_network_policy_enforced),
        ("pull_secrets", pull_secrets),
        ("status_names_pod_failures", status_names_pod_failures),
        ("a_rollout_without_progress_stalls", a_rollout_without_progress_stalls),
        ("idle_stop_from_real_activity", idle_stop_from_real_activity),
        ("git_init_container_clones", git_init_container_clones),
        ("bundled_ollama_counts_toward_ready", bundled_ollama_counts_toward_ready),
        ("model_keys_stay_out_of_the_agent", model_keys_stay_out_of_the_agent),
        ("oidc_sign_in_on_a_pod", oidc_sign_in_on_a_pod),
        ("egress_only_where_the_class_allows", egress_only_where_the_class_allows),
        ("namespace_deletion_completes", namespace_deletion_completes),
        ("ingress_serves_the_url", ingress_serves_the_url),
        ("run_local_main_job", run_local_main_job),
    ];
    let trials = scenarios.into_iter().map(|(name, f)| Trial::test(name, f)).collect();
    libtest_mimic::run(&args, trials).exit();
}

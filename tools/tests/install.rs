//! hack/install.sh, hack/prepare-namespace.sh and hack/uninstall.sh against
//! the local control plane (hack/local-cluster.sh: a real kube-apiserver, no
//! nodes, no controller-manager): install, prepare a namespace, apply every
//! sample, uninstall, then all of it a second time. Assertions read the API.
//! The second round installs the image `make image` built and plays the
//! kubelet for the manager Deployment: its container runs from the image's
//! root filesystem (read-only, /tmp a tmpfs, UID 1001) with the
//! ServiceAccount token a pod gets, and brings the basic sample to Running.
//!
//! The control plane is shared with tools/tests/e2e (never at the same time: cargo
//! runs test binaries one after another). Uninstall removes the operator's
//! ClusterRole, SCCs and namespace, which e2e re-creates in its setup, and
//! keeps the CRD, which e2e needs. Without a controller-manager a deleted
//! namespace stays Terminating forever, so this test plays the namespace
//! controller (empties and finalizes it) and leaves nothing Terminating behind.

use std::collections::BTreeMap;
#[path = "support/image.rs"]
mod image;
#[path = "support/local_cluster.rs"]
mod local_cluster;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, Service, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{ApiResource, DynamicObject, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use local_cluster::{local_cluster, value_of};
use serde_json::Value;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::platform::openshift::SecurityContextConstraints;
use tinycode_tools::devcluster;

const OPERATOR_NS: &str = "tinycode-operator-system";
const CRD: &str = "tinycodeinstances.tinycode.dev";
const PASSWORD: &str = "install-test pa$$word \"quoted\"";
const CLUSTER_ROLES: &[&str] = &[
    "tinycode-operator-manager",
    "tinycode-scc-restricted",
    "tinycode-scc-hostpath",
    "tinycode-scc-shell",
    "tinycode-user-role",
    "tinycode-user-view-role",
    "tinycode-operator-metrics-reader",
];
const SCCS: &[&str] = &["tinycode-restricted", "tinycode-hostpath", "tinycode-shell"];

/// The repository (and workspace) root, one above this crate.
fn root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

struct Cluster {
    kubeconfig: PathBuf,
    kubectl: PathBuf,
    helm: PathBuf,
}

impl Cluster {
    fn start() -> Cluster {
        let tools = local_cluster("tools");
        let started = local_cluster("start");
        Cluster {
            kubeconfig: value_of(&started, "export KUBECONFIG="),
            kubectl: value_of(&tools, "TINYCODE_KUBECTL="),
            helm: value_of(&tools, "TINYCODE_HELM="),
        }
    }

    async fn client(&self) -> Client {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig).expect("read the admin kubeconfig");
        let config =
            Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
        Client::try_from(config).expect("client")
    }

    /// Runs a hack/ script as a cluster-admin would, with the local tools.
    fn script(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(root().join("hack").join(script))
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("KUBECTL", &self.kubectl)
            .env("HELM", &self.helm)
            .env_remove("OPERATOR_IMAGE")
            .env_remove("INSTALL_WAIT")
            .env_remove("DELETE_CRD")
            .env_remove("TINYCODE_PASSWORD")
            .stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run the script")
    }

    fn script_ok(&self, script: &str, args: &[&str], env: &[(&str, &str)]) -> String {
        let out = self.script(script, args, env);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "hack/{script} {args:?} failed:\n{text}");
        text
    }

    fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> Output {
        use std::io::Write;
        let mut child = Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run kubectl");
        if let Some(input) = stdin {
            child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        }
        child.wait_with_output().unwrap()
    }

    /// `helm status` of a release, as JSON text.
    fn helm_release(&self, ns: &str, name: &str) -> String {
        let out = Command::new(&self.helm)
            .args(["status", name, "-n", ns, "-o", "json"])
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("run helm");
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }

    /// Plays the namespace controller that this control plane lacks: deletes
    /// what is left in a Terminating namespace, then removes its finalizer so
    /// it is really gone (and can be created again).
    fn finish_namespace_deletion(&self, ns: &str) {
        if !self.kubectl(&["get", "namespace", ns], None).status.success() {
            return; // gone already
        }
        self.kubectl(&["delete", "namespace", ns, "--wait=false", "--ignore-not-found"], None);
        let kinds = self.kubectl(&["api-resources", "--namespaced", "--verbs=list,delete", "-o", "name"], None);
        let kinds: Vec<String> = String::from_utf8_lossy(&kinds.stdout).lines().map(String::from).collect();
        if !kinds.is_empty() {
            self.kubectl(&["delete", &kinds.join(","), "--all", "-n", ns, "--wait=false", "--ignore-not-found"], None);
        }
        let path = format!("/api/v1/namespaces/{ns}/finalize");
        for _ in 0..50 {
            let out = self.kubectl(&["get", "namespace", ns, "-o", "json"], None);
            if !out.status.success() {
                return;
            }
            let mut namespace: Value = serde_json::from_slice(&out.stdout).unwrap();
            namespace["spec"]["finalizers"] = Value::Array(vec![]);
            let out = self.kubectl(&["replace", "--raw", &path, "-f", "-"], Some(&namespace.to_string()));
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() || err.contains("NotFound") || err.contains("Conflict"),
                "finalizing namespace {ns}: {err}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        panic!("namespace {ns} is still there after finalizing it");
    }
}

/// Leaves nothing Terminating behind, also when an assertion fails midway
/// (tools/tests/e2e installs into tinycode-operator-system next).
struct Cleanup<'a> {
    cluster: &'a Cluster,
    instance_ns: String,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        let c = self.cluster;
        // No operator runs, so nothing would ever remove an instance finalizer.
        let list = c.kubectl(&["get", "tinycodeinstances", "-n", &self.instance_ns, "-o", "name"], None);
        for name in String::from_utf8_lossy(&list.stdout).lines() {
            c.kubectl(
                &["patch", name, "-n", &self.instance_ns, "--type=merge", "-p", r#"{"metadata":{"finalizers":null}}"#],
                None,
            );
        }
        c.finish_namespace_deletion(&self.instance_ns);
        let phase = c.kubectl(&["get", "namespace", OPERATOR_NS, "-o", "jsonpath={.metadata.deletionTimestamp}"], None);
        if phase.status.success() && !phase.stdout.is_empty() {
            c.finish_namespace_deletion(OPERATOR_NS);
        }
    }
}

fn openshift_crds_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TINYCODE_OPENSHIFT_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/openshift-crds"));
    dir.join("routes.route.openshift.io.yaml").is_file().then_some(dir)
}

fn samples() -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(root().join("config/samples")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        if !name.ends_with(".yaml") || name == "kustomization.yaml" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for v in serde_saphyr::from_multiple::<Value>(&text).unwrap() {
            out.push((name.clone(), v));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    assert!(out.len() >= 8, "expected one sample per mode, found {}", out.len());
    out
}

async fn exists<K>(api: &Api<K>, name: &str) -> bool
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.get_opt(name).await.unwrap_or_else(|e| panic!("get {name}: {e}")).is_some()
}

/// Gone, or in a namespace that is being deleted (no controller-manager here
/// to finish that), which counts as gone.
async fn namespace_gone_or_terminating(client: &Client, ns: &str) -> bool {
    match Api::<Namespace>::all(client.clone()).get_opt(ns).await.unwrap() {
        None => true,
        Some(n) => n.metadata.deletion_timestamp.is_some(),
    }
}

async fn assert_installed(client: &Client, image: &str) {
    let crd = Api::<CustomResourceDefinition>::all(client.clone()).get(CRD).await.expect("the CRD is installed");
    let established = crd
        .status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == "Established" && c.status == "True");
    assert!(established, "the CRD is not Established");
    let sccs: Api<SecurityContextConstraints> = Api::all(client.clone());
    for scc in SCCS {
        assert!(exists(&sccs, scc).await, "SCC {scc} missing");
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for role in CLUSTER_ROLES {
        assert!(exists(&roles, role).await, "ClusterRole {role} missing");
    }
    let crb = Api::<ClusterRoleBinding>::all(client.clone()).get("tinycode-operator-manager").await.unwrap();
    let subject = &crb.subjects.unwrap()[0];
    assert_eq!((subject.name.as_str(), subject.namespace.as_deref()), ("tinycode-operator-manager", Some(OPERATOR_NS)));

    let ns = Api::<Namespace>::all(client.clone()).get(OPERATOR_NS).await.unwrap();
    assert!(ns.metadata.deletion_timestamp.is_none());
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("pod-security.kubernetes.io/enforce").map(String::as_str), Some("restricted"));
    assert!(exists(&Api::<ServiceAccount>::namespaced(client.clone(), OPERATOR_NS), "tinycode-operator-manager").await);
    assert!(exists(&Api::<Role>::namespaced(client.clone(), OPERATOR_NS), "tinycode-operator-leader-election").await);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), OPERATOR_NS);
    for b in ["tinycode-operator-leader-election", "tinycode-operator-scc"] {
        assert!(exists(&bindings, b).await, "RoleBinding {OPERATOR_NS}/{b} missing");
    }
    assert!(exists(&Api::<Service>::namespaced(client.clone(), OPERATOR_NS), "tinycode-operator-metrics").await);
    let d = Api::<Deployment>::namespaced(client.clone(), OPERATOR_NS).get("tinycode-operator-manager").await.unwrap();
    let pod = d.spec.template.spec.unwrap();
    assert_eq!(pod.service_account_name.as_deref(), Some("tinycode-operator-manager"));
    let c = &pod.containers[0];
    assert_eq!(c.image.as_deref(), Some(image));
    assert_eq!(c.security_context.as_ref().and_then(|s| s.read_only_root_filesystem), Some(true));
}

async fn assert_uninstalled(client: &Client) {
    let sccs: Api<SecurityContextConstraints> = Api::all(client.clone());
    for scc in SCCS {
        assert!(!exists(&sccs, scc).await, "SCC {scc} left behind");
    }
    let roles: Api<ClusterRole> = Api::all(client.clone());
    for role in CLUSTER_ROLES {
        assert!(!exists(&roles, role).await, "ClusterRole {role} left behind");
    }
    let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
    assert!(!exists(&crbs, "tinycode-operator-manager").await, "ClusterRoleBinding left behind");
    assert!(namespace_gone_or_terminating(client, OPERATOR_NS).await, "namespace {OPERATOR_NS} left behind");
    // What lived in the namespace was deleted explicitly, not left to the
    // namespace controller.
    let ns = OPERATOR_NS;
    assert!(!exists(&Api::<Deployment>::namespaced(client.clone(), ns), "tinycode-operator-manager").await);
    assert!(!exists(&Api::<Service>::namespaced(client.clone(), ns), "tinycode-operator-metrics").await);
    assert!(!exists(&Api::<ServiceAccount>::namespaced(client.clone(), ns), "tinycode-operator-manager").await);
    assert!(!exists(&Api::<Role>::namespaced(client.clone(), ns), "tinycode-operator-leader-election").await);
    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), ns);
    for b in ["tinycode-operator-leader-election", "tinycode-operator-scc"] {
        assert!(!exists(&bindings, b).await, "RoleBinding {ns}/{b} left behind");
    }
    // Kept on purpose: the CRD (deleting it deletes every instance).
    assert!(exists(&Api::<CustomResourceDefinition>::all(client.clone()), CRD).await, "uninstall removed the CRD");
}

async fn password_in(client: &Client, ns: &str) -> String {
    let secret = Api::<Secret>::namespaced(client.clone(), ns).get("tinycode-password").await.unwrap();
    let data = secret.data.unwrap_or_default();
    String::from_utf8(data["TINYCODE_SERVER_PASSWORD"].0.clone()).unwrap()
}

async fn assert_prepared(client: &Client, ns: &str) {
    let rb = Api::<RoleBinding>::namespaced(client.clone(), ns).get("tinycode-operator-admin").await.unwrap();
    assert_eq!((rb.role_ref.kind.as_str(), rb.role_ref.name.as_str()), ("ClusterRole", "admin"));
    let s = &rb.subjects.unwrap()[0];
    assert_eq!(
        (s.kind.as_str(), s.name.as_str(), s.namespace.as_deref()),
        ("ServiceAccount", "tinycode-operator-manager", Some(OPERATOR_NS))
    );
    assert_eq!(password_in(client, ns).await, PASSWORD);
    let labels: BTreeMap<String, String> =
        Api::<Namespace>::all(client.clone()).get(ns).await.unwrap().metadata.labels.unwrap_or_default();
    assert_eq!(labels.get("tinycode.dev/allow-hostpath").map(String::as_str), Some("true"));
    assert_eq!(labels.get("tinycode.dev/allow-shell").map(String::as_str), Some("true"));
}

/// Applies every sample into `ns` through the apiserver's admission (schema
/// and CEL rules), as `oc apply` would.
async fn apply_samples(client: &Client, ns: &str) -> Vec<String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &ApiResource::erase::<TinycodeInstance>(&()));
    let mut names = Vec::new();
    for (file, mut sample) in samples() {
        sample["metadata"]["namespace"] = ns.into();
        let name = sample["metadata"]["name"].as_str().unwrap().to_string();
        api.patch(&name, &PatchParams::apply("install-test").force(), &Patch::Apply(&sample))
            .await
            .unwrap_or_else(|e| panic!("config/samples/{file} was refused at admission: {e}"));
        names.push(name);
    }
    names
}

fn assert_not_leaked(output: &str) {
    assert!(!output.contains(PASSWORD), "a script printed the password");
}

#[tokio::test]
async fn install_prepare_samples_uninstall_twice() {
    let cluster = Cluster::start();
    let client = cluster.client().await;
    devcluster::install_openshift_apis(&client, openshift_crds_dir().as_deref()).await.expect("OpenShift APIs");
    let ns = format!("install-test-{:04x}", std::process::id() % 0xffff);
    let _cleanup = Cleanup { cluster: &cluster, instance_ns: ns.clone() };
    // Terminating leftovers of an earlier, interrupted run: the operator's
    // namespace would block the install.
    let all = cluster.kubectl(&["get", "namespaces", "-o", "name"], None);
    for name in String::from_utf8_lossy(&all.stdout).lines().filter_map(|l| l.strip_prefix("namespace/")) {
        if name.starts_with("install-test-") && name != ns {
            cluster.finish_namespace_deletion(name);
        }
    }
    let deleting =
        cluster.kubectl(&["get", "namespace", OPERATOR_NS, "-o", "jsonpath={.metadata.deletionTimestamp}"], None);
    if deleting.status.success() && !deleting.stdout.is_empty() {
        cluster.finish_namespace_deletion(OPERATOR_NS);
    }

    // A tenant running the preparation script gets a refusal naming
    // cluster-admin, and nothing is written: no namespace, no RoleBinding.
    let dir = tempfile::tempdir().unwrap();
    let as_alice = dir.path().join("kubectl-as-alice");
    std::fs::write(&as_alice, format!("#!/bin/sh\nexec '{}' --as=alice \"$@\"\n", cluster.kubectl.display())).unwrap();
    std::fs::set_permissions(&as_alice, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let alice_ns = format!("{ns}-alice");
    let refused = cluster.script("prepare-namespace.sh", &[&alice_ns], &[("KUBECTL", as_alice.to_str().unwrap())]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "alice prepared a namespace:\n{err}");
    assert!(err.contains("this needs cluster-admin"), "the refusal says who may: {err}");
    assert!(
        !exists(&Api::<Namespace>::all(client.clone()), &alice_ns).await,
        "a refused preparation wrote the namespace"
    );

    let instances: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::erase::<TinycodeInstance>(&()));
    for round in 1..=2 {
        // Round 1 says --no-wait; round 2 relies on install.sh noticing that the
        // cluster has no nodes. Round 2 also installs another image.
        let local_image = format!("localhost/tinycode-operator:{}", image::VERSION);
        let image = if round == 1 { "registry.example/platform/tinycode-operator:0.1.0" } else { local_image.as_str() };
        let out = if round == 1 {
            // No image given: refused before anything is applied (a default would
            // be a guess at somebody's registry).
            // (An interrupted earlier run may have left a manager: compare.)
            let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NS);
            let version = |d: Option<Deployment>| d.and_then(|d| d.metadata.resource_version);
            let before = version(deployments.get_opt("tinycode-operator-manager").await.unwrap());
            let refused = cluster.script("install.sh", &["--no-wait"], &[]);
            let text = String::from_utf8_lossy(&refused.stderr);
            assert!(!refused.status.success(), "install.sh without an image must fail:\n{text}");
            assert!(text.contains("OPERATOR_IMAGE"), "the refusal names the setting:\n{text}");
            let after = version(deployments.get_opt("tinycode-operator-manager").await.unwrap());
            assert_eq!(before, after, "a refused install applied the manager");
            cluster.script_ok("install.sh", &["--no-wait", "--image", image], &[])
        } else {
            cluster.script_ok("install.sh", &[], &[("OPERATOR_IMAGE", image)])
        };
        assert!(out.contains("tinycode-operator is installed"), "{out}");
        if round == 2 {
            assert!(out.contains("no nodes"), "install.sh should skip the rollout wait without nodes:\n{out}");
        }
        assert_installed(&client, image).await;

        // Preparing is idempotent; the second --generate-password keeps the password.
        let out = cluster.script_ok(
            "prepare-namespace.sh",
            &[&ns, "--password-from-env", "--allow-hostpath", "--allow-shell"],
            &[("TINYCODE_PASSWORD", PASSWORD)],
        );
        assert_not_leaked(&out);
        let out = cluster.script_ok("prepare-namespace.sh", &[&ns, "--generate-password"], &[]);
        assert_not_leaked(&out);
        assert_prepared(&client, &ns).await;

        let mut names = apply_samples(&client, &ns).await;
        for name in &names {
            assert!(exists(&instances, name).await, "instance {name} missing after apply");
        }
        if round == 2 {
            let deleted = run_basic_sample_with_the_manager_from_the_image(&cluster, &client, &ns).await;
            names.retain(|n| *n != deleted);
        }

        let out = cluster.script_ok("uninstall.sh", &[], &[]);
        assert!(out.contains("kept the CRD"), "{out}");
        assert_uninstalled(&client).await;
        // Idempotent: a second run finds nothing to do and succeeds.
        cluster.script_ok("uninstall.sh", &[], &[]);
        assert_uninstalled(&client).await;
        // Kept: the instances (CRD kept) and the prepared namespace.
        for name in &names {
            assert!(exists(&instances, name).await, "uninstall deleted instance {name} although it keeps the CRD");
        }
        assert_eq!(password_in(&client, &ns).await, PASSWORD, "uninstall touched the instance namespace");

        if round == 1 {
            // Installing into a namespace that is still being deleted fails with a clear message.
            let out = cluster.script("install.sh", &["--no-wait", "--image", image], &[]);
            assert!(!out.status.success());
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("is being deleted"), "{err}");
        }
        cluster.finish_namespace_deletion(OPERATOR_NS);
    }
}

#[test]
fn prepare_namespace_refuses_reserved_namespaces_without_touching_the_cluster() {
    for ns in ["default", "kube-system", "openshift-operators", "tinycode-operator-system"] {
        let out = Command::new("bash")
            .arg(root().join("hack/prepare-namespace.sh"))
            .arg(ns)
            // An unreachable cluster proves the refusal comes first.
            .env("KUBECONFIG", "/nonexistent")
            .env("KUBECTL", "true")
            .output()
            .unwrap();
        assert!(!out.status.success(), "{ns} was accepted");
        assert!(String::from_utf8_lossy(&out.stderr).contains("is reserved"), "{ns}");
    }
}

#[test]
fn scripts_explain_themselves() {
    for script in ["install.sh", "uninstall.sh", "prepare-namespace.sh", "image.sh", "sbom.sh", "olm-validate.sh"] {
        let out = Command::new("bash").arg(root().join("hack").join(script)).arg("--help").output().unwrap();
        assert!(out.status.success(), "{script} --help failed");
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(text.contains("Usage:"), "{script} --help: {text}");
    }
}

/// The manager Deployment install.sh applied, run the way a kubelet would run
/// it, from the image `make image` built.
struct ManagerFromImage {
    child: std::process::Child,
    log: PathBuf,
    _secrets: tempfile::TempDir,
}

impl ManagerFromImage {
    async fn start(cluster: &Cluster, client: &Client) -> ManagerFromImage {
        use base64::Engine;
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), OPERATOR_NS);
        let deployment = deployments.get("tinycode-operator-manager").await.expect("the manager Deployment");
        let pod = deployment.spec.template.spec.unwrap();
        let sa = pod.service_account_name.clone().expect("the manager names its ServiceAccount");
        let container = pod.containers[0].clone();
        assert_eq!(
            container.image.as_deref(),
            Some(format!("localhost/tinycode-operator:{}", image::VERSION).as_str()),
            "install.sh put the built image into the Deployment"
        );

        // What the kubelet mounts at the in-cluster path: a token for the
        // Deployment's ServiceAccount, the cluster's CA, the namespace.
        let kubeconfig = Kubeconfig::read_from(&cluster.kubeconfig).unwrap();
        let server_cluster = kubeconfig.clusters[0].cluster.clone().unwrap();
        let ca = base64::engine::general_purpose::STANDARD
            .decode(server_cluster.certificate_authority_data.clone().unwrap())
            .unwrap();
        let server = server_cluster.server.clone().unwrap();
        let (host, port) = server.trim_start_matches("https://").trim_end_matches('/').rsplit_once(':').unwrap();
        let token = cluster.kubectl(&["create", "token", &sa, "-n", OPERATOR_NS, "--duration=1h"], None);
        assert!(token.status.success(), "a token for {sa}: {}", String::from_utf8_lossy(&token.stderr));
        let secrets = tempfile::tempdir().unwrap();
        std::fs::write(secrets.path().join("token"), String::from_utf8(token.stdout).unwrap().trim()).unwrap();
        std::fs::write(secrets.path().join("ca.crt"), ca).unwrap();
        std::fs::write(secrets.path().join("namespace"), OPERATOR_NS).unwrap();
        // Readable by UID 1001 through the read-only bind mount.
        for f in ["", "token", "ca.crt", "namespace"] {
            let path = secrets.path().join(f);
            let mode = if f.is_empty() { 0o755 } else { 0o644 };
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
        }

        // The environment: the image's, then the container's (field
        // references resolved as the kubelet does), then the Service
        // variables the kubelet adds, pointing at the apiserver on loopback.
        let archive = image::archive();
        let mut env = image::image_env(&archive);
        for e in container.env.clone().unwrap_or_default() {
            let value = match (e.value, e.value_from.and_then(|v| v.field_ref).map(|f| f.field_path)) {
                (Some(v), _) => v,
                (None, Some(path)) => match path.as_str() {
                    "metadata.namespace" => OPERATOR_NS.to_string(),
                    "metadata.name" => "tinycode-operator-manager-from-image".to_string(),
                    "spec.serviceAccountName" => sa.clone(),
                    other => panic!("manager.yaml reads field {other}, which this kubelet does not resolve"),
                },
                (None, None) => String::new(),
            };
            env.insert(e.name, value);
        }
        env.insert("KUBERNETES_SERVICE_HOST".into(), host.to_string());
        env.insert("KUBERNETES_SERVICE_PORT".into(), port.to_string());

        let config = image::config(&archive);
        let mut argv: Vec<String> = match container.command {
            Some(c) => c,
            None => serde_json::from_value(config["config"]["Entrypoint"].clone()).unwrap(),
        };
        argv.extend(match container.args {
            Some(a) => a,
            None => serde_json::from_value(config["config"]["Cmd"].clone()).unwrap(),
        });
        let argv: Vec<&str> = argv.iter().map(String::as_str).collect();

        let log = image::repo_root().join("target/image/install-test-operator.log");
        let out = std::fs::File::create(&log).unwrap();
        let child = image::in_image(
            &env,
            &[(secrets.path().to_path_buf(), "/var/run/secrets/kubernetes.io/serviceaccount")],
            &argv,
        )
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .expect("start the operator from the image");
        let manager = ManagerFromImage { child, log, _secrets: secrets };

        // The readiness probe the Deployment declares.
        let port = container
            .ports
            .unwrap_or_default()
            .iter()
            .find(|p| p.name.as_deref() == Some("health"))
            .map(|p| p.container_port as u16)
            .expect("a health port");
        let mut manager = manager;
        for _ in 0..600 {
            if let Some(status) = manager.child.try_wait().unwrap() {
                panic!("the operator from the image exited ({status}):\n{}", manager.log_text());
            }
            if readyz(port) {
                return manager;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        panic!("the operator from the image was not ready within 60 s:\n{}", manager.log_text());
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ManagerFromImage {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn readyz(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(std::time::Duration::from_secs(2)));
    if s.write_all(b"GET /readyz HTTP/1.0\r\nHost: localhost\r\n\r\n").is_err() {
        return false;
    }
    let mut buf = String::new();
    let _ = s.read_to_string(&mut buf);
    buf.starts_with("HTTP/1.1 200") || buf.starts_with("HTTP/1.0 200")
}

/// The operator from the image reconciles the basic sample to Running (the
/// tests play the kubelet and the router), then removes it on deletion; its name.
async fn run_basic_sample_with_the_manager_from_the_image(cluster: &Cluster, client: &Client, ns: &str) -> String {
    // No controller-manager: the aggregated ClusterRoles are filled here.
    devcluster::aggregate_cluster_roles(client).await.expect("aggregate ClusterRoles");
    let manager = ManagerFromImage::start(cluster, client).await;
    let (_, basic) =
        samples().into_iter().find(|(f, _)| f == "tinycode_v1alpha1_basic.yaml").expect("the basic sample");
    let name = basic["metadata"]["name"].as_str().unwrap().to_string();
    let instances: Api<TinycodeInstance> = Api::namespaced(client.clone(), ns);
    let deployment = tinycode_operator::api::naming::fullname(&name);
    let front = tinycode_operator::api::naming::front(&name);
    let route = tinycode_operator::api::naming::route(&name);

    let mut phase = String::new();
    for _ in 0..1200 {
        let _ = devcluster::mark_deployment_available(client, ns, &deployment).await;
        let _ = devcluster::mark_deployment_available(client, ns, &front).await;
        let _ = devcluster::admit_route(client, ns, &route, &format!("{name}-{ns}.apps.local.test")).await;
        let inst = instances.get(&name).await.unwrap();
        phase = inst.status.as_ref().and_then(|s| s.phase.as_ref()).map(|p| p.as_str().to_string()).unwrap_or_default();
        if phase == "Running" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(
        phase,
        "Running",
        "the operator from the image did not bring {name} to Running:\n{}",
        manager.log_text()
    );
    // Release records live in the operator's namespace (tenants cannot forge them).
    let release = cluster.helm_release(OPERATOR_NS, &tinycode_operator::api::naming::release_name(ns, &name));
    assert!(release.contains("deployed"), "helm from the image installed the release: {release}");

    // Deleted: the finalizer runs helm uninstall from the image and lets go.
    instances.delete(&name, &Default::default()).await.unwrap();
    for _ in 0..600 {
        if instances.get_opt(&name).await.unwrap().is_none() {
            return name;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("the operator from the image did not finish deleting {name}:\n{}", manager.log_text());
}

/// Runs hack/install.sh against a stand-in kubectl that answers every check
/// and records the manifests applied from standard input: what install.sh
/// renders, without a cluster. The exit status, its output (stderr, then
/// stdout) and that record.
fn install_with_stand_in_kubectl(args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let applied = dir.path().join("applied.yaml");
    let kubectl = dir.path().join("kubectl");
    std::fs::write(
        &kubectl,
        "#!/usr/bin/env bash\n\
         case \"$1 $2\" in 'auth whoami') echo admin ;; 'auth can-i') echo yes ;; esac\n\
         if [[ \" $* \" == *' -f - '* ]]; then cat >>\"$APPLIED\"; echo --- >>\"$APPLIED\"; fi\n",
    )
    .unwrap();
    std::fs::set_permissions(&kubectl, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = Command::new("bash")
        .arg(root().join("hack/install.sh"))
        .args(["--no-wait", "--image", "registry.example/platform/tinycode-operator:0.1.0"])
        .args(args)
        .env("KUBECTL", &kubectl)
        .env("HELM", "true")
        .env("KUBECONFIG", "/nonexistent")
        .env("APPLIED", &applied)
        .env_remove("WATCH_NAMESPACES")
        .env_remove("OPERATOR_IMAGE")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let record = std::fs::read_to_string(&applied).unwrap_or_default();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stderr), String::from_utf8_lossy(&out.stdout));
    (out.status.success(), text, record)
}

/// WATCH_NAMESPACE of the manager Deployment install.sh applied.
fn applied_watch_namespace(record: &str) -> Value {
    let manager = serde_saphyr::from_multiple::<Value>(record)
        .unwrap()
        .into_iter()
        .find(|v| v["kind"] == "Deployment")
        .expect("install.sh applied the manager Deployment");
    let env = manager["spec"]["template"]["spec"]["containers"][0]["env"].as_array().unwrap().clone();
    env.into_iter().find(|e| e["name"] == "WATCH_NAMESPACE").unwrap()["value"].clone()
}

#[test]
fn install_watches_all_namespaces_unless_told_one_without_touching_a_cluster() {
    let (ok, err, record) = install_with_stand_in_kubectl(&[], &[]);
    assert!(ok, "{err}");
    assert_eq!(applied_watch_namespace(&record), "", "all namespaces by default");
    assert!(err.contains("watching all namespaces"), "{err}");

    let (ok, err, record) = install_with_stand_in_kubectl(&["--watch-namespaces", "team-a"], &[]);
    assert!(ok, "{err}");
    assert_eq!(applied_watch_namespace(&record), "team-a");
    let (ok, err, record) = install_with_stand_in_kubectl(&[], &[("WATCH_NAMESPACES", " team-a, ")]);
    assert!(ok, "{err}");
    assert_eq!(applied_watch_namespace(&record), "team-a", "the variable, trimmed");
    assert!(err.contains("hack/prepare-namespace.sh team-a"), "the next steps name it: {err}");

    for (value, refusal) in [
        ("team-a,team-b", "names several namespaces"),
        ("Team_A", "is not a namespace name"),
        ("tinycode-operator-system", "the operator's own namespace"),
    ] {
        let (ok, err, record) = install_with_stand_in_kubectl(&["--watch-namespaces", value], &[]);
        assert!(!ok && err.contains(refusal), "{value}: {err}");
        assert!(record.is_empty(), "{value}: refused before anything was applied");
    }
}

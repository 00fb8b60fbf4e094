//! config/scc/sccs.yaml against the real OpenShift SCC schema
//! (`../shared/openshift-crds`, or `TINYCODE_OPENSHIFT_CRDS`) on the local
//! control plane (hack/local-cluster.sh, started when not running, never
//! stopped): the real kubectl applies it client-side (twice), then
//! server-side, and creates it with `create`; the objects read back carry
//! `priority: 0`. A `priority: null` copy is refused client-side, which shows
//! the check bites.
//!
//! The control plane is shared, and tools/tests/install.rs asserts that the real SCC
//! names come and go with install/uninstall, so the SCCs are applied under
//! names unique to this run (the schema does not depend on the name) and
//! deleted afterwards.

#[path = "support/local_cluster.rs"]
mod local_cluster;

use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use local_cluster::{local_cluster, value_of};
use serde_json::Value;
use tinycode_tools::devcluster;

const SCC_CRD_FILE: &str = "securitycontextconstraints.security.openshift.io.yaml";

/// The repository (and workspace) root, one above this crate.
fn root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

fn openshift_crds_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TINYCODE_OPENSHIFT_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("../shared/openshift-crds"));
    dir.join(SCC_CRD_FILE).is_file().then_some(dir)
}

/// The SCC documents of config/scc/sccs.yaml, each renamed `<name>-<suffix>`.
fn sccs_renamed(suffix: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("config/scc/sccs.yaml")).expect("read config/scc/sccs.yaml");
    let mut out = Vec::new();
    for mut v in serde_saphyr::from_multiple::<Value>(&text).expect("sccs.yaml is YAML") {
        if v["kind"] != "SecurityContextConstraints" {
            continue;
        }
        let name = v["metadata"]["name"].as_str().expect("SCC name").to_string();
        v["metadata"]["name"] = format!("{name}-{suffix}").into();
        out.push(v);
    }
    assert_eq!(out.len(), 3, "config/scc/sccs.yaml holds the three tier SCCs");
    out
}

fn to_yaml(docs: &[Value]) -> String {
    docs.iter().map(|d| format!("---\n{}", serde_saphyr::to_string(d).unwrap())).collect()
}

fn names(docs: &[Value]) -> Vec<String> {
    docs.iter().map(|d| d["metadata"]["name"].as_str().unwrap().to_string()).collect()
}

struct Kubectl {
    bin: PathBuf,
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str]) -> Output {
        Command::new(&self.bin)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .stdin(Stdio::null())
            .output()
            .expect("run kubectl")
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "kubectl {args:?} failed:\n{text}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn delete(&self, names: &[String]) {
        let mut args = vec!["delete", "securitycontextconstraints.security.openshift.io", "--ignore-not-found"];
        args.extend(names.iter().map(String::as_str));
        self.run(&args);
    }
}

/// Deletes every SCC this test may have created, also when it panics.
struct Cleanup<'a> {
    kubectl: &'a Kubectl,
    names: Vec<String>,
}

impl Drop for Cleanup<'_> {
    fn drop(&mut self) {
        self.kubectl.delete(&self.names);
    }
}

#[test]
fn the_file_sets_priority_zero_never_null() {
    // The pure part: no document of the file carries a null priority.
    for scc in sccs_renamed("x") {
        assert_eq!(scc["priority"], serde_json::json!(0), "{}", scc["metadata"]["name"]);
    }
}

#[tokio::test]
async fn sccs_survive_client_side_apply_server_side_apply_and_create() {
    let Some(crds) = openshift_crds_dir() else {
        eprintln!(
            "skipped: the real OpenShift CRDs are absent (set TINYCODE_OPENSHIFT_CRDS or provide ../shared/openshift-crds)"
        );
        return;
    };
    let tools = local_cluster("tools");
    let started = local_cluster("start");
    let kubectl =
        Kubectl { bin: value_of(&tools, "TINYCODE_KUBECTL="), kubeconfig: value_of(&started, "export KUBECONFIG=") };

    // The real SCC CRD, applied the way the other tests apply it (same field manager).
    let kubeconfig = Kubeconfig::read_from(&kubectl.kubeconfig).expect("read the admin kubeconfig");
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig");
    let client = Client::try_from(config).expect("client");
    let crd: CustomResourceDefinition =
        serde_saphyr::from_str(&std::fs::read_to_string(crds.join(SCC_CRD_FILE)).unwrap()).expect("SCC CRD");
    devcluster::apply_crd(&client, &crd).await.expect("install the real SCC CRD");

    let run = format!("scc-apply-{:04x}", std::process::id() % 0xffff);
    let dir = tempfile::tempdir().unwrap();

    // Control: a null priority is dropped by client-side apply and refused.
    let mut nulled = sccs_renamed(&format!("{run}-null"));
    nulled.truncate(1);
    nulled[0]["priority"] = Value::Null;
    let applied = sccs_renamed(&run);
    let created = sccs_renamed(&format!("{run}-create"));
    let server_side = sccs_renamed(&format!("{run}-ssa"));
    let _cleanup = Cleanup {
        kubectl: &kubectl,
        names: [&nulled, &applied, &created, &server_side].into_iter().flat_map(|d| names(d)).collect(),
    };
    let null_file = dir.path().join("null.yaml");
    std::fs::write(&null_file, to_yaml(&nulled)).unwrap();
    let out = kubectl.run(&["apply", "-f", null_file.to_str().unwrap()]);
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        !out.status.success() && text.contains("priority"),
        "the real schema should refuse a null priority applied client-side, got:\n{text}"
    );

    // Client-side apply (creates), again (updates), then server-side apply.
    let file = dir.path().join("sccs.yaml");
    std::fs::write(&file, to_yaml(&applied)).unwrap();
    let file = file.to_str().unwrap();
    kubectl.ok(&["apply", "-f", file]);
    kubectl.ok(&["apply", "-f", file]);
    kubectl.ok(&["apply", "--server-side", "-f", file]);

    // `create`, and a server-side apply that creates.
    let create_file = dir.path().join("create.yaml");
    std::fs::write(&create_file, to_yaml(&created)).unwrap();
    kubectl.ok(&["create", "-f", create_file.to_str().unwrap()]);
    let ssa_file = dir.path().join("ssa.yaml");
    std::fs::write(&ssa_file, to_yaml(&server_side)).unwrap();
    kubectl.ok(&["apply", "--server-side", "-f", ssa_file.to_str().unwrap()]);

    for name in [&applied, &created, &server_side].into_iter().flat_map(|d| names(d)) {
        let live: Value = serde_json::from_str(&kubectl.ok(&[
            "get",
            "securitycontextconstraints.security.openshift.io",
            &name,
            "-o",
            "json",
        ]))
        .unwrap();
        assert_eq!(live["priority"], serde_json::json!(0), "{name}: {live}");
        assert_eq!(live["runAsUser"]["uid"], serde_json::json!(1001), "{name}");
    }
}

//! The OLM bundle and the install manifests: the committed `bundle/` must be
//! what `tinycode-local bundle` generates now (run `make bundle`), it must
//! pass operator-framework's own validators, and `config/manager` must keep
//! the properties the spec and the scripts rely on.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use serde_json::Value;

/// The repository (and workspace) root, one above this crate.
fn root() -> PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

/// Writes the bundle to `out` with `tinycode-local bundle`.
fn write_bundle(out: &Path) {
    let run = Command::new(env!("CARGO_BIN_EXE_tinycode-local"))
        .args(["bundle", "--out"])
        .arg(out)
        .output()
        .expect("run tinycode-local");
    assert!(run.status.success(), "tinycode-local bundle failed: {}", String::from_utf8_lossy(&run.stderr));
}

/// Every file below `dir`, by path relative to it.
fn tree(dir: &Path) -> BTreeMap<String, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, String>) {
        for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(base, &path, out);
            } else {
                let rel = path.strip_prefix(base).unwrap().to_string_lossy().to_string();
                out.insert(rel, std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_saphyr::from_multiple(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn committed_bundle_matches_the_generator() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    write_bundle(&out);
    let generated = tree(&out);
    let committed = tree(&root().join("bundle"));
    let names = |m: &BTreeMap<String, String>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&committed),
        names(&generated),
        "bundle/ has other files than the generator writes; run `make bundle`"
    );
    for (file, text) in &generated {
        assert!(committed[file] == *text, "bundle/{file} differs from `tinycode-local bundle`; run `make bundle`");
    }
}

#[test]
fn every_sample_is_an_alm_example() {
    let mut on_disk: Vec<String> = std::fs::read_dir(root().join("config/samples"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    on_disk.sort();
    let mut listed: Vec<String> = tinycode_tools::bundle::SAMPLES.iter().map(|(n, _)| n.to_string()).collect();
    listed.sort();
    assert_eq!(listed, on_disk, "tools/src/bundle.rs SAMPLES must list every file in config/samples");
}

#[test]
fn csv_installs_the_manager_deployment_and_the_declared_permissions() {
    let csv = &yaml_docs(&root().join("bundle/manifests/tinycode-operator.clusterserviceversion.yaml"))[0];
    let manager = &yaml_docs(&root().join("config/manager/manager.yaml"))[0];
    let install = &csv["spec"]["install"]["spec"];
    let deployment = &install["deployments"][0];
    assert_eq!(deployment["name"], manager["metadata"]["name"]);
    // Same spec, less the fixed UID that OpenShift's restricted-v2 SCC refuses
    // under OLM, and watching the namespaces OLM targets instead of all.
    let mut expected = manager["spec"].clone();
    expected["template"]["spec"]["securityContext"].as_object_mut().unwrap().remove("runAsUser");
    let container = &mut expected["template"]["spec"]["containers"][0];
    container["securityContext"].as_object_mut().unwrap().remove("runAsUser");
    let watch = container["env"].as_array_mut().unwrap().iter_mut().find(|e| e["name"] == "WATCH_NAMESPACE").unwrap();
    *watch = serde_json::json!({"name": "WATCH_NAMESPACE",
        "valueFrom": {"fieldRef": {"fieldPath": "metadata.annotations['olm.targetNamespaces']"}}});
    assert_eq!(deployment["spec"], expected);
    // The upgrade graph: this version replaces every earlier one.
    assert_eq!(
        csv["metadata"]["annotations"]["olm.skipRange"],
        format!("<{}", csv["spec"]["version"].as_str().unwrap()),
        "OLM upgrades any earlier build to this one"
    );

    let role = &yaml_docs(&root().join("config/rbac/role.yaml"))[0];
    assert_eq!(install["clusterPermissions"][0]["rules"], role["rules"]);
    let leader = &yaml_docs(&root().join("config/rbac/leader_election_role.yaml"))[0];
    assert_eq!(install["permissions"][0]["rules"], leader["rules"]);
    for p in ["clusterPermissions", "permissions"] {
        assert_eq!(install[p][0]["serviceAccountName"], manager["spec"]["template"]["spec"]["serviceAccountName"]);
    }

    let modes: BTreeMap<String, bool> = csv["spec"]["installModes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| (m["type"].as_str().unwrap().to_string(), m["supported"].as_bool().unwrap()))
        .collect();
    // OwnNamespace would watch only the namespace that holds the release
    // records, where instances are refused; several namespaces the operator
    // refuses at start-up (docs/olm-bundle.md, Install modes).
    assert_eq!(
        modes,
        BTreeMap::from([
            ("AllNamespaces".to_string(), true),
            ("MultiNamespace".to_string(), false),
            ("OwnNamespace".to_string(), false),
            ("SingleNamespace".to_string(), true),
        ])
    );

    let examples: Value =
        serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
    assert_eq!(examples.as_array().unwrap().len(), tinycode_tools::bundle::SAMPLES.len() + 1);
    let owned = &csv["spec"]["customresourcedefinitions"]["owned"][0];
    assert_eq!(owned["name"], "tinycodeinstances.tinycode.dev");
    assert_eq!(owned["version"], "v1alpha1");
    let icon = &csv["spec"]["icon"][0];
    assert_eq!(icon["mediatype"], "image/svg+xml");
    use base64::Engine;
    let svg = base64::engine::general_purpose::STANDARD.decode(icon["base64data"].as_str().unwrap()).unwrap();
    assert!(String::from_utf8(svg).unwrap().starts_with("<svg"));
}

#[test]
fn manager_runs_non_root_read_only_with_health_and_metrics() {
    let d = &yaml_docs(&root().join("config/manager/manager.yaml"))[0];
    assert_eq!(d["metadata"]["namespace"], "tinycode-operator-system");
    assert_eq!(d["spec"]["replicas"], 1);
    let pod = &d["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "tinycode-operator-manager");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 1001);
    let c = &pod["containers"][0];
    let sc = &c["securityContext"];
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["capabilities"]["drop"], serde_json::json!(["ALL"]));
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let ports: BTreeMap<&str, i64> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["containerPort"].as_i64().unwrap()))
        .collect();
    // The sign-in relay (served only with --oidc-issuer-url).
    assert_eq!(ports, BTreeMap::from([("health", 8081), ("metrics", 8383), ("oidc-relay", 8484)]));
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/healthz");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    let env: BTreeMap<&str, &Value> =
        c["env"].as_array().unwrap().iter().map(|e| (e["name"].as_str().unwrap(), e)).collect();
    assert_eq!(env["WATCH_NAMESPACE"]["value"], "");
    assert_eq!(env["OPERATOR_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.namespace");
    assert_eq!(env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name");
    assert_eq!(env["HELM_CHART_PATH"]["value"], "/helm-charts/tinycode");
    assert_eq!(env["TMPDIR"]["value"], "/tmp");
    let mounts = c["volumeMounts"].as_array().unwrap();
    assert!(mounts.iter().any(|m| m["mountPath"] == "/tmp"), "the read-only root needs a writable /tmp");

    let ns = &yaml_docs(&root().join("config/manager/namespace.yaml"))[0];
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(ns["metadata"]["labels"][format!("pod-security.kubernetes.io/{mode}")], "restricted");
    }
}

/// hack/olm-validate.sh's binary, built once per test run (and cached outside the repo).
fn validator() -> &'static PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join("hack/olm-validate.sh"))
            .arg("--print-path")
            .stderr(std::process::Stdio::inherit())
            .output()
            .expect("run hack/olm-validate.sh");
        assert!(out.status.success(), "building the OLM validator failed (see above)");
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

#[test]
fn bundle_passes_the_operator_framework_validators() {
    let out = Command::new(validator()).args(["-suite", "operatorhub"]).arg(root().join("bundle")).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "the bundle has OLM validation errors:\n{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("0 error(s)"), "{text}");
    assert!(!text.contains("WARN"), "the bundle has OLM validation warnings:\n{text}");
}

#[test]
fn the_validator_reports_a_broken_bundle() {
    let dir = tempfile::tempdir().unwrap();
    let bundle = dir.path().join("bundle");
    write_bundle(&bundle);
    std::fs::remove_file(bundle.join("manifests/tinycode.dev_tinycodeinstances.yaml")).unwrap();
    let out = Command::new(validator()).arg(&bundle).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("ERROR") && text.contains("TinycodeInstance"), "{text}");
}

#[test]
fn bundle_names_the_given_image_and_never_another_projects() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("bundle");
    let image = "registry.example/platform/tinycode-operator:0.1.0";
    let run = Command::new(env!("CARGO_BIN_EXE_tinycode-local"))
        .args(["bundle", "--image", image, "--out"])
        .arg(&out)
        .output()
        .expect("run tinycode-local");
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let csv_path = out.join("manifests/tinycode-operator.clusterserviceversion.yaml");
    let csv = &yaml_docs(&csv_path)[0];
    assert_eq!(csv["metadata"]["annotations"]["containerImage"], image);
    let deployment = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"];
    assert_eq!(deployment["template"]["spec"]["containers"][0]["image"], image);
    let related: Vec<&str> =
        csv["spec"]["relatedImages"].as_array().unwrap().iter().map(|r| r["image"].as_str().unwrap()).collect();
    assert!(related.contains(&image), "{related:?}");
    assert!(related.iter().any(|r| r.contains("/ollama/ollama")), "the bundled Ollama is listed: {related:?}");
    assert!(related.iter().any(|r| r.contains("tinycode-container")), "the tinycode image is listed: {related:?}");
    // The sign-in proxies an instance with spec.auth.mode runs (the gate is the operator's image).
    let signin = tinycode_operator::settings::SigninSettings::default();
    for proxy in [&signin.oauth2_proxy_image, &signin.openshift_oauth_proxy_image] {
        assert!(related.contains(&proxy.as_str()), "{proxy} is listed: {related:?}");
    }
    for (file, text) in tree(&out) {
        assert!(!text.contains("localhost/tinycode-operator"), "{file} still names the placeholder");
    }

    // The committed bundle names this project's placeholder at this version,
    // never another project's operator image or a floating tag.
    let committed =
        std::fs::read_to_string(root().join("bundle/manifests/tinycode-operator.clusterserviceversion.yaml")).unwrap();
    assert!(committed.contains(&format!("localhost/tinycode-operator:{}", env!("CARGO_PKG_VERSION"))));
    assert!(!committed.contains("tinycode-operator:latest") && !committed.contains("bjohns/tinycode-operator"));

    let refused = Command::new(env!("CARGO_BIN_EXE_tinycode-local"))
        .args(["bundle", "--image", "not an image", "--out"])
        .arg(dir.path().join("refused"))
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("--image"));
}

#[test]
fn csv_architectures_are_what_the_dockerfile_builds() {
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let built: std::collections::BTreeSet<String> = dockerfile
        .lines()
        .find_map(|l| l.strip_prefix("# Architectures:"))
        .expect("the Dockerfile's # Architectures: line")
        .split_whitespace()
        .map(String::from)
        .collect();
    let csv = &yaml_docs(&root().join("bundle/manifests/tinycode-operator.clusterserviceversion.yaml"))[0];
    let labels: std::collections::BTreeSet<String> = csv["metadata"]["labels"]
        .as_object()
        .unwrap()
        .keys()
        .filter_map(|k| k.strip_prefix("operatorframework.io/arch."))
        .map(String::from)
        .collect();
    assert_eq!(labels, built);
}

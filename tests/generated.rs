//! Generated files must match what the code generates now: edit the Rust
//! types or declarations, then regenerate with `make generate`.

use std::path::PathBuf;
use std::process::Command;

fn check(args: &[&str], file: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_tinycode-operator")).args(args).output().expect("run tinycode-operator");
    assert!(out.status.success(), "tinycode-operator {args:?} failed");
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(file);
    let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
    let generated = String::from_utf8(out.stdout).unwrap();
    assert!(committed == generated, "{file} differs from `tinycode-operator {}`; run `make generate`", args.join(" "));
}

#[test]
fn crd_matches_the_rust_types() {
    check(&["crd"], "config/crd/tinycode.dev_tinycodeinstances.yaml");
    check(&["crd", "--class"], "config/crd/tinycode.dev_tinycodeclasses.yaml");
}

#[test]
fn values_schema_matches_the_values_type() {
    check(&["values-schema"], "helm-charts/tinycode/values.schema.json");
}

#[test]
fn operator_cluster_role_matches_the_declared_calls() {
    check(&["rbac"], "config/rbac/role.yaml");
}

#[test]
fn operator_namespace_role_and_discovery_role_match_the_declarations() {
    check(
        &["rbac", "--leader-election-namespace", "tinycode-operator-system"],
        "config/rbac/leader_election_role.yaml",
    );
    check(&["rbac", "--discovery"], "config/rbac/discovery_role.yaml");
}

#[test]
fn sccs_match_the_tier_definitions() {
    check(&["scc"], "config/scc/sccs.yaml");
    check(&["admission"], "config/admission/host_paths.yaml");
}

#[test]
fn samples_pass_the_operator_validation() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/samples");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let out = Command::new(env!("CARGO_BIN_EXE_tinycode-operator"))
            .args([
                "values",
                "--offline",
                "--hostpath-allowed-prefixes",
                "/home/developer",
                "--namespace",
                "tinycode-dev",
                "-f",
            ])
            .arg(&path)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}: {}", path.display(), String::from_utf8_lossy(&out.stderr));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(v["release"].as_str().unwrap().starts_with("tinycode.tinycode-dev."));
        assert_eq!(v["releaseNamespace"], "tinycode-operator-system", "records never in the instance namespace");
        assert!(v["values"]["valuesHash"].as_str().unwrap().len() == 64);
    }
}

#[test]
fn values_command_refuses_an_invalid_spec_with_the_status_message() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bad.yaml");
    std::fs::write(&file, "apiVersion: tinycode.dev/v1alpha1\nkind: TinycodeInstance\nmetadata: {name: bad, namespace: team}\nspec:\n  shell: {enabled: true}\n  storage: {hostPath: {path: /srv}}\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tinycode-operator"))
        .args(["values", "--offline", "-f"])
        .arg(&file)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.shell.enabled") && err.contains("no SCC tier allows both"), "{err}");
}

/// Runs `tinycode-operator values --offline` for `instance` (YAML) under `class`.
fn values_with_class(instance: &str, class: &str) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("instance.yaml");
    std::fs::write(&file, instance).unwrap();
    Command::new(env!("CARGO_BIN_EXE_tinycode-operator"))
        .args(["values", "--offline", "--class", class, "-f"])
        .arg(&file)
        .output()
        .unwrap()
}

#[test]
fn values_command_shows_what_a_class_would_refuse_before_it_is_applied() {
    let class = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/classes/gpu-pool.yaml");
    let class = class.to_str().unwrap();
    let head = "apiVersion: tinycode.dev/v1alpha1\nkind: TinycodeInstance\nmetadata: {name: dev, namespace: team}\nspec:\n  className: gpu-pool\n";
    let out = values_with_class(
        &format!("{head}  ollama: {{enabled: true, resources: {{limits: {{nvidia.com/gpu: \"2\"}}}}}}\n"),
        class,
    );
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("spec.ollama.resources.limits.nvidia.com/gpu")
            && err.contains("exceeds 1")
            && err.contains("gpu-pool"),
        "{err}"
    );
    let out = values_with_class(&format!("{head}  shell: {{enabled: true}}\n"), class);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.shell.enabled"));
    // Within the class: its defaults and placement, as the operator would render them.
    let out = values_with_class(&format!("{head}  ollama: {{enabled: true}}\n"), class);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["class"], "gpu-pool");
    assert_eq!(v["values"]["ollama"]["resources"]["limits"]["nvidia.com/gpu"], "1");
    assert_eq!(v["values"]["ollama"]["nodeSelector"]["nvidia.com/gpu.present"], "true");
    assert_eq!(v["values"]["ollama"]["runtimeClassName"], "nvidia");
    assert_eq!(v["values"]["nodeSelector"], serde_json::json!({}), "the IDE is not placed on GPU nodes");
    // A file holding another class than the instance names is refused.
    let other = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("config/classes/locked-down.yaml");
    let out = values_with_class(&format!("{head}  ollama: {{enabled: true}}\n"), other.to_str().unwrap());
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn the_readme_shows_the_shipped_class_examples() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    for file in ["config/classes/gpu-pool.yaml", "config/classes/locked-down.yaml"] {
        let text = std::fs::read_to_string(root.join(file)).unwrap();
        let class: tinycode_operator::api::TinycodeClass = serde_saphyr::from_str(&text).unwrap();
        assert!(class.metadata.name.is_some(), "{file}");
        let body: String = text.lines().filter(|l| !l.starts_with('#')).collect::<Vec<_>>().join("\n");
        assert!(readme.contains(&body), "README.md does not show {file} as shipped");
    }
}

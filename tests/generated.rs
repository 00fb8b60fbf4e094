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
    check(&["rbac", "--access-reviewer"], "config/rbac/access_reviewer_role.yaml");
}

#[test]
fn sccs_match_the_tier_definitions() {
    check(&["scc"], "config/scc/sccs.yaml");
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

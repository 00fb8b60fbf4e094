//! The workspace's `rust-version` is what its dependency tree really needs:
//! the highest `rust-version` any resolved package declares. Lower, and a
//! user with that toolchain gets a build error instead of cargo's clear
//! refusal; higher, and the project claims a need it does not have.

use std::process::Command;

/// `1.89` and `1.89.0` alike: major, minor, patch.
fn version(v: &str) -> [u64; 3] {
    let mut parts = v.split('.').map(|p| p.parse().unwrap_or(0));
    [(); 3].map(|_| parts.next().unwrap_or(0))
}

#[test]
fn rust_version_is_the_highest_the_dependencies_declare() {
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline", "--manifest-path"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/Cargo.toml"))
        .output()
        .expect("cargo metadata");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let resolved: std::collections::HashSet<&str> =
        meta["resolve"]["nodes"].as_array().unwrap().iter().filter_map(|n| n["id"].as_str()).collect();
    let members: Vec<&str> = meta["workspace_members"].as_array().unwrap().iter().filter_map(|m| m.as_str()).collect();
    let packages = meta["packages"].as_array().unwrap();
    let (needed, by) = packages
        .iter()
        .filter(|p| resolved.contains(p["id"].as_str().unwrap()) && !members.contains(&p["id"].as_str().unwrap()))
        .filter_map(|p| Some((version(p["rust_version"].as_str()?), p["name"].as_str().unwrap())))
        .max()
        .expect("some dependency declares a rust-version");
    for p in packages.iter().filter(|p| members.contains(&p["id"].as_str().unwrap())) {
        let declared = p["rust_version"].as_str().unwrap_or("unset");
        assert_eq!(
            version(declared),
            needed,
            "{} declares rust-version {declared}, but {by} needs {}: set [workspace.package] rust-version to it",
            p["name"],
            needed.iter().map(u64::to_string).collect::<Vec<_>>().join(".")
        );
    }
}

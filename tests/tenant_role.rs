//! `tinycode-user-role` grants what the tenant's steps in docs/using.md need:
//! every `oc`/`kubectl` command there that a tenant runs in their own
//! namespace is mapped to the API calls it makes, and the role must allow
//! each. Commands for cluster-admins (namespace labels, SCCs, the operator's
//! namespace, RoleBindings) are left out by the patterns in ADMIN.

use std::collections::BTreeSet;

/// Commands a cluster-admin runs, not a tenant.
const ADMIN: &[&str] =
    &["label namespace", "oc label", "create rolebinding", "get rolebinding", "config/scc", "tinycode-operator-system"];

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// (API group, resource, verb) the command needs.
fn needs(command: &str) -> Vec<(&'static str, &'static str, &'static str)> {
    let words: Vec<&str> = command.split_whitespace().collect();
    let (verb, kind) = (words.get(1).copied().unwrap_or(""), words.get(2).copied().unwrap_or(""));
    let resource = match kind.split('/').next().unwrap_or("") {
        "tc" | "tinycodeinstance" | "tinycodeinstances" => ("tinycode.dev", "tinycodeinstances"),
        "tinycodeclass" | "tinycodeclasses" | "tinycode-all" => ("tinycode.dev", "tinycodeclasses"),
        "secret" | "secrets" => ("", "secrets"),
        "pvc" | "persistentvolumeclaim" => ("", "persistentvolumeclaims"),
        "pod" | "pods" => ("", "pods"),
        "deployment" => ("apps", "deployments"),
        _ => ("", ""),
    };
    let (g, r) = resource;
    match verb {
        "get" => vec![(g, r, "get"), (g, r, "list")],
        "describe" => vec![(g, r, "get"), (g, r, "list"), ("", "events", "list")],
        "create" | "apply" if r == "secrets" || command.contains("| oc apply") => {
            vec![("", "secrets", "create"), ("", "secrets", "get"), ("", "secrets", "patch")]
        }
        "delete" => vec![(g, r, "delete")],
        "patch" | "annotate" | "edit" => vec![(g, r, "get"), (g, r, "patch")],
        "logs" => vec![("", "pods", "list"), ("", "pods/log", "get")],
        "port-forward" => vec![("", "pods", "get"), ("", "pods/portforward", "create")],
        // A server-side dry run of an instance: what creating it needs.
        "apply" => {
            vec![("tinycode.dev", "tinycodeinstances", "create"), ("tinycode.dev", "tinycodeinstances", "patch")]
        }
        other => panic!("docs/using.md runs `{command}`: teach this test what `{other}` needs"),
    }
}

#[test]
fn the_tenant_role_allows_every_tenant_step_of_the_guide() {
    let guide = std::fs::read_to_string(root().join("docs/using.md")).unwrap();
    let roles = std::fs::read_to_string(root().join("config/rbac/user_role.yaml")).unwrap();
    let role: serde_json::Value = serde_saphyr::from_multiple::<serde_json::Value>(&roles)
        .unwrap()
        .into_iter()
        .find(|r: &serde_json::Value| r["metadata"]["name"] == "tinycode-user-role")
        .expect("tinycode-user-role in config/rbac/user_role.yaml");
    let mut granted = BTreeSet::new();
    for rule in role["rules"].as_array().unwrap() {
        for g in rule["apiGroups"].as_array().unwrap() {
            for r in rule["resources"].as_array().unwrap() {
                for v in rule["verbs"].as_array().unwrap() {
                    granted.insert((
                        g.as_str().unwrap().to_string(),
                        r.as_str().unwrap().to_string(),
                        v.as_str().unwrap().to_string(),
                    ));
                }
            }
        }
    }
    // The class viewer role covers the classes (bound to everyone signed in).
    let class_viewer = |g: &str, r: &str| g == "tinycode.dev" && r == "tinycodeclasses";
    let commands: Vec<&str> = guide
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|c| c.starts_with("oc ") || c.starts_with("kubectl "))
        .filter(|c| !ADMIN.iter().any(|a| c.contains(a)))
        .collect();
    assert!(commands.len() > 20, "the guide's commands were not found: {commands:?}");
    let mut missing = Vec::new();
    for command in commands {
        for (g, r, v) in needs(command) {
            if r.is_empty() || class_viewer(g, r) {
                continue;
            }
            if !granted.contains(&(g.to_string(), r.to_string(), v.to_string())) {
                missing.push(format!("`{command}` needs {v} on {r} ({g:?})"));
            }
        }
    }
    assert!(missing.is_empty(), "tinycode-user-role lacks:\n{}", missing.join("\n"));
}

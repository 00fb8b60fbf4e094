//! Schema and defaults of the API types.

use kube::CustomResourceExt;
use serde_json::Value;

use super::*;

fn storage_rules() -> Vec<Value> {
    let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
    let storage =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"];
    storage["x-kubernetes-validations"].as_array().cloned().unwrap_or_default()
}

fn rule_for(field_path: &str) -> Value {
    storage_rules()
        .into_iter()
        .find(|r| r["fieldPath"] == field_path)
        .unwrap_or_else(|| panic!("no spec.storage rule with fieldPath {field_path}"))
}

#[test]
fn storage_is_fixed_at_creation_by_transition_rules() {
    for (path, field, needle) in [
        (".storageClassName", "spec.storage.storageClassName", "self.storageClassName == oldSelf.storageClassName"),
        (
            ".projectsAccessMode",
            "spec.storage.projectsAccessMode",
            "self.projectsAccessMode == oldSelf.projectsAccessMode",
        ),
        (".hostPath", "spec.storage.hostPath.path", "self.hostPath.path == oldSelf.hostPath.path"),
    ] {
        let r = rule_for(path);
        let rule = r["rule"].as_str().unwrap();
        let message = r["message"].as_str().unwrap();
        assert!(rule.contains(needle), "{path}: {rule}");
        assert!(rule.contains("oldSelf"), "{path} must be a transition rule");
        assert!(message.starts_with(field), "{path}: {message}");
        assert!(message.contains("re-create the instance"), "{path}: {message}");
        assert!(
            message
                .contains("storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted"),
            "{path}: {message}"
        );
        assert!(!message.contains('\n'), "CRD rule messages must be one line");
    }
}

#[test]
fn optional_storage_fields_compare_presence_on_both_sides() {
    // Setting or removing an optional field is a change too; a rule that only
    // compared values would let `has()` mismatches through (or fail on them).
    let rule = rule_for(".storageClassName")["rule"].as_str().unwrap().to_string();
    assert!(rule.starts_with("has(self.storageClassName) == has(oldSelf.storageClassName) && "), "{rule}");
    // hostPath may come or go (the workspace moves between a PVC and the node); its path may not change.
    let rule = rule_for(".hostPath")["rule"].as_str().unwrap().to_string();
    assert!(rule.starts_with("!has(self.hostPath) || !has(oldSelf.hostPath) || "), "{rule}");
    // Sizes are not admission's: the operator compares them with the PVCs
    // (reconcile/volumes.rs), so a refused growth can go back.
    for path in [".dataSize", ".projectsSize"] {
        assert!(!storage_rules().iter().any(|r| r["fieldPath"] == path), "a transition rule on {path}");
    }
}

#[test]
fn storage_rules_sit_where_storage_always_exists() {
    // Transition rules run only where the old value exists: spec.storage and the
    // fields compared without has() guards carry schema defaults.
    let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
    let storage =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"];
    assert!(storage["default"].is_object(), "{storage}");
    for f in ["dataSize", "projectsSize", "projectsAccessMode", "retainOnDelete"] {
        assert!(!storage["properties"][f]["default"].is_null(), "{f} has no default");
    }
    assert_eq!(storage["properties"]["retainOnDelete"]["default"], true);
    assert!(
        !storage_rules().iter().any(|r| r["rule"].as_str().unwrap().contains("retainOnDelete")),
        "retainOnDelete stays mutable"
    );
}

#[test]
fn resource_name_rules_hold_the_resource_name_pattern() {
    let cel = RESOURCE_NAME_PATTERN.replace(r"\.", "[.]");
    for rule in [MAX_RULE, REQUESTS_RULE, LIMITS_RULE] {
        assert!(rule.contains(&format!("k.matches('{cel}')")), "{rule}");
    }
    let re = regex::Regex::new(RESOURCE_NAME_PATTERN).unwrap();
    for ok in
        ["cpu", "memory", "nvidia.com/gpu", "amd.com/gpu", "ephemeral-storage", "hugepages-2Mi".to_lowercase().as_str()]
    {
        assert!(re.is_match(ok), "{ok}");
    }
    for bad in ["Bad Name", "/gpu", "nvidia.com/", "a/b/c", ""] {
        assert!(!re.is_match(bad), "{bad}");
    }
}

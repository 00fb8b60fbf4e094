//! Every spec field is what `oc explain` shows a user: adding, removing or
//! renaming one is a reviewed change. This lists the spec's field paths from
//! the CRD the Rust types generate and compares them with
//! tests/spec_fields.txt; every field must also have a description.

use kube::CustomResourceExt;
use serde_json::Value;
use tinycode_operator::api::TinycodeInstance;

/// `(path, description)` of every property under `schema`, depth first.
fn fields(schema: &Value, prefix: &str, out: &mut Vec<(String, Option<String>)>) {
    let props = schema.get("properties").or_else(|| schema.get("items").and_then(|i| i.get("properties")));
    let Some(props) = props.and_then(Value::as_object) else { return };
    for (name, sub) in props {
        let path = format!("{prefix}.{name}");
        out.push((path.clone(), sub.get("description").and_then(Value::as_str).map(str::to_string)));
        // Kubernetes' own types (tolerations, resources) are described by Kubernetes.
        if !matches!(name.as_str(), "tolerations" | "nodeSelector") {
            fields(sub, &path, out);
        }
    }
}

fn spec_fields() -> Vec<(String, Option<String>)> {
    let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
    let spec = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"];
    let mut out = Vec::new();
    fields(spec, "spec", &mut out);
    out
}

#[test]
fn the_spec_fields_are_the_reviewed_list() {
    let listed = include_str!("spec_fields.txt");
    let want: Vec<&str> = listed.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()).collect();
    let got: Vec<String> = spec_fields().into_iter().map(|(p, _)| p).collect();
    let added: Vec<&String> = got.iter().filter(|p| !want.contains(&p.as_str())).collect();
    let removed: Vec<&&str> = want.iter().filter(|p| !got.iter().any(|g| g == *p)).collect();
    assert!(
        added.is_empty() && removed.is_empty(),
        "spec fields changed (review each description as `oc explain` shows it, then update tests/spec_fields.txt): added {added:?}, removed {removed:?}"
    );
}

#[test]
fn every_spec_field_has_a_description() {
    let missing: Vec<String> = spec_fields().into_iter().filter(|(_, d)| d.is_none()).map(|(p, _)| p).collect();
    assert!(missing.is_empty(), "fields without a description (what `oc explain` shows): {missing:?}");
}

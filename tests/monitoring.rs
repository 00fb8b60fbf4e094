//! The guides against what they describe: every alert of
//! config/prometheus/rules.yaml has a runbook URL whose anchor is a heading of
//! docs/monitoring.md, whose table names exactly those alerts; docs/using.md's
//! table of columns names exactly the CRD's printer columns.

use std::collections::BTreeSet;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_alert_has_a_runbook_heading_in_the_guide() {
    let rules: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(root().join("config/prometheus/rules.yaml")).unwrap()).unwrap();
    let guide = std::fs::read_to_string(root().join("docs/monitoring.md")).unwrap();
    // GitHub's anchors: the heading lowercased (these are single words).
    let anchors: BTreeSet<String> =
        guide.lines().filter_map(|l| l.strip_prefix("### ")).map(|h| h.trim().to_lowercase()).collect();
    let mut alerts = BTreeSet::new();
    for group in rules["spec"]["groups"].as_array().unwrap() {
        for rule in group["rules"].as_array().unwrap() {
            let name = rule["alert"].as_str().unwrap();
            alerts.insert(name.to_string());
            let url =
                rule["annotations"]["runbook_url"].as_str().unwrap_or_else(|| panic!("{name} has no runbook_url"));
            let (page, anchor) = url.split_once('#').unwrap();
            assert!(page.ends_with("/docs/monitoring.md"), "{name}: {url}");
            assert!(anchors.contains(anchor), "{name}: no heading `### {name}` in docs/monitoring.md for #{anchor}");
            assert!(
                ["warning", "info", "critical"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
                "{name}"
            );
        }
    }
    let listed: BTreeSet<String> = guide
        .lines()
        .filter_map(|l| l.strip_prefix("| `Tinycode"))
        .filter_map(|l| l.split_once('`'))
        .map(|(n, _)| format!("Tinycode{n}"))
        .collect();
    assert_eq!(alerts, listed, "the guide's alert table against rules.yaml");
}

/// docs/using.md's table of `oc get tc` columns names exactly the CRD's printer columns.
#[test]
fn the_guide_lists_every_printer_column() {
    use kube::CustomResourceExt;
    let crd = tinycode_operator::api::TinycodeInstance::crd();
    let columns: Vec<String> =
        crd.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect();
    let guide = std::fs::read_to_string(root().join("docs/using.md")).unwrap();
    let table = guide.split("| column | from | meaning |").nth(1).expect("the column table in docs/using.md");
    let listed: Vec<String> = table
        .lines()
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| l.trim_matches('|').split('|').next().unwrap().trim().to_string())
        .collect();
    assert_eq!(listed, columns, "docs/using.md's columns against the CRD's additionalPrinterColumns");
}

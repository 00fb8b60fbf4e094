//! config/prometheus/rules.yaml against docs/monitoring.md: every alert has
//! a runbook URL whose anchor is a heading of the guide, and the guide's
//! table names exactly the alerts the rules define.

use std::collections::BTreeSet;

fn root() -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn every_alert_has_a_runbook_heading_in_the_guide() {
    let rules: serde_json::Value =
        serde_yaml::from_str(&std::fs::read_to_string(root().join("config/prometheus/rules.yaml")).unwrap()).unwrap();
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

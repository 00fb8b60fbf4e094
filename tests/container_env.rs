//! CONTAINER.md's environment table names every `TINYCODE_*` variable the
//! chart sets on the tinycode containers (helm-charts/tinycode/templates).

use std::collections::BTreeSet;
use std::path::Path;

/// The `TINYCODE_*` names of `- name: ...` entries in the chart's templates.
fn set_by_the_chart() -> BTreeSet<String> {
    let templates = Path::new(env!("CARGO_MANIFEST_DIR")).join("helm-charts/tinycode/templates");
    let mut names = BTreeSet::new();
    for entry in std::fs::read_dir(&templates).expect("templates") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("template");
        for line in text.lines() {
            if let Some(name) = line.trim().strip_prefix("- name: TINYCODE_") {
                names.insert(format!("TINYCODE_{}", name.trim()));
            }
        }
    }
    names
}

/// The variables named in code spans in the first cell of CONTAINER.md's table rows.
fn documented(container_md: &str) -> BTreeSet<String> {
    container_md
        .lines()
        .filter_map(|l| l.strip_prefix('|'))
        .filter_map(|l| l.split('|').next())
        .flat_map(|cell| cell.split('`').skip(1).step_by(2).map(str::to_string).collect::<Vec<_>>())
        .collect()
}

fn missing(container_md: &str) -> Vec<String> {
    let documented = documented(container_md);
    set_by_the_chart().into_iter().filter(|n| !documented.contains(n)).collect()
}

#[test]
fn every_variable_the_chart_sets_is_documented() {
    let chart = set_by_the_chart();
    assert!(chart.len() >= 10 && chart.contains("TINYCODE_GIT_DEPTH"), "read from the templates: {chart:?}");
    let md = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("CONTAINER.md")).expect("CONTAINER.md");
    let lacking = missing(&md);
    assert!(lacking.is_empty(), "CONTAINER.md's environment table lacks {lacking:?}");
    let without_depth: String =
        md.lines().filter(|l| !l.starts_with("| `TINYCODE_GIT_DEPTH`")).collect::<Vec<_>>().join("\n");
    assert_eq!(missing(&without_depth), ["TINYCODE_GIT_DEPTH"], "the check finds a missing row");
}

//! The committed lint inputs of the chart are what the operator's pipeline
//! makes of the samples (`tinycode-local chart-ci-values`, in `make generate`).

use std::path::PathBuf;

#[test]
fn committed_chart_ci_values_match_the_generator() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../helm-charts/tinycode/ci");
    let mut committed: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    committed.sort();
    let generated = tinycode_tools::chart_ci::files();
    let mut names: Vec<String> = generated.iter().map(|(n, _)| n.clone()).collect();
    names.sort();
    assert_eq!(
        committed, names,
        "helm-charts/tinycode/ci has other files than the generator writes; run `make generate`"
    );
    for (file, text) in generated {
        let on_disk = std::fs::read_to_string(dir.join(&file)).unwrap();
        assert!(
            on_disk == text,
            "helm-charts/tinycode/ci/{file} differs from `tinycode-local chart-ci-values`; run `make generate`"
        );
    }
}

//! No code in src/ builds an API over the whole cluster except
//! src/watch_scope.rs: a namespaced kind must go through `WatchScope::api`
//! (so a single-namespace operator neither lists nor watches other
//! namespaces), a cluster-scoped one through `watch_scope::cluster_api`,
//! whose bound refuses namespaced kinds at compile time. kube's `Api::all`
//! takes any kind, so only this scan catches a watch that forgot the scope.

use std::path::{Path, PathBuf};

/// The one file allowed to call `Api::all` and `Api::all_with`.
const HELPER: &str = "src/watch_scope.rs";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
        let path = entry.expect("directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `Api::all(`, `Api::<K>::all(`, `kube::Api::all_with(`, ... outside comments.
fn whole_cluster_calls(text: &str) -> Vec<(usize, String)> {
    let call = regex::Regex::new(r"\bApi\s*(::\s*<.*?>\s*)?::\s*all(_with)?\s*\(").unwrap();
    text.lines()
        .enumerate()
        .filter_map(|(i, line)| {
            let code = line.split("//").next().unwrap_or_default();
            call.is_match(code).then(|| (i + 1, line.trim().to_string()))
        })
        .collect()
}

#[test]
fn only_the_scope_helper_calls_api_all() {
    let root = root();
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let mut found = Vec::new();
    let mut in_helper = 0;
    for file in &files {
        let rel = file.strip_prefix(&root).unwrap().to_string_lossy().replace('\\', "/");
        let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{rel}: {e}"));
        let calls = whole_cluster_calls(&text);
        if rel == HELPER {
            in_helper = calls.len();
            continue;
        }
        found.extend(calls.into_iter().map(|(line, code)| format!("{rel}:{line}: {code}")));
    }
    assert!(files.len() > 50, "only {} files under src/: the walk is broken", files.len());
    assert!(in_helper >= 2, "the scan no longer sees the helper's own calls: the pattern is broken");
    assert!(
        found.is_empty(),
        "Api::all outside {HELPER}: use WatchScope::api for a namespaced kind (the namespaces the operator watches) \
         or watch_scope::cluster_api for a cluster-scoped one:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_scan_recognises_each_spelling() {
    for code in [
        "let api: Api<Secret> = Api::all(client.clone());",
        "reflect(Api::<Meta<Namespace>>::all(client.clone()), config())",
        "kube::Api::all_with(client, &resource)",
        "Api::<RoleBinding>::all (c)",
    ] {
        assert_eq!(whole_cluster_calls(code).len(), 1, "{code}");
    }
    for code in ["Api::namespaced(client, ns)", "// Api::all(client) in a comment", "scope.api::<Secret>(&client)"] {
        assert!(whole_cluster_calls(code).is_empty(), "{code}");
    }
}

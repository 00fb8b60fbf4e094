//! hack/local-cluster.sh from a test: run one of its commands, and read the
//! `NAME=value` lines it prints (tool paths, the admin kubeconfig).

use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Runs `hack/local-cluster.sh <cmd>` (words split at spaces: `start --node`); its stdout. Panics when it fails.
pub fn local_cluster(cmd: &str) -> String {
    // The repository root is one above this crate (tools/).
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository");
    let script = root.join("hack/local-cluster.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(cmd.split_whitespace())
        .stderr(Stdio::inherit())
        .output()
        .expect("run hack/local-cluster.sh");
    assert!(out.status.success(), "hack/local-cluster.sh {cmd} failed (see above)");
    String::from_utf8(out.stdout).unwrap()
}

/// The path on the last line of `text` that starts with `prefix`.
pub fn value_of(text: &str, prefix: &str) -> PathBuf {
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix(prefix))
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("no {prefix} line in {text:?}"))
}

//! The operator image `make image` built (hack/image.sh), unpacked the way a
//! container runtime would, and commands run from its root filesystem as the
//! pod runs them: the root read-only, a fresh tmpfs on /tmp, UID 1001 with
//! GID 0 (OpenShift's restricted SCC keeps group 0).
//!
//! Running needs root here (mount namespaces, chroot); the tests run as root
//! on this machine kind. A missing archive or tool is a failure that says how
//! to get it, never a skipped test.

#![allow(dead_code)] // each test binary uses a part

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

use serde_json::Value;

/// The repository root, one above this crate (tools/).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

pub const VERSION: &str = env!("CARGO_PKG_VERSION");
pub const RUN_AS: &str = "1001:0";

/// target/image/tinycode-operator-VERSION.oci.tar, which must exist.
pub fn archive() -> PathBuf {
    let path = repo_root().join(format!("target/image/tinycode-operator-{VERSION}.oci.tar"));
    assert!(
        path.is_file(),
        "no image archive at {}: run `make image` (it needs buildah, skopeo, umoci and mmdebstrap: \
         `hack/image.sh tools` installs them, `make test` runs both)",
        path.display()
    );
    path
}

fn tool(name: &str) -> &str {
    let found = Command::new("sh").arg("-c").arg("command -v \"$1\"").arg("sh").arg(name).output();
    assert!(
        found.map(|o| o.status.success()).unwrap_or(false),
        "{name} is not installed: run `hack/image.sh tools` (apt-get install buildah skopeo umoci mmdebstrap)"
    );
    name
}

pub fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.stdin(Stdio::null()).output().unwrap_or_else(|e| panic!("run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The image's manifest digest (sha256 of the manifest bytes).
pub fn digest(archive: &Path) -> String {
    let out = run_ok(Command::new(repo_root().join("hack/image.sh")).arg("digest").arg(archive));
    out.trim().to_string()
}

/// The image's configuration (the OCI image config JSON).
pub fn config(archive: &Path) -> Value {
    let raw =
        run_ok(Command::new(tool("skopeo")).arg("inspect").arg("--config").arg("--raw").arg(oci_archive(archive)));
    serde_json::from_str(&raw).expect("the image config is JSON")
}

/// The image's manifest.
pub fn manifest(archive: &Path) -> Value {
    let raw = run_ok(Command::new(tool("skopeo")).arg("inspect").arg("--raw").arg(oci_archive(archive)));
    serde_json::from_str(&raw).expect("the image manifest is JSON")
}

fn oci_archive(archive: &Path) -> String {
    format!("oci-archive:{}", archive.display())
}

/// The image unpacked once per test process (skopeo into an OCI layout, then
/// umoci, as a runtime does): the bundle directory, its `rootfs/` inside.
pub fn unpacked() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let archive = archive();
        // Leftovers of earlier runs go first.
        for entry in std::fs::read_dir(repo_root().join("target/image")).into_iter().flatten().flatten() {
            if entry.file_name().to_string_lossy().starts_with("test-unpack-") {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let work = repo_root().join(format!("target/image/test-unpack-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).unwrap();
        let layout = work.join("layout");
        run_ok(
            Command::new(tool("skopeo"))
                .args(["copy", "--quiet"])
                .arg(oci_archive(&archive))
                .arg(format!("oci:{}:image", layout.display())),
        );
        let bundle = work.join("bundle");
        run_ok(
            Command::new(tool("umoci"))
                .args(["unpack", "--image"])
                .arg(format!("{}:image", layout.display()))
                .arg(&bundle),
        );
        bundle
    })
}

pub fn rootfs() -> PathBuf {
    unpacked().join("rootfs")
}

/// Drops the unpacked copy (call once, at the end of a test binary's last user).
pub fn remove_unpacked() {
    if let Some(bundle) = unpacked().parent() {
        let _ = std::fs::remove_dir_all(bundle);
    }
}

/// The `KEY=value` environment the image's config sets.
pub fn image_env(archive: &Path) -> BTreeMap<String, String> {
    config(archive)["config"]["Env"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e.as_str()?.split_once('=').map(|(k, v)| (k.to_string(), v.to_string())))
        .collect()
}

/// A command that runs `argv` (a path inside the image first) from the
/// image's root filesystem as the pod would: a private mount namespace in
/// which the root is bind-mounted read-only with a new tmpfs on /tmp, and
/// each `mounts` entry (host directory, path in the image) bind-mounted
/// read-only; then chroot as UID 1001, GID 0, with exactly `env`.
///
/// Like a runtime, it mounts /proc and a /dev with null, zero, full, random
/// and urandom (the operator's child processes get /dev/null as stdin). The
/// mount points a runtime would create (those, the ServiceAccount token's)
/// are made in the test's unpacked copy before the root turns read-only.
pub fn in_image(env: &BTreeMap<String, String>, mounts: &[(PathBuf, &str)], argv: &[&str]) -> Command {
    let root = rootfs();
    for inside in ["proc", "dev"] {
        std::fs::create_dir_all(root.join(inside)).unwrap();
    }
    for (_, inside) in mounts {
        std::fs::create_dir_all(root.join(inside.trim_start_matches('/'))).unwrap();
    }
    // Fixed script; every value arrives as a positional parameter. The host's
    // tools are named by path: the environment is the image's.
    let script = r#"set -eu
root=$1; shift
n=$1; shift
/usr/bin/mount --make-rprivate /
/usr/bin/mount --bind "$root" "$root"
while [ "$n" -gt 0 ]; do
  /usr/bin/mount --bind "$1" "$root/$2"
  /usr/bin/mount -o remount,ro,bind "$root/$2"
  shift 2; n=$((n - 1))
done
/usr/bin/mount -o remount,ro,bind "$root"
/usr/bin/mount -t tmpfs -o mode=1777,size=256m tmpfs "$root/tmp"
# What a runtime gives every container: /proc and a /dev with the usual nodes.
/usr/bin/mount -t proc proc "$root/proc"
/usr/bin/mount -t tmpfs -o mode=755,size=64k tmpfs "$root/dev"
for d in null zero full random urandom; do
  : > "$root/dev/$d"
  /usr/bin/mount --bind "/dev/$d" "$root/dev/$d"
done
exec /usr/sbin/chroot --userspec=1001:0 "$root" "$@"
"#;
    let mut cmd = Command::new("/usr/bin/unshare");
    cmd.args(["--mount", "--fork", "--kill-child", "--", "/usr/bin/sh", "-c", script, "sh"])
        .arg(&root)
        .arg(mounts.len().to_string());
    for (host, inside) in mounts {
        cmd.arg(host).arg(inside.trim_start_matches('/'));
    }
    cmd.args(argv);
    cmd.env_clear();
    cmd.envs(env);
    cmd
}

pub fn output_text(out: &Output) -> String {
    format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
}

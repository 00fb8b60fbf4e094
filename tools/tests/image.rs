//! The operator image `make image` built: its configuration against the
//! Dockerfile and the manager Deployment, its root filesystem, the binaries
//! run from it read-only, and a second build of the same tree giving the same
//! digest. tools/tests/install.rs runs the operator itself from this image
//! against the local control plane.

#[path = "support/image.rs"]
mod image;

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;

use image::{VERSION, archive, config, image_env, in_image, output_text, repo_root, rootfs};
use serde_json::{Value, json};

/// The instructions of the Dockerfile's last stage, continuation lines joined.
fn dockerfile_final_stage() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo_root().join("Dockerfile")).unwrap();
    let mut logical = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if current.is_empty() && (trimmed.is_empty() || trimmed.starts_with('#')) {
            continue;
        }
        if let Some(body) = trimmed.strip_suffix('\\') {
            current.push_str(body);
            current.push(' ');
        } else {
            current.push_str(trimmed);
            logical.push(std::mem::take(&mut current));
        }
    }
    let last_from = logical.iter().rposition(|l| l.starts_with("FROM ")).expect("a FROM");
    logical[last_from..]
        .iter()
        .map(|l| {
            let (op, rest) = l.split_once(' ').unwrap_or((l, ""));
            (op.to_string(), rest.trim().to_string())
        })
        .collect()
}

/// `k="v" k2=v2 ...` (LABEL and ENV syntax) as a map.
fn pairs(text: &str) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut rest = text.trim();
    while !rest.is_empty() {
        let (key, after) = rest.split_once('=').unwrap_or_else(|| panic!("no '=' in {rest:?}"));
        let (value, after) = if let Some(quoted) = after.strip_prefix('"') {
            let end = quoted.find('"').expect("closing quote");
            (&quoted[..end], &quoted[end + 1..])
        } else {
            after.split_once(char::is_whitespace).unwrap_or((after, ""))
        };
        out.insert(key.trim().to_string(), value.to_string());
        rest = after.trim_start();
    }
    out
}

#[test]
fn image_config_is_what_the_dockerfile_and_the_manager_deployment_say() {
    let archive = archive();
    let cfg = config(&archive)["config"].clone();
    let stage = dockerfile_final_stage();
    let last = |op: &str| stage.iter().rev().find(|(o, _)| o == op).map(|(_, r)| r.clone());

    assert_eq!(cfg["User"], json!(last("USER").expect("USER")), "USER");
    assert_eq!(cfg["User"], json!("1001"), "the image runs as UID 1001");
    assert_eq!(cfg["WorkingDir"], json!(last("WORKDIR").expect("WORKDIR")), "WORKDIR");
    let entrypoint: Value = serde_json::from_str(&last("ENTRYPOINT").unwrap()).unwrap();
    let cmd: Value = serde_json::from_str(&last("CMD").unwrap()).unwrap();
    assert_eq!(cfg["Entrypoint"], entrypoint, "ENTRYPOINT");
    assert_eq!(cfg["Entrypoint"], json!(["/usr/local/bin/tinycode-operator"]));
    assert_eq!(cfg["Cmd"], cmd, "CMD");

    let env = image_env(&archive);
    let docker_env: BTreeMap<String, String> =
        stage.iter().filter(|(o, _)| o == "ENV").flat_map(|(_, r)| pairs(r)).collect();
    assert_eq!(env, docker_env, "ENV");
    for (k, v) in [
        ("HELM_BIN", "/usr/local/bin/helm"),
        ("HELM_CHART_PATH", "/helm-charts/tinycode"),
        ("HOME", "/tmp"),
        ("TMPDIR", "/tmp"),
    ] {
        assert_eq!(env.get(k).map(String::as_str), Some(v), "{k}");
    }
    for k in ["HELM_CACHE_HOME", "HELM_CONFIG_HOME", "HELM_DATA_HOME"] {
        assert!(env[k].starts_with("/tmp/"), "{k} must lie on /tmp (the only writable place): {}", env[k]);
    }

    let ports: BTreeSet<String> = cfg["ExposedPorts"].as_object().expect("ExposedPorts").keys().cloned().collect();
    let docker_ports: BTreeSet<String> =
        last("EXPOSE").unwrap().split_whitespace().map(|p| format!("{p}/tcp")).collect();
    assert_eq!(ports, docker_ports, "EXPOSE");

    let labels: BTreeMap<String, String> = serde_json::from_value(cfg["Labels"].clone()).unwrap();
    let docker_labels: BTreeMap<String, String> =
        stage.iter().filter(|(o, _)| o == "LABEL").flat_map(|(_, r)| pairs(r)).collect();
    assert_eq!(labels, docker_labels, "LABEL");
    assert_eq!(labels["org.opencontainers.image.version"], VERSION, "the version label follows Cargo.toml");
    assert_eq!(labels["org.opencontainers.image.licenses"], "MIT");

    // The manager Deployment runs what the image offers.
    let manager: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(repo_root().join("config/manager/manager.yaml")).unwrap())
            .unwrap();
    let container = &manager["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        container["image"].as_str(),
        Some(format!("localhost/tinycode-operator:{VERSION}").as_str()),
        "manager.yaml names this project's image at this version (install.sh replaces it)"
    );
    let deployment_ports: BTreeSet<String> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| format!("{}/tcp", p["containerPort"].as_u64().unwrap()))
        .collect();
    assert_eq!(deployment_ports, ports, "the Deployment's container ports are the image's");
    assert_eq!(container["securityContext"]["runAsUser"].as_u64(), Some(1001));
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"].as_bool(), Some(true));
    for e in container["env"].as_array().unwrap() {
        if let (Some(k), Some(v)) = (e["name"].as_str(), e["value"].as_str())
            && let Some(image_value) = env.get(k)
        {
            assert_eq!(v, image_value, "manager.yaml sets {k} unlike the image");
        }
    }
}

fn walk(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        out.push(path.clone());
        if std::fs::symlink_metadata(&path).unwrap().is_dir() {
            walk(&path, out);
        }
    }
}

#[test]
fn image_root_holds_what_the_operator_needs_and_nothing_its_user_can_write() {
    let root = rootfs();
    let mut paths = Vec::new();
    walk(&root, &mut paths);
    let mut files = BTreeSet::new();
    for path in &paths {
        let rel = path.strip_prefix(&root).unwrap().to_string_lossy().to_string();
        let meta = std::fs::symlink_metadata(path).unwrap();
        if rel == "tmp" {
            assert!(meta.is_dir() && meta.mode() & 0o7777 == 0o1777, "/tmp is a sticky, world-writable directory");
            continue;
        }
        if meta.file_type().is_symlink() {
            continue; // a link's own mode means nothing
        }
        // Writable by the pod's user: UID 1001, or group 0 (OpenShift's
        // restricted SCC runs with GID 0), or anyone.
        let writable = (meta.uid() == 1001 && meta.mode() & 0o200 != 0)
            || (meta.gid() == 0 && meta.mode() & 0o020 != 0)
            || meta.mode() & 0o002 != 0;
        assert!(
            !writable,
            "/{rel} is writable by the operator's user (mode {:o}, {}:{})",
            meta.mode(),
            meta.uid(),
            meta.gid()
        );
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "/{rel} is owned by root");
        if meta.is_file() {
            files.insert(rel);
        }
    }

    // Outside the chart: the two binaries, the C library they load, the CA
    // bundle, passwd/group and the license. Nothing else (no shell, no
    // package manager).
    let chart_files: BTreeSet<&String> = files.iter().filter(|f| f.starts_with("helm-charts/")).collect();
    let others: BTreeSet<&str> = files.iter().filter(|f| !f.starts_with("helm-charts/")).map(String::as_str).collect();
    let allowed = |f: &str| {
        matches!(
            f,
            "usr/local/bin/tinycode-operator"
                | "usr/local/bin/helm"
                | "etc/passwd"
                | "etc/group"
                | "etc/ssl/certs/ca-certificates.crt"
                | "licenses/LICENSE"
        ) || (f.starts_with("lib/")
            && ["ld-linux", "libc.so.", "libm.so.", "libgcc_s.so."]
                .iter()
                .any(|l| f.rsplit('/').next().unwrap().starts_with(l)))
    };
    let unexpected: Vec<&&str> = others.iter().filter(|f| !allowed(f)).collect();
    assert!(unexpected.is_empty(), "files the operator does not need: {unexpected:?}");
    for needed in ["usr/local/bin/tinycode-operator", "usr/local/bin/helm", "etc/ssl/certs/ca-certificates.crt"] {
        assert!(others.contains(needed), "/{needed} is missing");
    }
    let bundle = std::fs::read_to_string(root.join("etc/ssl/certs/ca-certificates.crt")).unwrap();
    assert!(bundle.matches("BEGIN CERTIFICATE").count() > 100, "the CA bundle holds Debian's Mozilla set");

    // The chart is the repository's, files/ included, ci/ values left out.
    let chart_src = repo_root().join("helm-charts/tinycode");
    let mut src_paths = Vec::new();
    walk(&chart_src, &mut src_paths);
    let src: BTreeSet<String> = src_paths
        .iter()
        .filter(|p| p.is_file())
        .map(|p| format!("helm-charts/tinycode/{}", p.strip_prefix(&chart_src).unwrap().to_string_lossy()))
        .filter(|p| !p.starts_with("helm-charts/tinycode/ci/"))
        .collect();
    let shipped: BTreeSet<String> = chart_files.into_iter().cloned().collect();
    assert_eq!(shipped, src, "the chart in the image");
    assert!(shipped.iter().any(|f| f.starts_with("helm-charts/tinycode/files/")), "the chart's files/ ship");
    for f in &shipped {
        assert_eq!(
            std::fs::read(root.join(f)).unwrap(),
            std::fs::read(repo_root().join(f)).unwrap(),
            "/{f} differs from the repository's"
        );
    }
}

#[test]
fn binaries_run_from_the_read_only_image_root_as_uid_1001() {
    let archive = archive();
    let env = image_env(&archive);
    let out = in_image(&env, &[], &["/usr/local/bin/tinycode-operator", "version"]).output().unwrap();
    assert!(out.status.success(), "tinycode-operator version:\n{}", output_text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), format!("tinycode-operator {VERSION}"));

    let out = in_image(&env, &[], &["/usr/local/bin/helm", "version", "--short"]).output().unwrap();
    assert!(out.status.success(), "helm version:\n{}", output_text(&out));
    let tools = image::run_ok(Command::new("bash").arg(repo_root().join("hack/local-cluster.sh")).arg("tools"));
    let tested = tools.lines().find_map(|l| l.strip_prefix("TINYCODE_HELM=")).unwrap();
    let tested_version = image::run_ok(Command::new(tested).args(["version", "--short"]));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        tested_version.trim(),
        "the image's helm is the tests' helm"
    );

    // helm renders the bundled chart where the operator points it, writing
    // only its homes on /tmp.
    let out =
        in_image(&env, &[], &["/usr/local/bin/helm", "template", "probe", "/helm-charts/tinycode"]).output().unwrap();
    assert!(out.status.success(), "helm template from the image:\n{}", output_text(&out));
    let docs: Vec<serde_json::Value> = serde_saphyr::from_slice_multiple(&out.stdout).expect("helm renders YAML");
    assert!(docs.iter().any(|d| d["kind"].as_str() == Some("Deployment")), "the chart renders a Deployment");
}

#[test]
fn a_second_build_of_the_same_tree_gives_the_same_digest() {
    let archive = archive();
    let first = image::digest(&archive);
    let again = repo_root().join(format!("target/image/rebuild-{}.oci.tar", std::process::id()));
    let out =
        Command::new(repo_root().join("hack/image.sh")).arg("build").env("IMAGE_ARCHIVE", &again).output().unwrap();
    assert!(out.status.success(), "hack/image.sh build:\n{}", output_text(&out));
    let second = image::digest(&again);
    let _ = std::fs::remove_file(&again);
    assert_eq!(first, second, "two builds of the same tree");
    let manifest = image::manifest(&archive);
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1), "one layer: {manifest}");
}

/// `make sbom` (which `make test` runs) wrote these beside the archive.
fn sbom(name: &str) -> Value {
    let path = repo_root().join(format!("target/image/sbom/{name}.cdx.json"));
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run `make sbom` (hack/sbom.sh)", path.display()));
    serde_json::from_str(&text).expect("CycloneDX JSON")
}

#[test]
fn sboms_describe_the_shipped_binaries() {
    let operator = sbom("tinycode-operator");
    assert_eq!(operator["bomFormat"], "CycloneDX");
    assert_eq!(operator["metadata"]["component"]["name"], "tinycode-operator");
    assert_eq!(operator["metadata"]["component"]["version"], VERSION);
    // Every crate the lock file pins for the operator's main dependencies is listed at its version.
    let lock: toml_lock::Lock = toml_lock::read(&repo_root().join("Cargo.lock"));
    let components: BTreeSet<(String, String)> = operator["components"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (c["name"].as_str().unwrap().to_string(), c["version"].as_str().unwrap_or_default().to_string()))
        .collect();
    for krate in ["kube-runtime", "k8s-openapi", "tokio", "rustls", "serde-saphyr"] {
        let version = lock.version_of(krate);
        assert!(components.contains(&(krate.to_string(), version.clone())), "{krate} {version} is not in the SBOM");
    }
    assert!(!components.iter().any(|(n, _)| n == "libtest-mimic"), "dev-only crates of tools/ are not in the image");

    let helm = sbom("helm");
    assert_eq!(helm["metadata"]["component"]["name"], "helm.sh/helm/v3");
    let tools = image::run_ok(Command::new("bash").arg(repo_root().join("hack/local-cluster.sh")).arg("tools"));
    let tested = tools.lines().find_map(|l| l.strip_prefix("TINYCODE_HELM=")).unwrap();
    let version = image::run_ok(Command::new(tested).args(["version", "--short"]));
    assert_eq!(helm["metadata"]["component"]["version"].as_str(), version.trim().split('+').next());
    assert!(helm["components"].as_array().unwrap().len() > 50, "helm's Go modules are listed");
}

/// Just enough of Cargo.lock: `[[package]]` tables' name and version.
mod toml_lock {
    pub struct Lock(Vec<(String, String)>);
    pub fn read(path: &std::path::Path) -> Lock {
        let text = std::fs::read_to_string(path).unwrap();
        let mut out = Vec::new();
        let mut name = None;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("name = ") {
                name = Some(v.trim_matches('"').to_string());
            } else if let (Some(v), Some(n)) = (line.strip_prefix("version = "), name.take()) {
                out.push((n, v.trim_matches('"').to_string()));
            }
        }
        Lock(out)
    }
    impl Lock {
        pub fn version_of(&self, krate: &str) -> String {
            let found: Vec<&String> = self.0.iter().filter(|(n, _)| n == krate).map(|(_, v)| v).collect();
            assert_eq!(found.len(), 1, "{krate} appears {} times in Cargo.lock", found.len());
            found[0].clone()
        }
    }
}

#[test]
fn make_push_copies_the_archive_to_a_registry() {
    let archive = archive();
    let crane = image::run_ok(Command::new(repo_root().join("hack/image.sh")).arg("crane")).trim().to_string();
    // A registry on loopback, in memory, gone with the test.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let address = format!("127.0.0.1:{port}");
    struct Registry(std::process::Child);
    impl Drop for Registry {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let _registry = Registry(
        Command::new(&crane)
            .args(["registry", "serve", "--address", &address])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("start crane registry serve"),
    );
    for _ in 0..100 {
        if std::net::TcpStream::connect(&address).is_ok() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }

    // Without IMAGE: refused, naming it.
    let refused = Command::new("make")
        .arg("-s")
        .arg("push")
        .current_dir(repo_root())
        .env_remove("IMAGE")
        .env_remove("OPERATOR_IMAGE")
        .output()
        .unwrap();
    assert!(!refused.status.success(), "make push without IMAGE must fail");
    assert!(output_text(&refused).contains("IMAGE="), "{}", output_text(&refused));

    let target = format!("{address}/platform/tinycode-operator:{VERSION}");
    let out = Command::new("make")
        .args(["-s", "push", &format!("IMAGE={target}")])
        .current_dir(repo_root())
        .env("PUSH_TLS_VERIFY", "false")
        .output()
        .unwrap();
    assert!(out.status.success(), "make push:\n{}", output_text(&out));
    let pushed = image::run_ok(
        Command::new("skopeo").args(["inspect", "--raw", "--tls-verify=false"]).arg(format!("docker://{target}")),
    );
    use std::io::Write;
    let mut sha = Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    sha.stdin.take().unwrap().write_all(pushed.as_bytes()).unwrap();
    let sum = String::from_utf8(sha.wait_with_output().unwrap().stdout).unwrap();
    assert_eq!(format!("sha256:{}", &sum[..64]), image::digest(&archive), "the registry holds the archive's image");
}

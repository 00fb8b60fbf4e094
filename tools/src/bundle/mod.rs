//! The OLM bundle (`bundle/`), generated from the same sources as `config/`:
//! the CRD from the Rust types, the permissions from [`tinycode_operator::platform::rbac`], the
//! manager Deployment from `config/manager/manager.yaml`, alm-examples from
//! `config/samples`. `tinycode-local bundle --out bundle` writes it and
//! `tools/tests/bundle.rs` fails when the committed copy drifts.
//!
//! What OLM cannot install stays with the cluster-admin: the three SCCs
//! (`config/scc/sccs.yaml`; OLM bundles cannot carry SCCs) and the per-namespace
//! `admin` RoleBinding (`hack/prepare-namespace.sh`). The CSV description says so.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use kube::CustomResourceExt;
use serde_json::{Value, json};

use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::platform::rbac;
use tinycode_operator::platform::scc::ALL_TIERS;

mod csv;
mod descriptors;

pub use csv::cluster_service_version;
pub use descriptors::descriptor_paths;

/// OLM package name.
pub const PACKAGE: &str = "tinycode-operator";
/// The channel every bundle is published to (OLM's naming convention:
/// candidate, fast, stable).
pub const CHANNEL: &str = "candidate";
/// Oldest Kubernetes the operator supports (OpenShift 4.16): the CRD's rules
/// use CEL's quantity library and `fieldPath` (README, Requirements).
pub const MIN_KUBE_VERSION: &str = "1.29.0";
/// Oldest OpenShift the bundle is offered on (Red Hat catalog annotation).
pub const OPENSHIFT_VERSIONS: &str = "v4.16";

const MANAGER_YAML: &str = include_str!("../../../config/manager/manager.yaml");
const METRICS_SERVICE_YAML: &str = include_str!("../../../config/manager/service.yaml");
const RELAY_SERVICE_YAML: &str = include_str!("../../../config/manager/oidc_relay_service.yaml");
const USER_ROLES_YAML: &str = include_str!("../../../config/rbac/user_role.yaml");
const METRICS_READER_YAML: &str = include_str!("../../../config/prometheus/metrics_reader_role.yaml");
const SERVICE_MONITOR_YAML: &str = include_str!("../../../config/prometheus/monitor.yaml");
const PROMETHEUS_RULE_YAML: &str = include_str!("../../../config/prometheus/rules.yaml");

/// Every file in `config/samples`, in alm-examples order (the first is the
/// one the console pre-fills). tools/tests/bundle.rs checks the list is complete.
pub const SAMPLES: &[(&str, &str)] = &[
    ("tinycode_v1alpha1_basic.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_basic.yaml")),
    ("tinycode_v1alpha1_vllm.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_vllm.yaml")),
    ("tinycode_v1alpha1_ollama.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_ollama.yaml")),
    ("tinycode_v1alpha1_git.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_git.yaml")),
    ("tinycode_v1alpha1_shared.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_shared.yaml")),
    (
        "tinycode_v1alpha1_clusteradmin.yaml",
        include_str!("../../../config/samples/tinycode_v1alpha1_clusteradmin.yaml"),
    ),
    ("tinycode_v1alpha1_hostpath.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_hostpath.yaml")),
    ("tinycode_v1alpha1_shell.yaml", include_str!("../../../config/samples/tinycode_v1alpha1_shell.yaml")),
];

/// The TinycodeClass example the console pre-fills (the GPU pool: the
/// locked-down one is marked default, which an example should not be).
pub const CLASS_SAMPLE: (&str, &str) = ("gpu-pool.yaml", include_str!("../../../config/classes/gpu-pool.yaml"));

/// One generated file, relative to the bundle directory.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleFile {
    pub path: String,
    pub content: String,
}

fn parse_yaml_docs(text: &str, what: &str) -> Vec<Value> {
    serde_saphyr::from_multiple(text).unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}"))
}

fn one_doc(text: &str, what: &str) -> Value {
    let mut docs = parse_yaml_docs(text, what);
    assert!(docs.len() == 1, "{what} must hold exactly one document");
    docs.remove(0)
}

/// The manager Deployment of `config/manager/manager.yaml`.
pub fn manager_deployment() -> Value {
    one_doc(MANAGER_YAML, "config/manager/manager.yaml")
}

/// The operator image named in `config/manager/manager.yaml`.
pub fn operator_image() -> String {
    manager_deployment()["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .expect("manager.yaml names the manager image")
        .to_string()
}

/// alm-examples: every sample, without its namespace (the console fills it).
pub fn alm_examples() -> Value {
    Value::Array(
        SAMPLES
            .iter()
            .chain(std::iter::once(&CLASS_SAMPLE))
            .map(|(file, text)| {
                let mut v = one_doc(text, file);
                if let Some(meta) = v["metadata"].as_object_mut() {
                    meta.remove("namespace");
                }
                v
            })
            .collect(),
    )
}

fn strip_namespace(mut v: Value) -> Value {
    if let Some(meta) = v["metadata"].as_object_mut() {
        meta.remove("namespace");
    }
    v
}

/// `metadata/annotations.yaml` keys, also the bundle image's labels.
pub fn bundle_annotations() -> Vec<(&'static str, String)> {
    vec![
        ("operators.operatorframework.io.bundle.mediatype.v1", "registry+v1".into()),
        ("operators.operatorframework.io.bundle.manifests.v1", "manifests/".into()),
        ("operators.operatorframework.io.bundle.metadata.v1", "metadata/".into()),
        ("operators.operatorframework.io.bundle.package.v1", PACKAGE.into()),
        ("operators.operatorframework.io.bundle.channels.v1", CHANNEL.into()),
        ("operators.operatorframework.io.bundle.channel.default.v1", CHANNEL.into()),
        ("com.redhat.openshift.versions", OPENSHIFT_VERSIONS.into()),
    ]
}

fn yaml(v: &Value) -> String {
    serde_saphyr::to_string(v).expect("yaml")
}

fn manifest_file_name(v: &Value) -> String {
    let name = v["metadata"]["name"].as_str().expect("object has a name");
    let kind = v["kind"].as_str().expect("object has a kind");
    let api_version = v["apiVersion"].as_str().expect("object has an apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let group = if group.is_empty() { String::new() } else { format!("{group}_") };
    format!("manifests/{name}_{group}{version}_{}.yaml", kind.to_lowercase())
}

/// Every file of the bundle directory, in a stable order.
pub fn files() -> Vec<BundleFile> {
    let mut out = Vec::new();
    let header = "# Generated by `tinycode-local bundle` (make bundle); do not edit.\n";
    out.push(BundleFile {
        path: format!("manifests/{PACKAGE}.clusterserviceversion.yaml"),
        content: format!("{header}{}", yaml(&cluster_service_version())),
    });
    for crd in [
        serde_json::to_value(TinycodeInstance::crd()).expect("crd"),
        serde_json::to_value(tinycode_operator::api::TinycodeClass::crd()).expect("crd"),
    ] {
        let (group, plural) =
            (crd["spec"]["group"].as_str().expect("group"), crd["spec"]["names"]["plural"].as_str().expect("plural"));
        out.push(BundleFile {
            path: format!("manifests/{group}_{plural}.yaml"),
            content: format!("{header}{}", yaml(&crd)),
        });
    }
    // Extra objects OLM creates alongside the operator: the metrics Service
    // (in the install namespace), the SCC `use` ClusterRoles the operator
    // binds instances to, the discovery ClusterRole bound per namespace, the
    // self-service user roles, the ClusterRole a scraper of /metrics is
    // bound to (the operator authorizes scrapes with SubjectAccessReviews),
    // the ServiceMonitor and the alerts.
    let mut extras = vec![
        strip_namespace(one_doc(METRICS_SERVICE_YAML, "config/manager/service.yaml")),
        strip_namespace(one_doc(RELAY_SERVICE_YAML, "config/manager/oidc_relay_service.yaml")),
    ];
    extras.extend(ALL_TIERS.map(|tier| tier.use_role_manifest()));
    extras.push(rbac::discovery_cluster_role_manifest());
    extras.extend(parse_yaml_docs(USER_ROLES_YAML, "config/rbac/user_role.yaml"));
    extras.push(one_doc(METRICS_READER_YAML, "config/prometheus/metrics_reader_role.yaml"));
    // OLM creates these in the install namespace (it accepts both kinds in a
    // bundle); they need the monitoring.coreos.com API, which OpenShift has.
    extras.push(strip_namespace(one_doc(SERVICE_MONITOR_YAML, "config/prometheus/monitor.yaml")));
    extras.push(strip_namespace(one_doc(PROMETHEUS_RULE_YAML, "config/prometheus/rules.yaml")));
    for obj in extras {
        out.push(BundleFile { path: manifest_file_name(&obj), content: format!("{header}{}", yaml(&obj)) });
    }
    let annotations = bundle_annotations();
    let mut ann = serde_json::Map::new();
    for (k, v) in &annotations {
        ann.insert((*k).into(), Value::String(v.clone()));
    }
    out.push(BundleFile {
        path: "metadata/annotations.yaml".into(),
        content: format!("{header}{}", yaml(&json!({"annotations": ann}))),
    });
    let mut dockerfile = String::from(
        "# Generated by `tinycode-local bundle` (make bundle); do not edit.\n\
         # The OLM bundle image: build from the bundle directory, `make bundle-build`.\n\
         FROM scratch\n\n",
    );
    for (k, v) in &annotations {
        dockerfile.push_str(&format!("LABEL {k}={v}\n"));
    }
    dockerfile.push_str("\nCOPY manifests /manifests/\nCOPY metadata /metadata/\n");
    out.push(BundleFile { path: "bundle.Dockerfile".into(), content: dockerfile });
    out
}

/// Writes the bundle under `out`, replacing `manifests/` and `metadata/`;
/// with `image`, the operator image it names instead of manager.yaml's
/// placeholder (the image `make push` copied to a registry).
pub fn write(out: &Path, image: Option<&str>) -> std::io::Result<Vec<PathBuf>> {
    let placeholder = operator_image();
    if let Some(image) = image {
        let valid = !image.is_empty()
            && image.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
            && image.chars().all(|c| c.is_ascii_alphanumeric() || "._/:@-".contains(c));
        if !valid {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("--image '{image}' is not an image reference (registry/org/tinycode-operator:tag)"),
            ));
        }
    }
    for dir in ["manifests", "metadata"] {
        let d = out.join(dir);
        if d.is_dir() {
            std::fs::remove_dir_all(&d)?;
        }
    }
    let mut written = Vec::new();
    for f in files() {
        let path = out.join(&f.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let content = match image {
            Some(image) => f.content.replace(&placeholder, image),
            None => f.content,
        };
        std::fs::write(&path, content)?;
        written.push(path);
    }
    Ok(written)
}

/// `tinycode-local bundle --out DIR [--image IMAGE]`.
pub fn command(out: &Path, image: Option<&str>) -> ExitCode {
    match write(out, image) {
        Ok(paths) => {
            for p in paths {
                eprintln!("wrote {}", p.display());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: cannot write the bundle to {}: {e}", out.display());
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn schema_has(schema: &Value, path: &str) -> bool {
        let mut node = schema;
        for part in path.split('.') {
            match node["properties"].get(part) {
                Some(n) => node = n,
                None => return false,
            }
        }
        true
    }

    #[test]
    fn descriptors_name_real_fields_and_every_spec_field_has_one() {
        let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let class_crd = serde_json::to_value(tinycode_operator::api::TinycodeClass::crd()).unwrap();
        let class_schema = &class_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let [spec, status, class] = descriptor_paths();
        for p in &spec {
            assert!(schema_has(&schema["spec"], p), "spec descriptor {p} names no field of the CRD");
        }
        for p in status {
            assert!(schema_has(&schema["status"], p), "status descriptor {p} names no field of the CRD");
        }
        for p in class {
            assert!(schema_has(&class_schema["spec"], p), "class descriptor {p} names no field of TinycodeClass");
        }
        // The console's form offers every field of the spec, at least its first level.
        for field in schema["spec"]["properties"].as_object().unwrap().keys() {
            assert!(
                spec.iter().any(|p| p.split('.').next() == Some(field.as_str())),
                "spec.{field} has no descriptor: add one to SPEC_DESCRIPTORS"
            );
        }
    }

    #[test]
    fn csv_permissions_come_from_the_rbac_declaration() {
        let csv = cluster_service_version();
        let install = &csv["spec"]["install"]["spec"];
        assert_eq!(
            install["clusterPermissions"][0]["rules"],
            serde_json::to_value(rbac::cluster_role().rules.unwrap()).unwrap()
        );
        assert_eq!(install["clusterPermissions"][0]["serviceAccountName"], "tinycode-operator-manager");
        let deployment = &install["deployments"][0];
        assert_eq!(deployment["name"], "tinycode-operator-manager");
        let pod = &deployment["spec"]["template"]["spec"];
        assert!(pod["securityContext"].get("runAsUser").is_none());
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["containers"][0]["securityContext"]["readOnlyRootFilesystem"], true);
        // helm's home and its discovery cache live in TMPDIR, rewritten on every run.
        let env = pod["containers"][0]["env"].as_array().unwrap();
        let tmpdir = env.iter().find(|e| e["name"] == "TMPDIR").unwrap();
        let mount =
            pod["containers"][0]["volumeMounts"].as_array().unwrap().iter().find(|m| m["mountPath"] == tmpdir["value"]);
        let volume = pod["volumes"].as_array().unwrap().iter().find(|v| v["name"] == mount.unwrap()["name"]).unwrap();
        assert_eq!(volume["emptyDir"]["medium"], "Memory");
    }

    #[test]
    fn the_csv_is_dated_by_the_changelog_and_says_what_it_supports() {
        let csv = cluster_service_version();
        let annotations = &csv["metadata"]["annotations"];
        let date = annotations["createdAt"].as_str().unwrap();
        let digits: Vec<bool> = date.chars().map(|c| c.is_ascii_digit()).collect();
        assert_eq!(date.len(), 10, "{date}");
        assert!(digits.iter().enumerate().all(|(i, d)| *d == !matches!(i, 4 | 7)), "YYYY-MM-DD: {date}");
        assert_eq!(date, super::csv::release_date(tinycode_operator::VERSION));
        assert_eq!(annotations["features.operators.openshift.io/disconnected"], "true");
        for crd in [TinycodeInstance::crd().spec.names, tinycode_operator::api::TinycodeClass::crd().spec.names] {
            assert_eq!(crd.categories, Some(vec!["tinycode-all".to_string()]), "{}", crd.kind);
        }
        // The namespace preparation the description gives is the one the operator checks.
        let description = csv["spec"]["description"].as_str().unwrap();
        assert!(description.contains("tinycode.dev/prepared=true"));
        assert!(!description.contains("needs a password Secret"));
    }

    #[test]
    fn all_namespaces_and_single_namespace_are_supported() {
        let csv = cluster_service_version();
        let supported: Vec<&str> = csv["spec"]["installModes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["supported"] == true)
            .map(|m| m["type"].as_str().unwrap())
            .collect();
        assert_eq!(supported, ["SingleNamespace", "AllNamespaces"]);
        // What OLM targets is what the operator watches: every manager container
        // reads its target namespaces from the pod template.
        let pod = &csv["spec"]["install"]["spec"]["deployments"][0]["spec"]["template"]["spec"];
        for c in pod["containers"].as_array().unwrap() {
            let watch = c["env"].as_array().unwrap().iter().find(|e| e["name"] == "WATCH_NAMESPACE").unwrap();
            assert_eq!(watch["valueFrom"]["fieldRef"]["fieldPath"], "metadata.annotations['olm.targetNamespaces']");
            assert!(watch.get("value").is_none(), "{watch}");
        }
    }

    #[test]
    fn alm_examples_are_json_instances_without_namespace() {
        let csv = cluster_service_version();
        let examples: Value =
            serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
        let examples = examples.as_array().unwrap();
        assert_eq!(examples.len(), SAMPLES.len() + 1);
        for e in examples {
            assert!(e["kind"] == "TinycodeInstance" || e["kind"] == "TinycodeClass", "{e}");
            assert!(e["metadata"].get("namespace").is_none());
        }
        assert_eq!(examples.iter().filter(|e| e["kind"] == "TinycodeClass").count(), 1, "one class example");
    }
}

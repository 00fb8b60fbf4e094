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

use base64::Engine;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use tinycode_operator::api::{DEFAULT_IMAGE, TinycodeInstance};
use tinycode_operator::platform::rbac;
use tinycode_operator::platform::scc::ALL_TIERS;
use tinycode_operator::settings::DEFAULT_OPERATOR_NAMESPACE;

/// OLM package name.
pub const PACKAGE: &str = "tinycode-operator";
/// The channel every bundle is published to (OLM's naming convention:
/// candidate, fast, stable).
pub const CHANNEL: &str = "candidate";
/// Oldest Kubernetes the operator supports (OpenShift 4.12).
pub const MIN_KUBE_VERSION: &str = "1.25.0";
/// Oldest OpenShift the bundle is offered on (Red Hat catalog annotation).
pub const OPENSHIFT_VERSIONS: &str = "v4.12";
const REPOSITORY: &str = "https://github.com/bobbyjohnstx/tinycode-operator";

const MANAGER_YAML: &str = include_str!("../../config/manager/manager.yaml");
const METRICS_SERVICE_YAML: &str = include_str!("../../config/manager/service.yaml");
const USER_ROLES_YAML: &str = include_str!("../../config/rbac/user_role.yaml");
const ICON_SVG: &str = include_str!("../../config/manifests/icon.svg");

/// Every file in `config/samples`, in alm-examples order (the first is the
/// one the console pre-fills). tools/tests/bundle.rs checks the list is complete.
pub const SAMPLES: &[(&str, &str)] = &[
    ("tinycode_v1alpha1_basic.yaml", include_str!("../../config/samples/tinycode_v1alpha1_basic.yaml")),
    ("tinycode_v1alpha1_vllm.yaml", include_str!("../../config/samples/tinycode_v1alpha1_vllm.yaml")),
    ("tinycode_v1alpha1_ollama.yaml", include_str!("../../config/samples/tinycode_v1alpha1_ollama.yaml")),
    ("tinycode_v1alpha1_git.yaml", include_str!("../../config/samples/tinycode_v1alpha1_git.yaml")),
    ("tinycode_v1alpha1_shared.yaml", include_str!("../../config/samples/tinycode_v1alpha1_shared.yaml")),
    ("tinycode_v1alpha1_clusteradmin.yaml", include_str!("../../config/samples/tinycode_v1alpha1_clusteradmin.yaml")),
    ("tinycode_v1alpha1_hostpath.yaml", include_str!("../../config/samples/tinycode_v1alpha1_hostpath.yaml")),
    ("tinycode_v1alpha1_shell.yaml", include_str!("../../config/samples/tinycode_v1alpha1_shell.yaml")),
];

/// One generated file, relative to the bundle directory.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleFile {
    pub path: String,
    pub content: String,
}

/// `x-descriptors` for the console form, by field path under `spec`.
const SPEC_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
    (
        "image",
        "Image",
        "tinycode container image; its registry must be in the operator's allow-list",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "replicas",
        "Replicas",
        "Number of tinycode pods (1-10); more than one needs a shared workspace",
        &["urn:alm:descriptor:com.tectonic.ui:podCount"],
    ),
    (
        "resources",
        "Resources",
        "CPU and memory limits and requests of the tinycode container",
        &["urn:alm:descriptor:com.tectonic.ui:resourceRequirements"],
    ),
    (
        "auth.passwordSecret",
        "Password Secret",
        "Secret with key TINYCODE_SERVER_PASSWORD; unset leaves the UI unauthenticated",
        &["urn:alm:descriptor:io.kubernetes:Secret"],
    ),
    (
        "storage.dataSize",
        "Data Volume Size",
        "PVC size for the SQLite database and config",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "storage.projectsSize",
        "Workspace Volume Size",
        "PVC size for the /projects workspace",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "storage.projectsAccessMode",
        "Workspace Access Mode",
        "ReadWriteMany lets several replicas share the workspace",
        &[
            "urn:alm:descriptor:com.tectonic.ui:select:ReadWriteOnce",
            "urn:alm:descriptor:com.tectonic.ui:select:ReadWriteMany",
        ],
    ),
    (
        "storage.storageClassName",
        "Storage Class",
        "StorageClass of the PVCs (cluster default when unset)",
        &["urn:alm:descriptor:io.kubernetes:StorageClass"],
    ),
    (
        "storage.retainOnDelete",
        "Keep Volumes On Delete",
        "Keep the PVCs when the instance is deleted",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "storage.hostPath.path",
        "Host Path",
        "Host directory mounted at /projects (needs the namespace's hostpath approval)",
        &["urn:alm:descriptor:com.tectonic.ui:text", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    ("hostname", "Hostname", "Route host (generated when unset)", &["urn:alm:descriptor:com.tectonic.ui:text"]),
    (
        "tlsTermination",
        "TLS Termination",
        "Route TLS termination",
        &[
            "urn:alm:descriptor:com.tectonic.ui:select:edge",
            "urn:alm:descriptor:com.tectonic.ui:select:passthrough",
            "urn:alm:descriptor:com.tectonic.ui:select:reencrypt",
        ],
    ),
    (
        "model",
        "Default Model",
        "Default model ID written into the generated config",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "ollama.enabled",
        "Deploy Ollama",
        "Deploy an Ollama server in the same release",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "ollama.host",
        "External Ollama URL",
        "URL of an existing Ollama server (when Deploy Ollama is off)",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "git.url",
        "Git Repository",
        "Repository cloned into /projects at start-up",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "git.branch",
        "Git Branch",
        "Branch to clone (repository default when unset)",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "git.credentialsSecret",
        "Git Credentials Secret",
        "Secret with username/password (HTTPS) or ssh-privatekey (SSH)",
        &["urn:alm:descriptor:io.kubernetes:Secret"],
    ),
    (
        "shell.enabled",
        "Host Shell",
        "Host shell through hostPID (needs the namespace's shell approval)",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "clusterAdmin.enabled",
        "Cluster Admin Mode",
        "Mount a kubeconfig and install oc in the container",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "clusterAdmin.kubeconfigSecretName",
        "Kubeconfig Secret",
        "Secret holding the kubeconfig for cluster admin mode",
        &["urn:alm:descriptor:io.kubernetes:Secret", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "nodeSelector",
        "Node Selector",
        "Nodes the tinycode pods may run on",
        &["urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Node", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
];

const STATUS_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
    (
        "phase",
        "Phase",
        "Pending, Deploying, Running, Failed or Terminating",
        &["urn:alm:descriptor:io.kubernetes.phase"],
    ),
    ("url", "URL", "Where the tinycode web UI is served", &["urn:alm:descriptor:org.w3:link"]),
    (
        "conditions",
        "Conditions",
        "Ready, VllmWarning, VllmConfigReady and ClusterAdminReady",
        &["urn:alm:descriptor:io.kubernetes.conditions"],
    ),
    (
        "helmRelease",
        "Helm Release",
        "Helm release that holds the instance's objects",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "helmRevision",
        "Helm Revision",
        "Revision of that release last applied",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "scc",
        "Security Context Constraints",
        "SCC granted to the instance's ServiceAccount",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
];

/// Field paths (`a.b.c`) the descriptors name, for tests.
pub fn descriptor_paths() -> (Vec<&'static str>, Vec<&'static str>) {
    (SPEC_DESCRIPTORS.iter().map(|d| d.0).collect(), STATUS_DESCRIPTORS.iter().map(|d| d.0).collect())
}

fn descriptors(table: &[(&str, &str, &str, &[&str])]) -> Value {
    Value::Array(
        table
            .iter()
            .map(|(path, name, description, x)| {
                json!({"path": path, "displayName": name, "description": description, "x-descriptors": x})
            })
            .collect(),
    )
}

fn parse_yaml_docs(text: &str, what: &str) -> Vec<Value> {
    use serde::Deserialize;
    serde_yaml::Deserializer::from_str(text)
        .filter_map(|doc| {
            let v = Value::deserialize(doc).unwrap_or_else(|e| panic!("{what} is not valid YAML: {e}"));
            (!v.is_null()).then_some(v)
        })
        .collect()
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

/// The Deployment spec OLM installs: the manager's, without the fixed UID.
/// On OpenShift a Deployment that OLM installs runs under the install
/// namespace's restricted-v2 SCC, which assigns a UID from the namespace's
/// range and rejects `runAsUser: 1001`; the image's USER is 1001 anyway, so
/// plain Kubernetes still runs it as 1001, and the pod stays non-root
/// either way (`runAsNonRoot`).
fn olm_deployment_spec() -> Value {
    let mut spec = manager_deployment()["spec"].clone();
    let pod = &mut spec["template"]["spec"];
    if let Some(sc) = pod["securityContext"].as_object_mut() {
        sc.remove("runAsUser");
    }
    for c in pod["containers"].as_array_mut().into_iter().flatten() {
        if let Some(sc) = c["securityContext"].as_object_mut() {
            sc.remove("runAsUser");
        }
    }
    spec
}

/// alm-examples: every sample, without its namespace (the console fills it).
pub fn alm_examples() -> Value {
    Value::Array(
        SAMPLES
            .iter()
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

fn description() -> String {
    format!(
        "tinycode-operator installs and manages [tinycode](https://github.com/bobbyjohnstx/tinycode), a web-based AI \
coding assistant, on OpenShift. Each `TinycodeInstance` becomes one Helm release of the bundled chart (Deployment, \
Service, PVCs, NetworkPolicy, optional Ollama), an OpenShift Route and the least-privileged SecurityContextConstraints \
grant its spec needs.

## Before the first instance (cluster-admin)

1. Install the three SCCs once; OLM bundles cannot carry SCCs:
   `oc apply -f config/scc/sccs.yaml` (from the operator's repository).
2. Prepare each namespace instances go into: the operator's ServiceAccount needs `admin` there, and the
   instance needs a password Secret:
   `hack/prepare-namespace.sh tinycode-dev --generate-password --operator-namespace <namespace this operator runs in>`,
   or by hand:
   `oc create rolebinding tinycode-operator-admin --clusterrole=admin --serviceaccount=<operator namespace>:tinycode-operator-manager -n tinycode-dev`.
   An instance in an unprepared namespace reports the exact commands in its status.
3. The `tinycode-hostpath` and `tinycode-shell` tiers need the namespace approved:
   `oc label namespace tinycode-dev tinycode.dev/allow-hostpath=true` (or `tinycode.dev/allow-shell=true`).

## Self-service

`tinycode-user-role` lets a user manage instances and the password Secret in one namespace when bound there
with a RoleBinding; namespace admins and editors can manage instances without it.

## Data

Deleting an instance uninstalls its release and keeps its PVCs (`spec.storage.retainOnDelete`, default true);
an instance created again with the same name re-uses them.

Source and documentation: {REPOSITORY}"
    )
}

fn icon_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(ICON_SVG.as_bytes())
}

/// The ClusterServiceVersion.
pub fn cluster_service_version() -> Value {
    let version = tinycode_operator::VERSION;
    let image = operator_image();
    let examples = serde_json::to_string_pretty(&alm_examples()).expect("examples serialise");
    let cluster_rules = serde_json::to_value(rbac::cluster_role().rules.unwrap_or_default()).expect("rules");
    let deployment = manager_deployment();
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("manager.yaml names a serviceAccountName")
        .to_string();
    let leader_rules =
        serde_json::to_value(rbac::leader_election_role(DEFAULT_OPERATOR_NAMESPACE).rules.unwrap_or_default())
            .expect("rules");
    let crd = TinycodeInstance::crd();
    let owned_resources = json!([
        {"kind": "Deployment", "name": "", "version": "v1"},
        {"kind": "Service", "name": "", "version": "v1"},
        {"kind": "PersistentVolumeClaim", "name": "", "version": "v1"},
        {"kind": "ServiceAccount", "name": "", "version": "v1"},
        {"kind": "ConfigMap", "name": "", "version": "v1"},
        {"kind": "NetworkPolicy", "name": "", "version": "v1"},
        {"kind": "Role", "name": "", "version": "v1"},
        {"kind": "RoleBinding", "name": "", "version": "v1"},
        {"kind": "Route", "name": "", "version": "v1"},
    ]);
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": {
            "name": format!("{PACKAGE}.v{version}"),
            "namespace": "placeholder",
            "annotations": {
                "alm-examples": examples,
                "capabilities": "Basic Install",
                "categories": "AI/Machine Learning,Developer Tools",
                "containerImage": image,
                "description": "Installs and manages tinycode AI coding assistant instances on OpenShift",
                "operatorframework.io/suggested-namespace": DEFAULT_OPERATOR_NAMESPACE,
                "repository": REPOSITORY,
                "support": "tinycode-operator maintainers",
            },
            "labels": {
                "operatorframework.io/arch.amd64": "supported",
                "operatorframework.io/os.linux": "supported",
            },
        },
        "spec": {
            "displayName": "Tinycode Operator",
            "description": description(),
            "version": version,
            "minKubeVersion": MIN_KUBE_VERSION,
            "maturity": "alpha",
            "provider": {"name": "tinycode-operator maintainers", "url": REPOSITORY},
            "maintainers": [{"name": "tinycode-operator maintainers", "email": "tinycode-operator@example.com"}],
            "links": [
                {"name": "Source", "url": REPOSITORY},
                {"name": "tinycode", "url": "https://github.com/bobbyjohnstx/tinycode"},
                {"name": "tinycode container", "url": "https://github.com/bobbyjohnstx/tinycode-container"},
            ],
            "keywords": ["tinycode", "ai", "coding assistant", "llm", "vllm", "ollama", "developer tools"],
            "icon": [{"base64data": icon_base64(), "mediatype": "image/svg+xml"}],
            "installModes": [
                {"type": "OwnNamespace", "supported": false},
                {"type": "SingleNamespace", "supported": false},
                {"type": "MultiNamespace", "supported": false},
                {"type": "AllNamespaces", "supported": true},
            ],
            "customresourcedefinitions": {
                "owned": [{
                    "name": crd.metadata.name.clone().expect("crd name"),
                    "version": tinycode_operator::api::VERSION,
                    "kind": crd.spec.names.kind.clone(),
                    "displayName": "Tinycode Instance",
                    "description": "One tinycode AI coding assistant: a Helm release of the bundled chart, a Route and an SCC grant",
                    "resources": owned_resources,
                    "specDescriptors": descriptors(SPEC_DESCRIPTORS),
                    "statusDescriptors": descriptors(STATUS_DESCRIPTORS),
                }],
            },
            "install": {
                "strategy": "deployment",
                "spec": {
                    "clusterPermissions": [{"serviceAccountName": sa, "rules": cluster_rules}],
                    "permissions": [{"serviceAccountName": sa, "rules": leader_rules}],
                    "deployments": [{
                        "name": deployment["metadata"]["name"],
                        "label": deployment["metadata"]["labels"],
                        "spec": olm_deployment_spec(),
                    }],
                },
            },
            "relatedImages": [
                {"name": "tinycode-operator", "image": image},
                {"name": "tinycode", "image": DEFAULT_IMAGE},
            ],
        },
    })
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
    serde_yaml::to_string(v).expect("yaml")
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
    let crd = serde_json::to_value(TinycodeInstance::crd()).expect("crd");
    let (group, plural) =
        (crd["spec"]["group"].as_str().expect("group"), crd["spec"]["names"]["plural"].as_str().expect("plural"));
    out.push(BundleFile {
        path: format!("manifests/{group}_{plural}.yaml"),
        content: format!("{header}{}", yaml(&crd)),
    });
    // Extra objects OLM creates alongside the operator: the metrics Service
    // (in the install namespace), the SCC `use` ClusterRoles the operator
    // binds instances to, the discovery ClusterRole bound per namespace, and
    // the self-service user roles.
    let mut extras = vec![strip_namespace(one_doc(METRICS_SERVICE_YAML, "config/manager/service.yaml"))];
    extras.extend(ALL_TIERS.map(|tier| tier.use_role_manifest()));
    extras.push(rbac::discovery_cluster_role_manifest());
    extras.extend(parse_yaml_docs(USER_ROLES_YAML, "config/rbac/user_role.yaml"));
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

/// Writes the bundle under `out`, replacing `manifests/` and `metadata/`.
pub fn write(out: &Path) -> std::io::Result<Vec<PathBuf>> {
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
        std::fs::write(&path, f.content)?;
        written.push(path);
    }
    Ok(written)
}

/// `tinycode-local bundle --out DIR`.
pub fn command(out: &Path) -> ExitCode {
    match write(out) {
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
    fn descriptors_name_real_fields() {
        let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"];
        let (spec, status) = descriptor_paths();
        for p in spec {
            assert!(schema_has(&schema["spec"], p), "spec descriptor {p} names no field of the CRD");
        }
        for p in status {
            assert!(schema_has(&schema["status"], p), "status descriptor {p} names no field of the CRD");
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
    }

    #[test]
    fn only_all_namespaces_is_supported() {
        let csv = cluster_service_version();
        for mode in csv["spec"]["installModes"].as_array().unwrap() {
            assert_eq!(mode["supported"], mode["type"] == "AllNamespaces", "{mode}");
        }
    }

    #[test]
    fn alm_examples_are_json_instances_without_namespace() {
        let csv = cluster_service_version();
        let examples: Value =
            serde_json::from_str(csv["metadata"]["annotations"]["alm-examples"].as_str().unwrap()).unwrap();
        let examples = examples.as_array().unwrap();
        assert_eq!(examples.len(), SAMPLES.len());
        for e in examples {
            assert_eq!(e["kind"], "TinycodeInstance");
            assert!(e["metadata"].get("namespace").is_none());
        }
    }
}

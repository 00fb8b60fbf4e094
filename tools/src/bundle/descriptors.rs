//! The console's form and status view of a TinycodeInstance: the CSV's
//! `specDescriptors` and `statusDescriptors`, by field path.

use serde_json::{Value, json};

/// `x-descriptors` for the console form, by field path under `spec`.
pub(super) const SPEC_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
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

/// `x-descriptors` for the console's status view, by field path under `status`.
pub(super) const STATUS_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
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

/// A descriptor table as the CSV lists it.
pub(super) fn descriptors(table: &[(&str, &str, &str, &[&str])]) -> Value {
    Value::Array(
        table
            .iter()
            .map(|(path, name, description, x)| {
                json!({"path": path, "displayName": name, "description": description, "x-descriptors": x})
            })
            .collect(),
    )
}

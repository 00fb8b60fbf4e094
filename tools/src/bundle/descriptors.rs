//! The console's form and status view of a TinycodeInstance: the CSV's
//! `specDescriptors` and `statusDescriptors`, by field path.

use serde_json::{Value, json};

/// `x-descriptors` for the console form, by field path under `spec`.
pub(super) const SPEC_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
    (
        "className",
        "Class",
        "TinycodeClass whose defaults and limits apply (the cluster's default class when unset)",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "auth.mode",
        "Sign-in",
        "password (a shared password), openshift (the cluster's own sign-in) or oidc (the cluster-admin's OpenID Connect provider); the sign-in modes admit users allowed `use` on the instance",
        &[
            "urn:alm:descriptor:com.tectonic.ui:select:password",
            "urn:alm:descriptor:com.tectonic.ui:select:openshift",
            "urn:alm:descriptor:com.tectonic.ui:select:oidc",
        ],
    ),
    (
        "stopped",
        "Stopped",
        "Scale the workloads to zero, keeping data, address and release; off starts them with the same data",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "suspend",
        "Suspend Reconciling",
        "The operator applies nothing while on (what runs keeps running, unless idle stop is required)",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "idle.timeout",
        "Idle Timeout",
        "Stop after this long without activity (30m, 2h, 1h30m; 0: never, where allowed); unset: the operator's or class's default",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
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
        "Secret with key TINYCODE_SERVER_PASSWORD (password mode); unset: the operator generates one and status.passwordSecret names it",
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
        "vllm",
        "vLLM Servers",
        "OpenAI-compatible model servers (name, URL, optional API key Secret and models); probed for their models and limits",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "env",
        "Environment",
        "Variables for the tinycode container, by value or from a Secret key (the agent can read them)",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "nodeSelector",
        "Node Selector",
        "Nodes the tinycode pods may run on",
        &["urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Node", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "tolerations",
        "Tolerations",
        "Taints the tinycode pods tolerate (a class may add its own)",
        &["urn:alm:descriptor:io.kubernetes:Tolerations", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "imagePullSecrets",
        "Image Pull Secrets",
        "Secrets in this namespace with the registry credentials of a private image",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "egress",
        "Egress",
        "Hosts and ranges the agent may reach, through its egress proxy (within its class's list, if it has one)",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "ingress.tlsSecretName",
        "Ingress TLS Secret",
        "On Kubernetes: Secret with the certificate the Ingress serves (the ingress controller's default when unset)",
        &["urn:alm:descriptor:io.kubernetes:Secret", "urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "discovery.namespaces",
        "Model Discovery Namespaces",
        "Namespaces searched for vLLM Services (each approved by a cluster-admin's label; * for every approved one)",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
];

/// `x-descriptors` for the console's status view, by field path under `status`.
pub(super) const STATUS_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
    (
        "phase",
        "Phase",
        "Pending, Deploying, Running, Stopped, Suspended, Failed or Terminating",
        &["urn:alm:descriptor:io.kubernetes.phase"],
    ),
    ("url", "URL", "Where the tinycode web UI is served", &["urn:alm:descriptor:org.w3:link"]),
    (
        "conditions",
        "Conditions",
        "Ready, Reconciling, Stalled, IngressReady, VllmWarning, VllmConfigReady and ClusterAdminReady",
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

/// `x-descriptors` for a TinycodeClass, by field path under `spec`.
pub(super) const CLASS_SPEC_DESCRIPTORS: &[(&str, &str, &str, &[&str])] = &[
    (
        "default",
        "Default Class",
        "Applies to instances that name no class (at most one class should be the default)",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "description",
        "Description",
        "What the class is for, shown to tenants",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    ("image", "Image", "tinycode image of the class's instances", &["urn:alm:descriptor:com.tectonic.ui:text"]),
    (
        "allowCustomImage",
        "Allow Custom Image",
        "Whether instances may name an image of their own (from the operator's registry allow-list)",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "maxInstancesPerNamespace",
        "Instances Per Namespace",
        "Most instances of this class one namespace may run (the oldest keep running)",
        &["urn:alm:descriptor:com.tectonic.ui:number"],
    ),
    (
        "maxReplicas",
        "Pods Per Instance",
        "Most tinycode pods per instance (1 where tinycode.max caps resources)",
        &["urn:alm:descriptor:com.tectonic.ui:number"],
    ),
    (
        "idle.timeout",
        "Idle Timeout",
        "Default idle timeout of the class's instances (30m, 2h)",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "idle.maxTimeout",
        "Longest Idle Timeout",
        "The longest idle timeout an instance may ask for",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "idle.required",
        "Idle Stop Required",
        "Instances may not turn idle stop off, and idle ones stop even while suspended or refused",
        &["urn:alm:descriptor:com.tectonic.ui:booleanSwitch"],
    ),
    (
        "storage.maxDataSize",
        "Largest Data Volume",
        "Most spec.storage.dataSize an instance may ask for",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "storage.maxProjectsSize",
        "Largest Workspace Volume",
        "Most spec.storage.projectsSize an instance may ask for",
        &["urn:alm:descriptor:com.tectonic.ui:text"],
    ),
    (
        "egress",
        "Egress",
        "Hosts and ranges the class's agents may reach, through each instance's egress proxy (unset: anywhere but metadata addresses)",
        &["urn:alm:descriptor:com.tectonic.ui:advanced"],
    ),
    (
        "namespaceSelector",
        "Namespaces",
        "Namespaces whose instances may use the class (all when unset)",
        &[
            "urn:alm:descriptor:com.tectonic.ui:selector:core:v1:Namespace",
            "urn:alm:descriptor:com.tectonic.ui:advanced",
        ],
    ),
];

/// Field paths (`a.b.c`) the descriptors name, for tests: an instance's
/// spec and status, a class's spec.
pub fn descriptor_paths() -> [Vec<&'static str>; 3] {
    [SPEC_DESCRIPTORS, STATUS_DESCRIPTORS, CLASS_SPEC_DESCRIPTORS].map(|t| t.iter().map(|d| d.0).collect())
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

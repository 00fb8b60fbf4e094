//! The parts of a `TinycodeInstanceSpec`: resources, storage, auth, shell,
//! cluster-admin mode, vLLM providers, discovery, git, ingress options.

use super::*;

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("quantity(self.requests.cpu).compareTo(quantity(self.limits.cpu)) <= 0")
        .message("spec.resources.requests.cpu must not exceed spec.resources.limits.cpu"),
    validation = Rule::new("quantity(self.requests.memory).compareTo(quantity(self.limits.memory)) <= 0")
        .message("spec.resources.requests.memory must not exceed spec.resources.limits.memory"),
)]
pub struct Resources {
    /// Most the container may use (default 2 CPUs, 2Gi).
    #[serde(default = "default_limits")]
    pub limits: ResourceAmounts,
    /// What the scheduler reserves (default 200m, 512Mi).
    #[serde(default = "default_requests")]
    pub requests: ResourceAmounts,
}

impl Default for Resources {
    fn default() -> Self {
        Self { limits: default_limits(), requests: default_requests() }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct ResourceAmounts {
    /// CPU as a Kubernetes quantity (200m, 2).
    #[x_kube(validation = Rule::new("isQuantity(self)").message("cpu must be a Kubernetes quantity such as 200m or 2"))]
    #[schemars(length(max = 32))]
    pub cpu: String,
    /// Memory as a Kubernetes quantity (512Mi, 2Gi).
    #[x_kube(validation = Rule::new("isQuantity(self)").message("memory must be a Kubernetes quantity such as 512Mi or 2Gi"))]
    #[schemars(length(max = 32))]
    pub memory: String,
}

/// PVCs (or a host directory) for the data and the project workspace. Fixed at
/// creation, except that dataSize and projectsSize may grow and retainOnDelete
/// may change; re-create the instance to change the rest.
//
// Admission refuses what Kubernetes cannot follow: a PVC's StorageClass and
// access mode are immutable, and moving /projects between a host directory and
// a PVC would leave the workspace behind. A size below the last one is left to
// the operator, which compares it with what the PVC asks for (a growth the
// StorageClass refused must be able to go back). These are
// transition rules (they use `oldSelf`, so they run on updates only, and only
// where the old value exists). `spec.storage` always exists (schema default), so
// the rules sit at this level and compare optional fields with `has()` on both
// sides; projectsAccessMode has a schema default too.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)")
        .message("spec.storage.storageClassName cannot be set, changed or removed after creation (the PVCs keep their StorageClass); re-create the instance to change it. storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted, and an instance created again under the same name re-uses them: copy the data you need and delete the old PVCs first, or use a new name")
        .field_path(".storageClassName"),
    validation = Rule::new("!has(self.projectsAccessMode) || !has(oldSelf.projectsAccessMode) || self.projectsAccessMode == oldSelf.projectsAccessMode")
        .message("spec.storage.projectsAccessMode cannot be changed after creation (a PVC's access mode is fixed); re-create the instance to change it. storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted, and an instance created again under the same name re-uses them: copy the data you need and delete the old PVCs first, or use a new name")
        .field_path(".projectsAccessMode"),
    validation = Rule::new("!has(self.hostPath) || !has(oldSelf.hostPath) || self.hostPath.path == oldSelf.hostPath.path")
        .message("spec.storage.hostPath.path cannot be changed after creation (/projects would move to another directory without its contents); re-create the instance to change it. storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted, and an instance created again under the same name re-uses them: copy the data you need and delete the old PVCs first, or use a new name")
        .field_path(".hostPath"),
)]
pub struct Storage {
    /// PVC size for the SQLite database and config.
    #[serde(default = "default_data_size")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("spec.storage.dataSize must be a Kubernetes quantity such as 1Gi"))]
    #[schemars(length(max = 32))]
    pub data_size: String,
    /// PVC size for the project workspace.
    #[serde(default = "default_projects_size")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("spec.storage.projectsSize must be a Kubernetes quantity such as 10Gi"))]
    #[schemars(length(max = 32))]
    pub projects_size: String,
    /// Access mode of the projects PVC: ReadWriteOnce (default) or
    /// ReadWriteMany (needs a StorageClass that offers it; required for replicas > 1).
    #[serde(default)]
    pub projects_access_mode: AccessMode,
    /// StorageClass for the PVCs; the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub storage_class_name: Option<String>,
    /// Host directory mounted at /projects instead of the projects PVC.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_path: Option<HostPath>,
    /// Keep the PVCs when the instance is deleted.
    #[serde(default = "default_true")]
    pub retain_on_delete: bool,
}

impl Default for Storage {
    fn default() -> Self {
        Self {
            data_size: default_data_size(),
            projects_size: default_projects_size(),
            projects_access_mode: AccessMode::default(),
            storage_class_name: None,
            host_path: None,
            retain_on_delete: true,
        }
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HostPath {
    /// Absolute path on the node.
    #[schemars(pattern(r"^/"), length(min = 1, max = 4096))]
    pub path: String,
    /// Mount it read-only. Writable host directories need the namespace
    /// approval tinycode.dev/allow-hostpath=readwrite.
    #[serde(default)]
    pub read_only: bool,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AccessMode {
    #[default]
    ReadWriteOnce,
    ReadWriteMany,
}

impl AccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::ReadWriteOnce => "ReadWriteOnce",
            AccessMode::ReadWriteMany => "ReadWriteMany",
        }
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TlsTermination {
    #[default]
    Edge,
    Passthrough,
    Reencrypt,
}

impl TlsTermination {
    pub fn as_str(self) -> &'static str {
        match self {
            TlsTermination::Edge => "edge",
            TlsTermination::Passthrough => "passthrough",
            TlsTermination::Reencrypt => "reencrypt",
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Ollama {
    /// Requests and limits of the bundled Ollama, by resource, extended
    /// resources included (e.g. limits: {nvidia.com/gpu: "1"}). Unset: the
    /// class's defaults, else none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceLists>,
    /// Node labels the Ollama pod must run on (the IDE pod keeps its own
    /// spec.nodeSelector, so it is not forced onto GPU nodes with Ollama).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    /// Tolerations of the Ollama pod (Kubernetes' own type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,
    /// Deploy an Ollama server in the same Helm release.
    #[serde(default)]
    pub enabled: bool,
    /// External Ollama URL, when not enabled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new(HTTP_URL_HYGIENE_RULE)
        .message("spec.ollama.host: no credentials, query or fragment in the URL; give the base URL such as http://ollama.models.svc:11434"))]
    #[schemars(pattern(HTTP_URL_PATTERN), length(max = 2048))]
    pub host: Option<String>,
    /// Models to pre-pull.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), inner(pattern(r"^[A-Za-z0-9][A-Za-z0-9_./:-]*$"), length(max = 253)))]
    pub models: Option<Vec<String>>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Auth {
    /// Who may open the UI: `password` (one shared password, the default),
    /// `openshift` (sign in with the cluster's OAuth server) or `oidc` (sign in
    /// with the OpenID Connect provider the cluster-admin configured for the
    /// operator). In both sign-in modes a user also needs the RBAC verb `use`
    /// on `tinycodeinstances/<name>` in the instance's namespace.
    #[serde(default)]
    pub mode: AuthMode,
    /// Secret (in the instance namespace) holding the UI password under key
    /// TINYCODE_SERVER_PASSWORD. Unset: the operator generates a password into
    /// Secret <name>-tinycode-password (status.passwordSecret names it). In the
    /// sign-in modes users never see it: the authorization gate in the pod
    /// presents it to the tinycode server for them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub password_secret: Option<String>,
}

/// When an instance unused for a while is stopped.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Idle {
    /// Stop after this long without activity: no request reached the UI and
    /// the agent ran no task (for example 30m, 2h or 1h30m). 0 turns idle stop
    /// off where the cluster-admin allows it (--idle-stop-required). Unset: the
    /// operator's --idle-timeout. The operator's --idle-timeout-max caps it;
    /// status.idle.timeout is the timeout in force.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN), length(min = 1, max = 24))]
    pub timeout: Option<String>,
}

/// How users reach an instance's UI.
#[derive(
    JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default, Hash, strum::IntoStaticStr,
)]
#[serde(rename_all = "lowercase")]
#[strum(serialize_all = "lowercase")]
pub enum AuthMode {
    /// One shared password (Secret `spec.auth.passwordSecret` or the generated one).
    #[default]
    Password,
    /// The cluster's OAuth server (OpenShift only), through OpenShift's oauth-proxy.
    Openshift,
    /// The operator's OpenID Connect provider, through oauth2-proxy.
    Oidc,
}

impl AuthMode {
    /// The mode as the spec spells it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// A sign-in mode: a proxy and an authorization gate front the UI.
    pub fn signs_in(self) -> bool {
        self != AuthMode::Password
    }
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Shell {
    /// Host shell through hostPID (tinycode-shell SCC; needs namespace approval).
    #[serde(default)]
    pub enabled: bool,
    /// Advisory only: recorded, not enforced. The agent can run any command the
    /// shell allows; do not rely on this list as a security boundary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(length(max = 253)))]
    pub allowed_commands: Option<Vec<String>>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!self.enabled || (has(self.kubeconfigSecretName) && self.kubeconfigSecretName != '')")
        .message("spec.clusterAdmin.kubeconfigSecretName is required when spec.clusterAdmin.enabled is true: name the Secret that holds the kubeconfig"),
    validation = Rule::new("self.enabled || !has(self.clusterRole)")
        .message("spec.clusterAdmin.clusterRole is bound only in cluster-admin mode: set spec.clusterAdmin.enabled to true or remove clusterRole"),
)]
pub struct ClusterAdmin {
    /// Mount a kubeconfig (and install oc) so the agent can operate a cluster.
    #[serde(default)]
    pub enabled: bool,
    /// Secret holding the kubeconfig (required when enabled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub kubeconfig_secret_name: Option<String>,
    /// Key of that Secret holding the kubeconfig (default kubeconfig).
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(pattern(r"^[-._a-zA-Z0-9]+$"), length(min = 1, max = 253))]
    pub kubeconfig_secret_key: String,
    /// oc client version the container downloads at start (default stable).
    #[serde(default = "default_oc_version")]
    #[schemars(pattern(r"^[A-Za-z0-9][A-Za-z0-9._-]*$"), length(max = 64))]
    pub oc_version: String,
    /// Namespace the kubeconfig Secret lives in; copied into the instance namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"), length(max = 63))]
    pub kubeconfig_namespace: Option<String>,
    /// ClusterRole bound cluster-wide to the instance's ServiceAccount; only
    /// roles in the operator's allow-list that the namespace's
    /// `tinycode.dev/allow-cluster-role` label approves are bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("!(self in ['admin', 'cluster-admin', 'tinycode-discovery']) && !self.startsWith('tinycode-operator') && !self.startsWith('tinycode-scc-') && !self.startsWith('system:')")
        .message("spec.clusterAdmin.clusterRole may not be admin, cluster-admin, system:*, the operator's own roles or the SCC use roles; use a role a cluster-admin approved for this namespace (default: view)"))]
    #[schemars(length(min = 1, max = 253))]
    pub cluster_role: Option<String>,
}

impl Default for ClusterAdmin {
    fn default() -> Self {
        Self {
            enabled: false,
            kubeconfig_secret_name: None,
            kubeconfig_secret_key: default_kubeconfig_key(),
            oc_version: default_oc_version(),
            kubeconfig_namespace: None,
            cluster_role: None,
        }
    }
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct VllmProvider {
    /// Provider name in the generated config (unique in the list).
    #[schemars(pattern(VLLM_NAME_PATTERN), length(min = 1, max = 63))]
    pub name: String,
    /// Base URL of the OpenAI-compatible API, e.g. http://vllm.models.svc:8000/v1.
    #[x_kube(validation = Rule::new(HTTP_URL_HYGIENE_RULE)
        .message("spec.vllm[].url: no credentials, query or fragment in the URL; give the server's base URL such as http://vllm.models.svc:8000"))]
    #[schemars(pattern(HTTP_URL_PATTERN), length(max = 2048))]
    pub url: String,
    /// Per-model limit overrides, by model ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 100))]
    pub models: Option<BTreeMap<String, ModelLimits>>,
    /// Secret key holding the server's API key: the operator's probe sends
    /// it as a bearer token and the generated config references it from the
    /// environment, so its value is never copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_key_secret: Option<SecretKeyRef>,
}

/// A key of a Secret in the instance's namespace.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// The Secret's name.
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub name: String,
    /// The key whose value is used.
    #[schemars(pattern(r"^[-._a-zA-Z0-9]+$"), length(min = 1, max = 253))]
    pub key: String,
}

/// A Secret named by its name only.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct SecretName {
    /// The Secret's name (in the instance's namespace).
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub name: String,
}

/// An environment variable whose value is a Secret key.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EnvFromSecret {
    /// Variable name (e.g. OPENROUTER_API_KEY); names the chart sets itself
    /// (TINYCODE_*, OLLAMA_HOST, HOME, PATH, ...) are refused.
    #[x_kube(validation = Rule::new("!self.startsWith('TINYCODE_') && !(self in ['HOME', 'PATH', 'OLLAMA_HOST', 'KUBECONFIG', 'GIT_URL', 'GIT_BRANCH', 'GIT_DEPTH', 'GIT_PULL_ON_RESTART', 'OC_VERSION'])")
        .message("spec.env[].name may not be TINYCODE_* or a variable the chart sets itself (HOME, PATH, OLLAMA_HOST, KUBECONFIG, GIT_*, OC_VERSION); choose the provider's own variable name"))]
    #[schemars(pattern(r"^[A-Za-z_][A-Za-z0-9_]*$"), length(min = 1, max = 128))]
    pub name: String,
    /// The Secret key holding the value.
    pub secret_key_ref: SecretKeyRef,
}

/// Requests and limits by resource name, extended resources included
/// (spec.ollama.resources, and a class's defaults).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(REQUESTS_RULE)
        .message("requests: every key must be a resource name (cpu, memory, nvidia.com/gpu) and every value a Kubernetes quantity such as 500m, 8Gi or 1"),
    validation = Rule::new(LIMITS_RULE)
        .message("limits: every key must be a resource name (cpu, memory, nvidia.com/gpu) and every value a Kubernetes quantity such as 4, 16Gi or 1"),
)]
pub struct ResourceLists {
    /// What the scheduler reserves, by resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16), inner(length(max = 32)))]
    pub requests: BTreeMap<String, String>,
    /// Most the container may use, by resource.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16), inner(length(max = 32)))]
    pub limits: BTreeMap<String, String>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ModelLimits {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1024))]
    pub context_limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 256))]
    pub output_limit: Option<i64>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Discovery {
    /// Namespaces searched for annotated vLLM Services (`*` = all).
    #[serde(default)]
    #[schemars(length(max = 50), inner(pattern(NAMESPACE_OR_STAR_PATTERN), length(max = 63)))]
    pub namespaces: Vec<String>,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Git {
    /// Repository to clone (https or ssh; credentials go in credentialsSecret).
    #[x_kube(validation = Rule::new(GIT_URL_HYGIENE_RULE)
        .message("spec.git.url must not hold credentials (user:password@ or token@), a query or a fragment: put credentials in spec.git.credentialsSecret, not in the URL"))]
    #[schemars(pattern(GIT_URL_PATTERN), length(max = 2048))]
    pub url: String,
    /// Branch to check out; the repository's default branch when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GIT_BRANCH_PATTERN), length(min = 1, max = 255))]
    pub branch: Option<String>,
    /// Secret with username and password (HTTPS) or ssh-privatekey (SSH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub credentials_secret: Option<String>,
    /// Pull the branch each time the pod starts (the first start always clones).
    #[serde(default)]
    pub pull_on_restart: bool,
    /// Clone depth (default 1: the latest commit only).
    #[serde(default = "default_depth")]
    #[schemars(range(min = 1, max = 1000000))]
    pub depth: i32,
}

/// How the Ingress is built on Kubernetes (ignored on OpenShift, where the Route serves).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IngressOptions {
    /// Secret (type kubernetes.io/tls) with the certificate for spec.hostname; unset: plain HTTP.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub tls_secret_name: Option<String>,
}

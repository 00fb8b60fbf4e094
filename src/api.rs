//! The `tinycode.dev/v1alpha1` `TinycodeInstance` API.
//!
//! The CRD YAML is generated from these types (`tinycode-operator crd`), so every
//! rule the apiserver can check lives here: patterns, enums and bounds as schema
//! keywords, cross-field rules as CEL `x-kubernetes-validations` whose messages
//! name the field and the fix. The reconcile re-checks the same rules in
//! [`crate::reconcile::rules`] for objects admitted before a CRD upgrade.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// API group of the CRD.
pub const GROUP: &str = "tinycode.dev";
/// API version of the CRD.
pub const VERSION: &str = "v1alpha1";
/// Finalizer that guards helm uninstall and grant removal.
pub const FINALIZER: &str = "tinycode.dev/finalizer";

pub const DEFAULT_IMAGE: &str = "quay.io/bjohns/tinycode-container:latest";

/// Image reference syntax: registry host (with optional port), at least one path
/// component, optional tag and digest. Registry allow-listing happens at
/// reconcile time because the list is the cluster-admin's operator setting.
pub const IMAGE_PATTERN: &str = r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*(:[0-9]{1,5})?(/[a-z0-9]+([._-][a-z0-9]+)*)+(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[a-f0-9]{64})?$";
pub const GIT_URL_PATTERN: &str = r"^(https?|ssh|git)://[A-Za-z0-9_./@:~%+=-]+$";
pub const GIT_BRANCH_PATTERN: &str = r"^[A-Za-z0-9_./-]+$";
pub const VLLM_NAME_PATTERN: &str = r"^[a-z0-9][a-z0-9-]*$";
pub const HTTP_URL_PATTERN: &str = r"^https?://";
/// User-info in a URL (`scheme://user[:password]@host`). The scp-like git
/// form `git@host:org/repo.git` has no `://` and does not match.
pub const URL_USERINFO_PATTERN: &str = "^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@";
/// User-info in an http(s):// or git:// git URL: a token or user:password.
pub const GIT_USERINFO_PATTERN: &str = "^(https?|git)://[^/?#]*@";
/// A password in an ssh:// git URL; a bare user name (`ssh://git@host/..`)
/// is not a secret and stays allowed (the key comes from the credentials Secret).
pub const SSH_PASSWORD_PATTERN: &str = "^ssh://[^/?#]*:[^/?#]*@";
/// CEL rule for model-server URLs: no user-info, query or fragment. Holds
/// [`URL_USERINFO_PATTERN`] literally (a unit test checks).
pub const HTTP_URL_HYGIENE_RULE: &str =
    "!self.matches('^[a-zA-Z][a-zA-Z0-9+.-]*://[^/?#]*@') && !self.contains('?') && !self.contains('#')";
/// CEL rule for spec.git.url: no credentials, query or fragment. Holds
/// [`GIT_USERINFO_PATTERN`] and [`SSH_PASSWORD_PATTERN`] literally.
pub const GIT_URL_HYGIENE_RULE: &str = "!self.matches('^(https?|git)://[^/?#]*@') && !self.matches('^ssh://[^/?#]*:[^/?#]*@') && !self.contains('?') && !self.contains('#')";
pub const DNS_SUBDOMAIN_PATTERN: &str = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";
pub const NAMESPACE_OR_STAR_PATTERN: &str = r"^(\*|[a-z0-9]([-a-z0-9]*[a-z0-9])?)$";
/// Longest instance name: a DNS label, as the instance name is a label value
/// (`app.kubernetes.io/instance`). Names derived from it that would pass their
/// own limits are shortened with a digest (see [`crate::render::naming::fit`]).
pub const MAX_NAME_LEN: usize = 63;

/// A tinycode AI coding assistant instance: one Helm release, one Route, one SCC grant.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tinycode.dev",
    version = "v1alpha1",
    kind = "TinycodeInstance",
    plural = "tinycodeinstances",
    singular = "tinycodeinstance",
    shortname = "tinycode",
    shortname = "tc",
    namespaced,
    status = "TinycodeInstanceStatus",
    doc = "A tinycode AI coding assistant instance managed by tinycode-operator",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "URL", type_ = "string", json_path = ".status.url"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$') && size(self.metadata.name) <= 63")
        .message("metadata.name must start with a letter, hold only lowercase letters, digits and '-', and be at most 63 characters (it is a label value; the names derived from it are shortened to fit)")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!(has(self.git) && has(self.git.url) && has(self.storage) && has(self.storage.hostPath))")
        .message("spec.git.url and spec.storage.hostPath are mutually exclusive: a git workspace is cloned into the projects volume that a hostPath would replace; remove one of them"),
    validation = Rule::new("!(has(self.shell) && self.shell.enabled && has(self.storage) && has(self.storage.hostPath))")
        .message("spec.shell.enabled cannot be combined with spec.storage.hostPath: no SCC tier allows both hostPID and hostPath; use a PVC workspace or disable the shell"),
    validation = Rule::new("self.replicas <= 1 || (has(self.storage) && (self.storage.projectsAccessMode == 'ReadWriteMany' || has(self.storage.hostPath)))")
        .message("spec.replicas > 1 needs a shared workspace: set spec.storage.projectsAccessMode to ReadWriteMany or use spec.storage.hostPath"),
    validation = Rule::new("!has(self.vllm) || self.vllm.all(p, self.vllm.exists_one(q, q.name == p.name))")
        .message("spec.vllm[].name must be unique: give each vLLM provider its own name"),
    validation = Rule::new("!(has(self.ollama) && self.ollama.enabled && has(self.ollama.host))")
        .message("spec.ollama.host points at an external Ollama and spec.ollama.enabled deploys one: set only one of them"),
)]
pub struct TinycodeInstanceSpec {
    /// Container image; its registry must be in the operator's allow-list.
    #[serde(default = "default_image")]
    #[schemars(pattern(IMAGE_PATTERN), length(max = 512))]
    pub image: String,

    /// Number of tinycode pods; more than one needs a shared workspace.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,

    #[serde(default)]
    pub resources: Resources,

    #[serde(default)]
    pub storage: Storage,

    /// Route host; the router assigns one when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub hostname: Option<String>,

    #[serde(default)]
    pub tls_termination: TlsTermination,

    #[serde(default)]
    pub ollama: Ollama,

    #[serde(default)]
    pub auth: Auth,

    #[serde(default)]
    pub shell: Shell,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Default model ID, written into the generated config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub model: Option<String>,

    #[serde(default)]
    pub cluster_admin: ClusterAdmin,

    /// vLLM model servers configured as providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub vllm: Option<Vec<VllmProvider>>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<Git>,

    /// Kubernetes Ingress options (clusters without OpenShift Routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressOptions>,

    /// Pause the operator for this instance (maintenance): no helm runs and no
    /// writes to its objects until it is false again; deletion still cleans up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}

#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[x_kube(
    validation = Rule::new("quantity(self.requests.cpu).compareTo(quantity(self.limits.cpu)) <= 0")
        .message("spec.resources.requests.cpu must not exceed spec.resources.limits.cpu"),
    validation = Rule::new("quantity(self.requests.memory).compareTo(quantity(self.limits.memory)) <= 0")
        .message("spec.resources.requests.memory must not exceed spec.resources.limits.memory"),
)]
pub struct Resources {
    #[serde(default = "default_limits")]
    pub limits: ResourceAmounts,
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
    #[x_kube(validation = Rule::new("isQuantity(self)").message("cpu must be a Kubernetes quantity such as 200m or 2"))]
    #[schemars(length(max = 32))]
    pub cpu: String,
    #[x_kube(validation = Rule::new("isQuantity(self)").message("memory must be a Kubernetes quantity such as 512Mi or 2Gi"))]
    #[schemars(length(max = 32))]
    pub memory: String,
}

/// PVCs (or a host directory) for the data and the project workspace. Fixed at
/// creation, except that dataSize and projectsSize may grow and retainOnDelete
/// may change; re-create the instance to change the rest.
//
// Admission refuses what Kubernetes cannot follow: a PVC's StorageClass and
// access mode are immutable and it never shrinks, and moving /projects between
// a host directory and a PVC would leave the workspace behind. These are
// transition rules (they use `oldSelf`, so they run on updates only, and only
// where the old value exists). `spec.storage` always exists (schema default), so
// the rules sit at this level and compare optional fields with `has()` on both
// sides; dataSize, projectsSize and projectsAccessMode have schema defaults too.
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
    validation = Rule::new("!has(self.dataSize) || !has(oldSelf.dataSize) || !isQuantity(self.dataSize) || !isQuantity(oldSelf.dataSize) || quantity(self.dataSize).compareTo(quantity(oldSelf.dataSize)) >= 0")
        .message("spec.storage.dataSize cannot shrink (a PVC can grow, when its StorageClass allows expansion, but never shrink); re-create the instance for a smaller volume. storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted, and an instance created again under the same name re-uses them: copy the data you need and delete the old PVCs first, or use a new name")
        .field_path(".dataSize"),
    validation = Rule::new("!has(self.projectsSize) || !has(oldSelf.projectsSize) || !isQuantity(self.projectsSize) || !isQuantity(oldSelf.projectsSize) || quantity(self.projectsSize).compareTo(quantity(oldSelf.projectsSize)) >= 0")
        .message("spec.storage.projectsSize cannot shrink (a PVC can grow, when its StorageClass allows expansion, but never shrink); re-create the instance for a smaller volume. storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted, and an instance created again under the same name re-uses them: copy the data you need and delete the old PVCs first, or use a new name")
        .field_path(".projectsSize"),
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
    /// Secret holding key TINYCODE_SERVER_PASSWORD; unset leaves the UI unauthenticated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub password_secret: Option<String>,
    /// The last `tinycode.dev/reconcile-requested-at` value handled (a full
    /// reconcile, helm included, ran for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Shell {
    /// Host shell through hostPID (tinycode-shell SCC; needs namespace approval).
    #[serde(default)]
    pub enabled: bool,
    /// Recorded only; enforcement is future work.
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
    #[serde(default)]
    pub enabled: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub kubeconfig_secret_name: Option<String>,
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(pattern(r"^[-._a-zA-Z0-9]+$"), length(min = 1, max = 253))]
    pub kubeconfig_secret_key: String,
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
    #[schemars(pattern(VLLM_NAME_PATTERN), length(min = 1, max = 63))]
    pub name: String,
    #[x_kube(validation = Rule::new(HTTP_URL_HYGIENE_RULE)
        .message("spec.vllm[].url: no credentials, query or fragment in the URL; give the server's base URL such as http://vllm.models.svc:8000"))]
    #[schemars(pattern(HTTP_URL_PATTERN), length(max = 2048))]
    pub url: String,
    /// Per-model limit overrides, by model ID.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 100))]
    pub models: Option<BTreeMap<String, ModelLimits>>,
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
    #[x_kube(validation = Rule::new(GIT_URL_HYGIENE_RULE)
        .message("spec.git.url must not hold credentials (user:password@ or token@), a query or a fragment: put credentials in spec.git.credentialsSecret, not in the URL"))]
    #[schemars(pattern(GIT_URL_PATTERN), length(max = 2048))]
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GIT_BRANCH_PATTERN), length(min = 1, max = 255))]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub credentials_secret: Option<String>,
    #[serde(default)]
    pub pull_on_restart: bool,
    #[serde(default = "default_depth")]
    #[schemars(range(min = 1, max = 1000000))]
    pub depth: i32,
}

/// Observed state, written by the operator only.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TinycodeInstanceStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Helm release that holds the instance's objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_release: Option<String>,
    /// Revision of that release last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_revision: Option<i64>,
    /// SecurityContextConstraints granted to the instance's ServiceAccount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scc: Option<String>,
    /// Secret (in the instance namespace, key TINYCODE_SERVER_PASSWORD) holding
    /// the password: spec.auth.passwordSecret, or the one the operator generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<String>,
    /// The last `tinycode.dev/reconcile-requested-at` value handled (a full
    /// reconcile, helm included, ran for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
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

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Deploying,
    Running,
    Failed,
    Terminating,
    Suspended,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Deploying => "Deploying",
            Phase::Running => "Running",
            Phase::Failed => "Failed",
            Phase::Terminating => "Terminating",
            Phase::Suspended => "Suspended",
        }
    }
}

/// A status condition; `lastTransitionTime` changes only when `status` flips.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// True, False or Unknown.
    pub status: String,
    pub reason: String,
    pub message: String,
    /// RFC 3339 time of the last status flip.
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}
fn default_replicas() -> i32 {
    1
}
fn default_limits() -> ResourceAmounts {
    ResourceAmounts { cpu: "2".into(), memory: "2Gi".into() }
}
fn default_requests() -> ResourceAmounts {
    ResourceAmounts { cpu: "200m".into(), memory: "512Mi".into() }
}
fn default_data_size() -> String {
    "1Gi".into()
}
fn default_projects_size() -> String {
    "10Gi".into()
}
fn default_true() -> bool {
    true
}
fn default_kubeconfig_key() -> String {
    "kubeconfig".into()
}
fn default_oc_version() -> String {
    "stable".into()
}
fn default_depth() -> i32 {
    1
}

impl Default for TinycodeInstanceSpec {
    fn default() -> Self {
        // An empty spec is valid: every field has a default or is optional.
        serde_json::from_value(serde_json::json!({})).expect("empty spec deserializes")
    }
}

#[cfg(test)]
mod tests {
    use kube::CustomResourceExt;
    use serde_json::Value;

    use super::*;

    fn storage_rules() -> Vec<Value> {
        let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
        let storage =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"];
        storage["x-kubernetes-validations"].as_array().cloned().unwrap_or_default()
    }

    fn rule_for(field_path: &str) -> Value {
        storage_rules()
            .into_iter()
            .find(|r| r["fieldPath"] == field_path)
            .unwrap_or_else(|| panic!("no spec.storage rule with fieldPath {field_path}"))
    }

    #[test]
    fn storage_is_fixed_at_creation_by_transition_rules() {
        for (path, field, needle) in [
            (".storageClassName", "spec.storage.storageClassName", "self.storageClassName == oldSelf.storageClassName"),
            (
                ".projectsAccessMode",
                "spec.storage.projectsAccessMode",
                "self.projectsAccessMode == oldSelf.projectsAccessMode",
            ),
            (".hostPath", "spec.storage.hostPath.path", "self.hostPath.path == oldSelf.hostPath.path"),
            (
                ".dataSize",
                "spec.storage.dataSize",
                "quantity(self.dataSize).compareTo(quantity(oldSelf.dataSize)) >= 0",
            ),
            (
                ".projectsSize",
                "spec.storage.projectsSize",
                "quantity(self.projectsSize).compareTo(quantity(oldSelf.projectsSize)) >= 0",
            ),
        ] {
            let r = rule_for(path);
            let rule = r["rule"].as_str().unwrap();
            let message = r["message"].as_str().unwrap();
            assert!(rule.contains(needle), "{path}: {rule}");
            assert!(rule.contains("oldSelf"), "{path} must be a transition rule");
            assert!(message.starts_with(field), "{path}: {message}");
            assert!(message.contains("re-create the instance"), "{path}: {message}");
            assert!(
                message.contains(
                    "storage.retainOnDelete (default true) keeps the data volumes when the instance is deleted"
                ),
                "{path}: {message}"
            );
            assert!(!message.contains('\n'), "CRD rule messages must be one line");
        }
    }

    #[test]
    fn optional_storage_fields_compare_presence_on_both_sides() {
        // Setting or removing an optional field is a change too; a rule that only
        // compared values would let `has()` mismatches through (or fail on them).
        let rule = rule_for(".storageClassName")["rule"].as_str().unwrap().to_string();
        assert!(rule.starts_with("has(self.storageClassName) == has(oldSelf.storageClassName) && "), "{rule}");
        // hostPath may come or go (the workspace moves between a PVC and the node); its path may not change.
        let rule = rule_for(".hostPath")["rule"].as_str().unwrap().to_string();
        assert!(rule.starts_with("!has(self.hostPath) || !has(oldSelf.hostPath) || "), "{rule}");
        // Sizes compare only valid quantities, so an invalid old value cannot make every update fail.
        for path in [".dataSize", ".projectsSize"] {
            let rule = rule_for(path)["rule"].as_str().unwrap().to_string();
            assert!(rule.contains("!isQuantity(oldSelf."), "{rule}");
        }
    }

    #[test]
    fn storage_rules_sit_where_storage_always_exists() {
        // Transition rules run only where the old value exists: spec.storage and the
        // fields compared without has() guards carry schema defaults.
        let crd = serde_json::to_value(TinycodeInstance::crd()).unwrap();
        let storage =
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["storage"];
        assert!(storage["default"].is_object(), "{storage}");
        for f in ["dataSize", "projectsSize", "projectsAccessMode", "retainOnDelete"] {
            assert!(!storage["properties"][f]["default"].is_null(), "{f} has no default");
        }
        assert_eq!(storage["properties"]["retainOnDelete"]["default"], true);
        assert!(
            !storage_rules().iter().any(|r| r["rule"].as_str().unwrap().contains("retainOnDelete")),
            "retainOnDelete stays mutable"
        );
    }
}

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

mod class;
pub(crate) mod duration;
pub mod naming;
mod parts;
mod status;

pub use class::*;
pub use parts::*;
pub use status::*;

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
/// own limits are shortened with a digest (see [`crate::api::naming::fit`]).
pub const MAX_NAME_LEN: usize = 63;
/// A duration as hours, minutes and seconds (`90m`, `1h30m`, `45s`), or `0`.
pub const DURATION_PATTERN: &str = r"^(0|([0-9]{1,4}h)?([0-9]{1,6}m)?([0-9]{1,8}s)?)$";
/// Annotation a user sets (to any new value, e.g. the time) to start an
/// instance the operator stopped for idleness; status.idle.lastHandledStartAt
/// echoes the value handled.
pub const START_REQUEST_ANNOTATION: &str = "tinycode.dev/start-requested-at";
/// Annotation a user sets (to any new value) to apply a rendering that waits
/// for the busy agent now; status.rendering.lastHandledRolloutNow echoes the
/// value handled.
pub const ROLLOUT_NOW_ANNOTATION: &str = "tinycode.dev/rollout-now";

/// A tinycode AI coding assistant instance: one Helm release, a Route on
/// OpenShift or an Ingress on Kubernetes, and an SCC grant on OpenShift.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tinycode.dev",
    version = "v1alpha1",
    kind = "TinycodeInstance",
    plural = "tinycodeinstances",
    singular = "tinycodeinstance",
    shortname = "tinycode",
    shortname = "tc",
    // `kubectl get tinycode-all`: instances and classes together.
    category = "tinycode-all",
    namespaced,
    status = "TinycodeInstanceStatus",
    doc = "A tinycode AI coding assistant instance managed by tinycode-operator",
    printcolumn(name = "Ready", type_ = "string", json_path = ".status.conditions[?(@.type==\"Ready\")].status"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "URL", type_ = "string", json_path = ".status.url"),
    printcolumn(name = "Auth", type_ = "string", json_path = ".status.auth.mode"),
    printcolumn(name = "Class", type_ = "string", json_path = ".status.class"),
    printcolumn(name = "Rollout-Waits", type_ = "date", json_path = ".status.rendering.since"),
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
    validation = Rule::new("!has(self.auth) || !has(self.auth.mode) || self.auth.mode == 'password' || !has(self.tlsTermination) || self.tlsTermination == 'edge'")
        .message("spec.auth.mode openshift and oidc need spec.tlsTermination edge: the sign-in proxy serves plain HTTP behind the router; set tlsTermination to edge or use auth.mode password"),
    validation = Rule::new("!(has(self.ollama) && self.ollama.enabled && has(self.ollama.host))")
        .message("spec.ollama.host points at an external Ollama and spec.ollama.enabled deploys one: set only one of them"),
)]
pub struct TinycodeInstanceSpec {
    /// The TinycodeClass whose defaults and limits apply (cluster-scoped,
    /// set by a cluster-admin). Unset: the class marked default, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(min = 1, max = 253))]
    pub class_name: Option<String>,

    /// Container image; its registry must be in the operator's allow-list.
    /// Unset: the class's image, else the operator's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(IMAGE_PATTERN), length(max = 512))]
    pub image: Option<String>,

    /// Secrets (in this namespace) for pulling images from a private
    /// registry; each must exist.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub image_pull_secrets: Vec<SecretName>,

    /// Environment variables of the tinycode container, each from a Secret
    /// key (model providers' API keys such as OPENROUTER_API_KEY). Values are
    /// referenced, never copied: they are in no values file, status or event.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub env: Vec<EnvFromSecret>,

    /// Number of tinycode pods; more than one needs a shared workspace.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 1, max = 10))]
    pub replicas: i32,

    /// CPU and memory of the tinycode container. Unset: the class's
    /// defaults, else 200m/512Mi requested and 2 CPUs/2Gi limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<Resources>,

    /// Where the data and the project workspace live: PVCs or a host directory.
    #[serde(default)]
    pub storage: Storage,

    /// Host name of the instance's address: the Route's on OpenShift (the
    /// router assigns one when empty), the Ingress's on Kubernetes (where an
    /// instance without one gets no Ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub hostname: Option<String>,

    /// TLS termination of the Route on OpenShift: edge (default), passthrough
    /// or reencrypt. On Kubernetes TLS comes from spec.ingress.tlsSecretName.
    #[serde(default)]
    pub tls_termination: TlsTermination,

    /// A local model server: Ollama deployed with the instance, or an external one.
    #[serde(default)]
    pub ollama: Ollama,

    /// How the UI is protected.
    #[serde(default)]
    pub auth: Auth,

    /// A shell on the node for the agent (privileged: needs a cluster-admin's approval).
    #[serde(default)]
    pub shell: Shell,

    /// Node labels the tinycode pods must run on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,

    /// Tolerations of the tinycode pods (Kubernetes' own type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<Toleration>>,

    /// Default model ID, written into the generated config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub model: Option<String>,

    /// Cluster-admin mode: a kubeconfig (and optionally a cluster role) for the agent.
    #[serde(default)]
    pub cluster_admin: ClusterAdmin,

    /// vLLM model servers configured as providers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20))]
    pub vllm: Option<Vec<VllmProvider>>,

    /// Find vLLM servers by annotated Services, in this namespace and approved others.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discovery: Option<Discovery>,

    /// Clone a git repository into the workspace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub git: Option<Git>,

    /// Where this instance's agent may connect: only through its egress
    /// proxy, to these hosts and ranges. Within its class's egress when the
    /// class sets one (each entry must be one the class allows, on ports it
    /// allows); without one, the instance limits its own agent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressPolicy>,

    /// Kubernetes Ingress options (clusters without OpenShift Routes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ingress: Option<IngressOptions>,

    /// Pause the operator for this instance (maintenance): no helm runs and no
    /// writes to its objects until it is false again; deletion still cleans up.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,

    /// Stop the instance: its workloads (tinycode and the bundled Ollama) are
    /// scaled to zero and cost nothing; PVCs, Secrets, the Route/Ingress and the
    /// release are kept, and status.url still says where it will be. false
    /// starts it again with the same data.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,

    /// Stop the instance when nobody has used it for a while (the spec is not
    /// written: status says it stopped for idleness, and the annotation
    /// tinycode.dev/start-requested-at or toggling spec.stopped starts it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<Idle>,
}

fn default_replicas() -> i32 {
    1
}
pub(crate) fn default_limits() -> ResourceAmounts {
    ResourceAmounts { cpu: "2".into(), memory: "2Gi".into() }
}
pub(crate) fn default_requests() -> ResourceAmounts {
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
mod tests;

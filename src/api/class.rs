//! `TinycodeClass`: what a cluster-admin offers tenants (cluster-scoped).
//!
//! A class fills in what an instance leaves unset (image, resources,
//! placement, idle timeout) and caps what it may ask for (resources, storage,
//! modes, instances per namespace). The decisions live in
//! [`crate::reconcile::class_policy`]; these are only the types the CRD is generated from.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{DNS_SUBDOMAIN_PATTERN, DURATION_PATTERN, IMAGE_PATTERN};

/// Resource names: `cpu`, `memory`, or an extended resource such as `nvidia.com/gpu`.
pub const RESOURCE_NAME_PATTERN: &str =
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$";

/// CEL: every key of `max` a resource name, every value a quantity
/// (the schema's `propertyNames` does not survive into a CRD).
pub const MAX_RULE: &str = "!has(self.max) || self.max.all(k, size(k) <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$') && isQuantity(self.max[k]))";
/// CEL: the same for `requests`.
pub const REQUESTS_RULE: &str = "!has(self.requests) || self.requests.all(k, size(k) <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$') && isQuantity(self.requests[k]))";
/// CEL: the same for `limits`.
pub const LIMITS_RULE: &str = "!has(self.limits) || self.limits.all(k, size(k) <= 253 && k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9]([-a-z0-9_.]*[a-z0-9])?$') && isQuantity(self.limits[k]))";

/// Resources as name → quantity (`cpu: "2"`, `nvidia.com/gpu: "1"`).
pub type ResourceMap = BTreeMap<String, String>;

/// What a cluster-admin offers: defaults and caps for the instances that name it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "tinycode.dev",
    version = "v1alpha1",
    kind = "TinycodeClass",
    plural = "tinycodeclasses",
    singular = "tinycodeclass",
    shortname = "tcc",
    // `kubectl get tinycode-all`: instances and classes together.
    category = "tinycode-all",
    doc = "A class of tinycode instances a cluster-admin offers: defaults and limits that instances naming it (spec.className) cannot exceed",
    printcolumn(name = "Default", type_ = "boolean", json_path = ".spec.default"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(name = "Per-Namespace", type_ = "integer", json_path = ".spec.maxInstancesPerNamespace"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct TinycodeClassSpec {
    /// Instances that name no class get this one. Mark one class at most;
    /// with several, the first by name is used and instances say so.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub default: bool,

    /// What the class is for, shown to tenants.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub description: Option<String>,

    /// Image for instances that set no spec.image (pin it by digest for a
    /// fixed build); its registry must be on the operator's allow-list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(IMAGE_PATTERN), length(max = 512))]
    pub image: Option<String>,

    /// Whether instances may set another spec.image (default true). false:
    /// every instance runs the class's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_custom_image: Option<bool>,

    /// Whether instances may put Secrets into the agent's environment with
    /// spec.env (default true). false: refused (ExceedsPolicy), so no
    /// provider key of the tenant's choosing is there for any command the
    /// agent runs to print; model servers' keys still reach the servers
    /// through the model-key proxy (spec.vllm[].apiKeySecret). The UI
    /// password, and a cluster-admin mode kubeconfig, stay the agent's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allow_env_secrets: Option<bool>,

    /// The tinycode container: resources and placement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tinycode: Option<WorkloadPolicy>,

    /// The bundled Ollama (spec.ollama.enabled): resources and placement, so
    /// GPU nodes take the model server and not the IDE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ollama: Option<WorkloadPolicy>,

    /// Storage limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<StoragePolicy>,

    /// Idle stop for the class's instances (overrides the operator's
    /// --idle-timeout, --idle-timeout-max and --idle-stop-required for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdlePolicy>,

    /// How changes the instances did not ask for (an operator upgrade, a
    /// change of this class, a rotated Secret) reach a busy agent (overrides
    /// the operator's --rollout-busy-deadline for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollout: Option<RolloutPolicy>,

    /// Modes instances may use. Unset: every mode (each still needs its
    /// namespace approval where one is required). Listed: only these.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 8))]
    pub permitted_modes: Option<Vec<Mode>>,

    /// At most this many instances of the class in one namespace; the oldest
    /// keep running, later ones are refused (ExceedsPolicy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100000))]
    pub max_instances_per_namespace: Option<i32>,

    /// At most this many tinycode pods per instance (spec.replicas): each
    /// pod gets up to tinycode.max, so an instance uses up to maxReplicas
    /// times it. Unset: 1 when the class sets tinycode.max, else no cap
    /// beyond the spec's own (10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10))]
    pub max_replicas: Option<i32>,

    /// The namespaces whose instances may use the class, by their labels
    /// (which only a cluster-admin sets). Unset: every namespace. An
    /// instance elsewhere naming it, or naming no class when it is the
    /// default, is refused (ClassNotPermitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,

    /// Secrets (in each instance's namespace) for pulling the class's images
    /// from a private registry; added to the instance's own spec.imagePullSecrets.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 10))]
    pub image_pull_secrets: Vec<super::SecretName>,

    /// Where the class's agents may connect. Unset: anywhere but link-local
    /// and cloud metadata addresses. Set: only through the instance's egress
    /// proxy (HTTPS_PROXY and HTTP_PROXY in the agent's environment), to
    /// these hosts and address ranges; the agent's pod reaches DNS and that
    /// proxy and nothing else, so a tool that ignores the proxy has no route.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub egress: Option<EgressPolicy>,
}

/// Host names: a DNS name, or `*.` and one (any name below it, not itself);
/// lowercase.
pub const EGRESS_HOST_PATTERN: &str = r"^(\*\.)?[a-z0-9_]([-a-z0-9_]*[a-z0-9_])?(\.[a-z0-9_]([-a-z0-9_]*[a-z0-9_])?)*$";

/// Where a class's agents may connect (through the egress proxy).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct EgressPolicy {
    /// Hosts by name (git hosts, package registries, model providers, and
    /// in-cluster Services by their full name, e.g.
    /// `vllm.models.svc.cluster.local`). Every address a name resolves to is
    /// checked too: never a link-local or metadata address, and never an
    /// address of the cluster's own ranges unless the name is a Service name
    /// or a CIDR below holds it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 100))]
    pub hosts: Vec<EgressHost>,
    /// Address ranges the agent may reach by IP address (an IP address is
    /// never reached through a host rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 50))]
    pub cidrs: Vec<EgressCidr>,
}

/// One host the agents may reach, with its ports.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("!isIP(self.host)").message("host: an IP address is allowed by cidrs, not hosts"))]
pub struct EgressHost {
    /// `git.example.com`, or `*.example.com` for any name below example.com.
    #[schemars(pattern(EGRESS_HOST_PATTERN), length(min = 1, max = 253))]
    pub host: String,
    /// Ports; none listed: 443.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(range(min = 1, max = 65535)))]
    pub ports: Vec<i32>,
}

/// One address range the agents may reach, with its ports.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("isCIDR(self.cidr)").message("cidr: an address range such as 10.20.0.0/16 or fd00::/64"))]
pub struct EgressCidr {
    /// An address range, e.g. 10.96.0.1/32 or fd00::/64.
    #[schemars(length(min = 1, max = 64))]
    pub cidr: String,
    /// Ports; none listed: 443.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(range(min = 1, max = 65535)))]
    pub ports: Vec<i32>,
}

/// A mode a class can permit or withhold.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
#[serde(rename_all = "camelCase")]
pub enum Mode {
    /// spec.shell.enabled (host shell through hostPID).
    Shell,
    /// spec.storage.hostPath.
    HostPath,
    /// spec.clusterAdmin.enabled.
    ClusterAdmin,
    /// spec.git (clone a repository).
    Git,
    /// spec.ollama.enabled (a bundled Ollama server).
    Ollama,
}

impl Mode {
    pub const ALL: [Mode; 5] = [Mode::Shell, Mode::HostPath, Mode::ClusterAdmin, Mode::Git, Mode::Ollama];

    /// The mode as classes spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Shell => "shell",
            Mode::HostPath => "hostPath",
            Mode::ClusterAdmin => "clusterAdmin",
            Mode::Git => "git",
            Mode::Ollama => "ollama",
        }
    }

    /// The spec field that turns the mode on.
    pub fn field(self) -> &'static str {
        match self {
            Mode::Shell => "spec.shell.enabled",
            Mode::HostPath => "spec.storage.hostPath",
            Mode::ClusterAdmin => "spec.clusterAdmin.enabled",
            Mode::Git => "spec.git",
            Mode::Ollama => "spec.ollama.enabled",
        }
    }
}

/// Resources and placement of one workload.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(MAX_RULE)
        .message("max: every key must be a resource name (cpu, memory, nvidia.com/gpu) and every value a Kubernetes quantity such as 4, 8Gi or 1"),
)]
pub struct WorkloadPolicy {
    /// Requests and limits for instances that set none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub defaults: Option<super::ResourceLists>,
    /// The most an instance may request or limit, by resource. cpu and memory
    /// not named here are not capped; an extended resource (a GPU) not named
    /// here may not be asked for at all.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 16), inner(length(max = 32)))]
    pub max: ResourceMap,
    /// Node labels the pods must run on (added to the instance's own; the
    /// class's value wins where both name a label).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend("maxProperties" = 32))]
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations added to the instance's own.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    pub tolerations: Vec<Toleration>,
    /// RuntimeClass of the pods (for example a GPU runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253))]
    pub runtime_class_name: Option<String>,
}

/// Storage limits of a class.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct StoragePolicy {
    /// Largest spec.storage.dataSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("storage.maxDataSize must be a Kubernetes quantity such as 20Gi"))]
    #[schemars(length(max = 32))]
    pub max_data_size: Option<String>,
    /// Largest spec.storage.projectsSize.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("isQuantity(self)").message("storage.maxProjectsSize must be a Kubernetes quantity such as 50Gi"))]
    #[schemars(length(max = 32))]
    pub max_projects_size: Option<String>,
    /// StorageClasses instances may name in spec.storage.storageClassName.
    /// Unset: any. Listed: the instance must name one of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20), inner(pattern(DNS_SUBDOMAIN_PATTERN), length(max = 253)))]
    pub allowed_storage_classes: Option<Vec<String>>,
}

/// Rollouts of a class.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RolloutPolicy {
    /// Longest a change the user did not make waits while the agent is busy
    /// (its activity report says `busy`), e.g. 2h; 0: it never waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN), length(min = 1, max = 24))]
    pub busy_deadline: Option<String>,
}

/// Idle stop of a class.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IdlePolicy {
    /// Timeout of instances that set no spec.idle.timeout (e.g. 2h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN), length(min = 1, max = 24))]
    pub timeout: Option<String>,
    /// Longest timeout an instance may set; larger ones are capped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(DURATION_PATTERN), length(min = 1, max = 24))]
    pub max_timeout: Option<String>,
    /// spec.idle.timeout 0 (never stop) is not honoured.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

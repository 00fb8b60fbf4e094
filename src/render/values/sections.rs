//! The sections of [`Values`](super::Values), each built from its part of
//! the spec by its `of`.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Serialize;

use super::{Approved, InstanceRef, sha256_hex};
use k8s_openapi::api::core::v1::Toleration;

use crate::api::naming;
use crate::api::{
    AccessMode, Auth, AuthMode, ClusterAdmin, Git, ModelLimits, Ollama, ResourceLists, Resources, Shell, Storage,
    TinycodeInstanceSpec, VllmProvider,
};
use crate::platform::scc::SccTier;
use crate::render::signin;
use crate::settings::Settings;

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicyValues {
    /// Labels of the namespaces whose pods may reach the UI besides the
    /// instance's own: the OpenShift router's, or the ingress controller's.
    pub ingress_namespace_labels: BTreeMap<String, String>,
    /// IPv4 CIDRs the pods may not reach: link-local (cloud metadata lives
    /// there), other metadata addresses, and what the cluster-admin adds.
    pub egress_denied_v4: Vec<String>,
    /// The same for IPv6.
    pub egress_denied_v6: Vec<String>,
    /// The operator's namespace: its pods alone reach the activity port
    /// (idle stop reads it).
    pub operator_namespace: String,
}

/// Always closed to instance pods: link-local (169.254.169.254 and the other
/// metadata services there), Alibaba's and Azure's metadata and wire server.
pub const EGRESS_DENIED_V4: &[&str] = &["169.254.0.0/16", "100.100.100.200/32", "168.63.129.16/32"];
/// Always closed to instance pods: link-local, AWS's and GCP's IPv6 metadata.
pub const EGRESS_DENIED_V6: &[&str] = &["fe80::/10", "fd00:ec2::254/128", "fd20:ce::254/128"];

impl NetworkPolicyValues {
    pub fn of(settings: &Settings, ingress_namespace_labels: BTreeMap<String, String>) -> Self {
        let mut v4: Vec<String> = EGRESS_DENIED_V4.iter().map(|c| c.to_string()).collect();
        let mut v6: Vec<String> = EGRESS_DENIED_V6.iter().map(|c| c.to_string()).collect();
        for cidr in &settings.egress_deny_cidrs {
            let list = if cidr.contains(':') { &mut v6 } else { &mut v4 };
            if !list.contains(cidr) {
                list.push(cidr.clone());
            }
        }
        Self {
            ingress_namespace_labels,
            egress_denied_v4: v4,
            egress_denied_v6: v6,
            operator_namespace: settings.operator_namespace.clone(),
        }
    }
}

/// `cidr` in canonical form (`10.0.0.0/8`, `fd00::/8`) when it is an IPv4 or
/// IPv6 network whose host bits are zero, as NetworkPolicy requires.
pub fn parse_cidr(cidr: &str) -> Option<String> {
    let (addr, len) = cidr.trim().split_once('/')?;
    let len: u8 = len.parse().ok()?;
    match addr.parse::<std::net::IpAddr>().ok()? {
        std::net::IpAddr::V4(a) if len <= 32 => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            (u32::from(a) & !mask == 0).then(|| format!("{a}/{len}"))
        }
        std::net::IpAddr::V6(a) if len <= 128 => {
            let mask = if len == 0 { 0 } else { u128::MAX << (128 - len) };
            (u128::from(a) & !mask == 0).then(|| format!("{a}/{len}"))
        }
        _ => None,
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct InstanceValues {
    #[schemars(length(min = 1, max = 63))]
    pub name: String,
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Owner UID for ownerReferences; empty renders none.
    pub uid: String,
}

/// The names of the chart's objects, derived by `crate::api::naming` (shortened with a
/// digest where `<instance name><suffix>` would pass the limit); the chart
/// never builds a name from the instance name itself.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NameValues {
    /// `<name>-tinycode`: Deployment, Service, ServiceAccount, NetworkPolicy (and the operator's Route).
    #[schemars(length(min = 1, max = 63))]
    pub fullname: String,
    /// `<name>-ollama`: the bundled Ollama's Deployment, Service, NetworkPolicy.
    #[schemars(length(min = 1, max = 63))]
    pub ollama: String,
    /// `<name>-tinycode-config`: the generated-config ConfigMap.
    #[schemars(length(min = 1, max = 63))]
    pub config_map: String,
    /// `<name>-data`
    #[schemars(length(min = 1, max = 63))]
    pub data_pvc: String,
    /// `<name>-projects`
    #[schemars(length(min = 1, max = 63))]
    pub projects_pvc: String,
    /// `<name>-ollama-models`
    #[schemars(length(min = 1, max = 63))]
    pub ollama_models_pvc: String,
    /// `<name>-tinycode-discovery`: Role and RoleBinding in the instance namespace.
    #[schemars(length(min = 1, max = 253))]
    pub discovery_role: String,
    /// `tinycode:<namespace>:<name>-cluster-role`: the ClusterRoleBinding of the approved cluster role.
    #[schemars(length(min = 1, max = 253))]
    pub cluster_role_binding: String,
    /// `tinycode:<namespace>:<name>-discovery`: the RoleBinding in each discovery namespace.
    #[schemars(length(min = 1, max = 253))]
    pub discovery_binding: String,
    /// `<name>-tinycode-signin`: the sign-in proxy's Secret (cookie secret, relay credential).
    #[schemars(length(min = 1, max = 63))]
    pub signin_secret: String,
    /// `<name>-tinycode-front`: the front's Deployment and NetworkPolicy.
    #[schemars(length(min = 1, max = 63))]
    pub front: String,
    /// `<name>-tinycode-agent`: the Service the front reaches tinycode by.
    #[schemars(length(min = 1, max = 63))]
    pub agent_service: String,
    /// `<name>-tinycode-signin-pages`: the ConfigMap of the sign-in proxy's error page.
    #[schemars(length(min = 1, max = 253))]
    pub signin_pages: String,
    /// `<name>-tinycode-egress`: the egress proxy's Deployment, Service, ConfigMap and NetworkPolicy.
    #[schemars(length(min = 1, max = 63))]
    pub egress: String,
}

impl NameValues {
    pub fn of(namespace: &str, name: &str) -> Self {
        NameValues {
            fullname: naming::fullname(name),
            ollama: naming::ollama(name),
            config_map: naming::config_map(name),
            data_pvc: naming::data_pvc(name),
            projects_pvc: naming::projects_pvc(name),
            ollama_models_pvc: naming::ollama_models_pvc(name),
            discovery_role: naming::discovery_role(name),
            cluster_role_binding: naming::cluster_role_binding(namespace, name),
            signin_secret: naming::signin_secret(name),
            discovery_binding: naming::discovery_binding(namespace, name),
            front: naming::front(name),
            agent_service: naming::agent_service(name),
            signin_pages: naming::signin_pages(name),
            egress: naming::egress(name),
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ResourcesValues {
    /// By resource name (cpu, memory, extended resources such as nvidia.com/gpu).
    pub limits: BTreeMap<String, String>,
    pub requests: BTreeMap<String, String>,
}

impl ResourcesValues {
    /// The spec's cpu and memory (the built-in defaults when unset) and the
    /// class's extended resources (the rules checked they are quantities).
    pub(super) fn of(resources: Option<&Resources>, extended: &ResourceLists) -> Self {
        let default = Resources::default();
        let r = resources.unwrap_or(&default);
        let mut limits = BTreeMap::from([
            ("cpu".to_string(), r.limits.cpu.clone()),
            ("memory".to_string(), r.limits.memory.clone()),
        ]);
        let mut requests = BTreeMap::from([
            ("cpu".to_string(), r.requests.cpu.clone()),
            ("memory".to_string(), r.requests.memory.clone()),
        ]);
        limits.extend(extended.limits.iter().map(|(k, v)| (k.clone(), v.clone())));
        requests.extend(extended.requests.iter().map(|(k, v)| (k.clone(), v.clone())));
        ResourcesValues { limits, requests }
    }

    /// Requests and limits as listed.
    pub(super) fn lists(lists: Option<&ResourceLists>) -> Self {
        let lists = lists.cloned().unwrap_or_default();
        ResourcesValues { limits: lists.limits, requests: lists.requests }
    }
}

/// An environment variable from a Secret key.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SecretEnvValues {
    #[schemars(length(min = 1))]
    pub name: String,
    #[schemars(length(min = 1))]
    pub secret: String,
    #[schemars(length(min = 1))]
    pub key: String,
}

impl SecretEnvValues {
    /// spec.env: values the agent must hold. Model servers' keys never
    /// come this way ([`ModelKeysValues`]).
    pub(super) fn of(spec: &TinycodeInstanceSpec) -> Vec<Self> {
        spec.env
            .iter()
            .map(|e| SecretEnvValues {
                name: e.name.clone(),
                secret: e.secret_key_ref.name.clone(),
                key: e.secret_key_ref.key.clone(),
            })
            .collect()
    }
}

/// The model-key proxy (`tinycode-operator model-keys`), a container of the
/// tinycode pod: on when a vLLM provider names an `apiKeySecret`. Its
/// volume holds each such provider's key as a file named after the
/// provider, and only its container mounts it; the generated config points
/// those providers at it ([`crate::render::config::keyed_url`]).
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelKeysValues {
    pub enabled: bool,
    /// The operator's image.
    pub image: String,
    pub args: Vec<String>,
    pub keys: Vec<ModelKeyValues>,
}

/// One provider's key: the Secret key that becomes the file `provider`.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ModelKeyValues {
    #[schemars(length(min = 1))]
    pub provider: String,
    #[schemars(length(min = 1))]
    pub secret: String,
    #[schemars(length(min = 1))]
    pub key: String,
}

impl ModelKeysValues {
    pub(super) fn of(inst: &InstanceRef<'_>, spec: &TinycodeInstanceSpec, class: &str, settings: &Settings) -> Self {
        use crate::render::config::{MODEL_KEYS_METRICS_PORT, MODEL_KEYS_PORT, normalize_vllm_url};
        let keyed: Vec<_> = spec.vllm.iter().flatten().filter_map(|p| Some((p, p.api_key_secret.as_ref()?))).collect();
        if keyed.is_empty() {
            return ModelKeysValues::default();
        }
        let arg = |k: &str, v: &str| format!("--{k}={v}");
        let mut args = vec![
            "model-keys".to_string(),
            arg("listen", &format!("127.0.0.1:{MODEL_KEYS_PORT}")),
            arg("metrics-listen", &format!("0.0.0.0:{MODEL_KEYS_METRICS_PORT}")),
            arg("namespace", inst.namespace),
            arg("instance", inst.name),
            arg("class", class),
        ];
        args.extend(keyed.iter().map(|(p, _)| arg("provider", &format!("{}={}", p.name, normalize_vllm_url(&p.url)))));
        ModelKeysValues {
            enabled: true,
            image: settings.signin.gate_image.clone(),
            args,
            keys: keyed
                .iter()
                .map(|(p, r)| ModelKeyValues { provider: p.name.clone(), secret: r.name.clone(), key: r.key.clone() })
                .collect(),
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StorageValues {
    pub data_size: String,
    pub projects_size: String,
    pub projects_access_mode: AccessMode,
    pub storage_class_name: String,
    pub host_path: HostPathValues,
    pub retain_on_delete: bool,
    pub data_volume: VolumeSource,
    pub projects_volume: VolumeSource,
}

impl StorageValues {
    /// The volumes follow from the replicas and the hostPath: SQLite cannot
    /// be shared between pods, and a hostPath instance keeps no PVCs.
    pub(super) fn of(storage: &Storage, replicas: i32) -> Self {
        let host_path = storage.host_path.as_ref();
        let shared = replicas > 1;
        StorageValues {
            data_size: storage.data_size.clone(),
            projects_size: storage.projects_size.clone(),
            projects_access_mode: storage.projects_access_mode,
            storage_class_name: storage.storage_class_name.clone().unwrap_or_default(),
            host_path: HostPathValues {
                path: host_path.map(|h| h.path.clone()).unwrap_or_default(),
                read_only: host_path.is_some_and(|h| h.read_only),
            },
            retain_on_delete: storage.retain_on_delete,
            data_volume: if shared || host_path.is_some() { VolumeSource::EmptyDir } else { VolumeSource::Pvc },
            projects_volume: if host_path.is_some() { VolumeSource::HostPath } else { VolumeSource::Pvc },
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Copy, Debug, PartialEq, Eq)]
pub enum VolumeSource {
    #[serde(rename = "pvc")]
    Pvc,
    #[serde(rename = "emptyDir")]
    EmptyDir,
    #[serde(rename = "hostPath")]
    HostPath,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct HostPathValues {
    pub path: String,
    pub read_only: bool,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OllamaValues {
    pub enabled: bool,
    pub host: String,
    pub models: Vec<String>,
    pub image: String,
    pub models_size: String,
    /// Requests and limits of the bundled server (empty: the chart's small requests).
    pub resources: ResourcesValues,
    /// Placement of the bundled server's pod, apart from the tinycode pods'.
    pub node_selector: BTreeMap<String, String>,
    pub tolerations: Vec<Toleration>,
    pub runtime_class_name: String,
}

impl OllamaValues {
    /// The spec's Ollama; the bundled server's image and volume size are the operator's settings.
    pub(super) fn of(ollama: &Ollama, settings: &Settings, runtime_class: Option<&str>) -> Self {
        OllamaValues {
            enabled: ollama.enabled,
            host: ollama.host.clone().unwrap_or_default(),
            models: ollama.models.clone().unwrap_or_default(),
            image: settings.ollama_image.clone(),
            models_size: settings.ollama_models_size.clone(),
            resources: ResourcesValues::lists(ollama.resources.as_ref()),
            node_selector: ollama.node_selector.clone().unwrap_or_default(),
            tolerations: ollama.tolerations.clone().unwrap_or_default(),
            runtime_class_name: runtime_class.unwrap_or_default().to_string(),
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AuthValues {
    /// Secret with key TINYCODE_SERVER_PASSWORD: the spec's, or the generated `<name>-tinycode-password`.
    #[schemars(length(min = 1))]
    pub password_secret: String,
    /// password: the UI asks for the password; openshift, oidc: a sign-in
    /// proxy and the authorization gate front it.
    pub mode: AuthMode,
    /// The sign-in proxy (empty in password mode).
    pub proxy: ContainerValues,
    /// The gate: the authorization gate in the sign-in modes, the password
    /// check in password mode (empty there when the front is off).
    pub gate: ContainerValues,
}

/// A container the operator configures completely: image and arguments.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ContainerValues {
    pub image: String,
    pub args: Vec<String>,
}

impl AuthValues {
    /// No password named: the operator generates one, never an open instance.
    /// The sign-in containers' command lines come from [`signin`]; oidc needs
    /// the provider's endpoints (without them the instance is refused before
    /// rendering).
    pub(super) fn of(
        inst: &InstanceRef<'_>,
        auth: &Auth,
        settings: &Settings,
        endpoints: Option<&signin::OidcEndpoints>,
        agent: signin::AgentState,
    ) -> Self {
        let (ns, name) = (inst.namespace, inst.name);
        let password_secret =
            auth.password_secret.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| naming::generated_password(name));
        let gate = |mode| ContainerValues {
            image: settings.signin.gate_image.clone(),
            args: signin::gate_args(mode, ns, name, agent, &password_secret, &settings.signin),
        };
        let (proxy, gate) = match (auth.mode, settings.signin.oidc.as_ref(), endpoints) {
            (AuthMode::Password, ..) if settings.signin.front => (ContainerValues::default(), gate(AuthMode::Password)),
            (AuthMode::Password, ..) => (ContainerValues::default(), ContainerValues::default()),
            (AuthMode::Openshift, ..) => (
                ContainerValues {
                    image: settings.signin.openshift_oauth_proxy_image.clone(),
                    args: signin::openshift_proxy_args(ns, name, &naming::service_account(name)),
                },
                gate(AuthMode::Openshift),
            ),
            (AuthMode::Oidc, Some(oidc), Some(endpoints)) => (
                ContainerValues {
                    image: settings.signin.oauth2_proxy_image.clone(),
                    args: signin::oauth2_proxy_args(ns, name, oidc, &settings.signin.relay_url, endpoints),
                },
                gate(AuthMode::Oidc),
            ),
            // Refused by validation; never an open instance either way.
            (AuthMode::Oidc, ..) => (ContainerValues::default(), ContainerValues::default()),
        };
        AuthValues { password_secret, mode: auth.mode, proxy, gate }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ShellValues {
    pub enabled: bool,
    pub allowed_commands: Vec<String>,
}

impl ShellValues {
    /// The spec's shell; no allow-list is the empty list.
    pub(super) fn of(shell: &Shell) -> Self {
        ShellValues { enabled: shell.enabled, allowed_commands: shell.allowed_commands.clone().unwrap_or_default() }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClusterAdminValues {
    pub enabled: bool,
    pub kubeconfig_secret_name: String,
    pub kubeconfig_secret_key: String,
    pub oc_version: String,
    pub kubeconfig_namespace: String,
    /// The approved ClusterRole bound cluster-wide ("" = none); only then does the pod mount its token.
    pub cluster_role: String,
    /// Secret mounted in the instance namespace (a copy when kubeconfigNamespace is set).
    pub mount_secret_name: String,
}

impl ClusterAdminValues {
    /// The spec's cluster-admin mode with the approved cluster role; a
    /// kubeconfig from another namespace is mounted from its copy.
    pub(super) fn of(inst: &InstanceRef<'_>, ca: &ClusterAdmin, approved: &Approved) -> Self {
        let kubeconfig_ns = ca.kubeconfig_namespace.clone().unwrap_or_default();
        let mount_secret_name = if !ca.enabled {
            String::new()
        } else if !kubeconfig_ns.is_empty() && kubeconfig_ns != inst.namespace {
            naming::kubeconfig_copy(inst.name)
        } else {
            ca.kubeconfig_secret_name.clone().unwrap_or_default()
        };
        ClusterAdminValues {
            enabled: ca.enabled,
            kubeconfig_secret_name: ca.kubeconfig_secret_name.clone().unwrap_or_default(),
            kubeconfig_secret_key: ca.kubeconfig_secret_key.clone(),
            oc_version: ca.oc_version.clone(),
            kubeconfig_namespace: kubeconfig_ns,
            cluster_role: approved.cluster_role.clone().unwrap_or_default(),
            mount_secret_name,
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct VllmValues {
    pub name: String,
    pub url: String,
    pub models: BTreeMap<String, ModelLimits>,
}

impl VllmValues {
    /// One provider; no per-model limits is the empty map.
    pub(super) fn of(provider: &VllmProvider) -> Self {
        VllmValues {
            name: provider.name.clone(),
            url: provider.url.clone(),
            models: provider.models.clone().unwrap_or_default(),
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DiscoveryValues {
    /// Other namespaces (approved by their label) where the ServiceAccount may list Services.
    pub namespaces: Vec<String>,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GitValues {
    pub url: String,
    pub branch: String,
    pub credentials_secret: String,
    pub pull_on_restart: bool,
    #[schemars(range(min = 1))]
    pub depth: i32,
}

impl GitValues {
    /// The spec's git workspace; no workspace is the empty URL (depth 1).
    pub(super) fn of(git: Option<&Git>) -> Self {
        GitValues {
            url: git.map(|g| g.url.clone()).unwrap_or_default(),
            branch: git.and_then(|g| g.branch.clone()).unwrap_or_default(),
            credentials_secret: git.and_then(|g| g.credentials_secret.clone()).unwrap_or_default(),
            pull_on_restart: git.is_some_and(|g| g.pull_on_restart),
            depth: git.map_or(1, |g| g.depth),
        }
    }
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SccValues {
    pub tier: SccTier,
    pub name: String,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ConfigValues {
    /// Generated config.json; the ConfigMap exists only when this is non-empty.
    pub json: String,
    /// sha256 of `json`, so a changed config rolls the pods.
    pub checksum: String,
}

impl ConfigValues {
    /// The generated config and its checksum; no config is empty, checksum too.
    pub(super) fn of(config_json: Option<String>) -> Self {
        let json = config_json.unwrap_or_default();
        let checksum = if json.is_empty() { String::new() } else { sha256_hex(json.as_bytes()) };
        ConfigValues { json, checksum }
    }
}

/// The front: a Deployment of its own that answers the instance's URL and
/// stays up while tinycode is stopped, so the URL says why it does not
/// answer. The sign-in modes always have one (the proxy and the gate);
/// password mode has one (the gate, checking the password) unless the
/// cluster-admin turned fronts off.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct FrontValues {
    pub enabled: bool,
    /// 1, or 0 while tinycode is stopped with fronts turned off.
    #[schemars(range(min = 0, max = 1))]
    pub replicas: i32,
    /// The gate asks the operator's relay to start the instance when it is
    /// stopped for idleness, with the start credential of the front's Secret
    /// (`names.signinSecret`), which its volume then holds.
    pub starts: bool,
}

impl FrontValues {
    pub(super) fn of(mode: AuthMode, stopped: bool, settings: &Settings) -> Self {
        let on = settings.signin.front;
        FrontValues { enabled: mode.signs_in() || on, replicas: if stopped && !on { 0 } else { 1 }, starts: on }
    }
}

/// The egress proxy's port (HTTPS_PROXY and HTTP_PROXY point there).
pub const EGRESS_PORT: u16 = 3128;
/// The egress proxy's metrics port.
pub const EGRESS_METRICS_PORT: u16 = 3129;
/// Where the egress proxy's pod mounts the start credential.
pub const EGRESS_RELAY_MOUNT: &str = "/etc/tinycode/egress-relay";

/// The egress proxy, where the class limits egress: its allow-list as the
/// proxy reads it (`crate::egress::policy::PolicyFile`), and its container.
#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressValues {
    pub enabled: bool,
    /// 1, or 0 while the agent is stopped: nothing else goes through it.
    #[schemars(range(min = 0, max = 1))]
    pub replicas: i32,
    /// The operator's image.
    pub image: String,
    pub args: Vec<String>,
    /// The proxy tells the operator's relay what it refused (an event on
    /// the instance), with the start credential of the front's Secret
    /// (`names.signinSecret`), which its volume then holds.
    pub reports: bool,
    pub hosts: Vec<EgressRuleValues>,
    pub cidrs: Vec<EgressCidrValues>,
    pub cluster_cidrs: Vec<String>,
    pub cluster_domain: String,
    /// DNS servers outside pods the instance's pods may ask (`--cluster-dns-cidrs`).
    pub dns_cidrs: Vec<String>,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressRuleValues {
    #[schemars(length(min = 1))]
    pub host: String,
    pub ports: Vec<u16>,
}

#[derive(Serialize, JsonSchema, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EgressCidrValues {
    #[schemars(length(min = 1))]
    pub cidr: String,
    pub ports: Vec<u16>,
}

impl EgressValues {
    pub(super) fn of(
        inst: &InstanceRef<'_>,
        policy: Option<&crate::api::EgressPolicy>,
        class: &str,
        stopped: bool,
        settings: &Settings,
    ) -> Self {
        let Some(policy) = policy else { return EgressValues::default() };
        // Admission keeps ports within 1..=65535; none listed is 443 (the proxy's default too).
        let ports = |p: &[i32]| -> Vec<u16> {
            let p: Vec<u16> = p.iter().filter_map(|p| u16::try_from(*p).ok()).filter(|p| *p > 0).collect();
            if p.is_empty() { vec![443] } else { p }
        };
        let arg = |k: &str, v: &str| format!("--{k}={v}");
        let mut args = vec![
            "egress-proxy".to_string(),
            arg("listen", &format!("0.0.0.0:{EGRESS_PORT}")),
            arg("metrics-listen", &format!("0.0.0.0:{EGRESS_METRICS_PORT}")),
            arg("namespace", inst.namespace),
            arg("instance", inst.name),
            arg("class", class),
        ];
        // With fronts on, the instance has a start credential: refusals become events.
        let reports = settings.signin.front;
        if reports {
            let url = signin::relay_egress_refused_url(&settings.signin.relay_url, inst.namespace, inst.name);
            args.push(arg("refused-url", &url));
            args.push(arg("start-credential-file", &format!("{EGRESS_RELAY_MOUNT}/{}", signin::START_CREDENTIAL_KEY)));
        }
        EgressValues {
            enabled: true,
            replicas: if stopped { 0 } else { 1 },
            image: settings.signin.gate_image.clone(),
            args,
            reports,
            hosts: policy
                .hosts
                .iter()
                .map(|h| EgressRuleValues { host: h.host.to_ascii_lowercase(), ports: ports(&h.ports) })
                .collect(),
            cidrs: policy
                .cidrs
                .iter()
                .map(|c| EgressCidrValues { cidr: c.cidr.clone(), ports: ports(&c.ports) })
                .collect(),
            cluster_cidrs: settings.cluster_cidrs.clone(),
            cluster_domain: settings.cluster_domain.clone(),
            dns_cidrs: settings.cluster_dns_cidrs.clone(),
        }
    }
}

//! Command line: `run` (the controller), `crd`, `values`, `values-schema`,
//! `scc`, `openshift-crds`, `gate` (an instance pod's authorization gate),
//! `model-keys` (an instance pod's model-key proxy), `egress-proxy` (an
//! instance's way out when its class limits egress) and `version`. Every setting has an env fallback so the manager Deployment
//! configures it through env. Settings are global flags: they are accepted
//! before or after the subcommand (`--concurrency 2 run` and `run
//! --concurrency 2` are the same) and `run --help` lists them. `gate` and
//! `model-keys` have flags of their own instead ([`GateArgs`],
//! [`ModelKeysArgs`]), which no other subcommand takes.

mod egress_cmd;
mod gate_cmd;
mod model_keys_cmd;
mod run;
mod values_cmd;

pub use egress_cmd::{EgressArgs, POLICY_FILE};
pub use gate_cmd::GateArgs;
pub use model_keys_cmd::{KEYS_DIR, ModelKeysArgs};

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kube::CustomResourceExt;

use crate::api::TinycodeInstance;
use crate::platform::openshift;
use crate::platform::scc::ALL_TIERS;
use crate::render::values;
use crate::settings::Settings;
use crate::watch_scope::WatchScope;

#[derive(Parser, Debug)]
#[command(name = "tinycode-operator", version, about = "Installs and manages tinycode instances on OpenShift")]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub settings: SettingsArgs,
    #[command(flatten)]
    pub run: RunArgs,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run the controller (the default).
    Run,
    /// Print the TinycodeInstance CRD generated from the Rust types.
    Crd {
        /// Print the TinycodeClass CRD instead.
        #[arg(long)]
        class: bool,
    },
    /// Print what the operator would do for a TinycodeInstance, without a cluster.
    Values {
        /// TinycodeInstance YAML file ("-" for stdin).
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Namespace to assume when the file names none.
        #[arg(short = 'n', long)]
        namespace: Option<String>,
        /// Skip network probes (vLLM).
        #[arg(long)]
        offline: bool,
        /// TinycodeClass YAML file: check the instance against it and fill
        /// in its defaults, as the operator would.
        #[arg(long = "class")]
        class: Option<PathBuf>,
    },
    /// Print the chart's values.schema.json generated from the values type.
    ValuesSchema,
    /// Print the three SecurityContextConstraints and their `use` ClusterRoles.
    Scc,
    /// Print stand-in CRDs for the OpenShift APIs (Route, SCC) for a plain kube-apiserver.
    OpenshiftCrds,
    /// Print the ValidatingAdmissionPolicy (and binding) that holds pods in
    /// namespaces approved for host directories to the approved ones.
    Admission {
        /// The operator's namespace (where its parameter ConfigMap lives).
        #[arg(long, default_value = crate::settings::DEFAULT_OPERATOR_NAMESPACE)]
        operator_namespace: String,
    },
    /// Print the operator's ClusterRole, generated from its declared API calls.
    Rbac {
        /// Print the operator-namespace Role (leader Lease, Helm release records) for this namespace instead.
        #[arg(long)]
        leader_election_namespace: Option<String>,
        /// Print the tinycode-discovery ClusterRole (bound per discovery namespace) instead.
        #[arg(long, conflicts_with = "leader_election_namespace")]
        discovery: bool,
    },
    /// Run an instance pod's authorization gate: between the sign-in proxy
    /// and the tinycode server, it lets through only users allowed `use` on
    /// the TinycodeInstance.
    Gate(Box<GateArgs>),
    /// Run an instance pod's model-key proxy: beside the agent, it adds the
    /// model providers' API keys to the agent's requests to them, so the
    /// agent never holds a key.
    ModelKeys(Box<ModelKeysArgs>),
    /// Run an instance's egress proxy: the one way out of an instance whose
    /// class sets `egress`, to the hosts and addresses the class allows.
    EgressProxy(Box<EgressArgs>),
    /// Print the version.
    Version,
}

/// Cluster-admin settings shared by `run` and `values` (global: accepted before or after the subcommand).
#[derive(Args, Debug, Clone)]
pub struct SettingsArgs {
    /// Registries instance images may come from (comma-separated).
    #[arg(
        long,
        global = true,
        env = "TINYCODE_ALLOWED_REGISTRIES",
        value_delimiter = ',',
        default_value = "quay.io,ghcr.io"
    )]
    pub allowed_registries: Vec<String>,
    /// OpenShift (Routes, SCC grants) or plain Kubernetes (Ingress, Pod Security labels);
    /// auto: detected from API discovery at start-up.
    #[arg(long, global = true, env = "TINYCODE_PLATFORM", value_enum, default_value = "auto")]
    pub platform: crate::platform::PlatformChoice,
    /// IngressClass of instance Ingresses (Kubernetes); unset: the cluster's default class, else none.
    #[arg(long, global = true, env = "TINYCODE_INGRESS_CLASS")]
    pub ingress_class: Option<String>,
    /// Annotations (key=value, comma-separated) on every instance Ingress, e.g.
    /// cert-manager.io/cluster-issuer=letsencrypt.
    #[arg(long, global = true, env = "TINYCODE_INGRESS_ANNOTATIONS", value_delimiter = ',')]
    pub ingress_annotations: Vec<String>,
    /// Namespace of the ingress controller (Kubernetes): with the instance's own, the
    /// only namespace whose pods the NetworkPolicy lets reach the UI.
    #[arg(long, global = true, env = "TINYCODE_INGRESS_NAMESPACE", default_value = "ingress-nginx")]
    pub ingress_namespace: String,
    /// ClusterRoles instances may bind with spec.clusterAdmin.clusterRole once their
    /// namespace approves one (comma-separated; admin, cluster-admin and the
    /// operator's own roles are refused even when listed). The operator also needs
    /// `bind` on each (src/platform/rbac.rs).
    #[arg(long, global = true, env = "TINYCODE_ALLOWED_CLUSTER_ROLES", value_delimiter = ',', default_value = "view")]
    pub allowed_cluster_roles: Vec<String>,
    /// Namespace the operator runs in; Helm release records are kept there.
    #[arg(long, global = true, env = "OPERATOR_NAMESPACE", default_value = crate::settings::DEFAULT_OPERATOR_NAMESPACE)]
    pub operator_namespace: String,
    /// ServiceAccount the operator runs as (named in namespace-preparation messages).
    #[arg(long, global = true, env = "OPERATOR_SERVICE_ACCOUNT", default_value = crate::settings::DEFAULT_OPERATOR_SERVICE_ACCOUNT)]
    pub operator_service_account: String,
    /// Label (key=value) a namespace must carry before instances are accepted there.
    #[arg(long, global = true, env = "TINYCODE_REQUIRED_NAMESPACE_LABEL")]
    pub required_namespace_label: Option<String>,
    /// Accept only namespaces a cluster-admin labelled tinycode.dev/prepared=true
    /// (hack/prepare-namespace.sh does). Off, any RoleBinding giving the operator
    /// `admin` prepares a namespace, and a namespace's own admin can create one:
    /// a tenant could then switch the operator on where no cluster-admin did.
    #[arg(long, global = true, env = "TINYCODE_REQUIRE_PREPARED_LABEL", default_value_t = true, action = clap::ArgAction::Set)]
    pub require_prepared_label: bool,
    /// Host directories hostPath workspaces may lie under (comma-separated absolute
    /// paths); empty (the default) refuses every hostPath workspace.
    #[arg(long, global = true, env = "TINYCODE_HOSTPATH_ALLOWED_PREFIXES", value_delimiter = ',')]
    pub hostpath_allowed_prefixes: Vec<String>,
    /// CIDRs instance pods may not reach besides link-local and cloud metadata
    /// addresses, which are always closed (comma-separated).
    #[arg(long, global = true, env = "TINYCODE_EGRESS_DENY_CIDRS", value_delimiter = ',')]
    pub egress_deny_cidrs: Vec<String>,
    /// The cluster's pod and Service ranges (comma-separated), and any other
    /// private range: where a class limits egress, a public host name that
    /// resolves into one reaches nothing (only Service names of the cluster
    /// domain, and the class's own CIDRs, do).
    #[arg(
        long,
        global = true,
        env = "TINYCODE_CLUSTER_CIDRS",
        value_delimiter = ',',
        default_value = "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10,198.18.0.0/15,fc00::/7"
    )]
    pub cluster_cidrs: Vec<String>,
    /// The cluster's DNS domain: `<service>.<namespace>.svc.<domain>` names
    /// are the cluster's Services.
    #[arg(long, global = true, env = "TINYCODE_CLUSTER_DOMAIN", default_value = "cluster.local")]
    pub cluster_domain: String,
    /// Addresses of DNS servers that run outside pods (comma-separated
    /// CIDRs: a node's own address, a node-local cache), which agents whose
    /// class limits egress may ask besides the cluster's DNS pods.
    #[arg(long, global = true, env = "TINYCODE_CLUSTER_DNS_CIDRS", value_delimiter = ',')]
    pub cluster_dns_cidrs: Vec<String>,
    /// Ollama image for instances with ollama.enabled.
    #[arg(long, global = true, env = "TINYCODE_OLLAMA_IMAGE", default_value = "docker.io/ollama/ollama:latest")]
    pub ollama_image: String,
    /// Size of the Ollama models PVC.
    #[arg(long, global = true, env = "TINYCODE_OLLAMA_MODELS_SIZE", default_value = "20Gi")]
    pub ollama_models_size: String,
    /// The helm binary: helm 3, 3.17 or newer (`--take-ownership`); checked at start-up
    /// by `run`, which refuses an older helm and helm 4.
    #[arg(long, global = true, env = "HELM_BIN", default_value = "helm")]
    pub helm_bin: PathBuf,
    /// The bundled chart.
    #[arg(long, global = true, env = "HELM_CHART_PATH", default_value = "helm-charts/tinycode")]
    pub chart_path: PathBuf,
    /// Helm failures allowed for one rendering (spec and chart) before the
    /// instance is Stalled; a changed spec or tinycode.dev/reconcile-requested-at tries again.
    #[arg(long, global = true, env = "TINYCODE_MAX_RETRIES", default_value_t = 5)]
    pub max_retries: u32,
    /// Longest a helm run may take.
    #[arg(long, global = true, env = "TINYCODE_HELM_TIMEOUT_SECONDS", default_value_t = 120)]
    pub helm_timeout_seconds: u64,
    /// helm reaches the apiserver by itself (its own TLS connection and
    /// discovery per run) instead of through the operator's loopback
    /// listener: the A side of the bench's comparison.
    #[arg(long, global = true, env = "TINYCODE_HELM_DIRECT")]
    pub helm_direct: bool,
    /// How long an instance's rollout may make no progress (a pod that never
    /// becomes Ready) before the instance is Stalled: its Deployments'
    /// progressDeadlineSeconds.
    #[arg(long, global = true, env = "TINYCODE_PROGRESS_DEADLINE_SECONDS",
          default_value_t = crate::settings::DEFAULT_PROGRESS_DEADLINE_SECONDS,
          value_parser = clap::value_parser!(u64).range(10..=86400))]
    pub progress_deadline_seconds: u64,
    /// Probe vLLM servers on loopback addresses (local stand-ins in tests only).
    #[arg(long, global = true, env = "TINYCODE_VLLM_ALLOW_LOOPBACK")]
    pub vllm_allow_loopback: bool,
    /// Name servers (ip:port, comma-separated) the vLLM probes ask instead of
    /// /etc/resolv.conf's; /etc/hosts still answers first.
    #[arg(long, global = true, env = "TINYCODE_DNS_NAMESERVERS", value_delimiter = ',')]
    pub dns_nameservers: Vec<std::net::SocketAddr>,
    /// Timeout of one vLLM probe request.
    #[arg(long, global = true, env = "TINYCODE_VLLM_PROBE_TIMEOUT_SECONDS", default_value_t = 3)]
    pub vllm_probe_timeout_seconds: u64,
    /// Re-check delay for instances blocked on something outside their spec.
    #[arg(long, global = true, env = "TINYCODE_BLOCKED_REQUEUE_SECONDS", default_value_t = 30)]
    pub blocked_requeue_seconds: u64,
    #[command(flatten)]
    pub signin: SigninArgs,
    #[command(flatten)]
    pub idle: IdleArgs,
}

/// Idle stop (`spec.idle`): the cluster-admin's default and maximum, and how
/// activity is read.
#[derive(Args, Debug, Clone)]
pub struct IdleArgs {
    /// Idle timeout of instances that set no spec.idle.timeout (e.g. 8h); 0:
    /// they never idle.
    #[arg(long, global = true, env = "TINYCODE_IDLE_TIMEOUT", default_value = "0")]
    pub idle_timeout: String,
    /// Longest idle timeout an instance may set (e.g. 24h); 0: no maximum.
    #[arg(long, global = true, env = "TINYCODE_IDLE_TIMEOUT_MAX", default_value = "0")]
    pub idle_timeout_max: String,
    /// Instances may not turn idle stop off (spec.idle.timeout 0): the
    /// default, else the maximum, applies to them. Needs one of the two.
    #[arg(long, global = true, env = "TINYCODE_IDLE_STOP_REQUIRED")]
    pub idle_stop_required: bool,
    /// Where an instance's activity report is read; {service}, {namespace} and
    /// {name} are replaced. Addresses are checked as vLLM probes' are
    /// (never loopback, link-local or metadata; --vllm-allow-loopback for tests).
    #[arg(
        long,
        global = true,
        env = "TINYCODE_ACTIVITY_URL",
        default_value = "http://{service}.{namespace}.svc:4097/activity"
    )]
    pub activity_url: String,
    /// Seconds between two activity checks of one instance (checks of all
    /// instances are spread over this time).
    #[arg(long, global = true, env = "TINYCODE_ACTIVITY_CHECK_SECONDS", default_value_t = 60,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub activity_check_seconds: u64,
    /// Activity checks in flight at once.
    #[arg(long, global = true, env = "TINYCODE_ACTIVITY_CHECKS_IN_FLIGHT", default_value_t = 8,
          value_parser = clap::value_parser!(u64).range(1..=256))]
    pub activity_checks_in_flight: u64,
    /// Longest a change the user did not make (an operator upgrade, a class
    /// change, a rotated Secret) waits for an instance whose agent is busy
    /// before it is applied anyway; 0: it never waits. A class's
    /// rollout.busyDeadline overrides it.
    #[arg(long, global = true, env = "TINYCODE_ROLLOUT_BUSY_DEADLINE", default_value = "1h")]
    pub rollout_busy_deadline: String,
}

impl IdleArgs {
    fn rollout_busy_deadline(&self) -> Result<Option<Duration>, String> {
        let v = self.rollout_busy_deadline.trim();
        crate::api::duration::parse(v).map(|d| (!d.is_zero()).then_some(d)).ok_or_else(|| {
            format!("--rollout-busy-deadline {v:?} must be a duration such as 30m, 2h or 1h30m, or 0 (never wait)")
        })
    }

    fn to_settings(&self) -> Result<crate::settings::IdleSettings, String> {
        let duration = |flag: &str, v: &str| {
            crate::api::duration::parse(v.trim())
                .map(|d| (!d.is_zero()).then_some(d))
                .ok_or_else(|| format!("{flag} {v:?} must be a duration such as 30m, 8h or 1h30m, or 0"))
        };
        let default_timeout = duration("--idle-timeout", &self.idle_timeout)?;
        let max_timeout = duration("--idle-timeout-max", &self.idle_timeout_max)?;
        if self.idle_stop_required && default_timeout.is_none() && max_timeout.is_none() {
            return Err("--idle-stop-required needs --idle-timeout or --idle-timeout-max".into());
        }
        let template = self.activity_url.trim();
        if !(template.starts_with("http://") || template.starts_with("https://")) {
            return Err(format!("--activity-url {template:?} must be an http(s) URL"));
        }
        Ok(crate::settings::IdleSettings {
            default_timeout,
            max_timeout,
            required: self.idle_stop_required,
            url_template: template.to_string(),
            check_interval: Duration::from_secs(self.activity_check_seconds),
            checks_in_flight: self.activity_checks_in_flight as usize,
            from_class: false,
        })
    }
}

/// Sign-in (`spec.auth.mode` openshift and oidc): the proxies, the gate and the
/// OpenID Connect provider the cluster-admin configures once for every instance.
#[derive(Args, Debug, Clone)]
pub struct SigninArgs {
    /// Issuer URL of the OpenID Connect provider instances in auth.mode oidc sign
    /// in with (its /.well-known/openid-configuration is read by the operator);
    /// empty: oidc instances are refused.
    #[arg(long, global = true, env = "TINYCODE_OIDC_ISSUER_URL")]
    pub oidc_issuer_url: Option<String>,
    /// Client id registered with that provider for the operator (every instance uses it).
    #[arg(long, global = true, env = "TINYCODE_OIDC_CLIENT_ID")]
    pub oidc_client_id: Option<String>,
    /// File holding the client secret (manager.yaml mounts Secret
    /// tinycode-operator-oidc, key client-secret, of the operator's namespace
    /// here). It never leaves the operator: instance pods redeem sign-in codes
    /// through the operator's relay with a per-instance credential.
    #[arg(
        long,
        global = true,
        env = "TINYCODE_OIDC_CLIENT_SECRET_FILE",
        default_value = "/etc/tinycode-operator/oidc/client-secret"
    )]
    pub oidc_client_secret_file: PathBuf,
    /// Scopes asked at sign-in (space-separated).
    #[arg(long, global = true, env = "TINYCODE_OIDC_SCOPES", default_value = "openid email profile groups")]
    pub oidc_scopes: String,
    /// ID-token claim naming the user, as the cluster's apiserver maps OIDC users
    /// (its --oidc-username-claim), so RoleBindings name the same user.
    #[arg(long, global = true, env = "TINYCODE_OIDC_USERNAME_CLAIM", value_enum, default_value = "email")]
    pub oidc_username_claim: crate::settings::UsernameClaim,
    /// Prefix the cluster puts before OIDC user names (its --oidc-username-prefix).
    #[arg(long, global = true, env = "TINYCODE_OIDC_USERNAME_PREFIX")]
    pub oidc_username_prefix: Option<String>,
    /// ID-token claim listing the user's groups (the apiserver's --oidc-groups-claim).
    #[arg(long, global = true, env = "TINYCODE_OIDC_GROUPS_CLAIM", default_value = "groups")]
    pub oidc_groups_claim: String,
    /// Prefix the cluster puts before OIDC group names (its --oidc-groups-prefix).
    #[arg(long, global = true, env = "TINYCODE_OIDC_GROUPS_PREFIX")]
    pub oidc_groups_prefix: Option<String>,
    /// Base URL at which instance pods reach the operator's relay, where
    /// fronts ask to start their idle-stopped instance (every mode) and oidc
    /// instances sign users in
    /// [default: http://tinycode-operator-oidc-relay.<operator namespace>.svc:8484].
    #[arg(long, global = true, env = "TINYCODE_OIDC_RELAY_URL", alias = "relay-url")]
    pub oidc_relay_url: Option<String>,
    /// oauth2-proxy image (auth.mode oidc).
    #[arg(
        long,
        global = true,
        env = "TINYCODE_OAUTH2_PROXY_IMAGE",
        default_value = "quay.io/oauth2-proxy/oauth2-proxy:v7.15.6"
    )]
    pub oauth2_proxy_image: String,
    /// OpenShift's oauth-proxy image (auth.mode openshift).
    #[arg(
        long,
        global = true,
        env = "TINYCODE_OPENSHIFT_OAUTH_PROXY_IMAGE",
        default_value = "quay.io/openshift/origin-oauth-proxy:4.16"
    )]
    pub openshift_oauth_proxy_image: String,
    /// Image of the authorization gate in sign-in pods: the operator's own image
    /// (`tinycode-operator gate`); make install sets it to the installed image.
    #[arg(long, global = true, env = "TINYCODE_GATE_IMAGE", default_value = crate::settings::DEFAULT_GATE_IMAGE)]
    pub gate_image: String,
    /// Seconds the gate keeps an access decision: a removed RoleBinding takes
    /// effect within this time (at most 60).
    #[arg(long, global = true, env = "TINYCODE_ACCESS_CACHE_SECONDS", default_value_t = 30,
          value_parser = clap::value_parser!(u64).range(1..=60))]
    pub access_cache_seconds: u64,
    /// Give every instance a small front (the gate; with the sign-in proxy in
    /// the sign-in modes) that answers its URL while tinycode is stopped:
    /// starting, stopped, idle. false: password instances are served by
    /// tinycode directly, sign-in fronts scale to zero with the agent, and a
    /// stopped instance's URL answers nothing.
    #[arg(long, global = true, env = "TINYCODE_FRONT", default_value_t = true, action = clap::ArgAction::Set)]
    pub front: bool,
}

impl SigninArgs {
    fn to_settings(&self, operator_namespace: &str) -> Result<crate::settings::SigninSettings, String> {
        let given = |v: &Option<String>| v.as_deref().map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
        let oidc = if let Some(issuer) = given(&self.oidc_issuer_url) {
            let issuer = issuer.trim_end_matches('/').to_string();
            if !(issuer.starts_with("https://") || issuer.starts_with("http://")) {
                return Err(format!("--oidc-issuer-url {issuer:?} must be an http(s) URL"));
            }
            let Some(client_id) = given(&self.oidc_client_id) else {
                return Err("--oidc-client-id is required with --oidc-issuer-url".into());
            };
            Some(crate::settings::OidcSettings {
                issuer_url: issuer,
                client_id,
                client_secret_file: self.oidc_client_secret_file.clone(),
                scopes: self.oidc_scopes.split_whitespace().collect::<Vec<_>>().join(" "),
                username_claim: self.oidc_username_claim,
                username_prefix: self.oidc_username_prefix.clone().unwrap_or_default(),
                groups_claim: self.oidc_groups_claim.clone(),
                groups_prefix: self.oidc_groups_prefix.clone().unwrap_or_default(),
            })
        } else {
            None
        };
        Ok(crate::settings::SigninSettings {
            oidc,
            oauth2_proxy_image: self.oauth2_proxy_image.clone(),
            openshift_oauth_proxy_image: self.openshift_oauth_proxy_image.clone(),
            gate_image: self.gate_image.clone(),
            access_cache: Duration::from_secs(self.access_cache_seconds),
            front: self.front,
            relay_url: self
                .oidc_relay_url
                .clone()
                .filter(|u| !u.trim().is_empty())
                .map(|u| u.trim().trim_end_matches('/').to_string())
                .unwrap_or_else(|| {
                    use crate::settings::{OIDC_RELAY_SERVICE, RELAY_PORT};
                    format!("http://{OIDC_RELAY_SERVICE}.{operator_namespace}.svc:{RELAY_PORT}")
                }),
        })
    }
}

/// Settings of the controller only (global like [`SettingsArgs`], so `run --help` lists them).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// The namespace to watch (a comma-separated list; empty: all namespaces).
    /// With one (OLM's SingleNamespace) every watch and list of namespaced
    /// kinds stays in it; several (MultiNamespace) are refused.
    // WATCH_NAMESPACE, unprefixed, is what CSVs conventionally fill from OLM's
    // olm.targetNamespaces; --watch-namespace is the flag's earlier spelling.
    #[arg(
        long,
        global = true,
        env = "WATCH_NAMESPACE",
        value_delimiter = ',',
        default_value = "",
        alias = "watch-namespace"
    )]
    pub watch_namespaces: Vec<String>,
    /// Instances reconciled at once (default: 4 per available core, 2 to 16;
    /// helm waits on the apiserver, so more runs than cores overlap: see
    /// docs/benchmarks.md).
    #[arg(long, global = true, env = "TINYCODE_CONCURRENCY")]
    pub concurrency: Option<u16>,
    /// Log as JSON lines.
    #[arg(long, global = true, env = "TINYCODE_LOG_JSON")]
    pub log_json: bool,
    /// Address of /healthz and /readyz.
    #[arg(long, global = true, env = "TINYCODE_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: std::net::SocketAddr,
    /// Address of /metrics.
    #[arg(long, global = true, env = "TINYCODE_METRICS_ADDR", default_value = "0.0.0.0:8383")]
    pub metrics_addr: std::net::SocketAddr,
    /// Address of the relay: fronts ask there to start their idle-stopped
    /// instance (POST /start/..., every mode); with --oidc-issuer-url, oidc
    /// instances' proxies also redeem sign-in codes there (the operator adds
    /// the client secret they never hold) and their gates ask access reviews.
    #[arg(long, global = true, env = "TINYCODE_OIDC_RELAY_ADDR", default_value = "0.0.0.0:8484", alias = "relay-addr")]
    pub oidc_relay_addr: std::net::SocketAddr,
    /// Who may read /metrics: rbac, a caller whose bearer token a TokenReview
    /// authenticates and a SubjectAccessReview allows `get` on the non-resource
    /// URL /metrics; none, anyone who reaches the port (local development only).
    #[arg(long, global = true, env = "TINYCODE_METRICS_AUTH", value_enum, default_value = "rbac")]
    pub metrics_auth: crate::ops::metrics_auth::MetricsAuth,
    /// Hold a Lease in the operator namespace so only one replica reconciles.
    #[arg(long, global = true, env = "TINYCODE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Seconds a standby waits, after it last saw the leader lease change, before taking it over.
    #[arg(long, global = true, env = "TINYCODE_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
    /// Seconds the leader goes on without a successful renewal before it stops
    /// reconciling and exits; shorter than the lease duration [default: two thirds of it].
    #[arg(long, global = true, env = "TINYCODE_LEASE_RENEW_DEADLINE_SECONDS")]
    pub lease_renew_deadline_seconds: Option<u64>,
    /// Seconds between two renewals of the leader lease (or two attempts to
    /// take it) [default: two fifteenths of the lease duration].
    #[arg(long, global = true, env = "TINYCODE_LEASE_RETRY_PERIOD_SECONDS")]
    pub lease_retry_period_seconds: Option<u64>,
}

impl RunArgs {
    /// The namespaces to watch, checked. The operator's own namespace is
    /// refused: it holds every release record, so instances there are
    /// refused, and watching it alone (OLM's OwnNamespace) would run an
    /// operator that refuses everything it sees.
    pub fn watch_scope(&self, operator_namespace: &str) -> Result<WatchScope, String> {
        let scope = WatchScope::parse(&self.watch_namespaces)?;
        if scope.namespace() == Some(operator_namespace) {
            return Err(format!(
                "{} names the operator's own namespace {operator_namespace}, where instances are refused (it holds their Helm release records); watch a namespace prepared for instances, or all (OLM's OwnNamespace install mode is not supported)",
                crate::watch_scope::FLAG
            ));
        }
        Ok(scope)
    }

    /// The concurrency given, else 4 per core this process may use (which
    /// honours a container's CPU limit), between 2 and 16.
    pub fn concurrency(&self) -> u16 {
        self.concurrency.unwrap_or_else(|| {
            let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
            (cores * 4).clamp(2, 16) as u16
        })
    }

    /// The leader election timings, checked.
    pub fn lease_timings(&self) -> Result<crate::ops::leader::Timings, String> {
        let derived = crate::ops::leader::Timings::for_lease(Duration::from_secs(self.lease_duration_seconds));
        crate::ops::leader::Timings::new(
            derived.lease_duration,
            self.lease_renew_deadline_seconds.map_or(derived.renew_deadline, Duration::from_secs),
            self.lease_retry_period_seconds.map_or(derived.retry_period, Duration::from_secs),
        )
        .map_err(|e| {
            format!("--lease-duration-seconds, --lease-renew-deadline-seconds, --lease-retry-period-seconds: {e}")
        })
    }
}

impl SettingsArgs {
    pub fn to_settings(&self) -> Result<Settings, String> {
        let required_namespace_label = match self.required_namespace_label.as_deref() {
            None | Some("") => None,
            Some(kv) => Some(key_value("--required-namespace-label", kv)?),
        };
        let hostpath_allowed_prefixes = parse_each(&self.hostpath_allowed_prefixes, |p| {
            crate::reconcile::rules::normalise_host_path(p)
                .ok_or_else(|| format!("--hostpath-allowed-prefixes {p:?} must be an absolute path without . or .."))
        })?;
        let egress_deny_cidrs = parse_each(&self.egress_deny_cidrs, |c| {
            crate::render::values::parse_cidr(c)
                .ok_or_else(|| format!("--egress-deny-cidrs {c:?} is not a CIDR (e.g. 10.0.0.0/8 or fd00::/8)"))
        })?;
        let cluster_cidrs = parse_each(&self.cluster_cidrs, |c| {
            crate::render::values::parse_cidr(c)
                .ok_or_else(|| format!("--cluster-cidrs {c:?} is not a CIDR (e.g. 10.0.0.0/8 or fd00::/8)"))
        })?;
        let cluster_dns_cidrs = parse_each(&self.cluster_dns_cidrs, |c| {
            crate::render::values::parse_cidr(c)
                .ok_or_else(|| format!("--cluster-dns-cidrs {c:?} is not a CIDR (e.g. 169.254.20.10/32)"))
        })?;
        if !crate::egress::policy::valid_name(&self.cluster_domain) {
            return Err(format!("--cluster-domain {:?} is not a DNS name (e.g. cluster.local)", self.cluster_domain));
        }
        Ok(Settings {
            require_prepared_label: self.require_prepared_label,
            hostpath_allowed_prefixes,
            egress_deny_cidrs,
            cluster_cidrs,
            cluster_domain: self.cluster_domain.clone(),
            cluster_dns_cidrs,
            allowed_registries: parse_each(&self.allowed_registries, |r| Ok(r.to_string()))?,
            allowed_cluster_roles: parse_each(&self.allowed_cluster_roles, |r| Ok(r.to_string()))?,
            operator_namespace: self.operator_namespace.clone(),
            operator_service_account: self.operator_service_account.clone(),
            required_namespace_label,
            helm_bin: self.helm_bin.clone(),
            chart_path: self.chart_path.clone(),
            helm_timeout: Duration::from_secs(self.helm_timeout_seconds),
            helm_direct: self.helm_direct,
            progress_deadline: Duration::from_secs(self.progress_deadline_seconds),
            // A missing chart fails at the first helm run with a clear message.
            chart_digest: crate::helm::digest::chart_digest(&self.chart_path).unwrap_or_default(),
            max_retries: self.max_retries,
            blocked_requeue: Duration::from_secs(self.blocked_requeue_seconds),
            ollama_image: self.ollama_image.clone(),
            ollama_models_size: self.ollama_models_size.clone(),
            probes: crate::vllm::ProbeSettings {
                timeout: Duration::from_secs(self.vllm_probe_timeout_seconds.max(1)),
                allow_loopback: self.vllm_allow_loopback,
                nameservers: self.dns_nameservers.clone(),
                ..Default::default()
            },
            // Without a cluster (the values command), auto means OpenShift; `run` detects.
            platform: crate::platform::Platform::from_groups(
                self.platform,
                &["route.openshift.io".to_string(), "security.openshift.io".to_string()],
            ),
            ingress: crate::settings::IngressSettings {
                class: self.ingress_class.clone().filter(|c| !c.is_empty()),
                annotations: parse_each(&self.ingress_annotations, |a| key_value("--ingress-annotations", a))?
                    .into_iter()
                    .collect(),
            },
            ingress_namespace: self.ingress_namespace.clone(),
            platform_choice: self.platform,
            // Both set by `run` once this process leads.
            lease_duration: crate::settings::DEFAULT_LEASE_DURATION,
            leading_since: std::time::Instant::now(),
            digest_key: crate::settings::DigestKey::default(),
            // A `run` flag: `run` sets it, other commands watch nothing.
            watch_scope: WatchScope::All,
            signin: self.signin.to_settings(&self.operator_namespace)?,
            idle: self.idle.to_settings()?,
            rollout_busy_deadline: self.idle.rollout_busy_deadline()?,
        })
    }
}

/// Each non-empty item of a list flag, trimmed and parsed.
fn parse_each<T>(items: &[String], parse: impl Fn(&str) -> Result<T, String>) -> Result<Vec<T>, String> {
    items.iter().map(|i| i.trim()).filter(|i| !i.is_empty()).map(parse).collect()
}

/// `key=value`, both trimmed.
fn key_value(flag: &str, kv: &str) -> Result<(String, String), String> {
    kv.split_once('=')
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .ok_or_else(|| format!("{flag} {kv:?} must be key=value"))
}

pub fn main(cli: Cli) -> ExitCode {
    // The gate reads none of the operator's settings: a bad one must not stop it.
    if let Some(Command::Gate(args)) = &cli.command {
        return gate_cmd::command(args, cli.run.log_json);
    }
    if let Some(Command::ModelKeys(args)) = &cli.command {
        return model_keys_cmd::command(args, cli.run.log_json);
    }
    if let Some(Command::EgressProxy(args)) = &cli.command {
        return egress_cmd::command(args, cli.run.log_json);
    }
    let settings = match cli.settings.to_settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => run::run(settings, cli.run),
        Command::Crd { class: false } => print_yaml(&[serde_json::to_value(TinycodeInstance::crd()).expect("crd")]),
        Command::Crd { class: true } => {
            print_yaml(&[serde_json::to_value(crate::api::TinycodeClass::crd()).expect("crd")])
        }
        Command::Values { file, namespace, offline, class } => {
            values_cmd::command(&file, namespace, offline, class.as_ref(), &settings)
        }
        Command::ValuesSchema => {
            print!("{}", values::schema_json());
            ExitCode::SUCCESS
        }
        Command::Scc => {
            let mut docs = Vec::new();
            for tier in ALL_TIERS {
                docs.push(openshift::scc_manifest(&tier.scc()));
            }
            for tier in ALL_TIERS {
                docs.push(tier.use_role_manifest());
            }
            print_yaml(&docs)
        }
        Command::Admission { operator_namespace } => {
            print_yaml(&crate::platform::admission::manifests(&operator_namespace))
        }
        Command::OpenshiftCrds => print_yaml(
            &openshift::stand_in_crds().iter().map(|c| serde_json::to_value(c).expect("crd")).collect::<Vec<_>>(),
        ),
        Command::Rbac { discovery: true, .. } => {
            print_yaml(&[crate::platform::rbac::discovery_cluster_role_manifest()])
        }
        Command::Rbac { leader_election_namespace: None, .. } => {
            print_yaml(&[crate::platform::rbac::cluster_role_manifest()])
        }
        Command::Rbac { leader_election_namespace: Some(ns), .. } => {
            print_yaml(&[crate::platform::rbac::leader_election_role_manifest(&ns)])
        }
        Command::Gate(args) => gate_cmd::command(&args, cli.run.log_json),
        Command::ModelKeys(args) => model_keys_cmd::command(&args, cli.run.log_json),
        Command::EgressProxy(args) => egress_cmd::command(&args, cli.run.log_json),
        Command::Version => {
            println!("tinycode-operator {}", env!("CARGO_PKG_VERSION"));
            ExitCode::SUCCESS
        }
    }
}

fn print_yaml(docs: &[serde_json::Value]) -> ExitCode {
    let mut out = String::new();
    for d in docs {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(d).expect("yaml"));
    }
    print!("{out}");
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests;

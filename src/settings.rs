//! Operator-wide settings chosen by the cluster-admin (flags or env).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// Namespace the operator runs in unless told otherwise (`--operator-namespace`).
pub const DEFAULT_OPERATOR_NAMESPACE: &str = "tinycode-operator-system";
/// ServiceAccount the operator runs as unless told otherwise (`--operator-service-account`).
pub const DEFAULT_OPERATOR_SERVICE_ACCOUNT: &str = "tinycode-operator-manager";

/// The leader Lease's duration unless `--lease-duration` says otherwise; the
/// renew deadline and retry period follow from it (`ops::leader::Timings`).
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);

/// What the reconcile needs to know about the operator's own deployment.
#[derive(Clone, Debug)]
pub struct Settings {
    /// Registries an instance image may come from.
    pub allowed_registries: Vec<String>,
    /// ClusterRoles an instance may bind once its namespace approves one.
    pub allowed_cluster_roles: Vec<String>,
    /// Namespace the operator runs in (refused for instances); Helm keeps the
    /// release records here, where tenants cannot write.
    pub operator_namespace: String,
    /// ServiceAccount the operator runs as (named in the preparation commands).
    pub operator_service_account: String,
    /// Label a namespace must carry before instances are accepted there (`key=value`), if any.
    pub required_namespace_label: Option<(String, String)>,
    /// A namespace counts as prepared only with the cluster-admin's label
    /// [`crate::platform::prepare::PREPARED_LABEL`] (on by default; off trusts
    /// any RoleBinding that gives the operator `admin`, which a namespace's own
    /// admin can create).
    pub require_prepared_label: bool,
    /// Host directories a hostPath workspace may lie under (normalised
    /// absolute paths); empty: no hostPath workspace is accepted.
    pub hostpath_allowed_prefixes: Vec<String>,
    /// Further CIDRs instance pods may not reach, besides link-local and the
    /// cloud metadata addresses (always closed).
    pub egress_deny_cidrs: Vec<String>,
    /// The cluster's pod and Service ranges, and the other private ranges a
    /// public name must not reach through an egress proxy (`--cluster-cidrs`).
    pub cluster_cidrs: Vec<String>,
    /// The cluster's DNS domain (`--cluster-domain`).
    pub cluster_domain: String,
    /// DNS servers outside pods that limited agents may ask (`--cluster-dns-cidrs`).
    pub cluster_dns_cidrs: Vec<String>,
    pub helm_bin: PathBuf,
    pub chart_path: PathBuf,
    pub helm_timeout: Duration,
    /// helm without the operator's loopback listener (`crate::helm::api_proxy`).
    pub helm_direct: bool,
    /// How long an instance's rollout may make no progress before its
    /// Deployments say so and the instance is Stalled (their
    /// `progressDeadlineSeconds`).
    pub progress_deadline: Duration,
    /// The chart's digest (see [`crate::helm::digest`]); part of every values hash.
    pub chart_digest: String,
    /// Helm failures allowed per rendering before the instance is Stalled.
    pub max_retries: u32,
    /// Delay before re-checking an instance blocked on something outside its spec.
    pub blocked_requeue: Duration,
    pub ollama_image: String,
    pub ollama_models_size: String,
    pub probes: ProbeSettings,
    /// OpenShift (Routes, SCCs) or plain Kubernetes (Ingress, Pod Security); detected at start-up.
    pub platform: crate::platform::Platform,
    /// `--platform`: auto (detect) or forced.
    pub platform_choice: crate::platform::PlatformChoice,
    /// How Ingresses are built where there are no Routes.
    pub ingress: IngressSettings,
    /// Namespace of the ingress controller, the only one (with the instance's own)
    /// whose pods reach the UI where there is no OpenShift router.
    pub ingress_namespace: String,
    /// Leader lease duration: a pending helm record younger than this that
    /// this process did not write is left alone ([`crate::helm::release::may_discard_pending`]).
    pub lease_duration: Duration,
    /// When this process became the leader (when it started, without leader election).
    pub leading_since: std::time::Instant,
    /// The key of digests tenants can read (`checksum/secrets`), from
    /// `ops::digest_key` at start; never logged.
    pub digest_key: DigestKey,
    /// The namespaces the operator watches (`--watch-namespaces`; set by `run`).
    pub watch_scope: crate::watch_scope::WatchScope,
    /// Sign-in: proxies, gate and the OpenID Connect provider.
    pub signin: SigninSettings,
    /// Idle stop: timeouts and the activity checks.
    pub idle: IdleSettings,
    /// Longest a change the user did not make waits for a busy agent
    /// (`--rollout-busy-deadline`); `None`: it never waits.
    pub rollout_busy_deadline: Option<Duration>,
}

/// Port of an instance pod's activity report (CONTAINER.md, "Activity"),
/// named `activity` on its Service; only the operator's namespace reaches it.
pub const ACTIVITY_PORT: u16 = 4097;

/// Idle stop (`spec.idle`), as the cluster-admin sets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdleSettings {
    /// Timeout of instances that set none; `None`: they never idle.
    pub default_timeout: Option<Duration>,
    /// No instance waits longer than this.
    pub max_timeout: Option<Duration>,
    /// spec.idle.timeout 0 (off) is not honoured: the default, else the maximum, applies.
    pub required: bool,
    /// Where an instance's activity report is read: `{service}`,
    /// `{namespace}` and `{name}` are replaced.
    pub url_template: String,
    /// Every instance with a timeout is checked once per interval, the checks
    /// spread evenly over it.
    pub check_interval: Duration,
    /// Checks in flight at once.
    pub checks_in_flight: usize,
    /// These are a TinycodeClass's (status names the class, not the flags).
    pub from_class: bool,
}

impl Default for IdleSettings {
    fn default() -> Self {
        Self {
            default_timeout: None,
            max_timeout: None,
            required: false,
            url_template: format!("http://{{service}}.{{namespace}}.svc:{ACTIVITY_PORT}/activity"),
            check_interval: Duration::from_secs(60),
            checks_in_flight: 8,
            from_class: false,
        }
    }
}

/// The gate's image unless told otherwise: the operator image `make image`
/// builds (install.sh and the bundle name the installed one).
pub const DEFAULT_GATE_IMAGE: &str = concat!("localhost/tinycode-operator:", env!("CARGO_PKG_VERSION"));
/// How long a rollout waits for a busy agent unless told otherwise: an hour
/// lets most agent tasks finish, and bounds how long a security fix waits.
pub const DEFAULT_ROLLOUT_BUSY_DEADLINE: Duration = Duration::from_secs(3600);
/// Kubernetes' own default for a Deployment's progress deadline.
pub const DEFAULT_PROGRESS_DEADLINE_SECONDS: u64 = 600;

/// Service (in the operator's namespace) in front of the relay: fronts ask
/// it to start their idle-stopped instance (every mode), oidc proxies and
/// gates redeem sign-in codes and ask access reviews there. Its name is
/// older than the starts.
pub const OIDC_RELAY_SERVICE: &str = "tinycode-operator-oidc-relay";
/// The relay's port.
pub const RELAY_PORT: u16 = 8484;

/// What sign-in pods run, and the provider oidc instances use.
#[derive(Clone, Debug)]
pub struct SigninSettings {
    /// Unset: auth.mode oidc is refused (`SignInNotConfigured`).
    pub oidc: Option<OidcSettings>,
    pub oauth2_proxy_image: String,
    pub openshift_oauth_proxy_image: String,
    pub gate_image: String,
    /// How long the gate keeps an access decision.
    pub access_cache: Duration,
    /// Every instance gets a front that answers its URL while the agent is
    /// stopped (password mode too); off, a password instance's URL reaches
    /// tinycode directly and a stopped instance's URL answers nothing.
    pub front: bool,
    /// Where instance pods reach the operator's relay (no trailing slash).
    pub relay_url: String,
}

impl Default for SigninSettings {
    fn default() -> Self {
        Self {
            oidc: None,
            oauth2_proxy_image: "quay.io/oauth2-proxy/oauth2-proxy:v7.15.6".into(),
            openshift_oauth_proxy_image: "quay.io/openshift/origin-oauth-proxy:4.16".into(),
            gate_image: DEFAULT_GATE_IMAGE.into(),
            access_cache: Duration::from_secs(30),
            front: true,
            relay_url: format!("http://{OIDC_RELAY_SERVICE}.{DEFAULT_OPERATOR_NAMESPACE}.svc:{RELAY_PORT}"),
        }
    }
}

/// The ID-token claim that names a user to the cluster (as the apiserver's
/// `--oidc-username-claim`): the two oauth2-proxy can pass on as the user.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum UsernameClaim {
    Sub,
    Email,
}

/// The cluster-admin's OpenID Connect provider.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OidcSettings {
    pub issuer_url: String,
    pub client_id: String,
    /// Read by the relay only; never rendered.
    pub client_secret_file: PathBuf,
    pub scopes: String,
    pub username_claim: UsernameClaim,
    pub username_prefix: String,
    pub groups_claim: String,
    pub groups_prefix: String,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allowed_registries: vec!["quay.io".into(), "ghcr.io".into()],
            allowed_cluster_roles: vec!["view".into()],
            operator_namespace: DEFAULT_OPERATOR_NAMESPACE.into(),
            operator_service_account: DEFAULT_OPERATOR_SERVICE_ACCOUNT.into(),
            required_namespace_label: None,
            require_prepared_label: true,
            hostpath_allowed_prefixes: Vec::new(),
            egress_deny_cidrs: Vec::new(),
            cluster_cidrs: [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",
                "198.18.0.0/15",
                "fc00::/7",
            ]
            .map(String::from)
            .to_vec(),
            cluster_domain: "cluster.local".into(),
            cluster_dns_cidrs: Vec::new(),
            helm_bin: "helm".into(),
            chart_path: "helm-charts/tinycode".into(),
            helm_timeout: Duration::from_secs(120),
            helm_direct: false,
            progress_deadline: Duration::from_secs(DEFAULT_PROGRESS_DEADLINE_SECONDS),
            chart_digest: String::new(),
            max_retries: 5,
            blocked_requeue: Duration::from_secs(30),
            ollama_image: "docker.io/ollama/ollama:latest".into(),
            ollama_models_size: "20Gi".into(),
            probes: ProbeSettings::default(),
            platform: crate::platform::Platform::OPENSHIFT,
            platform_choice: crate::platform::PlatformChoice::Auto,
            ingress: IngressSettings::default(),
            ingress_namespace: "ingress-nginx".into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            leading_since: std::time::Instant::now(),
            digest_key: DigestKey::default(),
            watch_scope: crate::watch_scope::WatchScope::All,
            signin: SigninSettings::default(),
            idle: IdleSettings::default(),
            rollout_busy_deadline: Some(DEFAULT_ROLLOUT_BUSY_DEADLINE),
        }
    }
}

/// How probes behave (operator settings).
#[derive(Clone, Debug)]
pub struct ProbeSettings {
    pub timeout: Duration,
    pub max_body: usize,
    /// Allow loopback targets (local stand-ins in tests); off in production.
    pub allow_loopback: bool,
    /// How long a probe result is reused before the server is asked again.
    pub cache_ttl: Duration,
    /// Name servers the probes ask instead of /etc/resolv.conf's, if any.
    pub nameservers: Vec<std::net::SocketAddr>,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            max_body: 1 << 20,
            allow_loopback: false,
            cache_ttl: Duration::from_secs(300),
            nameservers: Vec::new(),
        }
    }
}

/// A key the operator holds; `Debug` never shows it.
#[derive(Clone, Default)]
pub struct DigestKey(pub std::sync::Arc<[u8]>);

impl std::fmt::Debug for DigestKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DigestKey(..)")
    }
}

impl std::ops::Deref for DigestKey {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

/// Cluster-admin settings for Ingresses.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IngressSettings {
    /// `--ingress-class`; `None`: the cluster's default IngressClass, if any.
    pub class: Option<String>,
    /// `--ingress-annotations` (e.g. cert-manager's cluster-issuer).
    pub annotations: BTreeMap<String, String>,
}

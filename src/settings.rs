//! Operator-wide settings chosen by the cluster-admin (flags or env).

use std::path::PathBuf;
use std::time::Duration;

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
    pub helm_bin: PathBuf,
    pub chart_path: PathBuf,
    pub helm_timeout: Duration,
    /// The chart's digest (see [`crate::digest`]); part of every values hash.
    pub chart_digest: String,
    /// Helm failures allowed per rendering before the instance is Stalled.
    pub max_retries: u32,
    /// Delay before re-checking an instance blocked on something outside its spec.
    pub blocked_requeue: Duration,
    pub ollama_image: String,
    pub ollama_models_size: String,
    pub probes: crate::vllm::ProbeSettings,
    /// OpenShift (Routes, SCCs) or plain Kubernetes (Ingress, Pod Security); detected at start-up.
    pub platform: crate::platform::Platform,
    /// `--platform`: auto (detect) or forced.
    pub platform_choice: crate::platform::PlatformChoice,
    /// How Ingresses are built where there are no Routes.
    pub ingress: crate::ingress::IngressSettings,
    /// Namespace of the ingress controller, the only one (with the instance's own)
    /// whose pods reach the UI where there is no OpenShift router.
    pub ingress_namespace: String,
    /// Leader lease duration: a pending helm record younger than this that
    /// this process did not write is left alone ([`crate::release::may_discard_pending`]).
    pub lease_duration: Duration,
    /// When this process became the leader (when it started, without leader election).
    pub leading_since: std::time::Instant,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            allowed_registries: vec!["quay.io".into(), "ghcr.io".into()],
            allowed_cluster_roles: vec!["view".into()],
            operator_namespace: "tinycode-operator-system".into(),
            operator_service_account: "tinycode-operator-manager".into(),
            required_namespace_label: None,
            helm_bin: "helm".into(),
            chart_path: "helm-charts/tinycode".into(),
            helm_timeout: Duration::from_secs(120),
            chart_digest: String::new(),
            max_retries: 5,
            blocked_requeue: Duration::from_secs(30),
            ollama_image: "docker.io/ollama/ollama:latest".into(),
            ollama_models_size: "20Gi".into(),
            probes: crate::vllm::ProbeSettings::default(),
            platform: crate::platform::Platform::OPENSHIFT,
            platform_choice: crate::platform::PlatformChoice::Auto,
            ingress: crate::ingress::IngressSettings::default(),
            ingress_namespace: "ingress-nginx".into(),
            lease_duration: crate::leader::Timings::default().lease_duration,
            leading_since: std::time::Instant::now(),
        }
    }
}

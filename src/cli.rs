//! Command line: `run` (the controller), `crd`, `values`, `values-schema`,
//! `scc`, `openshift-crds` and `version`. Every setting has an env fallback so
//! the manager Deployment configures it through env. Settings are global flags:
//! they are accepted before or after the subcommand (`--concurrency 2 run` and
//! `run --concurrency 2` are the same) and `run --help` lists them.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use kube::CustomResourceExt;
use serde_json::json;

use crate::api::TinycodeInstance;
use crate::helm::Helm;
use crate::scc::{ALL_TIERS, SccTier};
use crate::settings::Settings;
use crate::values::InstanceRef;
use crate::{config, naming, openshift, validation, values};

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
    Crd,
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
    },
    /// Print the chart's values.schema.json generated from the values type.
    ValuesSchema,
    /// Print the three SecurityContextConstraints and their `use` ClusterRoles.
    Scc,
    /// Print stand-in CRDs for the OpenShift APIs (Route, SCC) for a plain kube-apiserver.
    OpenshiftCrds,
    /// Print the operator's ClusterRole, generated from its declared API calls.
    Rbac {
        /// Print the operator-namespace Role (leader Lease, Helm release records) for this namespace instead.
        #[arg(long)]
        leader_election_namespace: Option<String>,
        /// Print the tinycode-discovery ClusterRole (bound per discovery namespace) instead.
        #[arg(long, conflicts_with = "leader_election_namespace")]
        discovery: bool,
    },
    /// Write the OLM bundle (CSV, CRD, metadata, bundle.Dockerfile) generated from the code.
    Bundle {
        /// Bundle directory; its manifests/ and metadata/ are replaced.
        #[arg(long, default_value = "bundle")]
        out: PathBuf,
    },
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
    /// `bind` on each (src/rbac.rs).
    #[arg(long, global = true, env = "TINYCODE_ALLOWED_CLUSTER_ROLES", value_delimiter = ',', default_value = "view")]
    pub allowed_cluster_roles: Vec<String>,
    /// Namespace the operator runs in; Helm release records are kept there.
    #[arg(long, global = true, env = "OPERATOR_NAMESPACE", default_value = "tinycode-operator-system")]
    pub operator_namespace: String,
    /// ServiceAccount the operator runs as (named in namespace-preparation messages).
    #[arg(long, global = true, env = "OPERATOR_SERVICE_ACCOUNT", default_value = "tinycode-operator-manager")]
    pub operator_service_account: String,
    /// Label (key=value) a namespace must carry before instances are accepted there.
    #[arg(long, global = true, env = "TINYCODE_REQUIRED_NAMESPACE_LABEL")]
    pub required_namespace_label: Option<String>,
    /// Ollama image for instances with ollama.enabled.
    #[arg(long, global = true, env = "TINYCODE_OLLAMA_IMAGE", default_value = "docker.io/ollama/ollama:latest")]
    pub ollama_image: String,
    /// Size of the Ollama models PVC.
    #[arg(long, global = true, env = "TINYCODE_OLLAMA_MODELS_SIZE", default_value = "20Gi")]
    pub ollama_models_size: String,
    /// The helm 3 binary, 3.16 or newer (`--skip-schema-validation`).
    #[arg(long, global = true, env = "HELM_BIN", default_value = "helm")]
    pub helm_bin: PathBuf,
    /// The bundled chart.
    #[arg(long, global = true, env = "HELM_CHART_PATH", default_value = "helm-charts/tinycode")]
    pub chart_path: PathBuf,
    /// Helm failures allowed for one rendering (spec, chart, operator version) before the
    /// instance is Stalled; a changed spec or tinycode.dev/reconcile-requested-at tries again.
    #[arg(long, env = "TINYCODE_MAX_RETRIES", default_value_t = 5)]
    pub max_retries: u32,
    /// Longest a helm run may take.
    #[arg(long, global = true, env = "TINYCODE_HELM_TIMEOUT_SECONDS", default_value_t = 120)]
    pub helm_timeout_seconds: u64,
    /// Probe vLLM servers on loopback addresses (local stand-ins in tests only).
    #[arg(long, global = true, env = "TINYCODE_VLLM_ALLOW_LOOPBACK")]
    pub vllm_allow_loopback: bool,
    /// Timeout of one vLLM probe request.
    #[arg(long, global = true, env = "TINYCODE_VLLM_PROBE_TIMEOUT_SECONDS", default_value_t = 3)]
    pub vllm_probe_timeout_seconds: u64,
    /// Re-check delay for instances blocked on something outside their spec.
    #[arg(long, global = true, env = "TINYCODE_BLOCKED_REQUEUE_SECONDS", default_value_t = 30)]
    pub blocked_requeue_seconds: u64,
}

/// Settings of the controller only (global like [`SettingsArgs`], so `run --help` lists them).
#[derive(Args, Debug, Clone)]
pub struct RunArgs {
    /// Watch only this namespace (empty: all).
    #[arg(long, global = true, env = "WATCH_NAMESPACE", default_value = "")]
    pub watch_namespace: String,
    /// Instances reconciled at once.
    #[arg(long, global = true, env = "TINYCODE_CONCURRENCY", default_value_t = 4)]
    pub concurrency: u16,
    /// Log as JSON lines.
    #[arg(long, global = true, env = "TINYCODE_LOG_JSON")]
    pub log_json: bool,
    /// Address of /healthz and /readyz.
    #[arg(long, global = true, env = "TINYCODE_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: std::net::SocketAddr,
    /// Address of /metrics.
    #[arg(long, global = true, env = "TINYCODE_METRICS_ADDR", default_value = "0.0.0.0:8383")]
    pub metrics_addr: std::net::SocketAddr,
    /// Hold a Lease in the operator namespace so only one replica reconciles.
    #[arg(long, global = true, env = "TINYCODE_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Seconds a leader lease lasts without renewal.
    #[arg(long, global = true, env = "TINYCODE_LEASE_DURATION_SECONDS", default_value_t = 15)]
    pub lease_duration_seconds: u64,
}

impl SettingsArgs {
    pub fn to_settings(&self) -> Result<Settings, String> {
        let required_namespace_label = match self.required_namespace_label.as_deref() {
            None | Some("") => None,
            Some(kv) => {
                let (k, v) =
                    kv.split_once('=').ok_or_else(|| format!("--required-namespace-label {kv:?} must be key=value"))?;
                Some((k.to_string(), v.to_string()))
            }
        };
        Ok(Settings {
            allowed_registries: self
                .allowed_registries
                .iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            allowed_cluster_roles: self
                .allowed_cluster_roles
                .iter()
                .map(|r| r.trim().to_string())
                .filter(|r| !r.is_empty())
                .collect(),
            operator_namespace: self.operator_namespace.clone(),
            operator_service_account: self.operator_service_account.clone(),
            required_namespace_label,
            helm_bin: self.helm_bin.clone(),
            chart_path: self.chart_path.clone(),
            helm_timeout: Duration::from_secs(self.helm_timeout_seconds),
            // A missing chart fails at the first helm run with a clear message.
            chart_digest: crate::digest::chart_digest(&self.chart_path).unwrap_or_default(),
            max_retries: self.max_retries,
            blocked_requeue: Duration::from_secs(self.blocked_requeue_seconds),
            ollama_image: self.ollama_image.clone(),
            ollama_models_size: self.ollama_models_size.clone(),
            probes: crate::vllm::ProbeSettings {
                timeout: Duration::from_secs(self.vllm_probe_timeout_seconds.max(1)),
                allow_loopback: self.vllm_allow_loopback,
                ..Default::default()
            },
            // Without a cluster (the values command), auto means OpenShift; `run` detects.
            platform: crate::platform::Platform::from_groups(
                self.platform,
                &["route.openshift.io".to_string(), "security.openshift.io".to_string()],
            ),
            ingress: crate::ingress::IngressSettings {
                class: self.ingress_class.clone().filter(|c| !c.is_empty()),
                annotations: self
                    .ingress_annotations
                    .iter()
                    .filter(|a| !a.trim().is_empty())
                    .map(|a| {
                        a.split_once('=')
                            .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                            .ok_or_else(|| format!("--ingress-annotations {a:?} must be key=value"))
                    })
                    .collect::<Result<_, _>>()?,
            },
            ingress_namespace: self.ingress_namespace.clone(),
            platform_choice: self.platform,
        })
    }
}

pub fn main(cli: Cli) -> ExitCode {
    let settings = match cli.settings.to_settings() {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    match cli.command.unwrap_or(Command::Run) {
        Command::Run => run(settings, cli.run),
        Command::Crd => print_yaml(&[serde_json::to_value(TinycodeInstance::crd()).expect("crd")]),
        Command::Values { file, namespace, offline } => values_cmd(&file, namespace, offline, &settings),
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
                let mut role = serde_json::to_value(tier.use_role()).expect("role");
                role["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
                role["kind"] = "ClusterRole".into();
                docs.push(role);
            }
            print_yaml(&docs)
        }
        Command::OpenshiftCrds => print_yaml(
            &openshift::stand_in_crds().iter().map(|c| serde_json::to_value(c).expect("crd")).collect::<Vec<_>>(),
        ),
        Command::Rbac { discovery: true, .. } => print_yaml(&[crate::rbac::discovery_cluster_role_manifest()]),
        Command::Rbac { leader_election_namespace: None, .. } => print_yaml(&[crate::rbac::cluster_role_manifest()]),
        Command::Rbac { leader_election_namespace: Some(ns), .. } => {
            print_yaml(&[crate::rbac::leader_election_role_manifest(&ns)])
        }
        Command::Bundle { out } => crate::bundle::command(&out),
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
        out.push_str(&serde_yaml::to_string(d).expect("yaml"));
    }
    print!("{out}");
    ExitCode::SUCCESS
}

/// What the operator would do for one CR, as JSON; non-zero with the status message when invalid.
fn values_cmd(file: &PathBuf, namespace: Option<String>, offline: bool, settings: &Settings) -> ExitCode {
    let text =
        if file.as_os_str() == "-" { std::io::read_to_string(std::io::stdin()) } else { std::fs::read_to_string(file) };
    let text = match text {
        Ok(t) => t,
        Err(e) => {
            eprintln!("error: cannot read {}: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let inst: TinycodeInstance = match serde_yaml::from_str(&text) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("error: {} is not a TinycodeInstance: {e}", file.display());
            return ExitCode::from(2);
        }
    };
    let name = inst.metadata.name.clone().unwrap_or_default();
    let Some(ns) = inst.metadata.namespace.clone().or(namespace) else {
        eprintln!("error: metadata.namespace is unset; set it in the file or pass -n NAMESPACE");
        return ExitCode::from(2);
    };
    let warnings = match validation::validate(&name, &ns, &inst.spec, settings) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("invalid spec: {e}");
            return ExitCode::from(1);
        }
    };
    let tier = SccTier::select(&inst.spec);
    let mut warnings = warnings;
    let served = if offline {
        Default::default()
    } else {
        let targets: Vec<(String, String)> =
            inst.spec.vllm.iter().flatten().map(|p| (p.name.clone(), p.url.clone())).collect();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
        let reports = runtime.block_on(crate::vllm::Prober::new(settings.probes.clone()).probe_all(&targets));
        for c in crate::vllm::conditions(&inst.spec, &reports, &[]) {
            if c.type_ == crate::status::VLLM_WARNING && c.status
                || c.type_ == crate::status::VLLM_CONFIG_READY && !c.status
            {
                warnings.push(c.message);
            }
        }
        crate::vllm::served_by_name(&reports)
    };
    let config_json = config::generate(&inst.spec, &served);
    let uid = inst.metadata.uid.clone().unwrap_or_default();
    // Without the cluster nothing is approved: say what would need approval.
    if let Some(role) = inst.spec.cluster_admin.cluster_role.as_deref() {
        warnings.push(format!(
            "ClusterRole {role} is bound only when it is in --allowed-cluster-roles and namespace {ns} carries the label {}={role}",
            crate::approval::ALLOW_CLUSTER_ROLE_LABEL
        ));
    }
    if inst.spec.discovery.as_ref().is_some_and(|d| d.namespaces.iter().any(|n| *n != ns)) {
        warnings.push(format!(
            "other discovery namespaces are searched only when they carry the label {}=true",
            crate::approval::DISCOVERY_LABEL
        ));
    }
    let v = values::build(
        &InstanceRef { name: &name, namespace: &ns, uid: &uid },
        &inst.spec,
        settings,
        &values::Approved::default(),
        config_json,
    );
    let generated = inst.spec.auth.password_secret.as_deref().is_none_or(str::is_empty);
    let out = json!({
        "release": naming::release_name(&ns, &name),
        "releaseNamespace": settings.operator_namespace,
        "namespace": ns,
        "scc": tier.scc_name(),
        "password": {"secret": v.auth.password_secret, "key": "TINYCODE_SERVER_PASSWORD", "generated": generated},
        "values": v,
        "warnings": warnings,
    });
    println!("{}", serde_json::to_string_pretty(&out).expect("json"));
    ExitCode::SUCCESS
}

fn run(settings: Settings, args: RunArgs) -> ExitCode {
    init_logging(args.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(run_async(settings, args))
}

async fn run_async(settings: Settings, args: RunArgs) -> ExitCode {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;

    let client = match kube::Client::try_default().await {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build a Kubernetes client; set KUBECONFIG or run in a pod");
            return ExitCode::from(1);
        }
    };
    if !settings.chart_path.join("Chart.yaml").is_file() {
        tracing::error!(chart = %settings.chart_path.display(), "the chart is missing; set HELM_CHART_PATH");
        return ExitCode::from(1);
    }
    let mut settings = settings;
    let choice = settings.platform_choice;
    settings.platform = match crate::platform::detect(&client, choice).await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!(error = %e, "cannot read API discovery to tell OpenShift from Kubernetes; set --platform");
            return ExitCode::from(1);
        }
    };
    tracing::info!(
        platform = settings.platform.name(),
        routes = settings.platform.routes,
        sccs = settings.platform.sccs,
        "platform"
    );
    let metrics = Arc::new(crate::metrics::Metrics::new());
    metrics.platform(settings.platform.name());
    let health = Arc::new(crate::health::HealthState::default());
    health.alive.store(true, Ordering::Relaxed);
    if let Err(e) = crate::health::serve(args.health_addr, args.metrics_addr, health.clone(), metrics.clone()).await {
        tracing::error!(error = %e, health = %args.health_addr, metrics = %args.metrics_addr, "cannot listen for health or metrics");
        return ExitCode::from(1);
    }

    // One shutdown signal for everything: SIGTERM/SIGINT, or a lost lease.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
            tokio::select! {
                _ = term.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: shutting down"),
            }
            let _ = stop_tx.send(true);
        });
    }

    let identity = std::env::var("POD_NAME").unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id()));
    let elector = args.leader_elect.then(|| {
        crate::leader::Elector::new(
            client.clone(),
            &settings.operator_namespace,
            identity.clone(),
            Duration::from_secs(args.lease_duration_seconds.max(3)),
        )
    });
    let lost = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if let Some(elector) = &elector {
        let mut stop = stop_rx.clone();
        let mut logged = false;
        loop {
            match elector.try_acquire().await {
                Ok(true) => break,
                Ok(false) if !logged => {
                    tracing::info!(identity = %identity, lease = crate::leader::LEASE_NAME, "standing by: another replica is the leader");
                    logged = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "cannot read the leader lease"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = async { let _ = stop.wait_for(|s| *s).await; } => return ExitCode::SUCCESS,
            }
        }
        tracing::info!(identity = %identity, "became the leader");
        let elector = elector.clone();
        let stop_tx = stop_tx.clone();
        let lost = lost.clone();
        tokio::spawn(async move {
            elector.hold().await;
            lost.store(true, Ordering::Relaxed);
            let _ = stop_tx.send(true);
        });
    }
    health.leader.store(true, Ordering::Relaxed);

    // The APIs can change under a running operator (the OpenShift APIs
    // installed or removed): re-read discovery each minute and restart on a
    // change, so the watches and the code path match the cluster again.
    let platform_changed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    if choice == crate::platform::PlatformChoice::Auto {
        let (client, stop_tx, changed, current) =
            (client.clone(), stop_tx.clone(), platform_changed.clone(), settings.platform);
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(60)).await;
                match crate::platform::detect(&client, choice).await {
                    Ok(p) if p != current => {
                        tracing::warn!(was = current.name(), now = p.name(), "the cluster's APIs changed; restarting");
                        changed.store(true, Ordering::Relaxed);
                        let _ = stop_tx.send(true);
                        return;
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(error = %e, "cannot re-read API discovery"),
                }
            }
        });
    }

    let helm = match Helm::new(
        settings.helm_bin.clone(),
        settings.chart_path.clone(),
        settings.helm_timeout,
        stop_rx.clone(),
        metrics.clone(),
    ) {
        Ok(h) => h,
        Err(e) => {
            tracing::error!(error = %e, "cannot create helm's working directory");
            return ExitCode::from(1);
        }
    };
    let watch = (!args.watch_namespace.is_empty()).then_some(args.watch_namespace.clone());
    tracing::info!(watch_namespace = watch.as_deref().unwrap_or("*"), "tinycode-operator starting");
    let ctx = Arc::new(crate::controller::Context::new(client, settings, helm, metrics));
    let mut stop = stop_rx.clone();
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let opts = crate::controller::RunOptions { watch_namespace: watch, concurrency: args.concurrency.max(1) };
    crate::controller::run(ctx, opts, health, shutdown).await;
    if lost.load(Ordering::Relaxed) {
        tracing::error!("stopped after losing the leader lease");
        return ExitCode::from(1);
    }
    if platform_changed.load(Ordering::Relaxed) {
        if let Some(elector) = &elector {
            elector.release().await;
        }
        return ExitCode::from(1);
    }
    if let Some(elector) = &elector {
        elector.release().await;
    }
    tracing::info!("tinycode-operator stopped");
    ExitCode::SUCCESS
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "tinycode-operator".into())
}

fn init_logging(json: bool) {
    use tracing_subscriber::EnvFilter;
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info,kube=warn"));
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr()) && std::env::var_os("NO_COLOR").is_none();
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi);
    if json {
        builder.json().init();
    } else {
        builder.init();
    }
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    fn parse(args: &[&str]) -> Cli {
        Cli::try_parse_from(std::iter::once("tinycode-operator").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{args:?} refused: {e}"))
    }

    #[test]
    fn command_line_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_after_run() {
        let cli = parse(&[
            "run",
            "--metrics-addr",
            "127.0.0.1:9999",
            "--health-addr",
            "127.0.0.1:9998",
            "--concurrency",
            "2",
            "--leader-elect",
            "false",
            "--lease-duration-seconds",
            "7",
            "--watch-namespace",
            "team-a",
            "--helm-bin",
            "/opt/helm",
            "--allowed-registries",
            "a.example,b.example",
            "--allowed-cluster-roles",
            "view,edit",
            "--operator-namespace",
            "ops",
        ]);
        assert!(matches!(cli.command, Some(Command::Run)));
        assert_eq!(cli.run.metrics_addr, "127.0.0.1:9999".parse().unwrap());
        assert_eq!(cli.run.health_addr, "127.0.0.1:9998".parse().unwrap());
        assert_eq!(cli.run.concurrency, 2);
        assert!(!cli.run.leader_elect);
        assert_eq!(cli.run.lease_duration_seconds, 7);
        assert_eq!(cli.run.watch_namespace, "team-a");
        assert_eq!(cli.settings.helm_bin, PathBuf::from("/opt/helm"));
        assert_eq!(cli.settings.allowed_registries, ["a.example", "b.example"]);
        assert_eq!(cli.settings.allowed_cluster_roles, ["view", "edit"]);
        assert_eq!(cli.settings.operator_namespace, "ops");
    }

    #[test]
    fn settings_before_run() {
        let cli = parse(&["--concurrency", "2", "--metrics-addr", "127.0.0.1:9999", "run"]);
        assert!(matches!(cli.command, Some(Command::Run)));
        assert_eq!(cli.run.concurrency, 2);
        assert_eq!(cli.run.metrics_addr, "127.0.0.1:9999".parse().unwrap());
    }

    #[test]
    fn settings_on_both_sides_of_run() {
        let cli = parse(&["--concurrency", "2", "run", "--helm-timeout-seconds", "9"]);
        assert_eq!(cli.run.concurrency, 2);
        assert_eq!(cli.settings.helm_timeout_seconds, 9);
    }

    #[test]
    fn no_subcommand_runs_the_controller_with_settings() {
        let cli = parse(&["--concurrency", "3"]);
        assert!(cli.command.is_none(), "main() treats a missing subcommand as run");
        assert_eq!(cli.run.concurrency, 3);
    }

    #[test]
    fn values_takes_settings_after_it() {
        let cli = parse(&["values", "-f", "x.yaml", "--allowed-registries", "a"]);
        match cli.command {
            Some(Command::Values { file, .. }) => assert_eq!(file, PathBuf::from("x.yaml")),
            other => panic!("{other:?}"),
        }
        assert_eq!(cli.settings.allowed_registries, ["a"]);
        let cli = parse(&["--allowed-registries", "b", "values", "-f", "x.yaml"]);
        assert_eq!(cli.settings.allowed_registries, ["b"]);
    }

    #[test]
    fn unknown_flags_are_still_refused() {
        assert!(Cli::try_parse_from(["tinycode-operator", "run", "--no-such-flag"]).is_err());
    }

    #[test]
    fn run_help_lists_the_settings_and_their_env() {
        let mut cmd = Cli::command();
        cmd.build();
        let run = cmd.find_subcommand_mut("run").expect("run subcommand");
        let help = run.render_help().to_string();
        for needle in [
            "--metrics-addr",
            "TINYCODE_METRICS_ADDR",
            "--health-addr",
            "TINYCODE_HEALTH_ADDR",
            "--concurrency",
            "TINYCODE_CONCURRENCY",
            "--leader-elect",
            "--allowed-registries",
            "TINYCODE_ALLOWED_REGISTRIES",
            "--helm-bin",
            "HELM_BIN",
            "--watch-namespace",
            "WATCH_NAMESPACE",
        ] {
            assert!(help.contains(needle), "run --help lacks {needle}:\n{help}");
        }
    }
}

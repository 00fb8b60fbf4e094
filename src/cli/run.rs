//! `tinycode-operator run`: connect, detect the platform, serve health and
//! metrics, check helm's version, win the leader lease, then run the controller until a signal, a
//! lost lease or a change of the cluster's APIs stops it.

use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::watch;

use super::RunArgs;
use crate::helm::Helm;
use crate::ops::health::HealthState;
use crate::ops::leader::Elector;
use crate::ops::metrics::Metrics;
use crate::ops::metrics_auth::{Gate, MetricsAuth};
use crate::platform::PlatformChoice;
use crate::settings::Settings;

/// A start-up step failed: it logged why; the process exits with this code.
type Fail = ExitCode;

pub fn run(settings: Settings, args: RunArgs) -> ExitCode {
    init_logging(args.log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    runtime.block_on(async move { run_async(settings, args).await.unwrap_or_else(|code| code) })
}

async fn run_async(mut settings: Settings, args: RunArgs) -> Result<ExitCode, Fail> {
    let timings = args.lease_timings().map_err(|e| fail(2, "invalid leader election timings", e))?;
    settings.watch_scope =
        args.watch_scope(&settings.operator_namespace).map_err(|e| fail(2, "invalid namespaces to watch", e))?;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| fail(1, "cannot build a Kubernetes client; set KUBECONFIG or run in a pod", e))?;
    if !settings.chart_path.join("Chart.yaml").is_file() {
        tracing::error!(chart = %settings.chart_path.display(), "the chart is missing; set HELM_CHART_PATH");
        return Err(ExitCode::from(1));
    }
    prepare_cluster(&client, &mut settings).await?;
    let metrics = Arc::new(Metrics::new());
    metrics.platform(settings.platform.name());
    let health = Arc::new(HealthState::default());
    health.alive.store(true, Ordering::Relaxed);
    serve_beside(&args, &client, &settings, &health, &metrics).await?;
    // One shutdown signal for everything: SIGTERM/SIGINT, or a changed platform.
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    on_signal(stop_tx.clone());
    let helm = start_helm(&settings, &client, stop_rx.clone(), &metrics).await?;

    let elector = args.leader_elect.then(|| {
        let identity = std::env::var("POD_NAME").unwrap_or_else(|_| format!("{}-{}", hostname(), std::process::id()));
        Elector::new(client.clone(), &settings.operator_namespace, identity, timings)
    });
    // When the term of the lease acquired starts (see crate::ops::leader).
    let renewed = match &elector {
        Some(elector) => match acquire(elector, stop_rx.clone()).await {
            Some(sent) => sent,
            None => return Ok(ExitCode::SUCCESS),
        },
        None => tokio::time::Instant::now(),
    };
    settings.lease_duration = timings.lease_duration;
    settings.leading_since = renewed.into_std();
    health.leader.store(true, Ordering::Relaxed);
    let platform_changed = watch_platform(&client, &settings, stop_tx.clone());

    let concurrency = args.concurrency();
    tracing::info!(watching = %settings.watch_scope, concurrency, "tinycode-operator starting");
    let mut stop = stop_rx.clone();
    let shutdown = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let opts = crate::reconcile::RunOptions { concurrency: concurrency.max(1) };
    let controller = crate::reconcile::run(client, settings, helm, metrics, opts, health.clone(), shutdown);
    if let Some(code) = lead(elector.as_ref(), renewed, controller, &health).await {
        return Ok(code);
    }
    if platform_changed.load(Ordering::Relaxed) {
        return Ok(ExitCode::from(1));
    }
    tracing::info!("tinycode-operator stopped");
    Ok(ExitCode::SUCCESS)
}

/// What the operator keeps on the cluster before it reconciles anything:
/// its digest key, the host-directory admission policy's parameter, and the
/// platform it runs on.
async fn prepare_cluster(client: &kube::Client, settings: &mut Settings) -> Result<(), Fail> {
    let key = crate::ops::digest_key::load_or_create(client, &settings.operator_namespace)
        .await
        .map_err(|e| fail(1, "cannot load the operator's digest key", e))?;
    settings.digest_key = crate::settings::DigestKey(key.into());
    // Until it is written, the apiserver refuses hostPath pods in approved namespaces.
    crate::platform::admission::write_param(client, &settings.operator_namespace, &settings.hostpath_allowed_prefixes)
        .await
        .map_err(|e| {
            fail(1, "cannot write ConfigMap tinycode-host-paths (the host-directory admission policy's parameter)", e)
        })?;
    settings.platform = crate::platform::detect(client, settings.platform_choice)
        .await
        .map_err(|e| fail(1, "cannot read API discovery to tell OpenShift from Kubernetes; set --platform", e))?;
    let p = settings.platform;
    tracing::info!(platform = p.name(), routes = p.routes, sccs = p.sccs, "platform");
    Ok(())
}

/// What every replica serves, leader or not: health, metrics and the relay
/// (starts, and OIDC sign-in).
async fn serve_beside(
    args: &RunArgs,
    client: &kube::Client,
    settings: &Settings,
    health: &Arc<HealthState>,
    metrics: &Arc<Metrics>,
) -> Result<(), Fail> {
    let gate = match args.metrics_auth {
        MetricsAuth::Rbac => Some(Arc::new(Gate::kube(client.clone()))),
        MetricsAuth::None => {
            tracing::warn!(
                addr = %args.metrics_addr,
                "--metrics-auth none: /metrics answers anyone who reaches its port, without authentication"
            );
            None
        }
    };
    crate::ops::health::serve(args.health_addr, args.metrics_addr, health.clone(), metrics.clone(), gate)
        .await
        .map_err(|e| fail(1, "cannot listen for health or metrics", e))?;
    // The relay: fronts of every mode start their idle-stopped instance
    // here; oidc instances also sign users in through it.
    let instances = Arc::new(crate::signin::oidc::CachedInstances::start(client, &settings.watch_scope));
    let starts = Arc::new(crate::signin::start::KubeStarts { client: client.clone() });
    let starter = Arc::new(crate::signin::start::Starter::new(instances.clone(), starts));
    let mut router = crate::signin::start::start_router(settings.digest_key.0.clone(), starter.clone());
    let writes = Arc::new(crate::signin::used::KubeUseWrites { client: client.clone() });
    router = router.merge(crate::signin::used::used_router(settings.digest_key.0.clone(), instances.clone(), writes));
    let reporter = kube::runtime::events::Reporter {
        controller: "tinycode-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let events = Arc::new(crate::signin::egress::KubeRefusalEvents {
        recorder: kube::runtime::events::Recorder::new(client.clone(), reporter),
    });
    router =
        router.merge(crate::signin::egress::refused_router(settings.digest_key.0.clone(), instances.clone(), events));
    if let Some(oidc) = settings.signin.oidc.clone() {
        let provider = crate::signin::oidc::Provider::new(oidc);
        tracing::info!(issuer = %provider.settings().issuer_url, "OIDC sign-in relay");
        let reviews = Arc::new(crate::signin::oidc::KubeAccessReviews { client: client.clone() });
        let relay = crate::signin::oidc::Relay::new(provider, instances, reviews).with_starts(starter);
        router = router.merge(crate::signin::oidc::relay_router(relay));
    }
    tracing::info!(addr = %args.oidc_relay_addr, "relay");
    let listener = tokio::net::TcpListener::bind(args.oidc_relay_addr)
        .await
        .map_err(|e| fail(1, "cannot listen for the relay (--oidc-relay-addr)", e))?;
    tokio::spawn(crate::ops::http_server::serve(listener, router, crate::signin::oidc::RELAY_LIMITS));
    Ok(())
}

/// Helm, asked its version once, before standing by for the lease: a helm
/// the operator cannot run stops every replica here, not at the first
/// instance.
async fn start_helm(
    settings: &Settings,
    client: &kube::Client,
    stop: watch::Receiver<bool>,
    metrics: &Arc<Metrics>,
) -> Result<Helm, Fail> {
    let helm =
        Helm::new(settings.helm_bin.clone(), settings.chart_path.clone(), settings.helm_timeout, stop, metrics.clone())
            .map_err(|e| fail(1, "cannot create helm's working directory", e))?
            .with_record_lookup(client.clone());
    let helm = if settings.helm_direct {
        helm
    } else {
        let groups = crate::helm::api_proxy::chart_api_groups(&settings.chart_path)
            .map_err(|e| fail(1, "cannot read the chart's templates", e))?;
        let proxy = crate::helm::api_proxy::ApiProxy::start(client.clone(), Some(groups))
            .await
            .map_err(|e| fail(1, "cannot listen on loopback for helm's requests", e))?;
        helm.through(&proxy)
    };
    let printed = helm.version().await.map_err(|e| fail(1, "cannot ask helm its version; set HELM_BIN", e))?;
    let helm_version = crate::helm::version::check(&settings.helm_bin.display().to_string(), &printed)
        .map_err(|e| fail(1, "helm is a version the operator cannot run", e))?;
    tracing::info!(helm = %helm_version, bin = %settings.helm_bin.display(), "helm");
    Ok(helm)
}

/// Runs the controller, under the lease when there is one. On a loss
/// `lead` has dropped the controller: its reconcile tasks are aborted and a
/// running helm is killed; the exit code says so (the Deployment restarts
/// this replica, which then stands by).
async fn lead(
    elector: Option<&Elector>,
    renewed: tokio::time::Instant,
    controller: impl std::future::Future<Output = ()>,
    health: &HealthState,
) -> Option<ExitCode> {
    let Some(elector) = elector else {
        controller.await;
        return None;
    };
    if let Err(lost) = elector.lead(renewed, controller).await {
        health.leader.store(false, Ordering::Relaxed);
        tracing::error!(reason = %lost, "lost the leader lease: stopped reconciling; exiting");
        return Some(ExitCode::from(1));
    }
    elector.release().await;
    None
}

/// Logs a start-up failure; the exit code to return.
fn fail(code: u8, what: &str, error: impl std::fmt::Display) -> Fail {
    tracing::error!(error = %error, "{what}");
    ExitCode::from(code)
}

/// SIGTERM or SIGINT asks everything to stop.
fn on_signal(stop_tx: Arc<watch::Sender<bool>>) {
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

/// Stands by until this replica holds the lease (when the lease was sent),
/// or None when asked to stop first.
async fn acquire(elector: &Elector, mut stop: watch::Receiver<bool>) -> Option<tokio::time::Instant> {
    tokio::select! {
        sent = elector.acquire() => {
            tracing::info!(identity = %elector.identity(), "became the leader");
            Some(sent)
        }
        _ = async { let _ = stop.wait_for(|s| *s).await; } => None,
    }
}

/// The APIs can change under a running operator (the OpenShift APIs
/// installed or removed): re-read discovery each minute and stop on a
/// change (the process exits 1 and restarts), so the watches and the code
/// path match the cluster again. True once that happened.
fn watch_platform(client: &kube::Client, settings: &Settings, stop_tx: Arc<watch::Sender<bool>>) -> Arc<AtomicBool> {
    let changed = Arc::new(AtomicBool::new(false));
    let choice = settings.platform_choice;
    if choice != PlatformChoice::Auto {
        return changed;
    }
    let (client, flag, current) = (client.clone(), changed.clone(), settings.platform);
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
            match crate::platform::detect(&client, choice).await {
                Ok(p) if p != current => {
                    tracing::warn!(was = current.name(), now = p.name(), "the cluster's APIs changed; restarting");
                    flag.store(true, Ordering::Relaxed);
                    let _ = stop_tx.send(true);
                    return;
                }
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "cannot re-read API discovery"),
            }
        }
    });
    changed
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "tinycode-operator".into())
}

pub(super) fn init_logging(json: bool) {
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

//! `tinycode-local`: prepares a bare local kube-apiserver (hack/local-cluster.sh)
//! for running the operator, as the end-to-end tests do, can stand in for
//! the kubelet and the OpenShift router in a local demo, and writes the OLM
//! bundle (`make bundle`). Not shipped in the image.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Client};
use serde_json::json;
use tinycode_operator::platform::openshift::Route;
use tinycode_tools::devcluster::{self, BoxError};

#[derive(Parser)]
#[command(about = "tinycode-operator development helpers: local control plane, OLM bundle")]
struct Args {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Install the OpenShift APIs (unless --platform kubernetes), the operator's CRD/SCCs/RBAC and a prepared namespace.
    Setup {
        /// openshift: install the Route and SCC APIs; kubernetes: a plain cluster without them.
        #[arg(long, default_value = "openshift", value_parser = ["openshift", "kubernetes"])]
        platform: String,
        /// Directory with the real OpenShift CRD schemas (else the operator's stand-ins are used).
        #[arg(long)]
        openshift_crds: Option<PathBuf>,
        /// Namespace to prepare for instances.
        #[arg(long, default_value = "tinycode-dev")]
        namespace: String,
        /// Password for the namespace's tinycode-password Secret.
        #[arg(long, env = "TINYCODE_PASSWORD", default_value = "change-me", hide_env_values = true)]
        password: String,
        /// Where to write a kubeconfig that authenticates as the operator's ServiceAccount.
        #[arg(long)]
        operator_kubeconfig: PathBuf,
    },
    /// Install only the Route and SCC APIs (the OpenShift stand-ins of a local cluster) and
    /// the Route rules OpenShift aggregates into `admin` and `edit`, as `setup` does;
    /// hack/install.sh then installs the operator as on OpenShift.
    OpenshiftApis {
        /// Directory with the real OpenShift CRD schemas (else the operator's stand-ins are used).
        #[arg(long)]
        openshift_crds: Option<PathBuf>,
    },
    /// Play the kubelet and the router or ingress controller: report tinycode Deployments
    /// available, admit their Routes, publish an address for their Ingresses.
    Simulate {
        /// Domain for admitted Route hosts.
        #[arg(long, default_value = "apps.local.test")]
        domain: String,
        /// A real node runs the pods (hack/local-cluster.sh --node): leave Deployments to
        /// it and play only the router and ingress controller.
        #[arg(long)]
        no_kubelet: bool,
    },
    /// Write the OLM bundle (CSV, CRD, metadata, bundle.Dockerfile) generated from the code.
    Bundle {
        /// Bundle directory; its manifests/ and metadata/ are replaced.
        #[arg(long, default_value = "bundle")]
        out: PathBuf,
        /// The operator image the CSV names (default: config/manager/manager.yaml's
        /// placeholder, localhost/tinycode-operator:VERSION, which no node can pull).
        #[arg(long)]
        image: Option<String>,
    },
}

#[tokio::main]
async fn main() -> ExitCode {
    let result = match Args::parse().command {
        Cmd::Setup { platform, openshift_crds, namespace, password, operator_kubeconfig } => {
            let Some(admin) = local_kubeconfig() else { return ExitCode::from(2) };
            let crds = (platform == "openshift").then_some(openshift_crds);
            setup(&admin, crds, &namespace, &password, &operator_kubeconfig).await.map(|()| {
                eprintln!(
                    "local cluster ready: namespace {namespace} prepared; operator kubeconfig at {}",
                    operator_kubeconfig.display()
                );
            })
        }
        Cmd::OpenshiftApis { openshift_crds } => {
            if local_kubeconfig().is_none() {
                return ExitCode::from(2);
            }
            match Client::try_default().await {
                Ok(client) => match devcluster::install_openshift_apis(&client, openshift_crds.as_deref()).await {
                    Ok(()) => devcluster::install_routes_admin_role(&client).await,
                    Err(e) => Err(e),
                },
                Err(e) => Err(e.into()),
            }
        }
        Cmd::Simulate { domain, no_kubelet } => {
            // Never a cluster picked up from ~/.kube/config: simulate writes status.
            if local_kubeconfig().is_none() {
                return ExitCode::from(2);
            }
            simulate(&domain, !no_kubelet).await
        }
        Cmd::Bundle { out, image } => return tinycode_tools::bundle::command(&out, image.as_deref()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

/// $KUBECONFIG, which the cluster commands require; says so when it is unset.
fn local_kubeconfig() -> Option<PathBuf> {
    let path = std::env::var_os("KUBECONFIG").map(PathBuf::from);
    if path.is_none() {
        eprintln!(
            "error: set KUBECONFIG to the local cluster's admin kubeconfig (eval \"$(hack/local-cluster.sh start)\")"
        );
    }
    path
}

/// `openshift`: `Some(real CRD directory or None for the stand-ins)`; `None`: plain Kubernetes.
async fn setup(
    admin: &std::path::Path,
    openshift: Option<Option<PathBuf>>,
    namespace: &str,
    password: &str,
    out: &std::path::Path,
) -> Result<(), BoxError> {
    let client = Client::try_default().await?;
    if let Some(crds) = openshift {
        devcluster::install_openshift_apis(&client, crds.as_deref()).await?;
    }
    devcluster::install_operator(&client).await?;
    devcluster::aggregate_cluster_roles(&client).await?;
    devcluster::prepare_namespace(&client, namespace, Some(password)).await?;
    devcluster::write_operator_kubeconfig(&client, admin, out).await?;
    Ok(())
}

/// What the simulated kubelet and router act on.
enum Seen {
    Deployment(Box<Deployment>),
    Ingress(Ingress),
    Route(Route),
}

/// As a kubelet and an OpenShift router would: Deployments of tinycode
/// instances become "available", their Routes "admitted" and, on a plain
/// Kubernetes, their Ingresses "published", as soon as a watch shows them.
/// Watches, not polling: a LIST of every Deployment each second cost the
/// apiserver and this process about 0.09 CPU seconds per second at 200
/// instances, CPU the benchmark's operator and helm then did not get.
async fn simulate(domain: &str, kubelet: bool) -> Result<(), BoxError> {
    use futures::StreamExt;
    use kube::runtime::watcher;

    let client = Client::try_default().await?;
    let config = watcher::Config::default().labels("app.kubernetes.io/part-of=tinycode-operator");
    let mut streams = vec![watch(Api::<Ingress>::all(client.clone()), &config, Seen::Ingress)];
    if kubelet {
        streams.push(watch(Api::<Deployment>::all(client.clone()), &config, |d| Seen::Deployment(Box::new(d))));
    }
    // A plain Kubernetes has no Routes.
    if Api::<Route>::all(client.clone()).list(&ListParams::default().limit(1)).await.is_ok() {
        streams.push(watch(Api::<Route>::all(client.clone()), &config, Seen::Route));
    }
    let mut events = futures::stream::select_all(streams);
    while let Some(event) = events.next().await {
        let outcome = match event {
            Ok(Seen::Deployment(d)) => deployment_available(&client, &d).await,
            Ok(Seen::Ingress(i)) => ingress_published(&client, &i).await,
            Ok(Seen::Route(r)) => route_admitted(&client, &r, domain).await,
            Err(e) => Err(e.into()),
        };
        // An object deleted meanwhile, a watch restarting: the next event retries.
        if let Err(e) = outcome {
            eprintln!("simulate: {e}");
        }
    }
    Ok(())
}

/// The objects of one kind a watch shows, as they are created or change.
fn watch<K>(
    api: Api<K>,
    config: &kube::runtime::watcher::Config,
    wrap: fn(K) -> Seen,
) -> futures::stream::BoxStream<'static, Result<Seen, kube::runtime::watcher::Error>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    kube::runtime::watcher(api, config.clone()).default_backoff().applied_objects().map(move |r| r.map(wrap)).boxed()
}

async fn deployment_available(client: &Client, d: &Deployment) -> Result<(), BoxError> {
    let (Some(ns), Some(name)) = (d.metadata.namespace.as_deref(), d.metadata.name.as_deref()) else { return Ok(()) };
    let replicas = d.spec.replicas.unwrap_or(1);
    let status = d.status.clone().unwrap_or_default();
    if status.observed_generation == d.metadata.generation && status.available_replicas == Some(replicas) {
        return Ok(());
    }
    let patch = json!({"status": {"observedGeneration": d.metadata.generation, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "simulated by tinycode-local"}]}});
    let kubelet = PatchParams { field_manager: Some("tinycode-local-kubelet".into()), ..Default::default() };
    Api::<Deployment>::namespaced(client.clone(), ns).patch_status(name, &kubelet, &Patch::Merge(&patch)).await?;
    eprintln!("simulate: Deployment {ns}/{name} reported available");
    Ok(())
}

async fn ingress_published(client: &Client, i: &Ingress) -> Result<(), BoxError> {
    let (Some(ns), Some(name)) = (i.metadata.namespace.as_deref(), i.metadata.name.as_deref()) else { return Ok(()) };
    if tinycode_operator::render::ingress::published(i).is_some() {
        return Ok(());
    }
    let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}});
    Api::<Ingress>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eprintln!("simulate: Ingress {ns}/{name} published");
    Ok(())
}

async fn route_admitted(client: &Client, r: &Route, domain: &str) -> Result<(), BoxError> {
    let (Some(ns), Some(name)) = (r.metadata.namespace.as_deref(), r.metadata.name.as_deref()) else { return Ok(()) };
    if tinycode_operator::render::route::admitted_host(r).is_some() {
        return Ok(());
    }
    let host = r.spec.host.clone().unwrap_or_else(|| format!("{name}-{ns}.{domain}"));
    let patch = json!({"status": {"ingress": [{"host": host, "routerName": "default", "wildcardPolicy": "None",
        "conditions": [{"type": "Admitted", "status": "True"}]}]}});
    Api::<Route>::namespaced(client.clone(), ns)
        .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    eprintln!("simulate: Route {ns}/{name} admitted as {host}");
    Ok(())
}

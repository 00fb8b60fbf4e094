//! `tinycode-local`: prepares a bare local kube-apiserver (hack/local-cluster.sh)
//! for running the operator, as the end-to-end tests do, can stand in for
//! the kubelet and the OpenShift router in a local demo, and writes the OLM
//! bundle (`make bundle`). Not shipped in the image.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

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
    /// Play the kubelet and the router or ingress controller: report tinycode Deployments
    /// available, admit their Routes, publish an address for their Ingresses.
    Simulate {
        /// Domain for admitted Route hosts.
        #[arg(long, default_value = "apps.local.test")]
        domain: String,
    },
    /// Write the OLM bundle (CSV, CRD, metadata, bundle.Dockerfile) generated from the code.
    Bundle {
        /// Bundle directory; its manifests/ and metadata/ are replaced.
        #[arg(long, default_value = "bundle")]
        out: PathBuf,
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
        Cmd::Simulate { domain } => {
            // Never a cluster picked up from ~/.kube/config: simulate writes status.
            if local_kubeconfig().is_none() {
                return ExitCode::from(2);
            }
            simulate(&domain).await
        }
        Cmd::Bundle { out } => return tinycode_tools::bundle::command(&out),
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

/// Every second: Deployments of tinycode instances become "available" and
/// their Routes "admitted", as a kubelet and an OpenShift router would make them.
async fn simulate(domain: &str) -> Result<(), BoxError> {
    let client = Client::try_default().await?;
    let selector = ListParams::default().labels("app.kubernetes.io/part-of=tinycode-operator");
    let kubelet = PatchParams { field_manager: Some("tinycode-local-kubelet".into()), ..Default::default() };
    loop {
        for d in Api::<Deployment>::all(client.clone()).list(&selector).await?.items {
            let (Some(ns), Some(name)) = (d.metadata.namespace.clone(), d.metadata.name.clone()) else { continue };
            let replicas = d.spec.replicas.unwrap_or(1);
            let status = d.status.clone().unwrap_or_default();
            if status.observed_generation == d.metadata.generation && status.available_replicas == Some(replicas) {
                continue;
            }
            let patch = json!({"status": {"observedGeneration": d.metadata.generation, "replicas": replicas, "updatedReplicas": replicas,
                "readyReplicas": replicas, "availableReplicas": replicas,
                "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable", "message": "simulated by tinycode-local"}]}});
            Api::<Deployment>::namespaced(client.clone(), &ns)
                .patch_status(&name, &kubelet, &Patch::Merge(&patch))
                .await?;
            eprintln!("simulate: Deployment {ns}/{name} reported available");
        }
        // A plain Kubernetes has no Routes: publish Ingress addresses instead.
        for i in Api::<Ingress>::all(client.clone()).list(&selector).await?.items {
            let (Some(ns), Some(name)) = (i.metadata.namespace.clone(), i.metadata.name.clone()) else { continue };
            if tinycode_operator::render::ingress::published(&i).is_some() {
                continue;
            }
            let patch = json!({"status": {"loadBalancer": {"ingress": [{"ip": "127.0.0.1"}]}}});
            Api::<Ingress>::namespaced(client.clone(), &ns)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            eprintln!("simulate: Ingress {ns}/{name} published");
        }
        let routes = Api::<Route>::all(client.clone()).list(&selector).await.map(|l| l.items).unwrap_or_default();
        for r in routes {
            let (Some(ns), Some(name)) = (r.metadata.namespace.clone(), r.metadata.name.clone()) else { continue };
            if tinycode_operator::render::route::admitted_host(&r).is_some() {
                continue;
            }
            let host = r.spec.host.clone().unwrap_or_else(|| format!("{name}-{ns}.{domain}"));
            let patch = json!({"status": {"ingress": [{"host": host, "routerName": "default", "wildcardPolicy": "None",
                "conditions": [{"type": "Admitted", "status": "True"}]}]}});
            Api::<Route>::namespaced(client.clone(), &ns)
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await?;
            eprintln!("simulate: Route {ns}/{name} admitted as {host}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

//! `tinycode-local`: prepares a bare local kube-apiserver (hack/local-cluster.sh)
//! for running the operator, as the end-to-end tests do. Not shipped in the image.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use tinycode_operator::devcluster;

#[derive(Parser)]
#[command(
    about = "Install the OpenShift APIs, the operator's CRD/SCCs/RBAC and a prepared namespace into a local control plane"
)]
struct Args {
    /// Directory with the real OpenShift CRD schemas (else the operator's stand-ins are used).
    #[arg(long)]
    openshift_crds: Option<PathBuf>,
    /// Namespace to prepare for instances.
    #[arg(long, default_value = "tinycode-dev")]
    namespace: String,
    /// Password for the namespace's tinycode-password Secret.
    #[arg(long, env = "TINYCODE_PASSWORD", default_value = "change-me")]
    password: String,
    /// Where to write a kubeconfig that authenticates as the operator's ServiceAccount.
    #[arg(long)]
    operator_kubeconfig: PathBuf,
}

#[tokio::main]
async fn main() -> ExitCode {
    let args = Args::parse();
    let Some(admin) = std::env::var_os("KUBECONFIG").map(PathBuf::from) else {
        eprintln!(
            "error: set KUBECONFIG to the local cluster's admin kubeconfig (eval \"$(hack/local-cluster.sh start)\")"
        );
        return ExitCode::from(2);
    };
    let result = async {
        let client = kube::Client::try_default().await?;
        devcluster::install_openshift_apis(&client, args.openshift_crds.as_deref()).await?;
        devcluster::install_operator(&client).await?;
        devcluster::aggregate_cluster_roles(&client).await?;
        devcluster::prepare_namespace(&client, &args.namespace, Some(&args.password)).await?;
        devcluster::write_operator_kubeconfig(&client, &admin, &args.operator_kubeconfig).await?;
        Ok::<_, devcluster::BoxError>(())
    }
    .await;
    match result {
        Ok(()) => {
            eprintln!(
                "local cluster ready: namespace {} prepared; operator kubeconfig at {}",
                args.namespace,
                args.operator_kubeconfig.display()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    }
}

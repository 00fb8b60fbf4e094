//! `tinycode-operator egress-proxy`: the flags of the egress proxy
//! ([`crate::egress`]), the pod an instance whose class sets `egress`
//! reaches the outside through. Like `gate`, it reads none of the
//! operator's settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::egress::{self, Labels};

/// Where the chart mounts the allow-list.
pub const POLICY_FILE: &str = "/etc/tinycode/egress/policy.json";

#[derive(Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Egress proxy options")]
pub struct EgressArgs {
    /// Address the proxy listens on.
    #[arg(long, default_value = "0.0.0.0:3128")]
    pub listen: SocketAddr,
    /// Address of the metrics port (`/metrics` and nothing else); unset: none.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// The allow-list (JSON: hosts, cidrs, clusterCidrs, clusterDomain).
    #[arg(long, default_value = POLICY_FILE)]
    pub policy: PathBuf,
    /// Namespace of the TinycodeInstance (a label on the metrics).
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Name of the TinycodeInstance (a label on the metrics).
    #[arg(long, default_value = "")]
    pub instance: String,
    /// The instance's TinycodeClass (a label on the metrics).
    #[arg(long, default_value = "")]
    pub class: String,
    /// The operator relay's endpoint that names refusals on the instance
    /// (an `EgressRefused` event); unset: refusals are logged and counted only.
    #[arg(long, requires = "start_credential_file")]
    pub refused_url: Option<String>,
    /// The instance's start credential, which the relay checks.
    #[arg(long, requires = "refused_url")]
    pub start_credential_file: Option<PathBuf>,
    /// Let loopback targets past the guard (`make bench-egress`, whose
    /// stand-ins listen there; the chart never sets it).
    #[arg(long, hide = true)]
    pub allow_loopback_targets: bool,
}

impl EgressArgs {
    pub fn to_settings(&self) -> egress::Settings {
        egress::Settings {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            policy: self.policy.clone(),
            labels: Labels {
                namespace: self.namespace.clone(),
                instance: self.instance.clone(),
                class: self.class.clone(),
            },
            nameservers: Vec::new(),
            refused: self.refused_url.clone().zip(self.start_credential_file.clone()),
            allow_loopback: self.allow_loopback_targets,
        }
    }
}

/// Runs the proxy until a signal; exit code 1 when it cannot start.
pub fn command(args: &EgressArgs, log_json: bool) -> ExitCode {
    super::run::init_logging(log_json);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(egress::run(args.to_settings())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "egress-proxy: cannot start");
            ExitCode::from(1)
        }
    }
}

//! `tinycode-operator model-keys`: the flags of the model-key proxy
//! ([`crate::modelkeys`]), a container of the tinycode pod that holds the
//! model providers' keys the agent uses but never reads. Like `gate`, it
//! reads none of the operator's settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use crate::modelkeys::{self, Labels, Provider};

/// Where the chart mounts the keys (one file per provider, named after it).
pub const KEYS_DIR: &str = "/var/run/secrets/tinycode/model-keys";

#[derive(Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Model-key proxy options")]
pub struct ModelKeysArgs {
    /// Address the proxy listens on (the pod's loopback: only the agent beside it).
    #[arg(long, default_value = "127.0.0.1:4099")]
    pub listen: SocketAddr,
    /// Address of the metrics port (`/metrics` and nothing else); unset: none.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// A provider as NAME=URL: requests to /NAME/v1/... go to URL with the
    /// key in KEYS_DIR/NAME. Repeat for each provider.
    #[arg(long = "provider", required = true)]
    pub providers: Vec<Provider>,
    /// Directory of the keys.
    #[arg(long, default_value = KEYS_DIR)]
    pub keys_dir: PathBuf,
    /// Namespace of the TinycodeInstance (a label on the metrics).
    #[arg(long, default_value = "")]
    pub namespace: String,
    /// Name of the TinycodeInstance (a label on the metrics).
    #[arg(long, default_value = "")]
    pub instance: String,
    /// The instance's TinycodeClass (a label on the metrics).
    #[arg(long, default_value = "")]
    pub class: String,
    /// Allow providers on loopback (tests and `make bench-model-keys`; the
    /// chart never sets it: the agent shares the pod's loopback).
    #[arg(long, hide = true)]
    pub allow_loopback_providers: bool,
    /// The instance's egress proxy (`http://HOST:PORT`), where its class
    /// limits egress: every provider is reached through it.
    #[arg(long)]
    pub egress_proxy: Option<String>,
}

impl ModelKeysArgs {
    pub fn to_settings(&self) -> modelkeys::Settings {
        modelkeys::Settings {
            listen: self.listen,
            metrics_listen: self.metrics_listen,
            keys_dir: self.keys_dir.clone(),
            providers: self.providers.clone(),
            labels: Labels {
                namespace: self.namespace.clone(),
                instance: self.instance.clone(),
                class: self.class.clone(),
            },
            allow_loopback: self.allow_loopback_providers,
            egress_proxy: self.egress_proxy.clone(),
        }
    }
}

/// Runs the proxy until a signal; exit code 1 when it cannot start.
pub fn command(args: &ModelKeysArgs, log_json: bool) -> ExitCode {
    super::run::init_logging(log_json);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(modelkeys::run(args.to_settings())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "model-keys: cannot start");
            ExitCode::from(1)
        }
    }
}

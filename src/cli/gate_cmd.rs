//! `tinycode-operator gate`: the flags of the instance pod's authorization
//! gate ([`crate::gate`]). They are the subcommand's own, not global
//! settings: the instance pod runs the operator image with this subcommand
//! only, and `run` never reads them.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use clap::builder::TypedValueParser;

use crate::gate::{self, Mode, Prefixes, Target};

/// The gate's flags. (The operator's global settings are accepted too,
/// listed under Options, and ignored but for `--log-json`.)
#[derive(Args, Debug, Clone, PartialEq, Eq)]
#[command(next_help_heading = "Gate options")]
pub struct GateArgs {
    /// Address the gate listens on (the sign-in proxy's upstream; in
    /// password mode, the front's public port).
    #[arg(long, default_value = "127.0.0.1:4181")]
    pub listen: SocketAddr,
    /// The tinycode server (http://host:port) allowed requests go to.
    #[arg(long, default_value = "http://127.0.0.1:4096")]
    pub upstream: String,
    /// Whether the server runs, else why not: what an allowed user is told
    /// while no connection to it can be made.
    #[arg(long, value_enum, default_value = "runs")]
    pub agent: gate::AgentState,
    /// Namespace of the TinycodeInstance.
    #[arg(long)]
    pub namespace: String,
    /// Name of the TinycodeInstance users need `use` on.
    #[arg(long)]
    pub instance: String,
    /// oidc: oauth2-proxy's X-Forwarded-User/-Groups, checked by the
    /// operator's relay (--review-url); openshift: oauth-proxy's X-Forwarded-Access-Token,
    /// checked with a SelfSubjectAccessReview made with it; password: no
    /// proxy, the caller's HTTP Basic password checked against --password-file.
    #[arg(long, value_enum)]
    pub mode: Mode,
    /// password: the Secret holding the password, named on the page that asks for it.
    #[arg(long)]
    pub password_secret: Option<String>,
    /// Put before the user name (the cluster's OIDC username prefix, e.g. "oidc:").
    #[arg(long, default_value = "")]
    pub username_prefix: String,
    /// Put before each group (the cluster's OIDC groups prefix).
    #[arg(long, default_value = "")]
    pub groups_prefix: String,
    /// Seconds a decision (allowed or refused) is remembered; at most 60.
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(0..=gate::MAX_CACHE_SECONDS))]
    pub cache_seconds: u64,
    /// oidc: the operator relay's review endpoint for this instance
    /// (<relay>/oidc/review/<namespace>/<instance>).
    #[arg(long)]
    pub review_url: Option<String>,
    /// The operator relay's start endpoint for this instance
    /// (<relay>/start/<namespace>/<instance>): whoever the gate lets in
    /// (an allowed user, or with the password) opening it while it is
    /// stopped for idleness starts it.
    #[arg(long)]
    pub start_url: Option<String>,
    /// Sign-in modes: the operator relay's endpoint that records who used
    /// this instance (<relay>/used/<namespace>/<instance>, status.lastUsedBy),
    /// told with the start credential.
    #[arg(long)]
    pub used_url: Option<String>,
    /// The instance's start credential (from the front's Secret), presented
    /// at --start-url; re-read on every request to start.
    #[arg(long, default_value = "/var/run/secrets/tinycode/gate/start-credential")]
    pub start_credential_file: PathBuf,
    /// oidc: the instance's relay credential (from its sign-in Secret), re-read on every review.
    #[arg(long, default_value = "/var/run/secrets/tinycode/gate/relay-credential")]
    pub relay_credential_file: PathBuf,
    /// CA bundle of the apiserver's certificate.
    #[arg(long, default_value = "/var/run/secrets/tinycode/gate/ca.crt")]
    pub ca_file: PathBuf,
    /// The apiserver [default: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT].
    #[arg(long)]
    pub api_server: Option<String>,
    /// The tinycode server's password, sent as Basic auth (user tinycode)
    /// when the file exists; "" sends none.
    #[arg(
        long,
        default_value = "/var/run/secrets/tinycode/gate/password",
        value_parser = clap::builder::OsStringValueParser::new().map(PathBuf::from)
    )]
    pub password_file: PathBuf,
    /// Address of the activity report the operator reads for idle stop
    /// (CONTAINER.md, "Activity"); unset: not served.
    #[arg(long)]
    pub activity_listen: Option<SocketAddr>,
    /// Sign-in modes: address of the audit counters (`/metrics` and nothing
    /// else, `tinycode_gate_events_total`); unset: not served.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// The image's own activity report (http://127.0.0.1:port/activity),
    /// joined into the gate's; unset or unanswered: requests alone.
    #[arg(long)]
    pub activity_report: Option<String>,
    /// Sign-in modes: the front's public port, in front of the sign-in
    /// proxy (--signin-upstream). It passes everything on unchanged, but
    /// tells a client that is not a browser the proxy's errors as plain text.
    #[arg(long, requires = "signin_upstream")]
    pub front_listen: Option<SocketAddr>,
    /// The sign-in proxy (http://host:port on loopback) --front-listen passes requests to.
    #[arg(long, requires = "front_listen")]
    pub signin_upstream: Option<String>,
}

impl GateArgs {
    pub fn to_settings(&self) -> gate::Settings {
        let nonempty = |p: &PathBuf| (!p.as_os_str().is_empty()).then(|| p.clone());
        gate::Settings {
            listen: self.listen,
            upstream: self.upstream.clone(),
            agent: self.agent,
            target: Target { namespace: self.namespace.clone(), instance: self.instance.clone() },
            mode: self.mode,
            prefixes: Prefixes { user: self.username_prefix.clone(), groups: self.groups_prefix.clone() },
            cache_ttl: Duration::from_secs(self.cache_seconds),
            review_url: self.review_url.clone().filter(|s| !s.is_empty()),
            relay_credential_file: self.relay_credential_file.clone(),
            start_url: self.start_url.clone().filter(|s| !s.is_empty()),
            used_url: self.used_url.clone().filter(|s| !s.is_empty()),
            start_credential_file: self.start_credential_file.clone(),
            ca_file: self.ca_file.clone(),
            api_server: self.api_server.clone().filter(|s| !s.is_empty()),
            password_file: nonempty(&self.password_file),
            password_secret: self.password_secret.clone().filter(|s| !s.is_empty()),
            activity_listen: self.activity_listen,
            metrics_listen: self.metrics_listen,
            activity_report: self.activity_report.clone().filter(|s| !s.is_empty()),
            front: self.front_listen.zip(self.signin_upstream.clone()),
        }
    }
}

/// Runs the gate until a signal; exit code 1 when it cannot start.
pub fn command(args: &GateArgs, log_json: bool) -> ExitCode {
    super::run::init_logging(log_json);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("tokio runtime");
    match runtime.block_on(gate::run(args.to_settings())) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "gate: cannot start");
            ExitCode::from(1)
        }
    }
}

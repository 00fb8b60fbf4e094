//! The end-to-end harness: a real kube-apiserver (hack/local-cluster.sh), the
//! OpenShift APIs, the operator's CRD/SCCs/RBAC, and the real operator binary
//! running as its own ServiceAccount with real helm. The harness plays the
//! kubelet (Deployment status) and the OpenShift router (Route status).

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::platform::openshift::Route;
use tinycode_tools::devcluster;
use tinycode_tools::devcluster::OPERATOR_NAMESPACE;

pub type TestResult = Result<(), String>;

/// Health and metrics ports of the main operator process.
pub const MAIN_PORTS: (u16, u16) = (18081, 18383);

/// One HTTP/1.0 GET on loopback: (status code, body).
pub async fn http_get(port: u16, path: &str) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect")?;
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes()).await.ctx("write")?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.ctx("read")?;
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no status line")?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// One HTTP/1.0 GET on loopback with `Authorization: Bearer <token>` when
/// given: (status code, body).
pub async fn http_get_bearer(port: u16, path: &str, token: Option<&str>) -> Result<(u16, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect")?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    stream.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{auth}\r\n").as_bytes()).await.ctx("write")?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.ctx("read")?;
    let status = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).ok_or("no status line")?;
    let body = buf.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default();
    Ok((status, body))
}

/// `/metrics` of the main operator, read as a scraper bound to the
/// metrics-reader ClusterRole (the operator runs with `--metrics-auth rbac`).
pub async fn metrics_get(env: &Env) -> Result<(u16, String), String> {
    metrics_get_at(env, MAIN_PORTS.1).await
}

/// `/metrics` on another operator process's metrics port, as [`metrics_get`].
pub async fn metrics_get_at(env: &Env, port: u16) -> Result<(u16, String), String> {
    http_get_bearer(port, "/metrics", Some(&env.metrics_token)).await
}

/// Namespace of the ServiceAccounts that scrape `/metrics` in the suite
/// (one for every run: created once, reused).
pub const SCRAPER_NAMESPACE: &str = "e2e-metrics-scrapers";
/// The ServiceAccount bound to the metrics-reader ClusterRole.
pub const SCRAPER: &str = "scraper";
/// The ClusterRole `hack/install.sh` applies from config/prometheus/.
pub const METRICS_READER_ROLE: &str = "tinycode-operator-metrics-reader";

/// A short-lived token of ServiceAccount `ns/name` (the TokenRequest API).
pub async fn service_account_token(client: &Client, ns: &str, name: &str) -> Result<String, String> {
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(6 * 3600), ..Default::default() }),
        ..Default::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), ns);
    let answer = sas
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .ctx(&format!("token of ServiceAccount {ns}/{name}"))?;
    answer.status.and_then(|s| s.token).filter(|t| !t.is_empty()).ok_or("the token request returned no token".into())
}

/// Creates (or keeps) ServiceAccount `SCRAPER_NAMESPACE/name`.
pub async fn scraper_service_account(client: &Client, name: &str) -> TestResult {
    let apply = PatchParams::apply("e2e-harness").force();
    let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SCRAPER_NAMESPACE}});
    Api::<Namespace>::all(client.clone())
        .patch(SCRAPER_NAMESPACE, &apply, &Patch::Apply(&ns))
        .await
        .ctx("scraper namespace")?;
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount",
        "metadata": {"name": name, "namespace": SCRAPER_NAMESPACE}});
    Api::<ServiceAccount>::namespaced(client.clone(), SCRAPER_NAMESPACE)
        .patch(name, &apply, &Patch::Apply(&sa))
        .await
        .ctx(&format!("ServiceAccount {SCRAPER_NAMESPACE}/{name}"))?;
    Ok(())
}

/// The metrics-reader ClusterRole (re-applied from config/prometheus/, as
/// install.sh does), a ServiceAccount bound to it, and that account's token.
async fn metrics_scraper_token(kubectl: &Path, kubeconfig: &Path, client: &Client) -> Result<String, String> {
    let role = repo_root().join("config/prometheus/metrics_reader_role.yaml");
    let out = Command::new(kubectl)
        .args(["apply", "--server-side", "--force-conflicts", "--field-manager=e2e-harness", "-f"])
        .arg(&role)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .ctx("run kubectl apply")?;
    if !out.status.success() {
        return Err(format!("kubectl apply {}: {}", role.display(), String::from_utf8_lossy(&out.stderr)));
    }
    scraper_service_account(client, SCRAPER).await?;
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "e2e-metrics-scraper"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": METRICS_READER_ROLE},
        "subjects": [{"kind": "ServiceAccount", "name": SCRAPER, "namespace": SCRAPER_NAMESPACE}]});
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch("e2e-metrics-scraper", &PatchParams::apply("e2e-harness").force(), &Patch::Apply(&binding))
        .await
        .ctx("bind the scraper to the metrics-reader ClusterRole")?;
    service_account_token(client, SCRAPER_NAMESPACE, SCRAPER).await
}

/// Sum of a metric's samples whose series starts with `prefix`.
pub fn metric_sum(text: &str, prefix: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(prefix))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

/// Turns any error into the test failure message.
pub trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T, String>;
}

impl<T, E: std::fmt::Display> Ctx<T> for Result<T, E> {
    fn ctx(self, what: &str) -> Result<T, String> {
        self.map_err(|e| format!("{what}: {e}"))
    }
}

/// The repository (and workspace) root, one above this crate.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("tools/ lies in the repository").to_path_buf()
}

/// The operator binary. A test cannot name another package's binary
/// (`CARGO_BIN_EXE_*` covers its own package only), so this asks cargo to
/// build `tinycode-operator` in this test's profile (a no-op when it is up to
/// date, as after `make test`'s workspace build) and takes the path cargo
/// reports. `TINYCODE_OPERATOR_BIN` names a prebuilt binary instead.
pub fn operator_bin() -> Result<&'static Path, String> {
    static BIN: std::sync::OnceLock<Result<PathBuf, String>> = std::sync::OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os("TINYCODE_OPERATOR_BIN") {
        Some(bin) => Ok(PathBuf::from(bin)),
        None => build_operator(),
    })
    .as_deref()
    .map_err(Clone::clone)
}

/// Variables cargo sets for the test it runs, besides `CARGO_PKG_*` and
/// `CARGO_BIN_EXE_*`. A nested cargo must not see them: build scripts that
/// watch one (ring's) would rebuild, and the next workspace build again.
const SET_FOR_THIS_TEST: &[&str] = &[
    "CARGO_MANIFEST_DIR",
    "CARGO_MANIFEST_PATH",
    "CARGO_CRATE_NAME",
    "CARGO_BIN_NAME",
    "CARGO_PRIMARY_PACKAGE",
    "CARGO_TARGET_TMPDIR",
    "OUT_DIR",
];

fn build_operator() -> Result<PathBuf, String> {
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo.args(["build", "-q", "--message-format=json", "--package=tinycode-operator", "--bin=tinycode-operator"]);
    cargo.current_dir(repo_root()).stderr(Stdio::inherit());
    // This test runs from <target>/<profile>/deps/.
    let exe = std::env::current_exe().ctx("test executable")?;
    match exe.parent().and_then(Path::parent).and_then(Path::file_name).and_then(|p| p.to_str()) {
        Some("release") => cargo.arg("--release"),
        Some(profile) if profile != "debug" => cargo.args(["--profile", profile]),
        _ => &mut cargo,
    };
    for (key, _) in std::env::vars_os() {
        let k = key.to_string_lossy();
        if k.starts_with("CARGO_PKG_") || k.starts_with("CARGO_BIN_EXE_") || SET_FOR_THIS_TEST.contains(&&*k) {
            cargo.env_remove(&key);
        }
    }
    let out = cargo.output().ctx("run cargo build -p tinycode-operator")?;
    if !out.status.success() {
        return Err("cargo build -p tinycode-operator failed (see above)".into());
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|m| m["target"]["name"] == "tinycode-operator")
        .find_map(|m| m["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo build -p tinycode-operator named no executable".to_string())
}

/// Where the real OpenShift CRD schemas are, if this checkout has them.
pub fn openshift_crds_dir() -> Option<PathBuf> {
    let dir = std::env::var_os("TINYCODE_OPENSHIFT_CRDS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("../shared/openshift-crds"));
    dir.join("routes.route.openshift.io.yaml").is_file().then_some(dir)
}

pub struct Env {
    pub admin_kubeconfig: PathBuf,
    pub operator_kubeconfig: PathBuf,
    pub helm: PathBuf,
    pub kubectl: PathBuf,
    pub work: tempfile::TempDir,
    pub run_id: String,
    pub real_openshift_schemas: bool,
    /// The chart the operator runs with (an operator upgrade is played by a changed copy).
    pub chart: PathBuf,
    /// Settings (environment) the next operator start adds to the suite's.
    pub extra_env: Vec<(String, String)>,
    /// A bearer token of a ServiceAccount bound to the metrics-reader
    /// ClusterRole: what [`metrics_get`] sends.
    pub metrics_token: String,
    operator: Option<Child>,
}

impl Env {
    /// Starts (or reuses) the control plane and installs everything.
    pub async fn setup() -> Result<Env, String> {
        operator_bin()?;
        let script = repo_root().join("hack/local-cluster.sh");
        let tools = Command::new("bash")
            .arg(&script)
            .arg("tools")
            .stderr(Stdio::inherit())
            .output()
            .ctx("run hack/local-cluster.sh tools")?;
        if !tools.status.success() {
            return Err("hack/local-cluster.sh tools failed (see above)".into());
        }
        let tools = String::from_utf8_lossy(&tools.stdout).to_string();
        let helm = tools
            .lines()
            .find_map(|l| l.strip_prefix("TINYCODE_HELM="))
            .map(PathBuf::from)
            .ok_or("hack/local-cluster.sh tools printed no TINYCODE_HELM")?;
        let kubectl = tools
            .lines()
            .find_map(|l| l.strip_prefix("TINYCODE_KUBECTL="))
            .map(PathBuf::from)
            .ok_or("hack/local-cluster.sh tools printed no TINYCODE_KUBECTL")?;
        let start = Command::new("bash")
            .arg(&script)
            .arg("start")
            .stderr(Stdio::inherit())
            .output()
            .ctx("run hack/local-cluster.sh start")?;
        if !start.status.success() {
            return Err("hack/local-cluster.sh start failed (see above)".into());
        }
        let out = String::from_utf8_lossy(&start.stdout).to_string();
        let admin_kubeconfig = out
            .lines()
            .rev()
            .find_map(|l| l.strip_prefix("export KUBECONFIG="))
            .map(PathBuf::from)
            .ok_or("hack/local-cluster.sh start printed no KUBECONFIG line")?;
        // SAFETY: set before any other thread reads the environment.
        unsafe { std::env::set_var("KUBECONFIG", &admin_kubeconfig) };

        let work = tempfile::Builder::new().prefix("tinycode-e2e-").tempdir().ctx("temp dir")?;
        let client = Client::try_default().await.ctx("admin client")?;
        let crds = openshift_crds_dir();
        devcluster::install_openshift_apis(&client, crds.as_deref()).await.ctx("install OpenShift APIs")?;
        // The operator is installed as a cluster-admin would: by hack/install.sh,
        // so every scenario runs under exactly the RBAC that script applies.
        run_script(&kubectl, &admin_kubeconfig, "install.sh", &["--no-wait", "--image", LOCAL_IMAGE])?;
        devcluster::aggregate_cluster_roles(&client).await.ctx("aggregate cluster roles")?;
        let operator_kubeconfig = work.path().join("operator.kubeconfig");
        devcluster::write_operator_kubeconfig(&client, &admin_kubeconfig, &operator_kubeconfig)
            .await
            .ctx("operator kubeconfig")?;
        let metrics_token = metrics_scraper_token(&kubectl, &admin_kubeconfig, &client).await?;
        let run_id = format!("{:04x}", std::process::id() % 0xffff);
        let _ = std::fs::remove_file(repo_root().join("target/e2e-operator.log"));
        Ok(Env {
            admin_kubeconfig,
            operator_kubeconfig,
            helm,
            kubectl,
            work,
            run_id,
            real_openshift_schemas: crds.is_some(),
            chart: repo_root().join("helm-charts/tinycode"),
            extra_env: Vec::new(),
            metrics_token,
            operator: None,
        })
    }

    pub async fn client(&self) -> Client {
        Client::try_default().await.expect("admin client")
    }

    /// A client acting as `user` (impersonated by the admin, `kubectl --as user`).
    pub async fn client_as(&self, user: &str) -> Client {
        let mut config = kube::Config::infer().await.expect("admin config");
        config.auth_info.impersonate = Some(user.to_string());
        Client::try_from(config).expect("impersonating client")
    }

    /// Prepares a namespace with hack/prepare-namespace.sh, as a cluster-admin would.
    pub fn prepare_with_script(&self, ns: &str) -> TestResult {
        run_script(&self.kubectl, &self.admin_kubeconfig, "prepare-namespace.sh", &[ns]).map(drop)
    }

    /// `kubectl` as the cluster admin (for labels and annotations, as an admin types them).
    pub fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new(&self.kubectl)
            .args(args)
            .env("KUBECONFIG", &self.admin_kubeconfig)
            .output()
            .ctx("run kubectl")?;
        if !out.status.success() {
            return Err(format!("kubectl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Namespace name unique to this run.
    pub fn ns(&self, base: &str) -> String {
        format!("e2e-{base}-{}", self.run_id)
    }

    /// Starts an operator process as the operator's ServiceAccount.
    pub fn spawn_operator(&self, helm: &Path, identity: &str, ports: (u16, u16), log: &Path) -> Result<Child, String> {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(log).ctx("operator log")?;
        Command::new(operator_bin()?)
            .arg("run")
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("KUBECONFIG", &self.operator_kubeconfig)
            .env("HELM_BIN", helm)
            .env("HELM_CHART_PATH", &self.chart)
            // view, and a role of the scenario that changes an approved role.
            .env("TINYCODE_ALLOWED_CLUSTER_ROLES", format!("view,{}", e2e_reader_role()))
            // Three helm failures per rendering before Stalled keeps the stall scenario short.
            .env("TINYCODE_MAX_RETRIES", "3")
            .env("TINYCODE_BLOCKED_REQUEUE_SECONDS", "2")
            .env("TINYCODE_LEASE_DURATION_SECONDS", "6")
            // vLLM stand-ins run on loopback in these tests; production keeps this off.
            .env("TINYCODE_VLLM_ALLOW_LOOPBACK", "true")
            // No pod serves an activity report here, and the default address
            // (`<service>.<namespace>.svc`) would be looked up in the machine's
            // resolver, off loopback: a port that refuses, unless a scenario
            // sets its stand-in (idle.rs).
            .env("TINYCODE_ACTIVITY_URL", "http://127.0.0.1:1/{namespace}/{name}")
            // The host directories the samples and scenarios use.
            .env("TINYCODE_HOSTPATH_ALLOWED_PREFIXES", "/srv,/home/developer")
            .env("TINYCODE_HEALTH_ADDR", format!("127.0.0.1:{}", ports.0))
            .env("TINYCODE_METRICS_ADDR", format!("127.0.0.1:{}", ports.1))
            // The relay (starts, sign-in) on a port of its own per process;
            // a scenario that calls it sets its own.
            .env("TINYCODE_OIDC_RELAY_ADDR", "127.0.0.1:0")
            // As in production: /metrics needs a token allowed `get /metrics`
            // (TokenReview + SubjectAccessReview, with the operator's own RBAC).
            .env("TINYCODE_METRICS_AUTH", "rbac")
            .env("POD_NAME", identity)
            .envs(self.extra_env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .env("RUST_LOG", "info,tinycode_operator=debug,kube=warn")
            .env("NO_COLOR", "1")
            .stdout(log.try_clone().ctx("log")?)
            .stderr(log)
            .process_group(0)
            .spawn()
            .ctx("start the operator")
    }

    /// Starts the main operator (identity e2e-operator-a) with `helm` as its helm.
    pub fn start_operator_with(&mut self, helm: &Path) -> TestResult {
        self.stop_operator();
        let mut child = self.spawn_operator(helm, "e2e-operator-a", MAIN_PORTS, &self.operator_log())?;
        // Ready means leader and synced: scenarios start against a working operator.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().ctx("wait")? {
                return Err(format!("the operator exited at start-up ({status}):\n{}", self.operator_log_tail()));
            }
            let ready = std::net::TcpStream::connect(("127.0.0.1", MAIN_PORTS.0)).ok().and_then(|mut s| {
                use std::io::{Read, Write};
                s.write_all(b"GET /readyz HTTP/1.0\r\n\r\n").ok()?;
                let mut buf = String::new();
                s.read_to_string(&mut buf).ok()?;
                Some(
                    buf.split_whitespace().nth(1) == Some("200")
                        && buf.ends_with("ready\n")
                        && !buf.contains("standing by"),
                )
            });
            if ready == Some(true) {
                break;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                return Err(format!("the operator was not ready within 60 s:\n{}", self.operator_log_tail()));
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        self.operator = Some(child);
        Ok(())
    }

    /// Sends SIGTERM to the operator process alone (as the kubelet does) and waits for it to exit.
    pub fn terminate_operator(&mut self, within: Duration) -> Result<std::process::ExitStatus, String> {
        let mut child = self.operator.take().ok_or("no operator running")?;
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = child.try_wait().ctx("wait")? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                self.operator = Some(child);
                self.kill_operator();
                return Err(format!("the operator did not exit within {within:?} of SIGTERM"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The main operator's resident memory now and at its peak (VmRSS,
    /// VmHWM), in MiB, read from the process itself.
    pub fn operator_rss_mib(&self) -> Result<(u64, u64), String> {
        let pid = self.operator.as_ref().ok_or("no operator running")?.id();
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ctx("read the operator's status")?;
        let kib = |field: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(field))
                .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
                .ok_or(format!("no {field} in /proc/{pid}/status"))
        };
        Ok((kib("VmRSS:")? / 1024, kib("VmHWM:")? / 1024))
    }

    pub fn start_operator(&mut self) -> TestResult {
        let helm = self.helm.clone();
        self.start_operator_with(&helm)
    }

    /// Kills the operator and everything it started (helm), as a pod's end would.
    pub fn kill_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", child.id())]).status();
            let _ = child.wait();
        }
    }

    pub fn stop_operator(&mut self) {
        if let Some(mut child) = self.operator.take() {
            let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", child.id())]).status();
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            self.operator = Some(child);
            self.kill_operator();
        }
    }

    /// Kept after the run (under target/) so a failure can be read in full.
    pub fn operator_log(&self) -> PathBuf {
        repo_root().join("target/e2e-operator.log")
    }

    pub fn operator_log_tail(&self) -> String {
        let text = std::fs::read_to_string(self.operator_log()).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(40)..].join("\n")
    }

    /// Helm, run as the cluster admin, for assertions on releases.
    pub fn helm_json(&self, args: &[&str]) -> Result<serde_json::Value, String> {
        let out = Command::new(&self.helm)
            .args(args)
            .args(["-o", "json"])
            .env("KUBECONFIG", &self.admin_kubeconfig)
            .env("HELM_CACHE_HOME", self.work.path().join("helm-cache"))
            .env("HELM_CONFIG_HOME", self.work.path().join("helm-config"))
            .env("HELM_DATA_HOME", self.work.path().join("helm-data"))
            .output()
            .ctx("run helm")?;
        if !out.status.success() {
            return Err(format!("helm {args:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
        }
        serde_json::from_slice(&out.stdout).ctx("helm json")
    }

    /// The release's revision and status, or None when helm has no such release.
    /// Every release lives in the operator's namespace.
    pub fn release(&self, release: &str) -> Result<Option<(i64, String)>, String> {
        let filter = format!("^{}$", release.replace('.', "\\."));
        let list = self.helm_json(&["list", "-n", OPERATOR_NAMESPACE, "-a", "--filter", &filter])?;
        Ok(list.as_array().and_then(|a| a.first()).map(|r| {
            let rev = r["revision"].as_str().and_then(|s| s.parse().ok()).or(r["revision"].as_i64()).unwrap_or(0);
            (rev, r["status"].as_str().unwrap_or_default().to_string())
        }))
    }

    /// Waits until no helm release record in the operator's namespace has
    /// changed for `seconds` (two minutes at most). An operator restarted
    /// with other settings re-renders every instance earlier scenarios left;
    /// the next scenario's "nothing outside the namespace changed" must not
    /// see the tail of that (CI run 27 did).
    pub async fn records_quiet(&self, seconds: u32) -> TestResult {
        use kube::api::ListParams;
        let secrets: Api<Secret> = Api::namespaced(self.client().await, OPERATOR_NAMESPACE);
        let helm = ListParams::default().labels("owner=helm");
        let deadline = Instant::now() + Duration::from_secs(120);
        let (mut last, mut still) = (None, 0);
        while still < seconds {
            ensure(Instant::now() < deadline, "helm records still changing after two minutes")?;
            tokio::time::sleep(Duration::from_secs(1)).await;
            let list = secrets.list_metadata(&helm).await.ctx("list helm records")?;
            let now: Vec<_> = list.items.into_iter().map(|s| (s.metadata.name, s.metadata.resource_version)).collect();
            still = if last.as_ref() == Some(&now) { still + 1 } else { 0 };
            last = Some(now);
        }
        Ok(())
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        self.stop_operator();
    }
}

/// A ClusterRole a scenario creates and a cluster-admin allows (besides view).
pub fn e2e_reader_role() -> &'static str {
    "e2e-services-reader"
}

/// Runs one of the hack/ scripts as the cluster admin; its output on failure.
/// The image `make image` builds: what the manager Deployment names (the
/// scenarios run the operator binary itself; tools/tests/install.rs runs the image).
pub const LOCAL_IMAGE: &str = concat!("localhost/tinycode-operator:", env!("CARGO_PKG_VERSION"));

pub fn run_script(kubectl: &Path, kubeconfig: &Path, script: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack").join(script))
        .args(args)
        .env("KUBECTL", kubectl)
        .env("KUBECONFIG", kubeconfig)
        .env("INSTALL_WAIT", "false")
        .stdin(Stdio::null())
        .output()
        .ctx(&format!("run hack/{script}"))?;
    if !out.status.success() {
        return Err(format!(
            "hack/{script} {args:?} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Polls `check` until it returns Ok(Some(v)) or the time is up.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> Result<T, String>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, String>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_err = String::new();
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = e,
        }
        if Instant::now() > deadline {
            return Err(format!(
                "timed out after {timeout:?} waiting for {what}{}",
                if last_err.is_empty() { String::new() } else { format!(" (last error: {last_err})") }
            ));
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

pub const WAIT: Duration = Duration::from_secs(60);

/// Applies a TinycodeInstance from JSON as the user would (`oc apply`).
pub async fn apply_instance(
    client: &Client,
    ns: &str,
    name: &str,
    spec: serde_json::Value,
) -> Result<TinycodeInstance, kube::Error> {
    let api: Api<TinycodeInstance> = Api::namespaced(client.clone(), ns);
    let obj = json!({"apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance", "metadata": {"name": name, "namespace": ns}, "spec": spec});
    api.patch(name, &PatchParams::apply("e2e-user").force(), &Patch::Apply(&obj)).await
}

pub async fn get_instance(client: &Client, ns: &str, name: &str) -> Result<Option<TinycodeInstance>, String> {
    Api::<TinycodeInstance>::namespaced(client.clone(), ns).get_opt(name).await.ctx("get instance")
}

/// Waits until the instance's status reports `phase` for its current generation.
pub async fn wait_phase(client: &Client, ns: &str, name: &str, phase: &str) -> Result<TinycodeInstance, String> {
    wait_for(&format!("{ns}/{name} to be {phase}"), WAIT, || async {
        let Some(inst) = get_instance(client, ns, name).await? else { return Ok(None) };
        let st = inst.status.clone().unwrap_or_default();
        let current = st.observed_generation == inst.metadata.generation;
        Ok((current && st.phase.map(|p| p.as_str()) == Some(phase)).then_some(inst))
    })
    .await
}

/// The Ready condition's (status, reason, message).
pub fn ready(inst: &TinycodeInstance) -> (String, String, String) {
    inst.status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

/// Plays the kubelet: reports the Deployment's current generation as rolled out.
pub async fn mark_available(client: &Client, ns: &str, deployment: &str) -> TestResult {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("Deployment {ns}/{deployment}"), WAIT, || async {
        api.get_opt(deployment).await.ctx("get deployment")
    })
    .await?;
    devcluster::mark_deployment_available(client, ns, deployment)
        .await
        .map_err(|e| format!("mark deployment available: {e}"))
}

/// Plays the OpenShift router: admits the Route under `host`.
pub async fn admit_route(client: &Client, ns: &str, route: &str, host: &str) -> TestResult {
    let api: Api<Route> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("Route {ns}/{route}"), WAIT, || async { api.get_opt(route).await.ctx("get route") }).await?;
    devcluster::admit_route(client, ns, route, host).await.map_err(|e| format!("admit route: {e}"))
}

/// Plays the kubelet for an instance's tinycode and its front (every
/// instance has one: the operator runs with --front=true).
pub async fn mark_workloads(c: &Client, ns: &str, name: &str) -> TestResult {
    use tinycode_operator::api::naming;
    mark_available(c, ns, &naming::fullname(name)).await?;
    mark_available(c, ns, &naming::front(name)).await
}

/// Plays the kubelet and the router for an instance, then waits for Running.
/// As a kubelet would, it reports a Deployment again when a later rollout
/// (an upgrade the operator makes right after the install, say) gives it a
/// new generation while it waits (CI run 34).
pub async fn run_to_running(c: &Client, ns: &str, name: &str) -> Result<TinycodeInstance, String> {
    use tinycode_operator::api::naming;
    mark_workloads(c, ns, name).await?;
    // A bundled Ollama's readiness is the instance's too.
    let inst = Api::<TinycodeInstance>::namespaced(c.clone(), ns).get(name).await.ctx("get the instance")?;
    // The egress proxy's, where the class limits egress (absent otherwise).
    let mut deployments = vec![naming::fullname(name), naming::front(name), naming::egress(name)];
    if inst.spec.ollama.enabled {
        mark_available(c, ns, &naming::ollama(name)).await?;
        deployments.push(naming::ollama(name));
    }
    admit_route(c, ns, &naming::route(name), &format!("{name}-{ns}.apps.local.test")).await?;
    let api: Api<Deployment> = Api::namespaced(c.clone(), ns);
    wait_for(&format!("{ns}/{name} to be Running"), WAIT, || async {
        for d in &deployments {
            let Some(live) = api.get_opt(d).await.ctx("get deployment")? else { continue };
            let seen = live.status.as_ref().and_then(|s| s.observed_generation);
            if seen < live.metadata.generation {
                devcluster::mark_deployment_available(c, ns, d)
                    .await
                    .map_err(|e| format!("mark {d} available: {e}"))?;
            }
        }
        let Some(inst) = get_instance(c, ns, name).await? else { return Ok(None) };
        let st = inst.status.clone().unwrap_or_default();
        let current = st.observed_generation == inst.metadata.generation;
        Ok((current && st.phase.map(|p| p.as_str()) == Some("Running")).then_some(inst))
    })
    .await
}

pub async fn prepare(client: &Client, ns: &str) -> TestResult {
    devcluster::prepare_namespace(client, ns, Some("e2e-password")).await.ctx("prepare namespace")
}

pub async fn secret_exists(client: &Client, ns: &str, name: &str) -> Result<bool, String> {
    Ok(Api::<Secret>::namespaced(client.clone(), ns).get_opt(name).await.ctx("get secret")?.is_some())
}

pub fn ensure(cond: bool, msg: impl Into<String>) -> TestResult {
    if cond { Ok(()) } else { Err(msg.into()) }
}

pub fn ensure_eq<T: PartialEq + std::fmt::Debug>(got: T, want: T, what: &str) -> TestResult {
    if got == want { Ok(()) } else { Err(format!("{what}: got {got:?}, want {want:?}")) }
}

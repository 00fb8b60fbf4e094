//! Runs the `helm` binary: an argument vector (never a shell), values in a
//! private temp file (0600, removed afterwards), a bounded run time, and stderr
//! captured for the status message.
//!
//! `--wait` is never used: readiness comes from the Deployment's status, so a
//! reconcile worker is busy for seconds, not minutes.
//!
//! Releases are stored in the operator's own namespace (`--namespace`), never
//! in the instance namespace: a tenant can write Secrets there, and a forged
//! release record would make helm delete objects it lists or run hooks it
//! holds with the operator's rights. Every template names its objects'
//! namespace itself. `--no-hooks` on every action: the chart has none, so a
//! hook can only come from a record nobody should trust.
//!
//! Every install and upgrade labels its release record with a mark random to this
//! process (`--labels`, [`crate::helm::release::WRITER_LABEL`]), so a pending record
//! this process left behind is told from one another replica may still be
//! writing ([`crate::helm::release::may_discard_pending`]).

pub mod api_proxy;
pub(crate) mod digest;
pub(crate) mod manifest;
pub(crate) mod release;
pub(crate) mod remediation;
pub(crate) mod version;

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::process::Command;
use tokio::sync::watch;

use crate::ops::metrics::Metrics;
use crate::render::values::Values;

/// Label selector of helm's release records (one Secret per revision).
pub const RECORDS_SELECTOR: &str = "owner=helm";

/// Label selector of the records of one release.
pub fn record_selector(release: &str) -> String {
    format!("{RECORDS_SELECTOR},name={release}")
}

/// Longest stderr excerpt kept for status messages.
const STDERR_KEEP: usize = 600;
/// Revisions Helm keeps per release (each is a Secret in the namespace).
const HISTORY_MAX: &str = "5";
/// Checks `helm install` and `helm upgrade` would repeat on every run although the operator
/// already guarantees what they check; each costs helm CPU on every run (measured:
/// docs/benchmarks.md, "Helm's flags and environment").
const APPLY_SKIPS: [&str; 2] = [
    // The apiserver validates fields itself (Kubernetes >= 1.27): helm's
    // "OpenAPI validation" only downloads every API group's documents to learn
    // that, and then checks nothing.
    "--disable-openapi-validation",
    // The values come from `crate::render::values::Values`, the type the
    // chart's values.schema.json is generated from; tests/chart.rs keeps
    // checking the schema against what the operator emits.
    "--skip-schema-validation",
];
/// GOGC for helm: a helm run lives well under a second, so collecting its
/// garbage is wasted work; the peak RSS this costs stays below that of a run
/// before the skips (measured: docs/benchmarks.md, "Helm's flags and environment").
const HELM_GOGC: &str = "400";
/// GOMAXPROCS for helm: one thread runs its Go code. Up to `--concurrency`
/// helm processes run at once on a few cores, so a second one per process only
/// adds the garbage collector's idle-time marking and the scheduling between
/// the two (measured: docs/benchmarks.md, "Helm's flags and environment").
const HELM_GOMAXPROCS: &str = "1";
/// The message locale of helm: at start-up helm loads kubectl's message catalog
/// for it, which it never prints from, and the French one is far smaller than
/// the default English one (measured: docs/benchmarks.md, "Helm's flags and
/// environment"). No decision reads helm's messages (failed installs and
/// uninstalls are judged by the release records), so their language cannot
/// change one; the e2e install-race test runs the fallback under this locale.
const HELM_MESSAGES_LOCALE: &str = "fr_FR.UTF-8";

#[derive(Debug, thiserror::Error)]
pub enum HelmError {
    #[error("could not start helm ({bin}): {source}; set HELM_BIN or put helm 3 on PATH")]
    Spawn { bin: String, source: std::io::Error },
    #[error("could not write the values file: {0}")]
    ValuesFile(std::io::Error),
    #[error("helm {action} did not finish within {timeout:?} and was stopped")]
    Timeout { action: &'static str, timeout: Duration },
    #[error("helm {action} failed: {stderr}")]
    Failed { action: &'static str, stderr: String },
    #[error("helm {action} was interrupted because the operator is shutting down")]
    Cancelled { action: &'static str },
}

/// How a release is applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// No record of the release exists: `helm install`, which looks the
    /// release up once where `upgrade --install` looks twice (one LIST of the
    /// operator namespace's release records fewer per new instance).
    Install,
    /// `helm upgrade --install`.
    Upgrade,
    /// `helm upgrade --install --take-ownership`: adopts the objects of a
    /// release an earlier build kept in the instance namespace.
    Adopt,
}

impl Mode {
    /// The metrics' `action` label.
    fn action(self) -> &'static str {
        match self {
            Mode::Install => "install",
            Mode::Upgrade | Mode::Adopt => "upgrade",
        }
    }
}

/// Whether a failed `helm install` met a release that existed before it
/// (helm refuses to re-use the name and writes nothing), judged by the
/// records' labels: anything but the single failed first revision a failed
/// install leaves behind. A lone failed revision 1 may be either; the next
/// reconcile sees it and upgrades.
fn install_met_a_release(records: &[BTreeMap<String, String>]) -> bool {
    let own_failure = |l: &BTreeMap<String, String>| {
        l.get("status").map(String::as_str) == Some("failed") && l.get("version").map(String::as_str) == Some("1")
    };
    match records {
        [] => false,
        [only] => !own_failure(only),
        _ => true,
    }
}

/// Result of a successful install or upgrade.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Applied {
    pub revision: i64,
    /// The objects the revision rendered, from helm's own output (None when
    /// it could not be read): the record need not be fetched to learn them.
    pub rendered: Option<Vec<manifest::ObjectRef>>,
}

/// Runs helm for the controller; shared by all workers.
#[derive(Clone)]
pub struct Helm {
    bin: PathBuf,
    chart: PathBuf,
    timeout: Duration,
    home: Arc<tempfile::TempDir>,
    running: Arc<Mutex<HashSet<String>>>,
    shutdown: watch::Receiver<bool>,
    metrics: Arc<Metrics>,
    /// Random per process; every record this process's upgrades write carries
    /// it in the label [`crate::helm::release::WRITER_LABEL`].
    writer: Arc<str>,
    /// Reads release records after a failed install or uninstall, to decide
    /// from them (never from helm's message text) what the failure meant.
    records: Option<kube::Client>,
    /// The listener helm reaches the apiserver through (its URL, token
    /// included, in helm's environment), which also clears its token from
    /// helm's messages; without it helm finds the cluster as the operator did
    /// (its environment or the pod's).
    proxy: Option<api_proxy::ApiProxy>,
}

/// Files of the chart that never reach a release: helm stores the whole chart
/// it installs in every revision's record (gzip at its best compression, on
/// each of the two or three record writes of a run), and neither of these is
/// read when the operator runs it. `values.schema.json` is skipped
/// (`--skip-schema-validation`) and was a quarter of each record; `ci/` is
/// helm-ignored, so helm would read its files only to drop them. Measured:
/// docs/benchmarks.md, "Helm's flags and environment".
const NOT_INSTALLED: [&str; 2] = ["values.schema.json", "ci"];

/// Copies the chart at `from` to `to` without [`NOT_INSTALLED`], its
/// templates without the text of their comments ([`without_comments`]), and
/// returns `to`; the chart's digest is still taken of `from`
/// (`digest::chart_digest`). A `from` that is no directory is returned as it
/// is: `run` refuses a missing chart before helm is set up, and helm names
/// the path it cannot load.
pub fn installed_copy(from: &std::path::Path, to: &std::path::Path) -> std::io::Result<PathBuf> {
    if !from.is_dir() {
        return Ok(from.to_path_buf());
    }
    fn copy_tree(from: &std::path::Path, to: &std::path::Path, top: bool, templates: bool) -> std::io::Result<()> {
        std::fs::create_dir_all(to)?;
        for entry in std::fs::read_dir(from)? {
            let entry = entry?;
            let name = entry.file_name();
            if top && NOT_INSTALLED.iter().any(|n| name == *n) {
                continue;
            }
            if entry.file_type()?.is_dir() {
                copy_tree(&entry.path(), &to.join(&name), false, templates || (top && name == "templates"))?;
            } else if templates {
                let text = std::fs::read(entry.path())?;
                match String::from_utf8(text) {
                    Ok(text) => std::fs::write(to.join(&name), without_comments(&text))?,
                    Err(e) => std::fs::write(to.join(&name), e.into_bytes())?,
                }
            } else {
                std::fs::copy(entry.path(), to.join(&name))?;
            }
        }
        Ok(())
    }
    copy_tree(from, to, true, false)?;
    Ok(to.to_path_buf())
}

/// A template with every comment action (`{{/* ... */}}`, with or without
/// trim markers) emptied to `{{/**/}}`, its trim markers kept, so it renders
/// exactly as before. The comments explain the chart to its readers and were
/// a fifth of the templates' text, which helm keeps in every release record
/// and compresses on every record write. `tests/chart.rs` renders every `ci/`
/// scenario from the chart and from the copy and compares them byte for byte.
pub fn without_comments(template: &str) -> String {
    // Go's text/template: a comment begins right after `{{` or `{{- ` and ends
    // at the first `*/`, which `}}` or ` -}}` must follow.
    static COMMENT: std::sync::LazyLock<regex::Regex> = std::sync::LazyLock::new(|| {
        regex::Regex::new(r"\{\{(-[ \t\r\n])?/\*(?s:.*?)\*/([ \t\r\n]-)?\}\}").expect("a valid pattern")
    });
    COMMENT
        .replace_all(template, |c: &regex::Captures| {
            let left = if c.get(1).is_some() { "- " } else { "" };
            let right = if c.get(2).is_some() { " -" } else { "" };
            format!("{{{{{left}/**/{right}}}}}")
        })
        .into_owned()
}

/// Marks a release busy for as long as it lives.
struct RunningGuard {
    key: String,
    running: Arc<Mutex<HashSet<String>>>,
}

impl Drop for RunningGuard {
    fn drop(&mut self) {
        self.running.lock().expect("lock").remove(&self.key);
    }
}

impl Helm {
    /// `shutdown` turning true interrupts running helm processes with SIGTERM,
    /// which helm answers by marking the release failed rather than leaving it pending.
    pub fn new(
        bin: PathBuf,
        chart: PathBuf,
        timeout: Duration,
        shutdown: watch::Receiver<bool>,
        metrics: Arc<Metrics>,
    ) -> std::io::Result<Self> {
        // Helm wants writable cache/config dirs; the manager's root filesystem is read-only.
        // One home for all runs. It saves no work any more (hack/helm-cost.sh: a
        // fresh home per run costs the same): helm invalidates the discovery cache
        // in it on every run, and only the OpenAPI documents that
        // --disable-openapi-validation no longer fetches came from its HTTP cache.
        let home = tempfile::Builder::new().prefix("tinycode-helm-").tempdir()?;
        let chart = installed_copy(&chart, &home.path().join("chart"))?;
        let writer = crate::render::secret::random_password(20).map_err(std::io::Error::other)?.into();
        Ok(Self {
            bin,
            chart,
            timeout,
            home: Arc::new(home),
            running: Arc::default(),
            shutdown,
            metrics,
            writer,
            records: None,
            proxy: None,
        })
    }

    /// Lets failed installs and uninstalls be judged by the release records
    /// (without it, each failure is returned as it is).
    pub fn with_record_lookup(mut self, client: kube::Client) -> Self {
        self.records = Some(client);
        self
    }

    /// Sends helm's requests through `proxy`. helm is told its URL in
    /// `HELM_KUBEAPISERVER`, not in a kubeconfig: client-go parses a kubeconfig
    /// several times a run (3-6% of a run's CPU, docs/benchmarks.md), and a
    /// process's environment is as private as a 0600 file (readable by its
    /// own user only), where a command-line flag would not be.
    pub fn through(mut self, proxy: &api_proxy::ApiProxy) -> Self {
        self.proxy = Some(proxy.clone());
        self
    }

    /// The labels of the release's records (helm's `status`, `version`, ...),
    /// or None when they could not be read.
    async fn record_labels(&self, namespace: &str, release: &str) -> Option<Vec<BTreeMap<String, String>>> {
        let client = self.records.clone()?;
        let api: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::namespaced(client, namespace);
        let lp = kube::api::ListParams::default().labels(&record_selector(release));
        let list = api.list_metadata(&lp).await.ok()?;
        Some(list.items.into_iter().map(|m| m.metadata.labels.unwrap_or_default()).collect())
    }

    /// This process's mark on the release records it writes.
    pub fn writer(&self) -> &str {
        &self.writer
    }

    /// Whether this process is running helm for the release right now.
    pub fn is_running(&self, namespace: &str, release: &str) -> bool {
        self.running.lock().expect("lock").contains(&format!("{namespace}/{release}"))
    }

    /// Installs or upgrades the release stored in `storage_namespace`, as
    /// `mode` says.
    pub async fn apply(
        &self,
        release: &str,
        storage_namespace: &str,
        values: &Values,
        mode: Mode,
    ) -> Result<Applied, HelmError> {
        let namespace = storage_namespace;
        let mut file = tempfile::Builder::new()
            .prefix("tinycode-values-")
            .suffix(".json")
            .tempfile_in(self.home.path())
            .map_err(HelmError::ValuesFile)?;
        serde_json::to_writer(&mut file, values).map_err(|e| HelmError::ValuesFile(e.into()))?;
        file.flush().map_err(HelmError::ValuesFile)?;
        let values_path = file.path().to_string_lossy().into_owned();
        let chart = self.chart.to_string_lossy().into_owned();
        let writer = format!("{}={}", crate::helm::release::WRITER_LABEL, self.writer);
        let args = apply_args(mode, release, &chart, namespace, &values_path, &writer);
        let stdout = match self.run(mode.action(), namespace, release, &args).await {
            Err(e @ HelmError::Failed { .. }) if mode == Mode::Install => {
                // A record the operator's watch had not shown yet: upgrade it.
                let labels = self.record_labels(namespace, release).await.unwrap_or_default();
                if !install_met_a_release(&labels) {
                    return Err(e);
                }
                let args = apply_args(Mode::Upgrade, release, &chart, namespace, &values_path, &writer);
                self.run(Mode::Upgrade.action(), namespace, release, &args).await?
            }
            other => other?,
        };
        drop(file);
        Ok(applied(&stdout))
    }

    /// What `helm version --short` prints (checked by [`version::check`]).
    pub async fn version(&self) -> Result<String, HelmError> {
        let action = "version";
        let run = self.command(&["version", "--short"]).output();
        let out = tokio::time::timeout(self.timeout, run)
            .await
            .map_err(|_| HelmError::Timeout { action, timeout: self.timeout })?
            .map_err(|source| HelmError::Spawn { bin: self.bin.display().to_string(), source })?;
        if !out.status.success() {
            return Err(HelmError::Failed { action, stderr: excerpt(&String::from_utf8_lossy(&out.stderr)) });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Rolls a release back to `revision` (a new revision with its manifest).
    pub async fn rollback(&self, release: &str, storage_namespace: &str, revision: i64) -> Result<(), HelmError> {
        let revision = revision.to_string();
        let args = ["rollback", release, &revision, "--namespace", storage_namespace, "--no-hooks"];
        self.run("rollback", storage_namespace, release, &args).await.map(drop)
    }

    /// Uninstalls a release stored in `storage_namespace`; one that does not
    /// exist counts as uninstalled.
    pub async fn uninstall(&self, release: &str, storage_namespace: &str) -> Result<(), HelmError> {
        let namespace = storage_namespace;
        let args = ["uninstall", release, "--namespace", namespace, "--no-hooks"];
        match self.run("uninstall", namespace, release, &args).await {
            // No record left: nothing to uninstall (helm says "not found").
            Err(e @ HelmError::Failed { .. }) => match self.record_labels(namespace, release).await {
                Some(records) if records.is_empty() => Ok(()),
                _ => Err(e),
            },
            other => other.map(drop),
        }
    }

    async fn run(
        &self,
        action: &'static str,
        namespace: &str,
        release: &str,
        args: &[&str],
    ) -> Result<Vec<u8>, HelmError> {
        let _guard = self.mark_running(namespace, release);
        let mut cmd = self.command(args);
        let started = Instant::now();
        let mut child =
            cmd.spawn().map_err(|source| HelmError::Spawn { bin: self.bin.display().to_string(), source })?;
        let out_task = tokio::spawn(read_all(child.stdout.take().expect("piped stdout")));
        let err_task = tokio::spawn(read_all(child.stderr.take().expect("piped stderr")));
        let mut shutdown = self.shutdown.clone();
        let status = tokio::select! {
            status = child.wait() => status.map_err(|source| HelmError::Spawn { bin: self.bin.display().to_string(), source })?,
            _ = tokio::time::sleep(self.timeout) => {
                let _ = child.kill().await;
                self.metrics.helm(action, false, started.elapsed());
                return Err(HelmError::Timeout { action, timeout: self.timeout });
            }
            _ = async { let _ = shutdown.wait_for(|stop| *stop).await; } => {
                // SIGTERM lets helm record the release as failed instead of pending.
                if let Some(pid) = child.id() {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGTERM);
                }
                if tokio::time::timeout(Duration::from_secs(20), child.wait()).await.is_err() {
                    let _ = child.kill().await;
                }
                tracing::warn!(action, namespace, release, "helm interrupted by shutdown");
                self.metrics.helm(action, false, started.elapsed());
                return Err(HelmError::Cancelled { action });
            }
        };
        let stdout = out_task.await.unwrap_or_default();
        let stderr = err_task.await.unwrap_or_default();
        let elapsed = started.elapsed();
        self.metrics.helm(action, status.success(), elapsed);
        let (elapsed_ms, ok) = (elapsed.as_millis() as u64, status.success());
        tracing::debug!(action, namespace, release, elapsed_ms, ok, "helm finished");
        if status.success() {
            Ok(stdout)
        } else {
            let stderr = String::from_utf8_lossy(&stderr);
            let stderr = match &self.proxy {
                Some(proxy) => proxy.redact(&stderr),
                None => stderr.into_owned(),
            };
            Err(HelmError::Failed { action, stderr: excerpt(&stderr) })
        }
    }

    /// helm with `args`, in the operator's helm home, with only the
    /// environment it needs to reach the cluster.
    fn command(&self, args: &[&str]) -> Command {
        let home = self.home.path();
        let mut cmd = Command::new(&self.bin);
        cmd.args(args)
            .env_clear()
            .env("HOME", home)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("GOGC", HELM_GOGC)
            .env("GOMAXPROCS", HELM_GOMAXPROCS)
            .env("LC_MESSAGES", HELM_MESSAGES_LOCALE)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        let cluster: &[&str] = match &self.proxy {
            Some(proxy) => {
                cmd.env("HELM_KUBEAPISERVER", proxy.server());
                &[]
            }
            None => &["KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"],
        };
        for key in ["PATH", "TMPDIR"].iter().chain(cluster) {
            if let Some(v) = std::env::var_os(key) {
                cmd.env(key, v);
            }
        }
        cmd
    }

    fn mark_running(&self, namespace: &str, release: &str) -> RunningGuard {
        let key = format!("{namespace}/{release}");
        self.running.lock().expect("lock").insert(key.clone());
        RunningGuard { key, running: self.running.clone() }
    }
}

/// What `helm install|upgrade --output json` printed: the release, manifest included.
fn applied(stdout: &[u8]) -> Applied {
    #[derive(serde::Deserialize)]
    struct Printed {
        #[serde(default)]
        version: i64,
        manifest: Option<String>,
    }
    match serde_json::from_slice::<Printed>(stdout) {
        Ok(p) => {
            Applied { revision: p.version, rendered: p.manifest.and_then(|m| manifest::objects_from_manifest(&m).ok()) }
        }
        Err(_) => Applied { revision: 0, rendered: None },
    }
}

/// The arguments of helm for applying one release as `mode` says.
fn apply_args<'a>(
    mode: Mode,
    release: &'a str,
    chart: &'a str,
    namespace: &'a str,
    values_path: &'a str,
    writer_label: &'a str,
) -> Vec<&'a str> {
    let mut args = match mode {
        Mode::Install => vec!["install", release, chart],
        Mode::Upgrade | Mode::Adopt => vec!["upgrade", "--install", release, chart, "--history-max", HISTORY_MAX],
    };
    args.extend([
        "--namespace",
        namespace,
        "--values",
        values_path,
        "--no-hooks",
        "--labels",
        writer_label,
        "--output",
        "json",
    ]);
    args.extend(APPLY_SKIPS);
    if mode == Mode::Adopt {
        args.push("--take-ownership");
    }
    args
}

async fn read_all(mut pipe: impl tokio::io::AsyncRead + Unpin) -> Vec<u8> {
    let mut buf = Vec::new();
    let _ = pipe.read_to_end(&mut buf).await;
    buf
}

/// The last lines of helm's stderr, bounded, on one line.
pub fn excerpt(stderr: &str) -> String {
    let text = stderr.split_whitespace().collect::<Vec<_>>().join(" ");
    if text.len() <= STDERR_KEEP {
        return text;
    }
    let mut start = text.len() - STDERR_KEEP;
    while !text.is_char_boundary(start) {
        start += 1;
    }
    format!("...{}", &text[start..])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    /// The install fallback decides from the records' labels, so helm's
    /// message language can never change it.
    #[test]
    fn a_failed_install_upgrades_only_a_release_that_existed_before_it() {
        let record =
            |version: &str, status: &str| labels(&[("owner", "helm"), ("version", version), ("status", status)]);
        assert!(!install_met_a_release(&[]), "no record: the install itself failed before writing one");
        assert!(!install_met_a_release(&[record("1", "failed")]), "the failed first revision the install left");
        assert!(install_met_a_release(&[record("1", "deployed")]));
        assert!(install_met_a_release(&[record("1", "pending-install")]));
        assert!(install_met_a_release(&[record("1", "superseded"), record("2", "failed")]));
        assert!(install_met_a_release(&[record("3", "failed")]));
    }

    /// Comment actions lose their text and keep their trim markers; nothing
    /// else of a template changes, strings that look like comments included.
    #[test]
    fn templates_lose_the_text_of_their_comments_only() {
        let template = "a\n{{- /* one\n two */}}\nb {{/* x */ -}}\n c {{- /* y */ -}} d\n{{/* z */}}\n\
                        {{ \"/* no comment */\" }} {{ include \"t\" . }} {{- /* p */}} {{/* q */}}";
        assert_eq!(
            without_comments(template),
            "a\n{{- /**/}}\nb {{/**/ -}}\n c {{- /**/ -}} d\n{{/**/}}\n\
             {{ \"/* no comment */\" }} {{ include \"t\" . }} {{- /**/}} {{/**/}}"
        );
        assert_eq!(without_comments("{{ .Values.x }}\n"), "{{ .Values.x }}\n");
    }

    #[test]
    fn a_release_records_are_selected_by_helm_s_labels() {
        assert_eq!(record_selector("team-dev"), "owner=helm,name=team-dev");
    }

    #[test]
    fn helm_applies_skip_only_checks_the_operator_guarantees() {
        for mode in [Mode::Install, Mode::Upgrade, Mode::Adopt] {
            let args = apply_args(mode, "tinycode.ns.a", "/chart", "op-ns", "/tmp/v.json", "w=1");
            for pair in
                [["--namespace", "op-ns"], ["--values", "/tmp/v.json"], ["--labels", "w=1"], ["--output", "json"]]
            {
                assert!(args.windows(2).any(|w| w == pair), "{mode:?}: {pair:?} missing from {args:?}");
            }
            for flag in ["--no-hooks", "--disable-openapi-validation", "--skip-schema-validation"] {
                assert!(args.contains(&flag), "{mode:?}: {flag} missing from {args:?}");
            }
            assert!(!args.contains(&"--wait"));
            assert_eq!(args.contains(&"--take-ownership"), mode == Mode::Adopt, "{mode:?}: {args:?}");
        }
        let install = apply_args(Mode::Install, "tinycode.ns.a", "/chart", "op-ns", "/tmp/v.json", "w=1");
        assert_eq!(&install[..3], ["install", "tinycode.ns.a", "/chart"]);
        assert!(!install.contains(&"--history-max"), "helm install has no history to cap");
        let upgrade = apply_args(Mode::Upgrade, "tinycode.ns.a", "/chart", "op-ns", "/tmp/v.json", "w=1");
        assert_eq!(&upgrade[..4], ["upgrade", "--install", "tinycode.ns.a", "/chart"]);
        assert!(upgrade.windows(2).any(|w| w == ["--history-max", HISTORY_MAX]));
    }

    #[test]
    fn helm_output_gives_the_revision_and_what_it_rendered() {
        let manifest = "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: a-tinycode\n  namespace: team\n";
        let printed =
            serde_json::json!({"name": "tinycode.team.a", "version": 4, "namespace": "op", "manifest": manifest});
        let out = applied(printed.to_string().as_bytes());
        assert_eq!(out.revision, 4);
        let rendered = out.rendered.expect("the manifest is read");
        assert_eq!(rendered.iter().map(manifest::ObjectRef::describe).collect::<Vec<_>>(), ["Service team/a-tinycode"]);
        let garbled = applied(b"Release \"x\" has been upgraded");
        assert_eq!((garbled.revision, garbled.rendered), (0, None), "text output yields nothing, not an empty list");
    }

    #[test]
    fn excerpt_keeps_the_tail_on_one_line() {
        assert_eq!(excerpt("Error: boom\n  detail\n"), "Error: boom detail");
        let long = format!("{}END", "x ".repeat(1000));
        let e = excerpt(&long);
        assert!(e.len() <= STDERR_KEEP + 3);
        assert!(e.ends_with("END") && e.starts_with("..."));
    }
}

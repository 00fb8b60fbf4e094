//! What a converged instance costs the API server: nothing while idle, and
//! at most two requests for a reconcile that finds nothing to do. Counted
//! from the apiserver's audit log (hack/local-cluster.sh logs every request
//! of the operator's ServiceAccount, helm's included), not by reading code.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tinycode_operator::api::TinycodeInstance;

use super::deploy;
use crate::harness::*;

/// One audited request of the operator: (verb, resource, namespace, name, URI).
#[derive(Debug, Clone)]
struct Request {
    verb: String,
    resource: String,
    namespace: String,
    name: String,
    uri: String,
}

impl Request {
    fn is_write(&self) -> bool {
        matches!(self.verb.as_str(), "create" | "update" | "patch" | "delete" | "deletecollection")
    }

    /// Whether it concerns the instance `name` in `ns`: objects in its
    /// namespace, or named for it elsewhere (release records, bindings).
    fn concerns(&self, ns: &str) -> bool {
        self.namespace == ns || self.name.contains(ns)
    }
}

fn audit_log(env: &Env) -> Result<PathBuf, String> {
    let path = env.admin_kubeconfig.parent().ok_or("kubeconfig has no directory")?.join("audit.log");
    ensure(
        path.is_file(),
        format!("no audit log at {}: the control plane predates it; run `hack/local-cluster.sh stop`", path.display()),
    )?;
    Ok(path)
}

/// The operator's requests logged after byte `from`, and the new end.
/// Watches (long-running, opened once) and the leader Lease (renewed on a
/// timer, not by reconciles) are left out.
fn requests_since(path: &Path, from: u64) -> Result<(u64, Vec<Request>), String> {
    let text = std::fs::read(path).ctx("read audit log")?;
    let from = (from as usize).min(text.len());
    let mut out = Vec::new();
    for line in String::from_utf8_lossy(&text[from..]).lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
        let s = |p: &str| event.pointer(p).and_then(|v| v.as_str()).unwrap_or_default().to_string();
        let r = Request {
            verb: s("/verb"),
            resource: s("/objectRef/resource"),
            namespace: s("/objectRef/namespace"),
            name: s("/objectRef/name"),
            uri: s("/requestURI"),
        };
        if r.verb == "watch" || r.resource == "leases" {
            continue;
        }
        out.push(r);
    }
    Ok((text.len() as u64, out))
}

/// Waits until the operator made no request concerning `ns` for `quiet`;
/// returns the log offset at that point.
async fn settle(log: &Path, ns: &str, from: u64, quiet: Duration) -> Result<u64, String> {
    let deadline = Instant::now() + Duration::from_secs(90);
    let (mut offset, mut since) = (from, Instant::now());
    while since.elapsed() < quiet {
        ensure(Instant::now() < deadline, format!("the operator kept sending requests for {ns}"))?;
        tokio::time::sleep(Duration::from_millis(250)).await;
        let (end, seen) = requests_since(log, offset)?;
        if seen.iter().any(|r| r.concerns(ns)) {
            since = Instant::now();
        }
        offset = end;
    }
    Ok(offset)
}

/// A new instance's release is looked up once (`helm install`, not
/// `upgrade --install`) and its record never read back (helm's output says
/// what it rendered). A Running instance left alone makes no request and
/// runs no helm; a reconcile woken by an unrelated change of the instance
/// (an annotation) reads at most two objects live and writes nothing.
pub async fn converged_instances_cost_no_requests(env: &mut Env) -> TestResult {
    let c = env.client().await;
    let ns = env.ns("quiet");
    env.prepare_with_script(&ns)?;
    let log = audit_log(env)?;
    let (before, _) = requests_since(&log, 0)?;
    deploy(env, &c, &ns, "dev", json!({})).await?;
    run_to_running(&c, &ns, "dev").await?;
    let (start, _) = requests_since(&log, 0)?;
    let offset = settle(&log, &ns, start, Duration::from_secs(4)).await?;

    let (_, rollout) = requests_since(&log, before)?;
    let release = format!("tinycode.{ns}.dev");
    let lookups: Vec<_> = rollout
        .iter()
        .filter(|r| r.verb == "list" && r.resource == "secrets" && r.uri.contains(&format!("name%3D{release}")))
        .collect();
    ensure_eq(lookups.len(), 1, "LISTs of the new release's records (helm install looks it up once)")?;
    let record_reads: Vec<_> = rollout
        .iter()
        .filter(|r| r.verb == "get" && r.name.starts_with(&format!("sh.helm.release.v1.{release}.")))
        .collect();
    ensure(record_reads.is_empty(), format!("the release record was read back: {record_reads:?}"))?;

    // Idle: no request at all for this instance (a helm run would show as
    // reads and writes of its objects here).
    tokio::time::sleep(Duration::from_secs(15)).await;
    let (offset, idle) = requests_since(&log, offset)?;
    let idle: Vec<_> = idle.into_iter().filter(|r| r.concerns(&ns)).collect();
    ensure(idle.is_empty(), format!("requests while idle: {idle:?}"))?;

    // A no-op reconcile, woken by an annotation nobody acts on. It reads the
    // password Secret live (a rotated password must roll the pods), so its
    // first request shows that it ran.
    let api: Api<TinycodeInstance> = Api::namespaced(c.clone(), &ns);
    let poke = json!({"metadata": {"annotations": {"e2e.tinycode.dev/poke": "1"}}});
    api.patch("dev", &PatchParams::default(), &Patch::Merge(&poke)).await.ctx("annotate")?;
    wait_for("the reconcile the annotation wakes", WAIT, || async {
        let (_, seen) = requests_since(&log, offset)?;
        Ok(seen.iter().any(|r| r.concerns(&ns)).then_some(()))
    })
    .await?;
    settle(&log, &ns, offset, Duration::from_secs(3)).await?;
    let (_, seen) = requests_since(&log, offset)?;
    let mine: Vec<_> = seen.into_iter().filter(|r| r.concerns(&ns)).collect();
    ensure(mine.iter().all(|r| !r.is_write()), format!("writes in a no-op reconcile: {mine:?}"))?;
    ensure(mine.len() <= 2, format!("{} requests in a no-op reconcile (at most 2): {mine:?}", mine.len()))?;
    let inst = get_instance(&c, &ns, "dev").await?.ok_or("instance gone")?;
    ensure_eq(
        inst.status.and_then(|s| s.phase).map(|p| p.as_str()),
        Some("Running"),
        "phase after the no-op reconcile",
    )?;
    Ok(())
}

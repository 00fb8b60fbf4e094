//! The reconcile of a `TinycodeInstance`, as a pipeline:
//!
//! | stage | file | touches the API |
//! |---|---|---|
//! | spec rules | [`rules`] | no |
//! | observe | [`stages::observe`] (from [`caches::stores`]) | reads |
//! | validate | [`stages::validate`] (classes: [`class_policy`]) | no |
//! | (the three above, as one verdict) | [`stages::admit`] | reads |
//! | withdraw what is not approved | [`revoke`] | writes |
//! | plan | [`stages::plan`] | no |
//! | execute | [`stages::execute`] (helm: `execute/helm_run.rs`) | writes |
//! | status | [`stages::status`] | no (written by execute) |
//! | delete | [`stages::cleanup`] | reads and writes |
//!
//! Beside the stages: [`caches`] (what the reconcile remembers between runs:
//! the watched stores, what it last wrote, which events wake it, how often a
//! namespace hears of a failure), [`idle`] (idle stop: pure decisions, and
//! the loop that reads activity), and the small parts every stage shares
//! ([`context`], [`basics`], [`calls`], [`error`], [`marks`], [`reason`]).
//!
//! This file wires the stages to kube's controller and finalizer.

pub(crate) mod approval;
pub(crate) mod basics;
pub(crate) mod caches;
pub(crate) mod calls;
pub mod class_policy;
pub(crate) mod condition_types;
pub mod conditions;
pub(crate) mod context;
pub mod diagnose;
pub(crate) mod discover;
pub mod error;
pub(crate) mod hosts;
pub(crate) mod idle;
pub(crate) mod kubeconfig;
pub(crate) mod marks;
pub mod reason;
pub(crate) mod revoke;
pub(crate) mod rollout;
pub mod rules;
pub mod stages;
pub(crate) mod status_writes;
pub(crate) mod volumes;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, Client, ResourceExt};

use caches::{stores, triggers};
use stages::execute::helm_run;
use stages::{admit, cleanup, execute, observe, plan, status};

use crate::api::{FINALIZER, Phase, TinycodeInstance};
use crate::helm::Helm;
use crate::ops::health::HealthState;
use crate::ops::metrics::Metrics;
use crate::settings::Settings;
pub use basics::{instance_key, now, truncate};
pub use context::Context;
pub use error::{During, Error, Retry, backoff};
pub use marks::VALUES_HASH_ANNOTATION;
pub use stores::PART_OF_SELECTOR;

const RESYNC_RUNNING: Duration = Duration::from_secs(300);
const RESYNC_DEPLOYING: Duration = Duration::from_secs(30);
/// While status names why a rollout does not finish: the pods' changes
/// (pulled at last, a volume bound) do not touch the Deployment, so no watch
/// event says the cause is gone or has changed.
const RESYNC_DIAGNOSED: Duration = Duration::from_secs(15);
/// After a helm run with another manager's write seconds old (plan's
/// `recent_foreign_write`): long enough that a repair it calls for writes its
/// record in a later second than the write, on clocks a little apart.
const LOOK_AGAIN_SOON: Duration = Duration::from_secs(3);
/// Most server pods read for a diagnosis: one instance runs few, and more
/// (pods a tenant labelled alike) add nothing to it.
const DIAGNOSIS_PODS: u32 = 20;
/// How long the reads for a diagnosis may take before status goes without one.
const DIAGNOSIS_TIMEOUT: Duration = Duration::from_secs(5);

/// How the controller runs (the namespaces it watches are a setting:
/// [`Settings::watch_scope`]).
pub struct RunOptions {
    pub concurrency: u16,
}

/// Whether a change of namespace `ns`'s labels (approvals) concerns `inst`:
/// its own namespace, or one it discovers models in.
fn namespace_concerns(inst: &TinycodeInstance, ns: &str) -> bool {
    inst.metadata.namespace.as_deref() == Some(ns)
        || approval::requested_discovery(&inst.spec).any(|d| d == ns || d == "*")
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    client: Client,
    settings: Settings,
    helm: Helm,
    metrics: Arc<Metrics>,
    opts: RunOptions,
    health: Arc<HealthState>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let scope = settings.watch_scope.clone();
    let instances: Api<TinycodeInstance> = scope.api(&client);
    let (reader, events) = stores::reflect(instances, stores::config());
    let config = kube::runtime::controller::Config::default().concurrency(opts.concurrency);
    let controller =
        Controller::for_stream(triggers::relevant(events, triggers::hash_instance), reader.clone()).with_config(config);
    let (platform, operator_ns) = (settings.platform, settings.operator_namespace.clone());
    let (stores, controller) =
        stores::start(&client, platform, &operator_ns, &scope, controller, reader.clone(), namespace_concerns);
    // Activity checks wake the instances they find idle.
    let (wake, woken) = futures::channel::mpsc::channel(1024);
    let controller = controller.reconcile_on(woken);
    let ctx = Arc::new(Context::new(client, settings, helm, metrics, stores));
    tokio::spawn(idle::watch(
        reader.clone(),
        ctx.settings.idle.clone(),
        ctx.activity_reader.clone(),
        ctx.activity.clone(),
        ctx.metrics.clone(),
        wake,
    ));
    let synced = health.clone();
    let ready_ctx = ctx.clone();
    tokio::spawn(async move {
        while tokio::time::timeout(Duration::from_secs(1), reader.wait_until_ready()).await.is_err() {}
        ready_ctx.stores.ready().await;
        synced.synced.store(true, Ordering::Relaxed);
        tracing::info!("watches synced");
    });
    controller
        .graceful_shutdown_on(shutdown)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            match res {
                Ok((obj, action)) => {
                    tracing::debug!(namespace = obj.namespace.as_deref().unwrap_or(""), name = %obj.name, ?action, "reconciled")
                }
                Err(e) => tracing::debug!(error = %e, "reconcile failed"),
            }
        })
        .await;
    health.alive.store(false, Ordering::Relaxed);
}

/// Entry point for one instance: the finalizer decides between apply and cleanup.
#[tracing::instrument(skip_all, fields(namespace = inst.namespace().unwrap_or_default(), name = inst.name_any()))]
pub async fn reconcile(inst: Arc<TinycodeInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    ctx.stores.ready().await;
    let ns = inst.namespace().unwrap_or_default();
    let api: Api<TinycodeInstance> = Api::namespaced(ctx.client.clone(), &ns);
    if inst.metadata.deletion_timestamp.is_some() && ctx.finalized.contains(&inst) {
        // Cleaned up and released already; the cache has not shown it yet.
        return Ok(Action::await_change());
    }
    let inst = ctx.written.current(inst);
    let result = finalizer(&api, FINALIZER, inst.clone(), |event| async {
        match event {
            FinalizerEvent::Apply(inst) => apply(&inst, &ctx).await,
            FinalizerEvent::Cleanup(inst) => {
                let done = cleanup::cleanup(&inst, &ctx).await;
                if done.is_ok() {
                    ctx.written.forget(&inst);
                }
                done
            }
        }
    })
    .await;
    let action = match result {
        Ok(action) => {
            if inst.metadata.deletion_timestamp.is_some() {
                // Being deleted and Ok: the cleanup ran and the finalizer is gone
                // (or it was gone before).
                ctx.finalized.mark(&inst);
            }
            action
        }
        Err(kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e)) => {
            return Err(e);
        }
        Err(kube::runtime::finalizer::Error::AddFinalizer(e) | kube::runtime::finalizer::Error::RemoveFinalizer(e)) => {
            return Err(Error::Kube { during: "update the instance's finalizer", source: e });
        }
        Err(e) => return Err(Error::blocked(reason::Blocked::FinalizerError, e.to_string())),
    };
    ctx.failures.lock().expect("lock").remove(&ObjectRef::from_obj(&*inst));
    Ok(action)
}

/// Transient errors back off exponentially per instance.
pub fn error_policy(inst: Arc<TinycodeInstance>, err: &Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(namespace = inst.namespace().unwrap_or_default(), name = inst.name_any(), reason = err.reason(), error = %err, "reconcile failed");
    let mut failures = ctx.failures.lock().expect("lock");
    let n = failures.entry(ObjectRef::from_obj(&*inst)).or_insert(0);
    let delay = backoff(*n);
    *n = n.saturating_add(1);
    Action::requeue(delay)
}

/// Apply path: on error, records Failed status and an event, then picks the retry.
async fn apply(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let started = Instant::now();
    match pipeline(inst, ctx).await {
        Ok(action) => {
            ctx.metrics.reconciled("success", started.elapsed());
            Ok(action)
        }
        Err(err) => {
            ctx.metrics.reconciled(err.reason(), started.elapsed());
            ctx.metrics.phase(&instance_key(inst), Some(Phase::Failed));
            // Every message names the CLI the cluster has (its builders are told which).
            let message = err.to_string();
            let failures = helm_run::recorded_failures(ctx, inst);
            let mut st = status::failed(inst, &err, &message, failures, &now());
            if let Some(idle) = enforce_idle(ctx, inst, err.reason()).await {
                st.idle = idle.status;
                st.last_activity_time = idle.last_activity_time;
            }
            if let Err(e) = status_writes::write_status_if_changed(ctx, inst, &st).await {
                tracing::warn!(error = %e, "could not record the failure in status");
            }
            if ctx.failure_events.admit(&inst.namespace().unwrap_or_default(), err.reason()) {
                ctx.event(inst, EventType::Warning, err.reason(), "Reconcile", message).await;
            }
            match err.retry() {
                Retry::OnChange => Ok(Action::await_change()),
                Retry::Slowly => Ok(Action::requeue(ctx.settings.blocked_requeue)),
                Retry::Backoff => Err(err),
            }
        }
    }
}

/// rules → observe → validate → plan → execute → status.
async fn pipeline(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let verdict = admit::admit(ctx, inst).await?;
    if let Some(why) = verdict.withdraws() {
        revoke::revoke(ctx, inst, why).await?;
    }
    let (valid, observed) = match verdict {
        admit::Verdict::Admitted(admitted) => *admitted,
        admit::Verdict::Suspended => return suspended(ctx, inst).await,
        admit::Verdict::Refused(refusal) => return Err(refused(ctx, inst, refusal)),
    };
    let mut plan = plan::plan(&valid, &observed, &ctx.settings);
    rollout::wait_for_busy(ctx, inst, &observed, valid.rollout_busy_deadline, &mut plan).await;
    // A PVC that cannot grow refuses the instance before anything is applied.
    let grown = volumes::before_helm(ctx, inst, &plan).await?;
    let outcome = execute::execute(ctx, inst, &plan).await?;
    let storage = volumes::condition(ctx, inst, &plan.values, !grown.is_empty()).await;
    let resizing = storage.as_ref().is_some_and(|c| !c.status);
    plan.conditions.extend(storage);
    let cached = CachedDeployments::read(ctx, inst, &plan, &observed);
    let deployments = cached.as_status();
    let mut st = status::applied(inst, &plan, &outcome, deployments, None, &now());
    let mut diagnosed = false;
    if st.phase == Some(Phase::Deploying) {
        // Only a rollout that has not finished costs pod reads: say why.
        if let Some(component) = status::waiting_on(&plan, deployments) {
            let waited = match component {
                diagnose::Component::Server => deployments.server,
                diagnose::Component::Ollama => deployments.ollama,
                diagnose::Component::Front => deployments.front,
                diagnose::Component::Egress => deployments.egress,
            };
            if let Some(d) = diagnose_rollout(ctx, inst, component, waited).await {
                st = status::applied(inst, &plan, &outcome, deployments, Some(&d), &now());
                diagnosed = true;
            }
        }
    }
    let phase = st.phase.unwrap_or(Phase::Deploying);
    announce(ctx, inst, &plan, &st).await;
    status_writes::write_status_if_changed(ctx, inst, &st).await.during("write the status")?;
    ctx.metrics.phase(&instance_key(inst), Some(phase));
    if let Some(held) = &plan.held {
        return Ok(Action::requeue(rollout::recheck(held, ctx.settings.idle.check_interval, Timestamp::now())));
    }
    if plan.helm.is_some() && plan.look_again_soon {
        return Ok(Action::requeue(LOOK_AGAIN_SOON));
    }
    let settled = matches!(phase, Phase::Running | Phase::Stopped);
    if resizing {
        // A volume's size shows on its PVC alone, which wakes no reconcile.
        return Ok(Action::requeue(RESYNC_DIAGNOSED));
    }
    Ok(Action::requeue(match (settled, diagnosed) {
        (true, _) => RESYNC_RUNNING,
        (false, true) => RESYNC_DIAGNOSED,
        (false, false) => RESYNC_DEPLOYING,
    }))
}

/// The instance's Deployments as the cache holds them, for its status.
struct CachedDeployments {
    server: Option<Arc<k8s_openapi::api::apps::v1::Deployment>>,
    ollama: Option<Arc<k8s_openapi::api::apps::v1::Deployment>>,
    front: Option<Arc<k8s_openapi::api::apps::v1::Deployment>>,
    egress: Option<Arc<k8s_openapi::api::apps::v1::Deployment>>,
}

impl CachedDeployments {
    fn read(ctx: &Context, inst: &TinycodeInstance, plan: &plan::Plan, observed: &observe::Observed) -> Self {
        let ns = inst.namespace().unwrap_or_default();
        let name = inst.name_any();
        let get = |deployment: String| ctx.stores.deployments.get(&ObjectRef::new(&deployment).within(&ns));
        let v = &plan.values;
        CachedDeployments {
            // After helm the cached Deployment may be the old one; status reads the cache again.
            server: match &plan.helm {
                Some(_) => get(crate::api::naming::fullname(&name)),
                None => observed.deployment.clone(),
            },
            // The bundled Ollama's readiness (its models pulled) is the instance's too,
            ollama: v.ollama.enabled.then(|| get(crate::api::naming::ollama(&name))).flatten(),
            // so is the front's (it answers the URL),
            front: v.front.enabled.then(|| get(crate::api::naming::front(&name))).flatten(),
            // and the egress proxy's (the agent's only way out).
            egress: v.egress.enabled.then(|| get(crate::api::naming::egress(&name))).flatten(),
        }
    }

    fn as_status(&self) -> status::Deployments<'_> {
        status::Deployments {
            server: self.server.as_deref(),
            ollama: self.ollama.as_deref(),
            front: self.front.as_deref(),
            egress: self.egress.as_deref(),
        }
    }
}

/// Normal events for what the user sees change: running, stopped for
/// idleness or by spec.stopped, started again.
async fn announce(ctx: &Context, inst: &TinycodeInstance, plan: &plan::Plan, st: &crate::api::TinycodeInstanceStatus) {
    let before = inst.status.as_ref().and_then(|s| s.phase);
    let phase = st.phase.unwrap_or(Phase::Deploying);
    if before != Some(Phase::Running) && phase == Phase::Running {
        let note = format!("tinycode is running{}", st.url.as_ref().map(|u| format!(" at {u}")).unwrap_or_default());
        ctx.event(inst, EventType::Normal, "Running", "Reconcile", note).await;
    }
    match &plan.idle.transition {
        Some(idle::Transition::Stopped { since }) => {
            ctx.metrics.idle_stop();
            let note = format!(
                "no activity since {since}: the workloads were scaled to zero; data, Route/Ingress and release kept"
            );
            ctx.event(inst, EventType::Normal, "IdleStopped", "Reconcile", note).await;
        }
        Some(idle::Transition::Started) => {
            let note = "started again after an idle stop: the workloads start with the same data".to_string();
            ctx.event(inst, EventType::Normal, "Started", "Reconcile", note).await;
        }
        None if before != Some(Phase::Stopped) && phase == Phase::Stopped => {
            let note =
                "spec.stopped: the workloads were scaled to zero; data, Route/Ingress and release kept".to_string();
            ctx.event(inst, EventType::Normal, "Stopped", "Reconcile", note).await;
        }
        None if before == Some(Phase::Stopped) && phase != Phase::Stopped => {
            let note = "spec.stopped is false again: the workloads start with the same data".to_string();
            ctx.event(inst, EventType::Normal, "Started", "Reconcile", note).await;
        }
        None => {}
    }
}

/// A refused spec: nothing rolls out, so nothing waits for a busy agent.
fn refused(ctx: &Context, inst: &TinycodeInstance, refusal: admit::Refusal) -> Error {
    ctx.metrics.rollout_waits(&instance_key(inst), false);
    refusal.into()
}

/// `spec.suspend`: what runs stays as it is (unless required idle stop stops
/// it), status says so.
async fn suspended(ctx: &Context, inst: &TinycodeInstance) -> Result<Action, Error> {
    // Nothing rolls out while suspended, so nothing waits for a busy agent.
    ctx.metrics.rollout_waits(&instance_key(inst), false);
    let deployment = ctx.stores.deployments.get(
        &ObjectRef::new(&crate::api::naming::fullname(&inst.name_any())).within(&inst.namespace().unwrap_or_default()),
    );
    let stopped = deployment.as_deref().is_some_and(revoke::scaled_down);
    let idle = enforce_idle(ctx, inst, "spec.suspend is true").await;
    let st = status::suspended(inst, stopped, idle, &now());
    status_writes::write_status_if_changed(ctx, inst, &st).await.during("write the status")?;
    ctx.metrics.phase(&instance_key(inst), Some(Phase::Suspended));
    // Namespace labels wake it; a kubeconfig owner's consent lives on a
    // Secret in another namespace, which is not watched.
    Ok(if inst.spec.cluster_admin.kubeconfig_namespace.is_some() {
        Action::requeue(ctx.settings.blocked_requeue)
    } else {
        Action::await_change()
    })
}

/// Required idle stop where the spec is not applied (suspended, or refused
/// for `why`): the pods that still run are judged by the last activity check
/// and scaled to zero when idle, and `st` says so (README.md, "Idle stop").
/// A scale-down that fails leaves status as it was; the next check retries.
async fn enforce_idle(ctx: &Context, inst: &TinycodeInstance, why: &str) -> Option<idle::IdleState> {
    use crate::api::naming;
    let class_idle = match observe::class_of(ctx, inst).0 {
        class_policy::Choice::Found { spec, .. } => spec.idle.clone(),
        _ => None,
    };
    let settings = class_policy::idle_settings(class_idle.as_ref(), &ctx.settings.idle);
    if !settings.required {
        return None;
    }
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let runs = |deployment: String| {
        ctx.stores.deployments.get(&ObjectRef::new(&deployment).within(&ns)).is_some_and(|d| d.spec.replicas != Some(0))
    };
    let (server, ollama) = (runs(naming::fullname(&name)), runs(naming::ollama(&name)));
    let obs = ctx.activity.lock().expect("lock").get(&ObjectRef::from_obj(inst)).cloned();
    let state = idle::decide_refused(inst, &settings, obs.as_ref(), Timestamp::now(), server || ollama, why)?;
    if let Some(idle::Transition::Stopped { since }) = &state.transition {
        for (deployment, running) in [(naming::fullname(&name), server), (naming::ollama(&name), ollama)] {
            if running && let Err(e) = revoke::scale_down(ctx, inst, &deployment).await {
                tracing::warn!(error = %e, "could not stop an idle instance whose spec is not applied");
                return None;
            }
        }
        ctx.metrics.idle_stop();
        let note = format!(
            "no activity since {since} while the spec is not applied ({why}); idle stop is required here, so the workloads were scaled to zero; data kept"
        );
        ctx.event(inst, EventType::Normal, "IdleStopped", "Reconcile", note).await;
    }
    Some(state)
}

/// Why the instance's rollout has not finished: the pods of the workload it
/// waits for (one list, by the chart's selector) and, when the scheduler
/// blames their volumes, the instance's own PVCs, read in its namespace
/// through the operator's `admin` grant there (no cluster-wide pod access).
/// A failed or slow read is never an error: it leaves what the Deployment
/// says, or no diagnosis (status says Deploying).
async fn diagnose_rollout(
    ctx: &Context,
    inst: &TinycodeInstance,
    component: diagnose::Component,
    deployment: Option<&k8s_openapi::api::apps::v1::Deployment>,
) -> Option<diagnose::Diagnosis> {
    use crate::api::naming;
    use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
    let ns = inst.namespace()?;
    let name = inst.name_any();
    let reads = async {
        let params =
            kube::api::ListParams::default().labels(&diagnose::selector(&name, component)).limit(DIAGNOSIS_PODS);
        let pods = Api::<Pod>::namespaced(ctx.client.clone(), &ns).list(&params).await?.items;
        // Only the claims the chart makes for this instance: a pod naming
        // another (one a tenant labelled alike) gets no read.
        let owned = match component {
            diagnose::Component::Server => vec![naming::data_pvc(&name), naming::projects_pvc(&name)],
            diagnose::Component::Ollama => vec![naming::ollama_models_pvc(&name)],
            diagnose::Component::Front | diagnose::Component::Egress => vec![],
        };
        let api = Api::<PersistentVolumeClaim>::namespaced(ctx.client.clone(), &ns);
        let mut pvcs = Vec::new();
        for claim in diagnose::claims_in_question(&pods).iter().filter(|c| owned.contains(c)) {
            // A claim that cannot be read leaves the scheduler's own words.
            if let Ok(Some(pvc)) = api.get_opt(claim).await {
                pvcs.push(pvc);
            }
        }
        Ok::<_, kube::Error>((pods, pvcs))
    };
    // Without the pods, the Deployment's own conditions still tell a refusal
    // or a passed deadline.
    let (pods, pvcs) = match tokio::time::timeout(DIAGNOSIS_TIMEOUT, reads).await {
        Ok(Ok(read)) => read,
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "could not read the pods for a diagnosis");
            Default::default()
        }
        Err(_) => {
            tracing::debug!("reading the pods for a diagnosis timed out");
            Default::default()
        }
    };
    diagnose::diagnose(&pods, &pvcs, deployment, ctx.settings.platform.cli())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespaces_labels_concern_its_instances_and_those_discovering_it() {
        let inst = |ns: &str, discovery: serde_json::Value| {
            let spec = serde_json::from_value(serde_json::json!({"discovery": {"namespaces": discovery}})).unwrap();
            let mut i = TinycodeInstance::new("dev", spec);
            i.metadata.namespace = Some(ns.into());
            i
        };
        assert!(namespace_concerns(&inst("team", serde_json::json!([])), "team"));
        assert!(!namespace_concerns(&inst("team", serde_json::json!([])), "models"));
        assert!(namespace_concerns(&inst("team", serde_json::json!(["models"])), "models"));
        assert!(namespace_concerns(&inst("team", serde_json::json!(["*"])), "models"));
        assert!(!namespace_concerns(&inst("team", serde_json::json!(["other"])), "models"));
    }
}

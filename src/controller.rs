//! The reconcile loop: read → validate (pure) → check the namespace → grant
//! the SCC → build values (pure) → helm upgrade when needed → Route → status.
//! Only this file and [`crate::helm`] touch the cluster.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams,
};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::api::{FINALIZER, Phase, TinycodeInstance, TinycodeInstanceStatus};
use crate::error::{Error, Retry, backoff};
use crate::health::HealthState;
use crate::helm::Helm;
use crate::metrics::Metrics;
use crate::openshift::{Route, SecurityContextConstraints};
use crate::remediation::RetryBudget;
use crate::scc::{ALL_TIERS, SccTier};
use crate::settings::Settings;
use crate::status::{self, Desired, Observed};
use crate::values::{self, Approved, InstanceRef, Values};
use crate::{
    FIELD_MANAGER, approval, config, ingress, manifest, naming, platform, prepare, release, route, scc, validation,
    vllm,
};

/// Annotation on the Deployment holding the digest of the values it was rendered from.
pub const VALUES_HASH_ANNOTATION: &str = "tinycode.dev/values-hash";
/// Label selecting the objects the operator and its chart create.
pub const PART_OF_SELECTOR: &str = "app.kubernetes.io/part-of=tinycode-operator";

/// The key the tinycode server reads its password from.
const GENERATED_PASSWORD_KEY: &str = "TINYCODE_SERVER_PASSWORD";
/// Annotation helm puts on every object it manages: the namespace of the release records.
const HELM_RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";

const RESYNC_RUNNING: Duration = Duration::from_secs(300);
const RESYNC_DEPLOYING: Duration = Duration::from_secs(30);

/// Shared state of all reconcile workers.
pub struct Context {
    pub client: Client,
    pub settings: Settings,
    pub helm: Helm,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    pub prober: vllm::Prober,
    failures: Mutex<HashMap<ObjectRef<TinycodeInstance>, u32>>,
    /// Helm failures per instance and rendering (the Stalled decision).
    retries: Mutex<RetryBudget<ObjectRef<TinycodeInstance>>>,
    /// Objects each release revision rendered, by record name (a revision's
    /// manifest never changes, so each record is decoded once).
    manifests: Mutex<HashMap<String, Arc<Vec<manifest::ObjectRef>>>>,
}

impl Context {
    pub fn new(client: Client, settings: Settings, helm: Helm, metrics: Arc<Metrics>) -> Self {
        let reporter = Reporter { controller: "tinycode-operator".into(), instance: std::env::var("POD_NAME").ok() };
        // The recorder folds repeats of an event into one series, so a failing
        // instance does not flood its namespace with events.
        let recorder = Recorder::new(client.clone(), reporter);
        let prober = vllm::Prober::new(settings.probes.clone());
        let retries = Mutex::new(RetryBudget::new(settings.max_retries));
        Self {
            client,
            settings,
            helm,
            recorder,
            metrics,
            prober,
            failures: Mutex::default(),
            retries,
            manifests: Mutex::default(),
        }
    }

    async fn event(&self, inst: &TinycodeInstance, type_: EventType, reason: &str, action: &str, note: String) {
        let ev = Event {
            type_,
            reason: reason.into(),
            note: Some(truncate(&note, 1000)),
            action: action.into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&ev, &inst.object_ref(&())).await {
            tracing::warn!(error = %e, "could not publish event");
        }
    }
}

/// How the controller runs.
pub struct RunOptions {
    pub watch_namespace: Option<String>,
    pub concurrency: u16,
}

/// Runs the controller until `shutdown` resolves; in-flight reconciles finish first.
pub async fn run(
    ctx: Arc<Context>,
    opts: RunOptions,
    health: Arc<HealthState>,
    shutdown: impl std::future::Future<Output = ()> + Send + Sync + 'static,
) {
    let client = ctx.client.clone();
    let ns = opts.watch_namespace.as_deref();
    let instances: Api<TinycodeInstance> = scoped_api(&client, ns);
    let owned = watcher::Config::default().labels(PART_OF_SELECTOR);
    let platform = ctx.settings.platform;
    let controller = Controller::new(instances, watcher::Config::default())
        .with_config(kube::runtime::controller::Config::default().concurrency(opts.concurrency));
    let store = controller.store();
    let synced = health.clone();
    tokio::spawn(async move {
        // A waiter registered before the first list completes is not always
        // woken (seen with kube-runtime 5), so ask again each second.
        loop {
            match tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await {
                Ok(Ok(())) => {
                    synced.synced.store(true, Ordering::Relaxed);
                    tracing::info!("watches synced");
                    return;
                }
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "the instance cache never synced");
                    return;
                }
                Err(_) => {}
            }
        }
    });
    let controller = controller
        .owns(scoped_api::<Deployment>(&client, ns), owned.clone())
        .owns(scoped_api::<Service>(&client, ns), owned.clone())
        .owns(scoped_api::<ServiceAccount>(&client, ns), owned.clone())
        .owns(scoped_api::<ConfigMap>(&client, ns), owned.clone())
        .owns(scoped_api::<NetworkPolicy>(&client, ns), owned.clone())
        .owns(scoped_api::<Role>(&client, ns), owned.clone())
        .owns(scoped_api::<RoleBinding>(&client, ns), owned.clone());
    // Watch the exposure the platform has (a missing API would fail its watch forever).
    let controller = if platform.routes {
        controller.owns(scoped_api::<Route>(&client, ns), owned)
    } else {
        controller.owns(scoped_api::<Ingress>(&client, ns), owned)
    };
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

fn scoped_api<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// Entry point for one instance: the finalizer decides between apply and cleanup.
#[tracing::instrument(skip_all, fields(namespace = inst.namespace().unwrap_or_default(), name = inst.name_any()))]
pub async fn reconcile(inst: Arc<TinycodeInstance>, ctx: Arc<Context>) -> Result<Action, Error> {
    tracing::trace!(resource_version = inst.metadata.resource_version.as_deref().unwrap_or(""), "reconcile");
    let ns = inst.namespace().unwrap_or_default();
    let api: Api<TinycodeInstance> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, inst.clone(), |event| async {
        match event {
            FinalizerEvent::Apply(inst) => apply(&inst, &ctx).await,
            FinalizerEvent::Cleanup(inst) => cleanup(&inst, &ctx).await,
        }
    })
    .await;
    let action = match result {
        Ok(action) => action,
        Err(kube::runtime::finalizer::Error::ApplyFailed(e) | kube::runtime::finalizer::Error::CleanupFailed(e)) => {
            return Err(e);
        }
        Err(kube::runtime::finalizer::Error::AddFinalizer(e) | kube::runtime::finalizer::Error::RemoveFinalizer(e)) => {
            return Err(Error::Kube(e));
        }
        Err(e) => return Err(Error::blocked("FinalizerError", e.to_string())),
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
    match apply_steps(inst, ctx).await {
        Ok(action) => {
            ctx.metrics.reconciled("success", started.elapsed());
            Ok(action)
        }
        Err(err) => {
            ctx.metrics.reconciled(err.reason(), started.elapsed());
            ctx.metrics.phase(&instance_key(inst), Some(Phase::Failed));
            let platform = ctx.settings.platform;
            let message = err.to_string();
            // Commands in messages use the CLI the cluster has.
            let message = if platform.cli() == "kubectl" { message.replace("`oc ", "`kubectl ") } else { message };
            let generation = inst.metadata.generation;
            let mut extra: Vec<Desired> = status::progress(&err);
            if err.reason().starts_with("Kubeconfig") || err.reason() == "ClusterRoleNotApproved" {
                extra.push(Desired::new(status::CLUSTER_ADMIN_READY, false, err.reason(), message.clone()));
            }
            let mut status = status::failed(inst.status.as_ref(), err.reason(), &message, &extra, &now(), generation);
            if matches!(err, Error::Helm(_) | Error::Stalled(_)) {
                // A requested reconcile ran helm, even if helm failed.
                status.last_handled_reconcile_at = reconcile_request(inst).or(status.last_handled_reconcile_at.clone());
            }
            if let Err(e) = patch_status(ctx, inst, &status).await {
                tracing::warn!(error = %e, "could not record the failure in status");
            }
            ctx.event(inst, EventType::Warning, err.reason(), "Reconcile", message).await;
            match err.retry() {
                Retry::OnChange => Ok(Action::await_change()),
                Retry::Slowly => Ok(Action::requeue(ctx.settings.blocked_requeue)),
                Retry::Backoff => Err(err),
            }
        }
    }
}

async fn apply_steps(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let name = inst.name_any();
    let ns = inst.namespace().unwrap_or_default();
    let spec = &inst.spec;
    let client = &ctx.client;

    // 1. validate (pure); a suspended instance stops here
    let mut warnings = validation::validate(&name, &ns, spec, &ctx.settings)?;
    if spec.suspend {
        return suspended(inst, ctx).await;
    }

    // 2. the namespace: opted in, prepared, tier approved
    let namespace = Api::<Namespace>::all(client.clone()).get(&ns).await?;
    let ns_labels = namespace.metadata.labels.unwrap_or_default();
    if let Some((key, value)) = &ctx.settings.required_namespace_label
        && ns_labels.get(key) != Some(value)
    {
        return Err(Error::blocked(
            "NamespaceNotEnabled",
            format!(
                "namespace {ns} has not opted in to tinycode; a cluster-admin enables it with `oc label namespace {ns} {key}={value}`"
            ),
        ));
    }
    check_prepared(ctx, &ns).await?;
    let tier = SccTier::select(spec);
    let platform = ctx.settings.platform;
    tier.check_approval(&ns, &ns_labels).map_err(|m| Error::blocked("SccNotApproved", m))?;
    if !platform.sccs {
        platform::check_pod_security(&ns, tier, &ns_labels).map_err(|m| Error::blocked("PodSecurityNotAllowed", m))?;
    } else if Api::<SecurityContextConstraints>::all(client.clone()).get_opt(&tier.scc_name()).await?.is_none() {
        return Err(Error::blocked(
            "SccMissing",
            format!(
                "SecurityContextConstraints {} is not installed; a cluster-admin installs it with `make install` (config/scc)",
                tier.scc_name()
            ),
        ));
    }

    // 3. what a cluster-admin approved: a cluster role, other namespaces for discovery
    let cluster_role =
        match approval::cluster_role(&ns, &spec.cluster_admin, &ns_labels, &ctx.settings.allowed_cluster_roles) {
            Ok(role) => role,
            Err(message) => {
                // An approval taken back takes the binding with it, before anything else.
                delete_ignoring_missing(
                    &Api::<ClusterRoleBinding>::all(client.clone()),
                    &naming::cluster_role_binding(&ns, &name),
                )
                .await?;
                return Err(Error::blocked("ClusterRoleNotApproved", message));
            }
        };
    if let Some(role) = &cluster_role {
        // A binding's roleRef cannot change: one to another role goes first,
        // and helm creates the new one.
        let crbs: Api<ClusterRoleBinding> = Api::all(client.clone());
        let binding = naming::cluster_role_binding(&ns, &name);
        if crbs.get_opt(&binding).await?.is_some_and(|b| b.role_ref.name != *role) {
            delete_ignoring_missing(&crbs, &binding).await?;
        }
    }
    let discovery_namespaces = approved_discovery(ctx, &ns, spec, &mut warnings).await?;

    // 4. Secrets the instance refers to
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    // Digests of what the pods mount, so a rotated Secret rolls them.
    let mut mounted: Vec<String> = Vec::new();
    if spec.auth.password_secret.as_deref().is_none_or(str::is_empty) {
        mounted.push(ensure_generated_password(ctx, inst, &name, &ns).await?);
    } else if let Some(pw) = &spec.auth.password_secret {
        let keys = secret_keys(&secrets, pw, &mut mounted).await?;
        match keys {
            None => {
                return Err(Error::blocked(
                    "PasswordSecretMissing",
                    format!(
                        "spec.auth.passwordSecret names Secret {pw}, which does not exist in {ns}; create it with `oc create secret generic {pw} --from-literal=TINYCODE_SERVER_PASSWORD=<password> -n {ns}`"
                    ),
                ));
            }
            Some(keys) if !keys.iter().any(|k| k == "TINYCODE_SERVER_PASSWORD") => {
                return Err(Error::blocked(
                    "PasswordSecretInvalid",
                    format!(
                        "Secret {pw} in {ns} has no key TINYCODE_SERVER_PASSWORD; re-create it with `oc create secret generic {pw} --from-literal=TINYCODE_SERVER_PASSWORD=<password> -n {ns}`"
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    if let Some(git) = &spec.git
        && let Some(cred) = &git.credentials_secret
    {
        match secret_keys(&secrets, cred, &mut mounted).await? {
            None => {
                return Err(Error::blocked(
                    "GitCredentialsMissing",
                    format!(
                        "spec.git.credentialsSecret names Secret {cred}, which does not exist in {ns}; create it with keys username and password (HTTPS) or ssh-privatekey (SSH)"
                    ),
                ));
            }
            Some(keys) => {
                let has = |k: &str| keys.iter().any(|x| x == k);
                if !(has("ssh-privatekey") || (has("username") && has("password"))) {
                    warnings.push(format!("Secret {cred} has neither username+password nor ssh-privatekey; the clone will run without credentials"));
                }
            }
        }
    }
    let cluster_admin_condition = if spec.cluster_admin.enabled {
        Some(check_kubeconfig(ctx, inst, &name, &ns, &mut mounted).await?)
    } else {
        None
    };
    let approved = Approved {
        cluster_role,
        discovery_namespaces,
        secrets_digest: values::sha256_hex(mounted.join("\n").as_bytes()),
    };

    // 5. SCC grant (RBAC, one RoleBinding per instance and tier)
    let owner = owner_reference(inst);
    if platform.sccs {
        let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
        let grant = scc::grant(&name, &ns, tier, owner.clone());
        bindings.patch(&naming::scc_grant(&name, tier.as_str()), &apply_params(), &Patch::Apply(&grant)).await?;
        // A grant of another tier exists only after a tier change, which the
        // status (the SCC last granted) shows; otherwise skip the deletes.
        let granted_before = inst.status.as_ref().and_then(|s| s.scc.clone());
        if granted_before.as_deref() != Some(tier.scc_name().as_str()) {
            for other in ALL_TIERS.iter().filter(|t| **t != tier) {
                delete_ignoring_missing(&bindings, &naming::scc_grant(&name, other.as_str())).await?;
            }
        }
    }

    // 6. vLLM probes (never blocking: failures become conditions), then values (pure)
    let targets: Vec<(String, String)> = spec.vllm.iter().flatten().map(|p| (p.name.clone(), p.url.clone())).collect();
    let candidates = discover_vllm(ctx, &ns, &approved.discovery_namespaces).await;
    let (reports, discovered) = futures::join!(ctx.prober.probe_all(&targets), ctx.prober.probe_all(&candidates));
    let vllm_conditions = vllm::conditions(spec, &reports, &discovered);
    let config_json = config::generate(spec, &vllm::served_by_name(&reports));
    let uid = inst.uid().unwrap_or_default();
    let values = values::build(
        &InstanceRef { name: &name, namespace: &ns, uid: &uid },
        spec,
        &ctx.settings,
        &approved,
        config_json,
    );

    // 7. helm, only when something changed or drifted
    let release_name = naming::release_name(&ns, &name);
    let revision = ensure_release(ctx, inst, &release_name, &values).await?;

    // 8. Route (OpenShift) or Ingress (elsewhere)
    let (exposure, exposure_condition) = if platform.routes {
        let routes: Api<Route> = Api::namespaced(client.clone(), &ns);
        let desired_route = route::build(&name, &ns, spec, owner);
        let live = routes.patch(&naming::route(&name), &apply_params(), &Patch::Apply(&desired_route)).await?;
        (Exposure { kind: "Route", host: route::admitted_host(&live), tls: live.spec.tls.is_some() }, None)
    } else {
        warnings.extend(ingress::warnings(spec));
        let (exposure, condition) = ensure_ingress(ctx, inst, &name, &ns, owner).await?;
        (exposure, Some(condition))
    };

    // 9. status from what the cluster reports
    let deployment = Api::<Deployment>::namespaced(client.clone(), &ns).get_opt(&naming::fullname(&name)).await?;
    let observed = observe(deployment.as_ref(), exposure, spec.replicas);
    let (phase, url, ready) = status::workload_status(&observed, &warnings);
    let generation = inst.metadata.generation;
    let prev = inst.status.clone().unwrap_or_default();
    let new_status = TinycodeInstanceStatus {
        phase: Some(phase),
        url,
        observed_generation: generation,
        conditions: status::merge_conditions(
            &prev.conditions,
            &std::iter::once(ready)
                .chain(vllm_conditions)
                .chain(cluster_admin_condition)
                .chain(exposure_condition)
                .chain(status::progress_ok(phase))
                .collect::<Vec<_>>(),
            &now(),
            generation,
        ),
        helm_release: Some(release_name),
        helm_revision: Some(revision),
        scc: Some(tier.scc_name()),
        password_secret: Some(values.auth.password_secret.clone()),
        last_handled_reconcile_at: reconcile_request(inst).or(prev.last_handled_reconcile_at.clone()),
    };
    if prev.phase != Some(Phase::Running) && phase == Phase::Running {
        let note =
            format!("tinycode is running{}", new_status.url.as_ref().map(|u| format!(" at {u}")).unwrap_or_default());
        ctx.event(inst, EventType::Normal, "Running", "Reconcile", note).await;
    }
    // Nothing changed (transition times are kept): no write, no watch event.
    if inst.status.as_ref() != Some(&new_status) {
        patch_status(ctx, inst, &new_status).await?;
    }
    ctx.metrics.phase(&instance_key(inst), Some(phase));
    Ok(Action::requeue(if phase == Phase::Running { RESYNC_RUNNING } else { RESYNC_DEPLOYING }))
}

/// Checks the kubeconfig Secret of cluster-admin mode and, when it lives in
/// another namespace whose owner shares it with this one, keeps a copy in the
/// instance namespace for the pod. Without that consent nothing is copied (a
/// copy made earlier is removed) and the message says nothing about whether
/// the Secret exists.
async fn check_kubeconfig(
    ctx: &Context,
    inst: &TinycodeInstance,
    name: &str,
    ns: &str,
    digests: &mut Vec<String>,
) -> Result<Desired, Error> {
    let ca = &inst.spec.cluster_admin;
    let secret_name = ca.kubeconfig_secret_name.clone().unwrap_or_default();
    let key = &ca.kubeconfig_secret_key;
    let source_ns = ca.kubeconfig_namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| ns.to_string());
    let source: Api<Secret> = Api::namespaced(ctx.client.clone(), &source_ns);
    let cross_namespace = source_ns != ns;
    let secret = match source.get_opt(&secret_name).await {
        Ok(s) => s,
        Err(kube::Error::Api(s)) if s.code == 403 && cross_namespace => None,
        Err(e) => return Err(e.into()),
    };
    if cross_namespace {
        let shared = secret.as_ref().is_some_and(|s| approval::kubeconfig_shared(s.metadata.annotations.as_ref(), ns));
        if !shared {
            delete_namespaced(&Api::<Secret>::namespaced(ctx.client.clone(), ns), &naming::kubeconfig_copy(name))
                .await?;
            return Err(Error::blocked(
                "KubeconfigNotShared",
                approval::kubeconfig_not_shared_message(&secret_name, &source_ns, ns),
            ));
        }
    }
    let Some(secret) = secret else {
        return Err(Error::blocked(
            "KubeconfigSecretMissing",
            format!(
                "spec.clusterAdmin.kubeconfigSecretName names Secret {secret_name}, which does not exist in {source_ns}; create it with `oc create secret generic {secret_name} --from-file={key}=<kubeconfig> -n {source_ns}`"
            ),
        ));
    };
    digests.push(secret_digest(&secret));
    let data = secret.data.unwrap_or_default();
    let Some(bytes) = data.get(key) else {
        return Err(Error::blocked(
            "KubeconfigKeyMissing",
            format!(
                "Secret {secret_name} in {source_ns} has no key {key}; set spec.clusterAdmin.kubeconfigSecretKey to the key that holds the kubeconfig"
            ),
        ));
    };
    let warnings =
        crate::cluster_admin::kubeconfig_warnings(&String::from_utf8_lossy(&bytes.0)).map_err(|problem| {
            Error::blocked(
                "KubeconfigInvalid",
                format!("Secret {secret_name} key {key} in {source_ns}: {problem}; store a working kubeconfig there"),
            )
        })?;
    if source_ns != ns {
        let copy = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": naming::kubeconfig_copy(name), "namespace": ns,
                         "labels": scc::instance_labels(name, "cluster-admin"),
                         "ownerReferences": [owner_reference(inst)]},
            "type": "Opaque",
            "data": {key: bytes},
        });
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .patch(&naming::kubeconfig_copy(name), &apply_params(), &Patch::Apply(&copy))
            .await?;
    }
    Ok(if warnings.is_empty() {
        Desired::new(
            status::CLUSTER_ADMIN_READY,
            true,
            "KubeconfigReady",
            format!("kubeconfig from Secret {source_ns}/{secret_name} is mounted"),
        )
    } else {
        Desired::new(
            status::CLUSTER_ADMIN_READY,
            true,
            "KubeconfigWarnings",
            format!(
                "kubeconfig from Secret {source_ns}/{secret_name} is mounted; warning: {}",
                warnings.join("; warning: ")
            ),
        )
    })
}

/// Namespaces besides its own whose Services the instance may discover:
/// those it lists (all, for `*`) that a cluster-admin opened with the
/// discovery label. Others are skipped with a warning.
async fn approved_discovery(
    ctx: &Context,
    ns: &str,
    spec: &crate::api::TinycodeInstanceSpec,
    warnings: &mut Vec<String>,
) -> Result<Vec<String>, Error> {
    let requested: Vec<String> = spec.discovery.iter().flat_map(|d| d.namespaces.iter().cloned()).collect();
    if requested.iter().all(|n| n == ns) {
        return Ok(Vec::new());
    }
    let selector = format!("{}=true", approval::DISCOVERY_LABEL);
    let labelled = Api::<Namespace>::all(ctx.client.clone())
        .list_metadata(&ListParams::default().labels(&selector))
        .await?
        .items
        .into_iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter_map(|n| n.metadata.name)
        .collect();
    let (approved, skipped) = approval::discovery_namespaces(&requested, ns, &labelled);
    warnings.extend(skipped);
    Ok(approved)
}

/// Services annotated `tinycode.dev/discover=vllm` in the instance namespace
/// and the approved discovery namespaces, as (name, base URL). Listing errors
/// only shorten the list: discovery feeds warnings, never failures.
async fn discover_vllm(ctx: &Context, ns: &str, others: &[String]) -> Vec<(String, String)> {
    let mut namespaces = vec![ns.to_string()];
    namespaces.extend(others.iter().cloned());
    let mut out = Vec::new();
    for namespace in namespaces {
        let api: Api<Service> = Api::namespaced(ctx.client.clone(), &namespace);
        let services = match api.list(&ListParams::default()).await {
            Ok(list) => list.items,
            Err(e) => {
                tracing::debug!(error = %e, "cannot list Services for vLLM discovery");
                continue;
            }
        };
        for svc in services {
            let annotations = svc.metadata.annotations.clone().unwrap_or_default();
            if annotations.get(vllm::DISCOVER_ANNOTATION).map(String::as_str) != Some("vllm") {
                continue;
            }
            let (name, svc_ns) =
                (svc.metadata.name.clone().unwrap_or_default(), svc.metadata.namespace.clone().unwrap_or_default());
            let url = annotations.get(vllm::URL_ANNOTATION).cloned().or_else(|| {
                let ports = svc.spec.as_ref()?.ports.clone()?;
                let port = ports.iter().find(|p| p.name.as_deref() == Some("http")).or(ports.first())?.port;
                Some(format!("http://{name}.{svc_ns}.svc:{port}"))
            });
            if let Some(url) = url {
                out.push((format!("{svc_ns}/{name}"), url));
            }
        }
    }
    out
}

/// Creates `<name>-tinycode-password` once, with a random password, owned by
/// the instance; an existing one is kept (spec changes never rotate it).
async fn ensure_generated_password(
    ctx: &Context,
    inst: &TinycodeInstance,
    name: &str,
    ns: &str,
) -> Result<String, Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret_name = naming::generated_password(name);
    if let Some(existing) = secrets.get_opt(&secret_name).await? {
        if existing.data.as_ref().is_some_and(|d| d.contains_key(GENERATED_PASSWORD_KEY)) {
            return Ok(secret_digest(&existing));
        }
        return Err(Error::blocked(
            "PasswordSecretInvalid",
            format!(
                "Secret {secret_name} in {ns} has no key {GENERATED_PASSWORD_KEY}; delete it (`oc delete secret {secret_name} -n {ns}`) and the operator generates a new password"
            ),
        ));
    }
    let password = crate::secret::random_password(32).map_err(|e| Error::blocked("PasswordGenerationFailed", e))?;
    let secret = Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(secret_name.clone()),
            namespace: Some(ns.into()),
            labels: Some(scc::instance_labels(name, "auth")),
            owner_references: Some(vec![owner_reference(inst)]),
            ..Default::default()
        },
        type_: Some("Opaque".into()),
        string_data: Some([(GENERATED_PASSWORD_KEY.to_string(), password)].into()),
        ..Default::default()
    };
    let params = PostParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
    match secrets.create(&params, &secret).await {
        Ok(created) => {
            ctx.event(
                inst,
                EventType::Normal,
                "PasswordGenerated",
                "Reconcile",
                format!("no spec.auth.passwordSecret: generated a password in Secret {secret_name}, key {GENERATED_PASSWORD_KEY}"),
            )
            .await;
            Ok(secret_digest(&created))
        }
        // Another worker or replica created it first: keep theirs.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(secret_digest(&secrets.get(&secret_name).await?)),
        Err(e) => Err(e.into()),
    }
}

/// Runs `helm upgrade --install` unless the release is deployed with these
/// values and its objects are intact (or a reconcile was requested). Returns
/// the release's current revision. Release records are read from the
/// operator's namespace only: records in the instance namespace are the
/// tenant's to forge and are never trusted. Failures count against the
/// rendering's retry budget; a failed upgrade after a success is rolled back.
async fn ensure_release(
    ctx: &Context,
    inst: &TinycodeInstance,
    release_name: &str,
    values: &Values,
) -> Result<i64, Error> {
    let ns = &values.instance.namespace;
    let name = &values.instance.name;
    let storage_ns = &ctx.settings.operator_namespace;
    let records_api: Api<Secret> = Api::namespaced(ctx.client.clone(), storage_ns);
    let metas =
        records_api.list_metadata(&ListParams::default().labels(&format!("owner=helm,name={release_name}"))).await?;
    let metas: Vec<_> = metas.items.into_iter().map(|m| m.metadata).collect();
    let mut records = release::records(&metas);

    // A pending record nobody is working on is left over from an interrupted
    // run (the operator was killed mid-upgrade): drop it so helm can proceed.
    let pending_check = release::PendingCheck::now(&ctx.helm, &ctx.settings, storage_ns, release_name);
    if !ctx.helm.is_running(storage_ns, release_name) {
        let stale: Vec<_> = records.iter().filter(|r| r.is_pending()).cloned().collect();
        for r in &stale {
            if !release::may_discard_pending(r, &pending_check) {
                return Err(Error::blocked("HelmOperationPending", pending_check.wait_message(r)));
            }
            tracing::warn!(release = release_name, revision = r.version, status = %r.status, "removing an interrupted helm operation");
            delete_ignoring_missing(&records_api, &r.secret_name).await?;
            ctx.event(inst, EventType::Warning, "HelmRecovered", "Helm", format!("revision {} of release {release_name} was left {} by an interrupted run; it was discarded and the release re-applied", r.version, r.status)).await;
        }
        records.retain(|r| !r.is_pending());
    }

    let request = reconcile_request(inst);
    let requested =
        request.is_some() && request != inst.status.as_ref().and_then(|s| s.last_handled_reconcile_at.clone());
    let mut migrate = false;
    let reason = match release::latest(&records) {
        None if installed_by_legacy_build(ctx, ns, name).await? => {
            migrate = true;
            "release of an earlier build moves to the operator namespace".to_string()
        }
        None => "release not installed".to_string(),
        Some(r) if r.status != "deployed" => format!("release is {}", r.status),
        Some(_) if requested => format!("reconcile requested ({})", request.clone().unwrap_or_default()),
        Some(r) => match drift(ctx, values, r).await? {
            Some(reason) => reason,
            None => return Ok(r.version),
        },
    };
    let key = ObjectRef::from_obj(inst);
    let attempt = format!("{}|{}", values.values_hash, request.unwrap_or_default());
    {
        let retries = ctx.retries.lock().expect("lock");
        if !retries.may_run(&key, &attempt) {
            return Err(Error::Stalled(format!(
                "helm failed {} times for this spec and chart and is not run again until the spec, the chart or the annotation {} changes; last error: {}",
                retries.max(),
                status::RECONCILE_REQUEST_ANNOTATION,
                retries.last_error(&key).unwrap_or_default()
            )));
        }
    }
    tracing::info!(release = release_name, reason = %reason, "applying helm release");
    let applied = match ctx.helm.upgrade_install(release_name, storage_ns, values, migrate).await {
        Ok(applied) => applied,
        Err(e) => {
            let failures = ctx.retries.lock().expect("lock").failed(&key, &attempt, &e.to_string());
            roll_back_to_last_good(ctx, inst, release_name).await;
            let max = ctx.retries.lock().expect("lock").max();
            if failures >= max {
                return Err(Error::Stalled(format!(
                    "helm failed {failures} times for this spec and chart; fix the cause, then change the spec or set the annotation {} to a new value: {e}",
                    status::RECONCILE_REQUEST_ANNOTATION
                )));
            }
            return Err(e.into());
        }
    };
    ctx.retries.lock().expect("lock").clear(&key);
    ctx.event(
        inst,
        EventType::Normal,
        "HelmApplied",
        "Helm",
        format!("release {release_name} revision {} applied ({reason}) for {name}", applied.revision),
    )
    .await;
    if migrate {
        finish_migration(ctx, inst, ns, name).await?;
    }
    Ok(applied.revision)
}

/// After a failed upgrade of a release that had worked, goes back to its
/// last good revision, so the instance keeps running what worked. Best
/// effort: a failure here is logged and the next attempt tries again.
async fn roll_back_to_last_good(ctx: &Context, inst: &TinycodeInstance, release_name: &str) {
    let storage_ns = &ctx.settings.operator_namespace;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), storage_ns);
    let Ok(list) = api.list_metadata(&ListParams::default().labels(&format!("owner=helm,name={release_name}"))).await
    else {
        return;
    };
    let records = release::records(&list.items.into_iter().map(|m| m.metadata).collect::<Vec<_>>());
    let Some(failed) = release::latest(&records).filter(|r| r.status == "failed") else { return };
    let Some(good) = release::last_good(&records, failed.version) else { return };
    match ctx.helm.rollback(release_name, storage_ns, good.version).await {
        Ok(()) => {
            ctx.event(
                inst,
                EventType::Warning,
                "HelmRolledBack",
                "Helm",
                format!(
                    "revision {} of release {release_name} failed; rolled back to revision {}, the last that worked",
                    failed.version, good.version
                ),
            )
            .await
        }
        Err(e) => tracing::warn!(release = release_name, error = %e, "rollback failed"),
    }
}

/// Whether the instance's objects belong to a release an earlier build kept
/// in the instance namespace (one metadata GET, only when no release exists
/// in the operator namespace). A tenant who fakes the annotation only makes
/// the operator adopt objects of its own chart, named for this instance.
async fn installed_by_legacy_build(ctx: &Context, ns: &str, name: &str) -> Result<bool, Error> {
    let deployment =
        Api::<Deployment>::namespaced(ctx.client.clone(), ns).get_metadata_opt(&naming::fullname(name)).await?;
    Ok(deployment
        .and_then(|d| d.metadata.annotations)
        .and_then(|a| a.get(HELM_RELEASE_NAMESPACE_ANNOTATION).cloned())
        .is_some_and(|release_ns| release_ns == ns))
}

/// After the release was re-created in the operator namespace: the old
/// records go (deleted, never read), and so does the old cluster-wide
/// discovery binding, which the new release replaces with RoleBindings.
async fn finish_migration(ctx: &Context, inst: &TinycodeInstance, ns: &str, name: &str) -> Result<(), Error> {
    let legacy = naming::legacy_release_name(ns, name);
    Api::<Secret>::namespaced(ctx.client.clone(), ns)
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("owner=helm,name={legacy}")),
        )
        .await?;
    let old_binding = naming::legacy_discovery_cluster_binding(ns, name);
    delete_ignoring_missing(&Api::<ClusterRoleBinding>::all(ctx.client.clone()), &old_binding).await?;
    ctx.event(
        inst,
        EventType::Normal,
        "HelmMigrated",
        "Helm",
        format!(
            "release {legacy} of an earlier build now lives in the operator namespace as {}; its old records in {ns} were deleted",
            naming::release_name(ns, name)
        ),
    )
    .await;
    Ok(())
}

/// Why the deployed release no longer matches, if it does not: changed
/// values (or chart, or operator), or an object the release rendered that is
/// missing or that another manager changed. The objects come from the
/// release record itself, cluster-scoped ones included.
async fn drift(ctx: &Context, values: &Values, record: &release::Record) -> Result<Option<String>, Error> {
    let ns = &values.instance.namespace;
    let fullname = naming::fullname(&values.instance.name);
    let deployed_at = record.created;
    let deployment = Api::<Deployment>::namespaced(ctx.client.clone(), ns).get_metadata_opt(&fullname).await?;
    let Some(deployment) = deployment else { return Ok(Some(format!("Deployment {fullname} is missing"))) };
    let applied_hash = deployment.metadata.annotations.as_ref().and_then(|a| a.get(VALUES_HASH_ANNOTATION));
    if applied_hash != Some(&values.values_hash) {
        return Ok(Some("values, chart or operator version changed".into()));
    }
    if let Some(m) = release::foreign_write_after(&deployment.metadata, deployed_at) {
        return Ok(Some(format!("Deployment {fullname} was changed by {m}")));
    }
    for obj in rendered_objects(ctx, record).await?.iter() {
        if obj.kind == "Deployment" && obj.name == fullname && obj.namespace == *ns {
            continue;
        }
        let (group, version) = obj.api_version.split_once('/').unwrap_or(("", obj.api_version.as_str()));
        let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &obj.kind));
        let api: Api<DynamicObject> = if obj.namespace.is_empty() {
            Api::all_with(ctx.client.clone(), &resource)
        } else {
            Api::namespaced_with(ctx.client.clone(), &obj.namespace, &resource)
        };
        match api.get_metadata_opt(&obj.name).await? {
            None => return Ok(Some(format!("{} is missing", obj.describe()))),
            // PVC specs are immutable and their status churns; only existence matters.
            Some(_) if obj.kind == "PersistentVolumeClaim" => {}
            Some(m) => {
                if let Some(manager) = release::foreign_write_after(&m.metadata, deployed_at) {
                    return Ok(Some(format!("{} was changed by {manager}", obj.describe())));
                }
            }
        }
    }
    Ok(None)
}

/// The objects a release revision rendered, decoded once per record.
async fn rendered_objects(ctx: &Context, record: &release::Record) -> Result<Arc<Vec<manifest::ObjectRef>>, Error> {
    if let Some(objs) = ctx.manifests.lock().expect("lock").get(&record.secret_name) {
        return Ok(objs.clone());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.settings.operator_namespace);
    let secret = api.get(&record.secret_name).await?;
    let data = secret.data.unwrap_or_default();
    let field = data.get("release").map(|b| b.0.as_slice()).unwrap_or_default();
    let objs = Arc::new(manifest::objects_from_record(field).map_err(|e| {
        Error::blocked("ReleaseRecordUnreadable", format!("release record {}: {e}", record.secret_name))
    })?);
    let mut cache = ctx.manifests.lock().expect("lock");
    if cache.len() > 4096 {
        cache.clear();
    }
    cache.insert(record.secret_name.clone(), objs.clone());
    Ok(objs)
}

/// A suspended instance: nothing applied, status says so.
async fn suspended(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let prev = inst.status.clone().unwrap_or_default();
    let generation = inst.metadata.generation;
    let ready = Desired::new(
        status::READY,
        false,
        "Suspended",
        "spec.suspend is true: the operator runs no helm and writes nothing for this instance until it is false",
    );
    let conditions: Vec<Desired> = std::iter::once(ready).chain(status::progress_ok(Phase::Suspended)).collect();
    let st = TinycodeInstanceStatus {
        phase: Some(Phase::Suspended),
        observed_generation: generation,
        conditions: status::merge_conditions(&prev.conditions, &conditions, &now(), generation),
        ..prev.clone()
    };
    if inst.status.as_ref() != Some(&st) {
        patch_status(ctx, inst, &st).await?;
    }
    ctx.metrics.phase(&instance_key(inst), Some(Phase::Suspended));
    Ok(Action::await_change())
}

/// The value of the reconcile-request annotation, if set.
fn reconcile_request(inst: &TinycodeInstance) -> Option<String> {
    inst.metadata.annotations.as_ref().and_then(|a| a.get(status::RECONCILE_REQUEST_ANNOTATION)).cloned()
}

/// Delete path: Terminating → helm uninstall → grants, Route and copies
/// removed → PVCs deleted only when the user said so. It always completes:
/// when the namespace is being deleted or the operator lost its rights there,
/// namespaced objects are taken as gone (a Warning event names what may be
/// left), while the release records and the instance's objects outside the
/// namespace are still removed.
async fn cleanup(inst: &TinycodeInstance, ctx: &Context) -> Result<Action, Error> {
    let name = inst.name_any();
    let ns = inst.namespace().unwrap_or_default();
    let client = &ctx.client;
    let mut st = inst.status.clone().unwrap_or_default();
    if st.phase != Some(Phase::Terminating) {
        st.phase = Some(Phase::Terminating);
        let message = "deleting: uninstalling the Helm release and removing the SCC grant".to_string();
        st.conditions = status::merge_conditions(
            &st.conditions,
            &[Desired::new(status::READY, false, "Terminating", message)],
            &now(),
            inst.metadata.generation,
        );
        if let Err(e) = patch_status(ctx, inst, &st).await {
            tracing::debug!(error = %e, "could not mark the instance Terminating");
        }
    }

    let namespace = Api::<Namespace>::all(client.clone()).get_opt(&ns).await?;
    let terminating = namespace.as_ref().is_none_or(|n| n.metadata.deletion_timestamp.is_some());
    let degraded = terminating || check_prepared(ctx, &ns).await.is_err();
    let mut left: Vec<String> = Vec::new();

    let release_name = naming::release_name(&ns, &name);
    let storage_ns = &ctx.settings.operator_namespace;
    let records_api: Api<Secret> = Api::namespaced(client.clone(), storage_ns);
    let selector = format!("owner=helm,name={release_name}");
    let installed = !records_api.list_metadata(&ListParams::default().labels(&selector)).await?.items.is_empty();
    if installed {
        match ctx.helm.uninstall(&release_name, storage_ns).await {
            Ok(()) => {}
            Err(e) if degraded => {
                tracing::warn!(error = %e, "helm uninstall failed in a namespace the operator cannot manage any more");
                left.push(format!("the objects of release {release_name}"));
            }
            Err(e) => return Err(e.into()),
        }
        // The records are the operator's own: never leave them behind.
        records_api.delete_collection(&DeleteParams::default(), &ListParams::default().labels(&selector)).await?;
    }

    let bindings: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
    for tier in ALL_TIERS {
        note_left(delete_namespaced(&bindings, &naming::scc_grant(&name, tier.as_str())).await?, &mut left);
    }
    if ctx.settings.platform.routes {
        let routes = Api::<Route>::namespaced(client.clone(), &ns);
        note_left(delete_namespaced(&routes, &naming::route(&name)).await?, &mut left);
    } else {
        let ingresses = Api::<Ingress>::namespaced(client.clone(), &ns);
        note_left(delete_namespaced(&ingresses, &naming::route(&name)).await?, &mut left);
    }
    let secrets = Api::<Secret>::namespaced(client.clone(), &ns);
    note_left(delete_namespaced(&secrets, &naming::kubeconfig_copy(&name)).await?, &mut left);
    remove_outside_objects(ctx, &ns, &name, &mut left).await?;

    let kept = if inst.spec.storage.retain_on_delete {
        "the data volumes were kept (storage.retainOnDelete)"
    } else {
        let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns);
        for pvc in [naming::data_pvc(&name), naming::projects_pvc(&name), naming::ollama_models_pvc(&name)] {
            note_left(delete_namespaced(&pvcs, &pvc).await?, &mut left);
        }
        "the data volumes were deleted (storage.retainOnDelete is false)"
    };
    if !left.is_empty() {
        let why = if terminating { "namespace is being deleted" } else { "operator has lost its rights there" };
        ctx.event(
            inst,
            EventType::Warning,
            "CleanupIncomplete",
            "Cleanup",
            format!(
                "the {why}; these may remain in {ns} until the namespace goes: {}; the release records and cluster-wide bindings were removed",
                left.join(", ")
            ),
        )
        .await;
    }
    ctx.event(
        inst,
        EventType::Normal,
        "Deleted",
        "Cleanup",
        format!("release {release_name} uninstalled and SCC grant removed; {kept}"),
    )
    .await;
    ctx.metrics.phase(&instance_key(inst), None);
    ctx.retries.lock().expect("lock").clear(&ObjectRef::from_obj(inst));
    Ok(Action::await_change())
}

/// Objects of the instance outside its namespace, found by their instance
/// labels: the cluster-role binding and discovery RoleBindings elsewhere.
async fn remove_outside_objects(ctx: &Context, ns: &str, name: &str, left: &mut Vec<String>) -> Result<(), Error> {
    let selector = format!("tinycode.dev/instance-namespace={ns},tinycode.dev/instance-name={name}");
    let lp = ListParams::default().labels(&selector);
    let crbs: Api<ClusterRoleBinding> = Api::all(ctx.client.clone());
    for crb in crbs.list_metadata(&lp).await?.items {
        delete_ignoring_missing(&crbs, &crb.name_any()).await?;
    }
    delete_ignoring_missing(&crbs, &naming::cluster_role_binding(ns, name)).await?;
    for rb in Api::<RoleBinding>::all(ctx.client.clone()).list_metadata(&lp).await?.items {
        let rb_ns = rb.metadata.namespace.clone().unwrap_or_default();
        let api: Api<RoleBinding> = Api::namespaced(ctx.client.clone(), &rb_ns);
        note_left(delete_namespaced(&api, &rb.name_any()).await?.map(|o| format!("{o} in {rb_ns}")), left);
    }
    Ok(())
}

/// Deletes a namespaced object; `Some(what)` when the operator may not
/// (it lost its rights there), `None` when it is gone.
async fn delete_namespaced<K>(api: &Api<K>, name: &str) -> Result<Option<String>, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(None),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(Some(format!("{} {name}", K::kind(&())))),
        Err(e) => Err(e),
    }
}

fn note_left(what: Option<String>, left: &mut Vec<String>) {
    left.extend(what);
}

async fn check_prepared(ctx: &Context, ns: &str) -> Result<(), Error> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec { namespace: Some(ns.into()) },
        ..Default::default()
    };
    let result = Api::<SelfSubjectRulesReview>::all(ctx.client.clone()).create(&PostParams::default(), &review).await?;
    let Some(status) = result.status else { return Ok(()) };
    if status.incomplete {
        // Some authorizer could not list its rules; let the real calls decide.
        return Ok(());
    }
    let missing = prepare::missing(&status.resource_rules, ctx.settings.platform);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::blocked(
        "NamespaceNotPrepared",
        prepare::not_prepared_message(
            ns,
            &missing,
            &ctx.settings.operator_namespace,
            &ctx.settings.operator_service_account,
        ),
    ))
}

/// Keys of a Secret (never its values), or None when it does not exist; the
/// digest of its content goes to `digests`.
async fn secret_keys(api: &Api<Secret>, name: &str, digests: &mut Vec<String>) -> Result<Option<Vec<String>>, Error> {
    Ok(api.get_opt(name).await?.map(|s| {
        digests.push(secret_digest(&s));
        let mut keys: Vec<String> = s.data.unwrap_or_default().into_keys().collect();
        keys.extend(s.string_data.unwrap_or_default().into_keys());
        keys
    }))
}

/// sha256 of a Secret's name and content (sorted keys); never logged.
fn secret_digest(secret: &Secret) -> String {
    let mut bytes = secret.metadata.name.clone().unwrap_or_default().into_bytes();
    for (k, v) in secret.data.iter().flatten() {
        bytes.push(0);
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&v.0);
    }
    values::sha256_hex(&bytes)
}

/// Where the instance is reachable, as its Route or Ingress reports it.
struct Exposure {
    kind: &'static str,
    host: Option<String>,
    tls: bool,
}

/// The Ingress for the instance (or none without a host name), and the
/// IngressReady condition saying how to reach it.
async fn ensure_ingress(
    ctx: &Context,
    inst: &TinycodeInstance,
    name: &str,
    ns: &str,
    owner: OwnerReference,
) -> Result<(Exposure, Desired), Error> {
    let api: Api<Ingress> = Api::namespaced(ctx.client.clone(), ns);
    let class = match &ctx.settings.ingress.class {
        Some(c) => Some(c.clone()),
        None => default_ingress_class(ctx).await?,
    };
    let Some(desired) = ingress::build(name, ns, &inst.spec, owner, &ctx.settings.ingress, class) else {
        delete_ignoring_missing(&api, &naming::route(name)).await?;
        let service = naming::fullname(name);
        let condition = Desired::new(
            status::INGRESS_READY,
            false,
            "NoHostname",
            format!(
                "spec.hostname is empty, so the instance has no Ingress; reach it with `kubectl port-forward -n {ns} svc/{service} 4096:4096` and open http://localhost:4096, or set spec.hostname"
            ),
        );
        return Ok((Exposure { kind: "Ingress", host: None, tls: false }, condition));
    };
    let live = api.patch(&naming::route(name), &apply_params(), &Patch::Apply(&desired)).await?;
    let published = ingress::published(&live);
    let condition = match &published {
        Some((host, _)) => Desired::new(
            status::INGRESS_READY,
            true,
            "AddressPublished",
            format!("the ingress controller serves {host}"),
        ),
        None => Desired::new(
            status::INGRESS_READY,
            false,
            "AddressPending",
            "waiting for an ingress controller to publish an address for the Ingress (check --ingress-class and that a controller runs)",
        ),
    };
    let (host, tls) = published.map(|(h, t)| (Some(h), t)).unwrap_or((None, false));
    Ok((Exposure { kind: "Ingress", host, tls }, condition))
}

/// The IngressClass annotated as the cluster's default, if there is one.
async fn default_ingress_class(ctx: &Context) -> Result<Option<String>, Error> {
    let classes = Api::<IngressClass>::all(ctx.client.clone()).list_metadata(&ListParams::default()).await?;
    Ok(classes.items.into_iter().find_map(|c| {
        let default = c
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("ingressclass.kubernetes.io/is-default-class"))
            .is_some_and(|v| v == "true");
        if default { c.metadata.name } else { None }
    }))
}

fn observe(deployment: Option<&Deployment>, exposure: Exposure, desired_replicas: i32) -> Observed {
    let status = deployment.and_then(|d| d.status.clone()).unwrap_or_default();
    let generation = deployment.and_then(|d| d.metadata.generation);
    Observed {
        desired_replicas,
        available_replicas: status.available_replicas.unwrap_or(0),
        updated_replicas: status.updated_replicas.unwrap_or(0),
        deployment_current: deployment.is_some()
            && status.observed_generation.is_some()
            && status.observed_generation >= generation,
        admitted_host: exposure.host,
        tls: exposure.tls,
        exposure: exposure.kind,
    }
}

fn instance_key(inst: &TinycodeInstance) -> String {
    format!("{}/{}", inst.namespace().unwrap_or_default(), inst.name_any())
}

fn owner_reference(inst: &TinycodeInstance) -> OwnerReference {
    OwnerReference {
        api_version: TinycodeInstance::api_version(&()).into_owned(),
        kind: TinycodeInstance::kind(&()).into_owned(),
        name: inst.name_any(),
        uid: inst.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

async fn patch_status(
    ctx: &Context,
    inst: &TinycodeInstance,
    status: &TinycodeInstanceStatus,
) -> Result<(), kube::Error> {
    let api: Api<TinycodeInstance> = Api::namespaced(ctx.client.clone(), &inst.namespace().unwrap_or_default());
    let patch = json!({
        "apiVersion": TinycodeInstance::api_version(&()),
        "kind": TinycodeInstance::kind(&()),
        "status": status,
    });
    api.patch_status(&inst.name_any(), &apply_params(), &Patch::Apply(&patch)).await.map(drop)
}

fn apply_params() -> PatchParams {
    PatchParams::apply(FIELD_MANAGER).force()
}

async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

fn now() -> String {
    let t = Timestamp::now();
    Timestamp::from_second(t.as_second()).unwrap_or(t).to_string()
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

//! Stage 1 of the reconcile: everything the later (pure) stages need, read
//! once. Watched kinds come from the reflector stores; only the tenant's
//! Secrets (never watched: that would need cluster-wide Secret rights), a
//! namespace's preparation (cached a while) and a release revision's
//! manifest (once per revision) are read live. vLLM servers are probed here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::TinycodeInstance;
use crate::api::naming;
use crate::helm::{manifest, release};
use crate::platform::openshift::Route;
use crate::platform::prepare;
use crate::platform::scc::ALL_TIERS;
use crate::reconcile::caches::stores::Lookup;
use crate::reconcile::error::During;
use crate::reconcile::{Context, Error, discover};
use crate::vllm::Report;
use crate::watch_scope::{cluster_api, cluster_api_dynamic};

use crate::reconcile::marks::HELM_RELEASE_NAMESPACE_ANNOTATION;

/// What the cluster holds for one instance.
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// The namespace's labels; None when the namespace is gone or going.
    pub namespace_labels: Option<BTreeMap<String, String>>,
    /// Rules the operator lacks in the namespace (empty: prepared).
    pub missing_rules: Vec<String>,
    /// SecurityContextConstraints installed, by name.
    pub installed_sccs: BTreeSet<String>,
    /// The role the instance's ClusterRoleBinding binds now, if it exists.
    pub bound_cluster_role: Option<String>,
    /// Namespaces labelled open to vLLM discovery (and prepared for the operator).
    pub discovery_labelled: BTreeSet<String>,
    /// Namespaces labelled open to discovery where the operator is not (or no
    /// longer) prepared: skipped, so another namespace's admin cannot block
    /// this instance's upgrades by revoking the operator's rights there.
    pub discovery_unprepared: Vec<String>,
    pub password: SecretFacts,
    /// A fresh random password, drawn only when the generated Secret is missing.
    pub fresh_password: Option<String>,
    pub git_credentials: Option<SecretFacts>,
    pub kubeconfig: Option<KubeconfigFacts>,
    /// Sign-in modes: the sign-in Secret and, for oidc, the provider.
    pub signin: Option<SigninFacts>,
    pub release: ReleaseFacts,
    pub deployment: Option<Arc<Deployment>>,
    /// SCC grants present, by name.
    pub grants: BTreeMap<String, ObjectMeta>,
    pub route: Option<Arc<Route>>,
    pub ingress: Option<Arc<Ingress>>,
    /// The IngressClass annotated as the cluster's default.
    pub default_ingress_class: Option<String>,
    /// Probes of the configured providers and of discovered Services.
    pub providers: Vec<Report>,
    pub discovered: Vec<Report>,
    /// Discovered Services found beyond those probed (`vllm::MAX_DISCOVERED_PER_INSTANCE`).
    pub discovery_skipped: usize,
    /// Without a cluster (`tinycode-operator values`): the namespace gates
    /// are not checked and nothing is approved.
    pub offline: bool,
    /// The last activity check (instances with an idle timeout).
    pub activity: Option<crate::reconcile::idle::Observation>,
    /// When this was observed (idle stop measures time from it).
    pub now: k8s_openapi::jiff::Timestamp,
    /// The TinycodeClass that applies.
    pub class: crate::reconcile::class_policy::Choice,
    /// Instances of that class in the namespace created before this one.
    pub class_rank: usize,
    /// Secrets named by spec.imagePullSecrets, spec.env and the vLLM
    /// providers' apiKeySecret (with the class's pull secrets), by name: their keys.
    pub secrets_present: BTreeMap<String, BTreeSet<String>>,
    /// Digests of those Secrets' content (never the content), by name: a
    /// rotated key rolls the pods that read it from the environment.
    pub secret_digests: BTreeMap<String, String>,
    /// The vLLM providers' API keys, by provider name (sent by the probe only).
    pub api_keys: BTreeMap<String, String>,
    /// Other instances' claims on the host spec.hostname names.
    pub host_claims: Vec<crate::reconcile::hosts::Claim>,
}

impl Observed {
    /// What `tinycode-operator values` assumes without a cluster: the named
    /// Secrets exist (content unknown), nothing is approved, nothing applied.
    pub fn assumed(providers: Vec<Report>) -> Observed {
        let present = |keys: &[&str]| SecretFacts::Present {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            digest: String::new(),
        };
        Observed {
            password: present(&[crate::reconcile::marks::PASSWORD_KEY]),
            git_credentials: Some(present(&["ssh-privatekey"])),
            providers,
            offline: true,
            ..Default::default()
        }
    }
}

/// What a sign-in instance needs besides its spec.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SigninFacts {
    /// The sign-in Secret's data now (None: it does not exist).
    pub current: Option<BTreeMap<String, String>>,
    /// A fresh cookie secret, drawn when the Secret keeps no usable one.
    pub fresh_cookie: Option<String>,
    /// oidc: the instance's relay credential, or why it cannot be made.
    pub relay_credential: Option<Result<String, String>>,
    /// oidc: the provider's endpoints, or why they could not be read.
    pub endpoints: Option<Result<crate::render::signin::OidcEndpoints, String>>,
}

/// A cookie secret oauth2-proxy and oauth-proxy accept: 32 characters (an AES-256 key).
pub fn usable_cookie_secret(value: &str) -> bool {
    value.len() == 32 && value.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A Secret the instance names: its keys and a digest of its content (never the values).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SecretFacts {
    #[default]
    Missing,
    Present {
        keys: Vec<String>,
        digest: String,
    },
}

/// The kubeconfig of cluster-admin mode, as far as the operator may see it.
#[derive(Debug, Clone, Default)]
pub struct KubeconfigFacts {
    pub source_namespace: String,
    /// The source Secret; None when missing or (another namespace) unreadable.
    pub source: Option<Secret>,
    /// The copy in the instance namespace (metadata), when the source is elsewhere.
    pub copy: Option<ObjectMeta>,
}

/// Helm's view of the release.
#[derive(Debug, Clone, Default)]
pub struct ReleaseFacts {
    pub records: Vec<release::Record>,
    /// The instance's objects belong to a release an earlier build kept in the instance namespace.
    pub legacy: bool,
    /// The release still has the name an earlier build shortened it to
    /// ([`naming::previous_release_name`]): it moves to the current name.
    pub renamed_from: Option<String>,
    /// The objects the latest deployed revision rendered, with what the cluster holds.
    pub rendered: Vec<(manifest::ObjectRef, Option<ObjectMeta>)>,
}

/// Reads everything about `inst`.
pub async fn observe(ctx: &Context, inst: &TinycodeInstance) -> Result<Observed, Error> {
    let ns = inst.namespace().unwrap_or_default();
    let namespace = ctx.stores.namespaces.get(&ObjectRef::new(&ns));
    let mut o = Observed {
        activity: ctx.activity.lock().expect("lock").get(&ObjectRef::from_obj(inst)).cloned(),
        now: k8s_openapi::jiff::Timestamp::now(),
        namespace_labels: namespace
            .as_ref()
            .filter(|n| n.metadata.deletion_timestamp.is_none())
            .map(|n| n.metadata.labels.clone().unwrap_or_default()),
        ..Default::default()
    };
    (o.class, o.class_rank) = class_of(ctx, inst);
    if let Some(host) = crate::reconcile::hosts::wanted(inst) {
        o.host_claims = crate::reconcile::hosts::others(&ctx.stores.instances.state(), inst, &host);
    }
    // A namespace that did not opt in, or is not prepared, is all validate
    // needs to know (and its Secrets would be refused anyway).
    if let Some((key, value)) = &ctx.settings.required_namespace_label
        && o.namespace_labels.as_ref().and_then(|l| l.get(key)) != Some(value)
    {
        return Ok(o);
    }
    if ctx.settings.require_prepared_label
        && !o.namespace_labels.as_ref().is_some_and(crate::platform::prepare::labelled_prepared)
    {
        return Ok(o);
    }
    o.missing_rules = prepared(ctx, &ns).await?;
    if !o.missing_rules.is_empty() {
        return Ok(o);
    }
    from_stores(ctx, inst, &mut o);
    (o.discovery_labelled, o.discovery_unprepared) =
        prepared_discovery(ctx, std::mem::take(&mut o.discovery_labelled)).await?;
    secrets(ctx, inst, &mut o).await?;
    o.release = release_facts(ctx, &ns, &inst.name_any(), o.deployment.as_deref()).await?;
    let others = discover::approved_discovery(&ns, &inst.spec, &o.discovery_labelled);
    let targets: Vec<(String, String, Option<String>)> = inst
        .spec
        .vllm
        .iter()
        .flatten()
        .map(|p| (p.name.clone(), p.url.clone(), o.api_keys.get(&p.name).cloned()))
        .collect();
    let (candidates, skipped) = discover::vllm_services(ctx, &ns, &others);
    o.discovery_skipped = skipped;
    (o.providers, o.discovered) =
        futures::join!(ctx.prober.probe_all_with_keys(&targets), ctx.prober.probe_all(&candidates));
    Ok(o)
}

/// The class that applies to `inst` and how many older instances of it the
/// namespace holds (from the watches).
pub fn class_of(ctx: &Context, inst: &TinycodeInstance) -> (crate::reconcile::class_policy::Choice, usize) {
    use crate::reconcile::class_policy::{self, Choice};
    let classes = ctx.stores.classes.state();
    let choice = class_policy::choose(inst.spec.class_name.as_deref(), &classes);
    let Choice::Found { name, spec, .. } = &choice else { return (choice, 0) };
    if spec.max_instances_per_namespace.is_none() {
        return (choice, 0);
    }
    let ns = inst.namespace().unwrap_or_default();
    let stamp =
        |i: &TinycodeInstance| i.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default();
    let all = ctx.stores.instances.state();
    let same: Vec<(String, String)> = all
        .iter()
        .filter(|i| i.metadata.namespace.as_deref() == Some(ns.as_str()) && i.metadata.deletion_timestamp.is_none())
        .filter(|i| i.metadata.uid != inst.metadata.uid)
        .filter(|i| class_policy::counts_against(i, name, &classes))
        .map(|i| (stamp(i), i.name_any()))
        .collect();
    let me = (stamp(inst), inst.name_any());
    let rank = class_policy::rank((&me.0, &me.1), same.iter().map(|(a, b)| (a.as_str(), b.as_str())));
    (choice, rank)
}

/// Largest API key the probe sends (a bearer token is far smaller).
const MAX_API_KEY_LEN: usize = 4096;

/// The Secrets the spec and its class name for pulls, environment and API
/// keys: which exist and with which keys; the providers' API keys, read
/// for the probe alone.
async fn referenced_secrets(api: &Api<Secret>, inst: &TinycodeInstance, o: &mut Observed) -> Result<(), Error> {
    let spec = &inst.spec;
    let class_pulls: Vec<String> = match &o.class {
        crate::reconcile::class_policy::Choice::Found { spec, .. } => {
            spec.image_pull_secrets.iter().map(|s| s.name.clone()).collect()
        }
        _ => Vec::new(),
    };
    let mut names: BTreeSet<String> = spec.image_pull_secrets.iter().map(|s| s.name.clone()).collect();
    names.extend(class_pulls);
    names.extend(spec.env.iter().map(|e| e.secret_key_ref.name.clone()));
    names.extend(spec.vllm.iter().flatten().filter_map(|p| p.api_key_secret.as_ref().map(|r| r.name.clone())));
    for name in names {
        let Some(secret) = api.get_opt(&name).await.during("read a Secret the spec names")? else { continue };
        o.secret_digests.insert(name.clone(), secret_digest(&secret));
        let data = secret.data.unwrap_or_default();
        for p in spec.vllm.iter().flatten() {
            let Some(r) = p.api_key_secret.as_ref().filter(|r| r.name == name) else { continue };
            if let Some(value) = data.get(&r.key).filter(|v| v.0.len() <= MAX_API_KEY_LEN)
                && let Ok(text) = std::str::from_utf8(&value.0)
            {
                o.api_keys.insert(p.name.clone(), text.trim().to_string());
            }
        }
        o.secrets_present.insert(name, data.into_keys().collect());
    }
    Ok(())
}

/// What the watches hold about the instance.
fn from_stores(ctx: &Context, inst: &TinycodeInstance, o: &mut Observed) {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let stores = &ctx.stores;
    o.installed_sccs = stores.sccs.iter().flat_map(|s| s.state()).filter_map(|s| s.metadata.name.clone()).collect();
    o.bound_cluster_role = stores
        .cluster_role_bindings
        .get(&ObjectRef::new(&naming::cluster_role_binding(&ns, &name)))
        .map(|b| b.role_ref.name.clone());
    o.discovery_labelled = discover::labelled_namespaces(ctx, &ns, &inst.spec);
    o.deployment = stores.deployments.get(&ObjectRef::new(&naming::fullname(&name)).within(&ns));
    o.grants = ALL_TIERS
        .iter()
        .map(|t| naming::scc_grant(&name, t.as_str()))
        .filter_map(|g| {
            let rb = stores.role_bindings.get(&ObjectRef::new(&g).within(&ns))?;
            Some((g, rb.metadata.clone()))
        })
        .collect();
    o.route = stores.routes.as_ref().and_then(|s| s.get(&ObjectRef::new(&naming::route(&name)).within(&ns)));
    o.ingress = stores.ingresses.as_ref().and_then(|s| s.get(&ObjectRef::new(&naming::route(&name)).within(&ns)));
    o.default_ingress_class = stores.ingress_classes.as_ref().and_then(|s| {
        s.state().iter().find_map(|c| {
            let annotations = c.metadata.annotations.as_ref()?;
            let default = annotations.get("ingressclass.kubernetes.io/is-default-class").is_some_and(|v| v == "true");
            if default { c.metadata.name.clone() } else { None }
        })
    });
}

/// The Secrets the instance names, read live (never watched: that would
/// take cluster-wide Secret rights); their keys and digests only.
async fn secrets(ctx: &Context, inst: &TinycodeInstance, o: &mut Observed) -> Result<(), Error> {
    let (name, ns) = (inst.name_any(), inst.namespace().unwrap_or_default());
    let spec = &inst.spec;
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let named = spec.auth.password_secret.clone().filter(|p| !p.is_empty());
    o.password = secret_facts(&api, named.as_deref().unwrap_or(&naming::generated_password(&name))).await?;
    if named.is_none() && o.password == SecretFacts::Missing {
        let password = crate::render::secret::random_password(32)
            .map_err(|e| Error::blocked(crate::reconcile::reason::Blocked::PasswordGenerationFailed, e))?;
        o.fresh_password = Some(password);
    }
    if let Some(cred) = spec.git.as_ref().and_then(|g| g.credentials_secret.as_deref()) {
        o.git_credentials = Some(secret_facts(&api, cred).await?);
    }
    if spec.cluster_admin.enabled {
        o.kubeconfig = Some(kubeconfig(ctx, inst, &ns).await?);
    }
    // The front's Secret: the sign-in modes' always, password mode's while
    // it has a front (the start credential alone).
    if spec.auth.mode.signs_in() || ctx.settings.signin.front {
        o.signin = Some(signin_facts(ctx, &api, &ns, &name, spec.auth.mode).await?);
    }
    referenced_secrets(&api, inst, o).await
}

/// The front's Secret's data (read live, like every Secret), a fresh cookie
/// secret when a sign-in mode's keeps none, and for oidc the provider's side.
async fn signin_facts(
    ctx: &Context,
    api: &Api<Secret>,
    ns: &str,
    name: &str,
    mode: crate::api::AuthMode,
) -> Result<SigninFacts, Error> {
    use crate::render::signin::COOKIE_SECRET_KEY;
    let secret = api.get_opt(&naming::signin_secret(name)).await.during("read the sign-in Secret")?;
    let current = secret.map(|s| {
        s.data
            .unwrap_or_default()
            .into_iter()
            .filter_map(|(k, v)| String::from_utf8(v.0).ok().map(|v| (k, v)))
            .collect::<BTreeMap<_, _>>()
    });
    let kept = current.as_ref().and_then(|c| c.get(COOKIE_SECRET_KEY)).is_some_and(|c| usable_cookie_secret(c));
    let fresh_cookie = if kept || !mode.signs_in() {
        None
    } else {
        Some(
            crate::render::secret::random_password(32)
                .map_err(|e| Error::blocked(crate::reconcile::reason::Blocked::PasswordGenerationFailed, e))?,
        )
    };
    let (relay_credential, endpoints) = match (mode, ctx.oidc.as_ref()) {
        (crate::api::AuthMode::Oidc, Some(provider)) => {
            (Some(provider.relay_credential(ns, name)), Some(provider.endpoints().await))
        }
        _ => (None, None),
    };
    Ok(SigninFacts { current, fresh_cookie, relay_credential, endpoints })
}

/// Splits discovery namespaces into those prepared for the operator (the
/// cluster-admin's label where required, and the operator's rights) and the
/// rest. They belong to other tenants, whose admins can revoke the operator's
/// rights at any time, so their rights are asked live, never cached: a helm
/// run must not meet a namespace it may no longer write.
async fn prepared_discovery(
    ctx: &Context,
    labelled: BTreeSet<String>,
) -> Result<(BTreeSet<String>, Vec<String>), Error> {
    let mut ready = BTreeSet::new();
    let mut unprepared = Vec::new();
    for ns in labelled {
        let labels = ctx.stores.namespaces.get(&ObjectRef::new(&ns)).and_then(|n| n.metadata.labels.clone());
        let marked = !ctx.settings.require_prepared_label
            || labels.as_ref().is_some_and(crate::platform::prepare::labelled_prepared);
        if marked && prepared_live(ctx, &ns).await?.is_empty() {
            ready.insert(ns);
        } else {
            unprepared.push(ns);
        }
    }
    Ok((ready, unprepared))
}

/// Forgets that these namespaces were found prepared (a helm run failed
/// there: the rights may be gone), so the next reconcile asks again.
pub fn forget_prepared<'a>(ctx: &Context, namespaces: impl IntoIterator<Item = &'a str>) {
    ctx.prepared.forget(namespaces);
}

/// Rules the operator lacks in `ns` (empty: prepared). A positive answer is
/// trusted for a while; a namespace that lost its preparation since then
/// shows as refused calls, which report and retry on their own.
pub async fn prepared(ctx: &Context, ns: &str) -> Result<Vec<String>, Error> {
    if ctx.prepared.fresh(ns) {
        return Ok(Vec::new());
    }
    let missing = prepared_live(ctx, ns).await?;
    if missing.is_empty() {
        ctx.prepared.remember(ns);
    }
    Ok(missing)
}

/// Asks the API server which rules the operator has in `ns`.
pub async fn prepared_live(ctx: &Context, ns: &str) -> Result<Vec<String>, Error> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec { namespace: Some(ns.into()) },
        ..Default::default()
    };
    let result = cluster_api::<SelfSubjectRulesReview>(&ctx.client)
        .create(&PostParams::default(), &review)
        .await
        .during("ask which rules the operator has in the namespace")?;
    Ok(match result.status {
        // Some authorizer could not list its rules; let the real calls decide.
        Some(s) if !s.incomplete => prepare::missing(&s.resource_rules, ctx.settings.platform),
        _ => Vec::new(),
    })
}

async fn secret_facts(api: &Api<Secret>, name: &str) -> Result<SecretFacts, Error> {
    Ok(match api.get_opt(name).await.during("read a Secret the instance names")? {
        None => SecretFacts::Missing,
        Some(s) => {
            let digest = secret_digest(&s);
            let mut keys: Vec<String> = s.data.unwrap_or_default().into_keys().collect();
            keys.extend(s.string_data.unwrap_or_default().into_keys());
            SecretFacts::Present { keys, digest }
        }
    })
}

/// sha256 of a Secret's name and content (sorted keys); never logged.
pub fn secret_digest(secret: &Secret) -> String {
    let data = secret.data.iter().flatten().map(|(k, v)| (k.as_str(), v.0.as_slice()));
    content_digest(secret.metadata.name.as_deref().unwrap_or_default(), data)
}

/// The digest [`secret_digest`] gives a Secret with this name and data.
pub fn content_digest<'a>(name: &str, data: impl Iterator<Item = (&'a str, &'a [u8])>) -> String {
    let mut bytes = name.as_bytes().to_vec();
    for (k, v) in data {
        bytes.push(0);
        bytes.extend_from_slice(k.as_bytes());
        bytes.push(0);
        bytes.extend_from_slice(v);
    }
    crate::render::values::sha256_hex(&bytes)
}

async fn kubeconfig(ctx: &Context, inst: &TinycodeInstance, ns: &str) -> Result<KubeconfigFacts, Error> {
    let ca = &inst.spec.cluster_admin;
    let secret_name = ca.kubeconfig_secret_name.clone().unwrap_or_default();
    let source_namespace = ca.kubeconfig_namespace.clone().filter(|n| !n.is_empty()).unwrap_or_else(|| ns.to_string());
    let cross_namespace = source_namespace != ns;
    let source = match Api::<Secret>::namespaced(ctx.client.clone(), &source_namespace).get_opt(&secret_name).await {
        Ok(s) => s,
        Err(kube::Error::Api(s)) if s.code == 403 && cross_namespace => None,
        Err(source) => return Err(Error::Kube { during: "read the kubeconfig Secret", source }),
    };
    let copy = if cross_namespace {
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .get_metadata_opt(&naming::kubeconfig_copy(&inst.name_any()))
            .await
            .during("read the kubeconfig copy")?
            .map(|m| m.metadata)
    } else {
        None
    };
    Ok(KubeconfigFacts { source_namespace, source, copy })
}

async fn release_facts(
    ctx: &Context,
    ns: &str,
    name: &str,
    deployment: Option<&Deployment>,
) -> Result<ReleaseFacts, Error> {
    let release_name = naming::release_name(ns, name);
    let named = |release: &str| ctx.stores.records_of(release);
    let records = release::records(&named(&release_name));
    let renamed_from = if records.is_empty() {
        naming::previous_release_name(ns, name).filter(|old| !named(old).is_empty())
    } else {
        None
    };
    let legacy = records.is_empty()
        && deployment
            .and_then(|d| d.metadata.annotations.as_ref())
            .and_then(|a| a.get(HELM_RELEASE_NAMESPACE_ANNOTATION))
            .is_some_and(|release_ns| release_ns == ns);
    let mut rendered = Vec::new();
    if let Some(latest) = release::latest(&records).filter(|r| r.status == release::ReleaseStatus::Deployed) {
        for obj in rendered_objects(ctx, latest).await?.iter() {
            let meta = match ctx.stores.meta(&obj.kind, &obj.namespace, &obj.name) {
                Lookup::Found(m) => Some(*m),
                Lookup::Missing => None,
                Lookup::NotCached => live_meta(ctx, obj).await?,
            };
            rendered.push((obj.clone(), meta));
        }
    }
    Ok(ReleaseFacts { records, legacy, renamed_from, rendered })
}

async fn live_meta(ctx: &Context, obj: &manifest::ObjectRef) -> Result<Option<ObjectMeta>, Error> {
    let (group, version) = obj.api_version.split_once('/').unwrap_or(("", obj.api_version.as_str()));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &obj.kind));
    let api: Api<DynamicObject> = if obj.namespace.is_empty() {
        cluster_api_dynamic(&ctx.client, &resource)
    } else {
        Api::namespaced_with(ctx.client.clone(), &obj.namespace, &resource)
    };
    Ok(api.get_metadata_opt(&obj.name).await.during("read an object the release rendered")?.map(|m| m.metadata))
}

/// The objects a release revision rendered, decoded once per record (a
/// revision's manifest never changes).
async fn rendered_objects(ctx: &Context, record: &release::Record) -> Result<Arc<Vec<manifest::ObjectRef>>, Error> {
    if let Some(objs) = ctx.manifests.lock().expect("lock").get(&record.secret_name) {
        return Ok(objs.clone());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.settings.operator_namespace);
    let secret = api.get(&record.secret_name).await.during("read the release record")?;
    let data = secret.data.unwrap_or_default();
    let field = data.get("release").map(|b| b.0.as_slice()).unwrap_or_default();
    let objs = manifest::objects_from_record(field).map_err(|e| {
        Error::blocked(
            crate::reconcile::reason::Blocked::ReleaseRecordUnreadable,
            format!("release record {}: {e}", record.secret_name),
        )
    })?;
    Ok(ctx.remember_rendered(&record.secret_name, objs))
}

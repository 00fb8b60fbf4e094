//! Stage 1 of the reconcile: everything the later (pure) stages need, read
//! once. Watched kinds come from the reflector stores; only the tenant's
//! Secrets (never watched: that would need cluster-wide Secret rights), a
//! namespace's preparation (cached a while) and a release revision's
//! manifest (once per revision) are read live. vLLM servers are probed here.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::authorization::v1::{SelfSubjectRulesReview, SelfSubjectRulesReviewSpec};
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, PostParams};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};

use crate::api::TinycodeInstance;
use crate::helm::{manifest, release};
use crate::platform::openshift::Route;
use crate::platform::prepare;
use crate::platform::scc::ALL_TIERS;
use crate::reconcile::stores::Lookup;
use crate::reconcile::{Context, Error, approval};
use crate::render::naming;
use crate::vllm::{self, Report};

/// How long a namespace found prepared is trusted without asking again.
const PREPARED_TTL: Duration = Duration::from_secs(300);
/// Annotation helm puts on every object it manages: the namespace of the release records.
pub const HELM_RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";

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
    /// Namespaces labelled open to vLLM discovery.
    pub discovery_labelled: BTreeSet<String>,
    pub password: SecretFacts,
    /// A fresh random password, drawn only when the generated Secret is missing.
    pub fresh_password: Option<String>,
    pub git_credentials: Option<SecretFacts>,
    pub kubeconfig: Option<KubeconfigFacts>,
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
    /// Without a cluster (`tinycode-operator values`): the namespace gates
    /// are not checked and nothing is approved.
    pub offline: bool,
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
            password: present(&[crate::reconcile::validate::PASSWORD_KEY]),
            git_credentials: Some(present(&["ssh-privatekey"])),
            providers,
            offline: true,
            ..Default::default()
        }
    }
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
    /// The objects the latest deployed revision rendered, with what the cluster holds.
    pub rendered: Vec<(manifest::ObjectRef, Option<ObjectMeta>)>,
}

/// Reads everything about `inst`.
pub async fn observe(ctx: &Context, inst: &TinycodeInstance) -> Result<Observed, Error> {
    let name = inst.name_any();
    let ns = inst.namespace().unwrap_or_default();
    let spec = &inst.spec;
    let stores = &ctx.stores;
    let namespace = stores.namespaces.get(&ObjectRef::new(&ns));
    let namespace_labels = namespace
        .as_ref()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .map(|n| n.metadata.labels.clone().unwrap_or_default());
    // A namespace that did not opt in, or is not prepared, is all validate
    // needs to know (and its Secrets would be refused anyway).
    let early = |missing_rules: Vec<String>| Observed {
        namespace_labels: namespace_labels.clone(),
        missing_rules,
        ..Default::default()
    };
    if let Some((key, value)) = &ctx.settings.required_namespace_label
        && namespace_labels.as_ref().and_then(|l| l.get(key)) != Some(value)
    {
        return Ok(early(Vec::new()));
    }
    let missing_rules = prepared(ctx, &ns).await?;
    if !missing_rules.is_empty() {
        return Ok(early(missing_rules));
    }
    let installed_sccs = stores.sccs.iter().flat_map(|s| s.state()).filter_map(|s| s.metadata.name.clone()).collect();
    let bound_cluster_role = stores
        .cluster_role_bindings
        .get(&ObjectRef::new(&naming::cluster_role_binding(&ns, &name)))
        .map(|b| b.role_ref.name.clone());
    let discovery_labelled = discovery_labelled(ctx, &ns, spec);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let password_name = spec
        .auth
        .password_secret
        .clone()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| naming::generated_password(&name));
    let password = secret_facts(&secrets, &password_name).await?;
    let generated = spec.auth.password_secret.as_deref().is_none_or(str::is_empty);
    let fresh_password = if generated && password == SecretFacts::Missing {
        Some(
            crate::render::secret::random_password(32)
                .map_err(|e| Error::blocked(crate::reconcile::reason::Blocked::PasswordGenerationFailed, e))?,
        )
    } else {
        None
    };
    let git_credentials = match spec.git.as_ref().and_then(|g| g.credentials_secret.as_deref()) {
        Some(cred) => Some(secret_facts(&secrets, cred).await?),
        None => None,
    };
    let kubeconfig = if spec.cluster_admin.enabled { Some(kubeconfig(ctx, inst, &ns).await?) } else { None };
    let deployment = stores.deployments.get(&ObjectRef::new(&naming::fullname(&name)).within(&ns));
    let release = release_facts(ctx, &ns, &name, deployment.as_deref()).await?;
    let grants = ALL_TIERS
        .iter()
        .map(|t| naming::scc_grant(&name, t.as_str()))
        .filter_map(|g| {
            let rb = stores.role_bindings.get(&ObjectRef::new(&g).within(&ns))?;
            Some((g, rb.metadata.clone()))
        })
        .collect();
    let route = stores.routes.as_ref().and_then(|s| s.get(&ObjectRef::new(&naming::route(&name)).within(&ns)));
    let ingress = stores.ingresses.as_ref().and_then(|s| s.get(&ObjectRef::new(&naming::route(&name)).within(&ns)));
    let default_ingress_class = stores.ingress_classes.as_ref().and_then(|s| {
        s.state().iter().find_map(|c| {
            let default = c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("ingressclass.kubernetes.io/is-default-class"))
                .is_some_and(|v| v == "true");
            if default { c.metadata.name.clone() } else { None }
        })
    });
    let (own, others) = (ns.clone(), approved_discovery(&ns, spec, &discovery_labelled));
    let targets: Vec<(String, String)> = spec.vllm.iter().flatten().map(|p| (p.name.clone(), p.url.clone())).collect();
    let candidates = discover_vllm(ctx, &own, &others).await;
    let (providers, discovered) = futures::join!(ctx.prober.probe_all(&targets), ctx.prober.probe_all(&candidates));
    Ok(Observed {
        namespace_labels,
        missing_rules,
        installed_sccs,
        bound_cluster_role,
        discovery_labelled,
        password,
        fresh_password,
        git_credentials,
        kubeconfig,
        release,
        deployment,
        grants,
        route,
        ingress,
        default_ingress_class,
        providers,
        discovered,
        offline: false,
    })
}

/// Rules the operator lacks in `ns` (empty: prepared). A positive answer is
/// trusted for a while; a namespace that lost its preparation since then
/// shows as refused calls, which report and retry on their own.
pub async fn prepared(ctx: &Context, ns: &str) -> Result<Vec<String>, Error> {
    if ctx.prepared.lock().expect("lock").get(ns).is_some_and(|at| at.elapsed() < PREPARED_TTL) {
        return Ok(Vec::new());
    }
    let missing = prepared_live(ctx, ns).await?;
    if missing.is_empty() {
        ctx.prepared.lock().expect("lock").insert(ns.to_string(), Instant::now());
    }
    Ok(missing)
}

/// Asks the API server which rules the operator has in `ns`.
pub async fn prepared_live(ctx: &Context, ns: &str) -> Result<Vec<String>, Error> {
    let review = SelfSubjectRulesReview {
        spec: SelfSubjectRulesReviewSpec { namespace: Some(ns.into()) },
        ..Default::default()
    };
    let result = Api::<SelfSubjectRulesReview>::all(ctx.client.clone()).create(&PostParams::default(), &review).await?;
    Ok(match result.status {
        // Some authorizer could not list its rules; let the real calls decide.
        Some(s) if !s.incomplete => prepare::missing(&s.resource_rules, ctx.settings.platform),
        _ => Vec::new(),
    })
}

fn discovery_labelled(ctx: &Context, ns: &str, spec: &crate::api::TinycodeInstanceSpec) -> BTreeSet<String> {
    let requested = spec.discovery.iter().flat_map(|d| d.namespaces.iter());
    if requested.clone().all(|n| n == ns) {
        return BTreeSet::new();
    }
    ctx.stores
        .namespaces
        .state()
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.metadata.labels.as_ref().and_then(|l| l.get(approval::DISCOVERY_LABEL)).is_some_and(|v| v == "true")
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// Namespaces besides its own whose Services the instance may discover.
pub fn approved_discovery(
    ns: &str,
    spec: &crate::api::TinycodeInstanceSpec,
    labelled: &BTreeSet<String>,
) -> Vec<String> {
    let requested: Vec<String> = spec.discovery.iter().flat_map(|d| d.namespaces.iter().cloned()).collect();
    if requested.iter().all(|n| n == ns) {
        return Vec::new();
    }
    approval::discovery_namespaces(&requested, ns, labelled).0
}

async fn secret_facts(api: &Api<Secret>, name: &str) -> Result<SecretFacts, Error> {
    Ok(match api.get_opt(name).await? {
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
        Err(e) => return Err(e.into()),
    };
    let copy = if cross_namespace {
        Api::<Secret>::namespaced(ctx.client.clone(), ns)
            .get_metadata_opt(&naming::kubeconfig_copy(&inst.name_any()))
            .await?
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
    let metas: Vec<ObjectMeta> = ctx
        .stores
        .records
        .state()
        .iter()
        .filter(|s| s.metadata.labels.as_ref().and_then(|l| l.get("name")) == Some(&release_name))
        .map(|s| s.metadata.clone())
        .collect();
    let records = release::records(&metas);
    let legacy = records.is_empty()
        && deployment
            .and_then(|d| d.metadata.annotations.as_ref())
            .and_then(|a| a.get(HELM_RELEASE_NAMESPACE_ANNOTATION))
            .is_some_and(|release_ns| release_ns == ns);
    let mut rendered = Vec::new();
    if let Some(latest) = release::latest(&records).filter(|r| r.status == "deployed") {
        for obj in rendered_objects(ctx, latest).await?.iter() {
            let meta = match ctx.stores.meta(&obj.kind, &obj.namespace, &obj.name) {
                Lookup::Found(m) => Some(*m),
                Lookup::Missing => None,
                Lookup::NotCached => live_meta(ctx, obj).await?,
            };
            rendered.push((obj.clone(), meta));
        }
    }
    Ok(ReleaseFacts { records, legacy, rendered })
}

async fn live_meta(ctx: &Context, obj: &manifest::ObjectRef) -> Result<Option<ObjectMeta>, Error> {
    let (group, version) = obj.api_version.split_once('/').unwrap_or(("", obj.api_version.as_str()));
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(group, version, &obj.kind));
    let api: Api<DynamicObject> = if obj.namespace.is_empty() {
        Api::all_with(ctx.client.clone(), &resource)
    } else {
        Api::namespaced_with(ctx.client.clone(), &obj.namespace, &resource)
    };
    Ok(api.get_metadata_opt(&obj.name).await?.map(|m| m.metadata))
}

/// The objects a release revision rendered, decoded once per record (a
/// revision's manifest never changes).
async fn rendered_objects(ctx: &Context, record: &release::Record) -> Result<Arc<Vec<manifest::ObjectRef>>, Error> {
    if let Some(objs) = ctx.manifests.lock().expect("lock").get(&record.secret_name) {
        return Ok(objs.clone());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.settings.operator_namespace);
    let secret = api.get(&record.secret_name).await?;
    let data = secret.data.unwrap_or_default();
    let field = data.get("release").map(|b| b.0.as_slice()).unwrap_or_default();
    let objs = Arc::new(manifest::objects_from_record(field).map_err(|e| {
        Error::blocked(
            crate::reconcile::reason::Blocked::ReleaseRecordUnreadable,
            format!("release record {}: {e}", record.secret_name),
        )
    })?);
    let mut cache = ctx.manifests.lock().expect("lock");
    if cache.len() > 4096 {
        cache.clear();
    }
    cache.insert(record.secret_name.clone(), objs.clone());
    Ok(objs)
}

/// Services annotated `tinycode.dev/discover=vllm` in the instance namespace
/// and the approved discovery namespaces, as (name, base URL). Listing errors
/// only shorten the list: discovery feeds warnings, never failures.
async fn discover_vllm(ctx: &Context, ns: &str, others: &[String]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for namespace in std::iter::once(ns).chain(others.iter().map(String::as_str)) {
        let services: Vec<Arc<Service>> = if ctx.stores.covers(namespace) {
            ctx.stores
                .services
                .state()
                .into_iter()
                .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
                .collect()
        } else {
            match Api::<Service>::namespaced(ctx.client.clone(), namespace).list(&ListParams::default()).await {
                Ok(list) => list.items.into_iter().map(Arc::new).collect(),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot list Services for vLLM discovery");
                    continue;
                }
            }
        };
        out.extend(services.iter().filter_map(|s| vllm_candidate(s)));
    }
    out
}

/// (namespace/name, base URL) of a Service annotated for discovery.
fn vllm_candidate(svc: &Service) -> Option<(String, String)> {
    let annotations = svc.metadata.annotations.as_ref()?;
    if annotations.get(vllm::DISCOVER_ANNOTATION).map(String::as_str) != Some("vllm") {
        return None;
    }
    let (name, ns) = (svc.metadata.name.clone()?, svc.metadata.namespace.clone()?);
    let url = annotations.get(vllm::URL_ANNOTATION).cloned().or_else(|| {
        let ports = svc.spec.as_ref()?.ports.as_ref()?;
        let port = ports.iter().find(|p| p.name.as_deref() == Some("http")).or(ports.first())?.port;
        Some(format!("http://{name}.{ns}.svc:{port}"))
    })?;
    Some((format!("{ns}/{name}"), url))
}

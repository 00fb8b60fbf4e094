//! Everything the reconcile reads, kept current by watches: one reflector
//! per kind, so a resync reads memory instead of the API server. Kinds the
//! instances own also wake their owner, but only when a field the reconcile
//! reads changed (see [`crate::reconcile::caches::triggers`]).

use std::hash::Hash;
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Secret, Service, ServiceAccount};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass, NetworkPolicy};
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, Role, RoleBinding};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use crate::api::{TinycodeClass, TinycodeInstance};
use crate::platform::openshift::{Route, SecurityContextConstraints};
use crate::reconcile::caches::triggers::{
    hash_deployment, hash_ingress, hash_meta, hash_namespace, hash_route, relevant, relevant_owned,
};
use crate::watch_scope::{WatchScope, cluster_api};

/// Label selecting the objects the operator and its chart create.
pub const PART_OF_SELECTOR: &str = "app.kubernetes.io/part-of=tinycode-operator";

type Meta<K> = PartialObjectMeta<K>;

/// The reflector stores the reconcile reads.
#[derive(Clone)]
pub struct Stores {
    pub namespaces: Store<Meta<Namespace>>,
    pub sccs: Option<Store<Meta<SecurityContextConstraints>>>,
    pub deployments: Store<Deployment>,
    pub services: Store<Service>,
    pub service_accounts: Store<Meta<ServiceAccount>>,
    pub config_maps: Store<Meta<ConfigMap>>,
    pub network_policies: Store<Meta<NetworkPolicy>>,
    pub roles: Store<Meta<Role>>,
    pub role_bindings: Store<Meta<RoleBinding>>,
    pub pvcs: Store<Meta<PersistentVolumeClaim>>,
    pub cluster_role_bindings: Store<ClusterRoleBinding>,
    /// Helm's release records (metadata), in the operator namespace only.
    pub records: Store<Meta<Secret>>,
    pub routes: Option<Store<Route>>,
    pub ingresses: Option<Store<Ingress>>,
    pub ingress_classes: Option<Store<Meta<IngressClass>>>,
    /// TinycodeClasses (cluster-scoped): a change wakes the instances it may apply to.
    pub classes: Store<TinycodeClass>,
    /// The instances themselves (the controller's own store): a class's
    /// per-namespace limit counts them.
    pub instances: Store<TinycodeInstance>,
    /// The namespaces the namespaced stores watch.
    pub scope: WatchScope,
}

/// What a store says about one object.
#[derive(Debug, Clone, PartialEq)]
pub enum Lookup {
    Found(Box<ObjectMeta>),
    Missing,
    /// No store holds this kind or namespace: ask the API server.
    NotCached,
}

impl Stores {
    /// Waits until every store has listed once (reads before that would
    /// see an empty cluster and, say, re-install every release).
    pub async fn ready(&self) {
        // Every store is named here, so a new one that is not waited for
        // does not build.
        let Stores {
            namespaces,
            sccs,
            deployments,
            services,
            service_accounts,
            config_maps,
            network_policies,
            roles,
            role_bindings,
            pvcs,
            cluster_role_bindings,
            records,
            routes,
            ingresses,
            ingress_classes,
            classes,
            instances,
            scope: _,
        } = self;
        wait_store(namespaces).await;
        wait_store(classes).await;
        wait_store(instances).await;
        wait_store(deployments).await;
        wait_store(services).await;
        wait_store(service_accounts).await;
        wait_store(config_maps).await;
        wait_store(network_policies).await;
        wait_store(roles).await;
        wait_store(role_bindings).await;
        wait_store(pvcs).await;
        wait_store(cluster_role_bindings).await;
        wait_store(records).await;
        if let Some(s) = sccs {
            wait_store(s).await;
        }
        if let Some(s) = routes {
            wait_store(s).await;
        }
        if let Some(s) = ingresses {
            wait_store(s).await;
        }
        if let Some(s) = ingress_classes {
            wait_store(s).await;
        }
    }

    /// The stores of kinds a release renders, which [`Stores::meta`] reads,
    /// each known by its own kind's name. Every store is named here, so a new
    /// one is either listed or said to be left out, or this does not build.
    fn rendered(&self) -> [&dyn RenderedStore; 9] {
        let Stores {
            deployments,
            services,
            service_accounts,
            config_maps,
            network_policies,
            roles,
            role_bindings,
            pvcs,
            cluster_role_bindings,
            // Not rendered by a release: namespaces, SCCs and IngressClasses
            // are the cluster's, records are helm's own.
            namespaces: _,
            sccs: _,
            ingress_classes: _,
            records: _,
            // The operator's own kinds: not rendered by a release.
            classes: _,
            instances: _,
            // Rendered too, but not read by kind: `meta` leaves them to the API server.
            routes: _,
            ingresses: _,
            scope: _,
        } = self;
        [
            deployments,
            services,
            service_accounts,
            config_maps,
            network_policies,
            roles,
            role_bindings,
            pvcs,
            cluster_role_bindings,
        ]
    }

    /// The metadata of an object a release rendered, by kind.
    pub fn meta(&self, kind: &str, namespace: &str, name: &str) -> Lookup {
        let ns = (!namespace.is_empty()).then_some(namespace);
        if ns.is_some() && !self.covers(namespace) {
            return Lookup::NotCached;
        }
        match self.rendered().into_iter().find(|s| s.kind() == kind) {
            Some(store) => store.lookup(ns, name),
            None => Lookup::NotCached,
        }
    }

    /// Whether the namespaced stores hold `namespace`.
    pub fn covers(&self, namespace: &str) -> bool {
        self.scope.covers(namespace)
    }

    /// The metadata of helm's records of one release (its `name` label).
    /// Filtered under the store's lock: only the release's own entries are
    /// cloned, not the whole store's (thousands at scale, on every reconcile).
    pub fn records_of(&self, release: &str) -> Vec<ObjectMeta> {
        self.records
            .state_filter(|s| {
                s.metadata.labels.as_ref().and_then(|l| l.get("name")).map(String::as_str) == Some(release)
            })
            .iter()
            .map(|s| s.metadata.clone())
            .collect()
    }
}

/// A store [`Stores::meta`] reads, whatever its kind.
trait RenderedStore {
    /// The kind's name, as a manifest spells it.
    fn kind(&self) -> std::borrow::Cow<'static, str>;
    /// The metadata of one object (cluster-scoped kinds ignore `ns`).
    fn lookup(&self, ns: Option<&str>, name: &str) -> Lookup;
}

impl<K> RenderedStore for Store<K>
where
    K: Resource<DynamicType = ()> + Clone + 'static,
    K::Scope: 'static,
{
    fn kind(&self) -> std::borrow::Cow<'static, str> {
        K::kind(&())
    }

    fn lookup(&self, ns: Option<&str>, name: &str) -> Lookup {
        let cluster_scoped =
            std::any::TypeId::of::<K::Scope>() == std::any::TypeId::of::<k8s_openapi::ClusterResourceScope>();
        let key = match ns {
            Some(ns) if !cluster_scoped => ObjectRef::new(name).within(ns),
            _ => ObjectRef::new(name),
        };
        match self.get(&key) {
            Some(obj) => Lookup::Found(Box::new(obj.meta().clone())),
            None => Lookup::Missing,
        }
    }
}

async fn wait_store<K>(store: &Store<K>)
where
    K: Resource + Clone + 'static,
    K::DynamicType: Eq + Hash + Clone,
{
    // A waiter registered before the first list completes is not always
    // woken (seen with kube-runtime 5), so ask again each second.
    loop {
        match tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready()).await {
            Ok(_) => return,
            Err(_) => continue,
        }
    }
}

/// Objects per page of a watch's initial list. Each page arrives whole and is
/// decoded into full objects before they are cut down for the cache, so small
/// pages keep a restart's peak memory low for a few more requests (measured:
/// docs/benchmarks.md, "Watch list pages").
const LIST_PAGE_SIZE: u32 = 100;

/// The watch configuration every store starts from.
pub fn config() -> watcher::Config {
    watcher::Config::default().page_size(LIST_PAGE_SIZE)
}

/// A reflector fed by a watch, and its event stream (to drive, or to filter
/// into controller triggers).
pub fn reflect<K>(
    api: Api<K>,
    config: watcher::Config,
) -> (Store<K>, impl Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    reflect_trimmed(api, config, |o: &mut K| slim(o.meta_mut()))
}

/// [`reflect`] for kinds the instances own ([`slim_owned`]).
pub fn reflect_owned<K>(api: Api<K>, config: watcher::Config) -> (Store<K>, impl EventStream<K>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    reflect_trimmed(api, config, |o: &mut K| slim_owned(o.meta_mut()))
}

/// A reflector whose objects `trim` cuts down before they are cached.
fn reflect_trimmed<K>(api: Api<K>, config: watcher::Config, trim: fn(&mut K)) -> (Store<K>, impl EventStream<K>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (reader, writer) = reflector::store();
    let events = watcher(api, config).default_backoff().modify(trim);
    (reader, reflector::reflector(writer, events))
}

/// Drops what no stage reads from a cached object's metadata: of
/// `managedFields` all but who wrote, how and when (drift needs no more;
/// the field sets were most of a cached object's size), and kubectl's
/// last-applied copy.
pub fn slim(meta: &mut ObjectMeta) {
    for entry in meta.managed_fields.iter_mut().flatten() {
        entry.fields_v1 = None;
        entry.fields_type = None;
        entry.api_version = None;
    }
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Annotations the stages read on objects the instances own.
const OWNED_ANNOTATIONS_READ: [&str; 4] = [
    crate::reconcile::marks::APPLIED_HASH_ANNOTATION,
    crate::reconcile::marks::VALUES_HASH_ANNOTATION,
    crate::reconcile::marks::HELM_RELEASE_NAMESPACE_ANNOTATION,
    crate::reconcile::marks::PVC_SIZE_ANNOTATION,
];

/// [`slim`], and for objects the instances own also their labels and the
/// annotations no stage reads: what is left is existence, owners, writers
/// and the operator's own marks, so caches of many owned objects stay small
/// (measured: docs/benchmarks.md, "Slim caches of owned objects").
pub fn slim_owned(meta: &mut ObjectMeta) {
    slim(meta);
    meta.labels = None;
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| OWNED_ANNOTATIONS_READ.contains(&k.as_str()));
    }
    if meta.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        meta.annotations = None;
    }
}

/// A Deployment's spec down to its replicas and, per container, the name,
/// image and resources (init containers: the name).
pub fn trim_deployment(d: &mut Deployment) {
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodTemplateSpec};
    let spec = std::mem::take(&mut d.spec);
    let pod = spec.template.spec.unwrap_or_default();
    let keep = |c: Container, all: bool| Container {
        name: c.name,
        image: if all { c.image } else { None },
        resources: if all { c.resources } else { None },
        ..Default::default()
    };
    let init = pod.init_containers.map(|cs| cs.into_iter().map(|c| keep(c, false)).collect());
    d.spec = k8s_openapi::api::apps::v1::DeploymentSpec {
        replicas: spec.replicas,
        template: PodTemplateSpec {
            spec: Some(PodSpec {
                containers: pod.containers.into_iter().map(|c| keep(c, true)).collect(),
                init_containers: init,
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
}

/// A reflector of metadata only (smaller, and enough for existence and drift).
pub fn reflect_meta<K>(api: Api<Meta<K>>, config: watcher::Config) -> (Store<Meta<K>>, impl EventStream<Meta<K>>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    reflect(api, config)
}

/// A watch's event stream.
pub trait EventStream<K>: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static {}
impl<K, S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static> EventStream<K> for S {}

/// Keeps a store current without waking any reconcile.
pub fn drive<K: Send + 'static>(stream: impl Stream<Item = Result<K, watcher::Error>> + Send + 'static) {
    tokio::spawn(stream.for_each(|res| async move {
        if let Err(e) = res {
            tracing::debug!(error = %e, "watch error (retried)");
        }
    }));
}

/// Starts every watch: kinds the instances own feed `controller` (filtered
/// by [`relevant`]); the rest only keep their store current.
pub fn start(
    client: &Client,
    platform: crate::platform::Platform,
    operator_namespace: &str,
    scope: &WatchScope,
    controller: kube::runtime::Controller<TinycodeInstance>,
    instances: Store<TinycodeInstance>,
    concerns: fn(&TinycodeInstance, &str) -> bool,
) -> (Stores, kube::runtime::Controller<TinycodeInstance>) {
    let owned = || config().labels(PART_OF_SELECTOR);
    let any = config;
    let (cached, namespace_events) = Cached::start(client, platform, operator_namespace, scope);
    // Deployments keep only what the reconcile reads: metadata, status, and
    // of the pod template what a class limits (images, resources, which
    // init containers), so a tightened class is checked against what runs.
    let (deployments, s) = reflect_trimmed(scope.api::<Deployment>(client), owned(), |d| {
        trim_deployment(d);
        slim_owned(&mut d.metadata);
    });
    let mut c = controller.owns_stream(relevant_owned(s, hash_deployment));
    let (services, s) = reflect(scope.api::<Service>(client), any());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (service_accounts, s) = reflect_owned(scope.api::<Meta<ServiceAccount>>(client), owned());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (config_maps, s) = reflect_owned(scope.api::<Meta<ConfigMap>>(client), owned());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (network_policies, s) = reflect_owned(scope.api::<Meta<NetworkPolicy>>(client), owned());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (roles, s) = reflect_owned(scope.api::<Meta<Role>>(client), owned());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (role_bindings, s) = reflect_owned(scope.api::<Meta<RoleBinding>>(client), owned());
    c = c.owns_stream(relevant_owned(s, hash_meta));
    let (routes, ingresses) = if platform.routes {
        let (store, s) = reflect_owned(scope.api::<Route>(client), owned());
        c = c.owns_stream(relevant_owned(s, hash_route));
        (Some(store), None)
    } else {
        let (store, s) = reflect_owned(scope.api::<Ingress>(client), owned());
        c = c.owns_stream(relevant_owned(s, hash_ingress));
        (None, Some(store))
    };
    let (classes, c) = wake_on_policy(client, c, &instances, namespace_events, concerns);
    let Cached { namespaces, pvcs, cluster_role_bindings, records, sccs, ingress_classes } = cached;
    let stores = Stores {
        namespaces,
        sccs,
        deployments,
        services,
        service_accounts,
        config_maps,
        network_policies,
        roles,
        role_bindings,
        pvcs,
        cluster_role_bindings,
        records,
        routes,
        ingresses,
        ingress_classes,
        classes,
        instances,
        scope: scope.clone(),
    };
    (stores, c)
}

/// Wakes instances when the cluster-admin's policy changes: namespace
/// labels (approvals) and classes.
fn wake_on_policy(
    client: &Client,
    c: kube::runtime::Controller<TinycodeInstance>,
    instances: &Store<TinycodeInstance>,
    namespace_events: impl EventStream<Meta<Namespace>>,
    concerns: fn(&TinycodeInstance, &str) -> bool,
) -> (Store<TinycodeClass>, kube::runtime::Controller<TinycodeInstance>) {
    // A namespace's labels are approvals: a change wakes the instances they
    // concern (its own, and those discovering it), so one taken back is
    // withdrawn at once whatever state they are in.
    let waking = instances.clone();
    let c = c.watches_stream(relevant(namespace_events, hash_namespace), move |ns: Meta<Namespace>| {
        let name = ns.metadata.name.clone().unwrap_or_default();
        waking.state().iter().filter(|i| concerns(i, &name)).map(|i| ObjectRef::from_obj(&**i)).collect::<Vec<_>>()
    });
    // A class is the cluster-admin's policy: a change re-renders (or
    // refuses) the instances naming it, and those naming none (it may be,
    // or have been, the default), through the controller's normal queue.
    let (classes, s) = reflect(cluster_api::<TinycodeClass>(client), config());
    let waking = instances.clone();
    let c =
        c.watches_stream(relevant(s, crate::reconcile::caches::triggers::hash_class), move |class: TinycodeClass| {
            let name = class.metadata.name.clone().unwrap_or_default();
            waking
                .state()
                .iter()
                .filter(|i| i.spec.class_name.as_deref().is_none_or(|n| n == name))
                .map(|i| ObjectRef::from_obj(&**i))
                .collect::<Vec<_>>()
        });
    (classes, c)
}

/// Stores of kinds whose changes wake nobody: read at the next reconcile.
struct Cached {
    namespaces: Store<Meta<Namespace>>,
    pvcs: Store<Meta<PersistentVolumeClaim>>,
    cluster_role_bindings: Store<ClusterRoleBinding>,
    records: Store<Meta<Secret>>,
    sccs: Option<Store<Meta<SecurityContextConstraints>>>,
    ingress_classes: Option<Store<Meta<IngressClass>>>,
}

impl Cached {
    fn start(
        client: &Client,
        platform: crate::platform::Platform,
        operator_namespace: &str,
        scope: &WatchScope,
    ) -> (Self, impl EventStream<Meta<Namespace>>) {
        let owned = || config().labels(PART_OF_SELECTOR);
        let any = config;
        // Namespaces are cluster-scoped, but their labels are approvals for
        // the instances in them: with one namespace watched, the others'
        // labels are none of the operator's business (nor is discovery there).
        let namespace_config = match scope.namespace() {
            Some(ns) => config().fields(&format!("metadata.name={ns}")),
            None => config(),
        };
        let (namespaces, namespace_events) = reflect_meta(cluster_api::<Meta<Namespace>>(client), namespace_config);
        let (pvcs, s) = reflect_owned(scope.api::<Meta<PersistentVolumeClaim>>(client), owned());
        drive(s);
        let (cluster_role_bindings, s) = reflect_owned(cluster_api::<ClusterRoleBinding>(client), owned());
        drive(s);
        let records_api = Api::<Meta<Secret>>::namespaced(client.clone(), operator_namespace);
        // Of a record, the stages read its name, labels and creation time only.
        let trim = |r: &mut Meta<Secret>| r.metadata.managed_fields = None;
        let (records, s) = reflect_trimmed(records_api, config().labels(crate::helm::RECORDS_SELECTOR), trim);
        drive(s);
        let sccs = platform.sccs.then(|| {
            let (store, s) = reflect_meta(cluster_api::<Meta<SecurityContextConstraints>>(client), any());
            drive(s);
            store
        });
        let ingress_classes = (!platform.routes).then(|| {
            let (store, s) = reflect_meta(cluster_api::<Meta<IngressClass>>(client), any());
            drive(s);
            store
        });
        let cached = Cached { namespaces, pvcs, cluster_role_bindings, records, sccs, ingress_classes };
        (cached, namespace_events)
    }
}

/// Empty stores that never fill (for tests of the stages after observe).
#[cfg(test)]
pub fn empty(platform: crate::platform::Platform) -> Stores {
    fn s<K: Resource<DynamicType = ()> + Clone + 'static>() -> Store<K> {
        reflector::store().0
    }
    Stores {
        namespaces: s(),
        sccs: platform.sccs.then(s),
        deployments: s(),
        services: s(),
        service_accounts: s(),
        config_maps: s(),
        network_policies: s(),
        roles: s(),
        role_bindings: s(),
        pvcs: s(),
        cluster_role_bindings: s(),
        records: s(),
        routes: platform.routes.then(s),
        ingresses: (!platform.routes).then(s),
        ingress_classes: (!platform.routes).then(s),
        classes: s(),
        instances: s(),
        scope: WatchScope::All,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry, OwnerReference};

    fn meta() -> ObjectMeta {
        let annotations = [
            (crate::reconcile::marks::APPLIED_HASH_ANNOTATION, "h"),
            (crate::reconcile::marks::VALUES_HASH_ANNOTATION, "v"),
            (crate::reconcile::marks::HELM_RELEASE_NAMESPACE_ANNOTATION, "op"),
            ("meta.helm.sh/release-name", "r"),
            ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
        ];
        ObjectMeta {
            name: Some("dev-tinycode".into()),
            labels: Some([("app.kubernetes.io/part-of".to_string(), "tinycode-operator".to_string())].into()),
            annotations: Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
            owner_references: Some(vec![OwnerReference { uid: "u".into(), ..Default::default() }]),
            managed_fields: Some(vec![ManagedFieldsEntry {
                manager: Some("helm".into()),
                operation: Some("Update".into()),
                api_version: Some("v1".into()),
                fields_type: Some("FieldsV1".into()),
                fields_v1: Some(FieldsV1(serde_json::json!({"f:metadata": {}}))),
                ..Default::default()
            }]),
            ..Default::default()
        }
    }

    /// A store holding `objs`, as a watch would fill it.
    fn filled<K: Resource<DynamicType = ()> + Clone + 'static>(objs: Vec<K>) -> Store<K> {
        let (reader, mut writer) = reflector::store();
        for obj in objs {
            writer.apply_watcher_event(&watcher::Event::Apply(obj));
        }
        reader
    }

    fn named(name: &str, namespace: Option<&str>) -> ObjectMeta {
        ObjectMeta { name: Some(name.into()), namespace: namespace.map(Into::into), ..Default::default() }
    }

    #[test]
    fn rendered_kinds_are_named_by_their_stores_types() {
        let stores = empty(crate::platform::Platform::OPENSHIFT);
        let kinds: Vec<String> = stores.rendered().iter().map(|s| s.kind().into_owned()).collect();
        assert_eq!(
            kinds,
            [
                "Deployment",
                "Service",
                "ServiceAccount",
                "ConfigMap",
                "NetworkPolicy",
                "Role",
                "RoleBinding",
                "PersistentVolumeClaim",
                "ClusterRoleBinding"
            ]
        );
    }

    #[test]
    fn meta_reads_the_store_of_the_kind_asked_for() {
        let mut stores = empty(crate::platform::Platform::OPENSHIFT);
        stores.deployments =
            filled(vec![Deployment { metadata: named("dev-tinycode", Some("team")), ..Default::default() }]);
        stores.config_maps =
            filled(vec![Meta::<ConfigMap> { metadata: named("dev-tinycode", Some("team")), ..Default::default() }]);
        stores.cluster_role_bindings =
            filled(vec![ClusterRoleBinding { metadata: named("team-dev-tinycode", None), ..Default::default() }]);
        let found = |l: Lookup| match l {
            Lookup::Found(m) => (m.name, m.namespace),
            other => panic!("{other:?}"),
        };
        assert_eq!(
            found(stores.meta("Deployment", "team", "dev-tinycode")),
            (Some("dev-tinycode".into()), Some("team".into()))
        );
        assert_eq!(found(stores.meta("ConfigMap", "team", "dev-tinycode")).0.as_deref(), Some("dev-tinycode"));
        assert_eq!(stores.meta("Deployment", "other", "dev-tinycode"), Lookup::Missing, "by namespace too");
        assert_eq!(stores.meta("Service", "team", "dev-tinycode"), Lookup::Missing, "each kind its own store");
        // A cluster-scoped kind is found whatever namespace the manifest gave.
        assert_eq!(found(stores.meta("ClusterRoleBinding", "", "team-dev-tinycode")).1, None);
        assert_eq!(found(stores.meta("ClusterRoleBinding", "team", "team-dev-tinycode")).1, None);
        // Kinds without a store here are asked of the API server.
        assert_eq!(stores.meta("Route", "team", "dev-tinycode"), Lookup::NotCached);
        assert_eq!(stores.meta("Secret", "team", "dev-tinycode"), Lookup::NotCached);
        stores.scope = WatchScope::Namespace("elsewhere".into());
        assert_eq!(
            stores.meta("Deployment", "team", "dev-tinycode"),
            Lookup::NotCached,
            "outside the watched namespace"
        );
    }

    #[test]
    fn cached_objects_keep_what_the_stages_read() {
        let mut m = meta();
        slim(&mut m);
        let entry = &m.managed_fields.as_ref().unwrap()[0];
        assert_eq!((entry.manager.as_deref(), entry.operation.as_deref()), (Some("helm"), Some("Update")));
        assert!(entry.fields_v1.is_none() && entry.api_version.is_none() && entry.fields_type.is_none());
        assert!(m.labels.is_some(), "labels stay on kinds the instances do not own");
        assert_eq!(m.annotations.as_ref().unwrap().len(), 4, "only kubectl's copy goes");

        let mut owned = meta();
        slim_owned(&mut owned);
        assert!(owned.labels.is_none());
        let kept: Vec<&str> = owned.annotations.as_ref().unwrap().keys().map(String::as_str).collect();
        assert_eq!(kept.len(), 3);
        assert!(kept.iter().all(|k| OWNED_ANNOTATIONS_READ.contains(k)), "{kept:?}");
        assert_eq!(owned.owner_references, meta().owner_references, "owners map events to instances");
        assert_eq!(owned.managed_fields.as_ref().unwrap()[0].manager.as_deref(), Some("helm"));
    }
}

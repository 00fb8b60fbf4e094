//! Which watch events wake a reconcile: those that may change its outcome.
//! A status write by the kubelet's controllers, or a resync that changes
//! nothing the reconcile reads, wakes nobody.

use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use futures::{Stream, StreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::networking::v1::Ingress;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;
use kube::runtime::watcher;

use crate::platform::openshift::Route;

/// A hash of what the reconcile reads from an object's metadata: a watch
/// event that leaves it unchanged (a status write by the kubelet's
/// controllers, a resync) wakes nobody. Writes to the object by any manager
/// show in `managedFields` (status subresource writes excepted).
pub fn meta_hash(meta: &ObjectMeta, h: &mut DefaultHasher) {
    meta.labels.hash(h);
    meta.annotations.hash(h);
    meta.generation.hash(h);
    meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()).hash(h);
    for o in meta.owner_references.iter().flatten() {
        o.uid.hash(h);
    }
    for m in meta.managed_fields.iter().flatten() {
        if m.subresource.as_deref().is_some_and(|s| !s.is_empty()) {
            continue;
        }
        m.manager.hash(h);
        m.operation.hash(h);
        m.time.as_ref().map(|t| t.0.as_second()).hash(h);
    }
}

/// The watch events that may change a reconcile's outcome, as objects:
/// deletions always, additions and changes when `hash` differs from the
/// last one seen for that object.
pub fn relevant<K, S>(events: S, hash: fn(&K) -> u64) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    let mut seen: HashMap<(Option<String>, String, Option<String>), u64> = HashMap::new();
    events
        .map(move |event| -> Vec<Result<K, watcher::Error>> {
            match event {
                Err(e) => vec![Err(e)],
                Ok(watcher::Event::Delete(obj)) => {
                    let m = obj.meta();
                    seen.remove(&(m.namespace.clone(), m.name.clone().unwrap_or_default(), m.uid.clone()));
                    vec![Ok(obj)]
                }
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                    let m = obj.meta();
                    let key = (m.namespace.clone(), m.name.clone().unwrap_or_default(), m.uid.clone());
                    let value = hash(&obj);
                    if seen.insert(key, value) == Some(value) { Vec::new() } else { vec![Ok(obj)] }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => Vec::new(),
            }
        })
        .flat_map(futures::stream::iter)
}

/// Metadata hash for kinds where only metadata matters.
pub fn hash_meta<K: Resource>(obj: &K) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(obj.meta(), &mut h);
    h.finish()
}

/// Deployments: metadata plus the rollout figures the status reports.
pub fn hash_deployment(d: &Deployment) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(&d.metadata, &mut h);
    if let Some(s) = &d.status {
        (s.observed_generation, s.available_replicas, s.updated_replicas, s.replicas).hash(&mut h);
    }
    h.finish()
}

/// Routes: metadata plus the hosts routers admitted.
pub fn hash_route(r: &Route) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(&r.metadata, &mut h);
    crate::render::route::admitted_host(r).hash(&mut h);
    h.finish()
}

/// Ingresses: metadata plus the published address.
pub fn hash_ingress(i: &Ingress) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(&i.metadata, &mut h);
    crate::render::ingress::published(i).hash(&mut h);
    h.finish()
}

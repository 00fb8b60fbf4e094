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
    own_hash(meta, h);
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

/// What every hash here reads of an object's metadata: its labels,
/// annotations, generation and whether it is going.
fn own_hash(meta: &ObjectMeta, h: &mut DefaultHasher) {
    meta.labels.hash(h);
    meta.annotations.hash(h);
    meta.generation.hash(h);
    meta.deletion_timestamp.as_ref().map(|t| t.0.as_second()).hash(h);
}

/// Instances: what of one can change its reconcile's outcome ([`own_hash`]
/// and its finalizers); its own status writes are not among it. Unlike
/// [`meta_hash`] it leaves out owners and writers: an instance has no owner
/// the reconcile reads, and any change to its spec shows in its generation,
/// while an edit of an owned object (whose drift the reconcile repairs) may
/// show only in `managedFields`.
pub fn hash_instance<K: Resource>(inst: &K) -> u64 {
    let mut h = DefaultHasher::new();
    own_hash(inst.meta(), &mut h);
    inst.meta().finalizers.hash(&mut h);
    h.finish()
}

/// The watch events that may change a reconcile's outcome, as objects:
/// deletions always, additions and changes when `hash` differs from the
/// last one seen for that object.
pub fn relevant<K, S>(events: S, hash: fn(&K) -> u64) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    filter(events, hash, false)
}

/// [`relevant`] for kinds the instances own, less the creations the
/// operator made itself ([`written_only_by_us`]).
pub fn relevant_owned<K, S>(events: S, hash: fn(&K) -> u64) -> impl Stream<Item = Result<K, watcher::Error>> + Send
where
    K: Resource + Clone + Send + 'static,
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
{
    filter(events, hash, true)
}

// Not kube-runtime's `predicate_filter`: it sees objects, not events, so a
// deletion (whose object hashes as before) would be dropped, and a deleted
// owned object must wake its instance to be repaired; it also cannot drop
// the creations the operator made itself ([`written_only_by_us`]).
fn filter<K, S>(events: S, hash: fn(&K) -> u64, owned: bool) -> impl Stream<Item = Result<K, watcher::Error>> + Send
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
                    match seen.insert(key, value) {
                        Some(old) if old == value => Vec::new(),
                        None if owned && written_only_by_us(m) => Vec::new(),
                        _ => vec![Ok(obj)],
                    }
                }
                Ok(watcher::Event::Init | watcher::Event::InitDone) => Vec::new(),
            }
        })
        .flat_map(futures::stream::iter)
}

/// A new object nobody but the operator (and its helm) wrote was created by a
/// reconcile of its owner, which reads the caches again when it next runs, so
/// waking the owner for it only repeats that reconcile (measured:
/// docs/benchmarks.md, "New objects do not wake their owner"). Its later
/// changes (a rollout's status, another writer) and its deletion still wake it.
fn written_only_by_us(meta: &ObjectMeta) -> bool {
    let mut writers = meta.managed_fields.iter().flatten().peekable();
    writers.peek().is_some()
        && writers.all(|m| m.manager.as_deref().is_some_and(|w| crate::helm::release::OWN_MANAGERS.contains(&w)))
}

/// Metadata hash for kinds where only metadata matters.
pub fn hash_meta<K: Resource>(obj: &K) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(obj.meta(), &mut h);
    h.finish()
}

/// TinycodeClasses: a spec change shows in the generation.
pub fn hash_class<K: Resource>(class: &K) -> u64 {
    let mut h = DefaultHasher::new();
    own_hash(class.meta(), &mut h);
    h.finish()
}

/// Namespaces: their labels (the approvals) and whether they are going.
pub fn hash_namespace<K: Resource>(ns: &K) -> u64 {
    let mut h = DefaultHasher::new();
    ns.meta().labels.hash(&mut h);
    ns.meta().deletion_timestamp.as_ref().map(|t| t.0.as_second()).hash(&mut h);
    h.finish()
}

/// Deployments: metadata plus the rollout figures the status reports, and
/// which conditions hold (a refused pod, a passed progress deadline: what
/// the diagnosis reads). Their messages and times are left out: they change
/// while the condition stays what it was.
pub fn hash_deployment(d: &Deployment) -> u64 {
    let mut h = DefaultHasher::new();
    meta_hash(&d.metadata, &mut h);
    if let Some(s) = &d.status {
        (s.observed_generation, s.available_replicas, s.updated_replicas, s.replicas).hash(&mut h);
        for c in s.conditions.iter().flatten() {
            (&c.type_, &c.status, &c.reason).hash(&mut h);
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry;

    fn sa(uid: &str, managers: &[&str], label: &str) -> ServiceAccount {
        let entry = |m: &&str| ManagedFieldsEntry { manager: Some(m.to_string()), ..Default::default() };
        ServiceAccount {
            metadata: ObjectMeta {
                name: Some("dev-tinycode".into()),
                namespace: Some("team".into()),
                uid: Some(uid.into()),
                labels: Some([("l".to_string(), label.to_string())].into()),
                managed_fields: Some(managers.iter().map(entry).collect()),
                ..Default::default()
            },
            ..Default::default()
        }
    }

    /// Which of `events` wake the owner, by uid and label.
    fn woken(owned: bool, events: Vec<watcher::Event<ServiceAccount>>) -> Vec<String> {
        let stream = filter(futures::stream::iter(events.into_iter().map(Ok)), hash_meta, owned);
        futures::executor::block_on(stream.collect::<Vec<_>>())
            .into_iter()
            .map(|r| {
                let m = r.unwrap().metadata;
                format!("{}:{}", m.uid.unwrap(), m.labels.unwrap()["l"])
            })
            .collect()
    }

    #[test]
    fn an_instance_wakes_its_reconcile_for_what_the_reconcile_reads_only() {
        use crate::api::{TinycodeInstance, TinycodeInstanceStatus};
        let mut inst = TinycodeInstance::new("dev", serde_json::from_value(serde_json::json!({})).unwrap());
        inst.metadata.generation = Some(1);
        let base = hash_instance(&inst);
        let mut status = inst.clone();
        status.status = Some(TinycodeInstanceStatus { url: Some("https://x".into()), ..Default::default() });
        status.metadata.managed_fields =
            Some(vec![ManagedFieldsEntry { manager: Some("m".into()), ..Default::default() }]);
        assert_eq!(hash_instance(&status), base, "a status write, or who wrote, wakes nobody");
        let mut finalized = inst.clone();
        finalized.metadata.finalizers = Some(vec![crate::api::FINALIZER.into()]);
        assert_ne!(hash_instance(&finalized), base);
        let mut edited = inst.clone();
        edited.metadata.generation = Some(2);
        assert_ne!(hash_instance(&edited), base);
        let mut labelled = inst;
        labelled.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        assert_ne!(hash_instance(&labelled), base);
    }

    #[test]
    fn a_deployment_wakes_its_instance_when_a_condition_turns_not_when_its_words_do() {
        let deployment = |status: &str, reason: &str, message: &str| -> Deployment {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "dev-tinycode"},
                "status": {"conditions": [{"type": "Progressing", "status": status, "reason": reason,
                    "message": message, "lastUpdateTime": "2026-12-02T00:00:00Z"}]}}))
            .unwrap()
        };
        let progressing = hash_deployment(&deployment("True", "ReplicaSetUpdated", "a"));
        assert_eq!(hash_deployment(&deployment("True", "ReplicaSetUpdated", "b")), progressing);
        assert_ne!(hash_deployment(&deployment("False", "ProgressDeadlineExceeded", "a")), progressing);
    }

    #[test]
    fn own_creations_of_owned_objects_wake_nobody_but_their_changes_and_deletions_do() {
        use watcher::Event::{Apply, Delete};
        let events = vec![
            Apply(sa("a", &["helm"], "1")),                  // created by helm: no
            Apply(sa("a", &["helm"], "1")),                  // unchanged: no
            Apply(sa("a", &["helm", "kubectl-edit"], "2")),  // edited by a tenant: yes
            Apply(sa("b", &["kubectl-create"], "1")),        // created by someone else: yes
            Apply(sa("c", &["tinycode-operator"], "1")),     // applied by the operator: no
            Apply(sa("c", &["tinycode-operator"], "2")),     // changed since: yes
            Apply(sa("d", &[], "1")),                        // no writer recorded: yes
            Delete(sa("a", &["helm", "kubectl-edit"], "2")), // deleted: yes
        ];
        assert_eq!(woken(true, events.clone()), ["a:2", "b:1", "c:2", "d:1", "a:2"]);
        // The instances' own stream keeps every first sight.
        assert_eq!(woken(false, events), ["a:1", "a:2", "b:1", "c:1", "c:2", "d:1", "a:2"]);
    }
}

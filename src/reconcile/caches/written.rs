//! The one place for the caches that trail the operator's own writes, and
//! what works around them: the status this process last wrote for each
//! instance (read instead of a cache that does not show it yet), the instances
//! whose finalizer it removed, the wait for a new helm revision to reach the
//! record cache, and namespaces found prepared (trusted a while). Every
//! status write goes through
//! [`write_status_if_changed`](crate::reconcile::status_writes::write_status_if_changed),
//! which keeps these.
//!
//! A reconcile woken right after a status write can read the instance from the
//! cache before the write's watch event arrived, and taking that old status for
//! the current one sent the Running event twice and rewrote the status
//! (measured: docs/benchmarks.md, "Statuses the cache does not show yet"). So
//! while the cache still shows the very object a write was made over (same uid
//! and resourceVersion), the reconcile reads the status that write set instead.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::api::{TinycodeInstance, TinycodeInstanceStatus};
use crate::reconcile::basics::instance_key as key;

/// How long a namespace found prepared is trusted without asking again. A
/// namespace that lost its preparation since shows as refused calls, and a
/// failed helm run forgets it at once.
pub const PREPARED_TTL: Duration = Duration::from_secs(300);

/// Namespaces found prepared (the operator's own SelfSubjectRulesReview), and when.
#[derive(Debug, Default)]
pub struct Prepared(Mutex<HashMap<String, Instant>>);

impl Prepared {
    /// Whether `ns` was found prepared within [`PREPARED_TTL`].
    pub fn fresh(&self, ns: &str) -> bool {
        self.0.lock().expect("lock").get(ns).is_some_and(|at| at.elapsed() < PREPARED_TTL)
    }

    pub fn remember(&self, ns: &str) {
        self.0.lock().expect("lock").insert(ns.to_string(), Instant::now());
    }

    pub fn forget<'a>(&self, namespaces: impl IntoIterator<Item = &'a str>) {
        let mut prepared = self.0.lock().expect("lock");
        for ns in namespaces {
            prepared.remove(ns);
        }
    }
}

/// Statuses written, by `namespace/name`.
#[derive(Default)]
pub struct WrittenStatuses(Mutex<HashMap<String, Written>>);

/// Versions of an object are only compared for equality: `stale` holds the
/// resourceVersions known to predate the last write (what a row of writes over
/// a trailing cache was made over, and what the earlier ones produced).
struct Written {
    uid: Option<String>,
    stale: Vec<String>,
    /// What the last write produced.
    latest: Option<String>,
    status: TinycodeInstanceStatus,
}

/// Longest row of writes over a trailing cache that is remembered.
const ROW: usize = 8;

impl WrittenStatuses {
    /// `status` was written over `seen` (the instance as the reconcile read
    /// it) and the object became resourceVersion `latest`.
    pub fn record(&self, seen: &TinycodeInstance, status: &TinycodeInstanceStatus, latest: Option<String>) {
        let mut map = self.0.lock().expect("lock");
        let k = key(seen);
        let Some(rv) = seen.metadata.resource_version.clone() else {
            map.remove(&k);
            return;
        };
        let stale = match map.remove(&k) {
            // Written over a cache that still trailed the last write: that
            // write's own version predates this one too.
            Some(w) if w.uid == seen.metadata.uid && w.stale.contains(&rv) => {
                w.stale.into_iter().chain(w.latest).collect()
            }
            _ => vec![rv],
        };
        if stale.len() <= ROW {
            map.insert(k, Written { uid: seen.metadata.uid.clone(), stale, latest, status: status.clone() });
        }
    }

    /// The instance with the status this process wrote last, when the cache
    /// shows a version from before that write; else `inst` itself (and the
    /// entry goes: the cache shows the write, or a later change).
    pub fn current(&self, inst: Arc<TinycodeInstance>) -> Arc<TinycodeInstance> {
        let mut map = self.0.lock().expect("lock");
        let k = key(&inst);
        match (map.get(&k), &inst.metadata.resource_version) {
            (Some(w), Some(rv)) if w.uid == inst.metadata.uid && w.stale.contains(rv) => {
                let mut fresher = (*inst).clone();
                fresher.status = Some(w.status.clone());
                Arc::new(fresher)
            }
            (Some(_), _) => {
                map.remove(&k);
                inst
            }
            (None, _) => inst,
        }
    }

    /// Forgets a deleted instance.
    pub fn forget(&self, inst: &TinycodeInstance) {
        self.0.lock().expect("lock").remove(&key(inst));
    }

    pub fn len(&self) -> usize {
        self.0.lock().expect("lock").len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Instances (by uid) whose finalizer this process removed. A reconcile woken
/// by the deletion of their objects can still find them in the cache, with the
/// finalizer, and ran the whole cleanup a second time: a "Deleted" event again
/// and a finalizer patch that failed with 404 (measured: docs/benchmarks.md,
/// "Finalizers the cache does not show yet").
#[derive(Default)]
pub struct Finalized(Mutex<HashMap<String, Instant>>);

/// Far longer than a cache trails the cluster.
const FINALIZED_KEPT: Duration = Duration::from_secs(600);

impl Finalized {
    /// The finalizer of `inst` is gone from the cluster.
    pub fn mark(&self, inst: &TinycodeInstance) {
        let Some(uid) = inst.metadata.uid.clone() else { return };
        let mut map = self.0.lock().expect("lock");
        map.retain(|_, at| at.elapsed() < FINALIZED_KEPT);
        map.insert(uid, Instant::now());
    }

    /// Whether this is an instance whose finalizer this process removed.
    pub fn contains(&self, inst: &TinycodeInstance) -> bool {
        inst.metadata.uid.as_ref().is_some_and(|uid| self.0.lock().expect("lock").contains_key(uid))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Phase;

    fn instance(rv: &str, phase: Option<Phase>) -> Arc<TinycodeInstance> {
        let mut inst: TinycodeInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
            "metadata": {"name": "a", "namespace": "team", "uid": "u1", "resourceVersion": rv},
            "spec": {}
        }))
        .unwrap();
        inst.status = phase.map(|p| TinycodeInstanceStatus { phase: Some(p), ..Default::default() });
        Arc::new(inst)
    }

    fn running() -> TinycodeInstanceStatus {
        TinycodeInstanceStatus { phase: Some(Phase::Running), ..Default::default() }
    }

    #[test]
    fn a_cache_that_trails_the_write_reads_the_written_status() {
        let written = WrittenStatuses::default();
        let before = instance("10", Some(Phase::Deploying));
        written.record(&before, &running(), Some("11".into()));
        // Woken again before the write's watch event: the same object.
        let seen = written.current(instance("10", Some(Phase::Deploying)));
        assert_eq!(seen.status.as_ref().and_then(|s| s.phase), Some(Phase::Running));
        assert_eq!(written.len(), 1);
    }

    #[test]
    fn once_the_cache_moved_on_it_is_believed_and_the_entry_goes() {
        let written = WrittenStatuses::default();
        written.record(&instance("10", Some(Phase::Deploying)), &running(), Some("11".into()));
        // The cache shows the write, or a change made since.
        let seen = written.current(instance("12", Some(Phase::Failed)));
        assert_eq!(seen.status.as_ref().and_then(|s| s.phase), Some(Phase::Failed));
        assert!(written.is_empty());
    }

    #[test]
    fn a_second_write_over_the_trailing_cache_keeps_both_versions_stale() {
        let written = WrittenStatuses::default();
        written.record(&instance("10", Some(Phase::Deploying)), &running(), Some("11".into()));
        // Written again while the cache still showed 10: it became 12.
        let mut url = running();
        url.url = Some("https://a.apps.example".into());
        let seen = written.current(instance("10", Some(Phase::Deploying)));
        written.record(&seen, &url, Some("12".into()));
        // The cache shows the first write only: the second is the status.
        let seen = written.current(instance("11", Some(Phase::Running)));
        assert_eq!(seen.status.as_ref().and_then(|s| s.url.as_deref()), Some("https://a.apps.example"));
        // It shows the second: believed.
        let seen = written.current(instance("12", Some(Phase::Running)));
        assert_eq!(seen.status.as_ref().and_then(|s| s.phase), Some(Phase::Running));
        assert!(written.is_empty());
    }

    #[test]
    fn a_finalized_instance_is_known_by_its_uid() {
        let finalized = Finalized::default();
        let gone = instance("10", Some(Phase::Terminating));
        assert!(!finalized.contains(&gone));
        finalized.mark(&gone);
        assert!(finalized.contains(&instance("9", Some(Phase::Running))));
        let mut recreated = (*instance("20", None)).clone();
        recreated.metadata.uid = Some("u2".into());
        assert!(!finalized.contains(&recreated));
    }

    #[test]
    fn another_instance_of_the_same_name_is_not_confused() {
        let written = WrittenStatuses::default();
        written.record(&instance("10", None), &running(), Some("11".into()));
        let mut other = (*instance("10", None)).clone();
        other.metadata.uid = Some("u2".into());
        let seen = written.current(Arc::new(other));
        assert_eq!(seen.status, None);
        written.record(&instance("10", None), &running(), Some("11".into()));
        written.forget(&instance("10", None));
        assert!(written.is_empty());
    }
}

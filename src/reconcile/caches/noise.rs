//! How often a namespace hears of one failure. An instance that cannot run
//! (a namespace nobody prepared, a refused registry) fails again at every
//! requeue, and a tenant may create many such instances: status says why
//! every time, but a Warning event is written at most once per namespace and
//! reason per [`WINDOW`], so no tenant can make the operator write events
//! without bound.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// One Warning event per namespace and reason this often, at most.
pub const WINDOW: Duration = Duration::from_secs(600);
/// (namespace, reason) pairs remembered at once.
const MAX_KEYS: usize = 4096;

/// When each namespace last heard of each failure reason.
#[derive(Default)]
pub struct FailureEvents {
    last: Mutex<HashMap<(String, &'static str), Instant>>,
}

impl FailureEvents {
    /// Whether a Warning event for `reason` in `namespace` may be written now
    /// (and, if so, that it was).
    pub fn admit(&self, namespace: &str, reason: &'static str) -> bool {
        self.admit_at(namespace, reason, Instant::now())
    }

    fn admit_at(&self, namespace: &str, reason: &'static str, now: Instant) -> bool {
        let mut last = self.last.lock().expect("failure events lock");
        let key = (namespace.to_string(), reason);
        if last.get(&key).is_some_and(|at| now.saturating_duration_since(*at) < WINDOW) {
            return false;
        }
        if last.len() >= MAX_KEYS {
            last.retain(|_, at| now.saturating_duration_since(*at) < WINDOW);
            if last.len() >= MAX_KEYS {
                last.clear();
            }
        }
        last.insert(key, now);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_event_per_namespace_and_reason_per_window() {
        let events = FailureEvents::default();
        let t0 = Instant::now();
        assert!(events.admit_at("team-a", "NamespaceNotPrepared", t0));
        // The same failure again, from this or another instance of the namespace.
        assert!(!events.admit_at("team-a", "NamespaceNotPrepared", t0 + Duration::from_secs(30)));
        // Another reason, another namespace: each heard once.
        assert!(events.admit_at("team-a", "ImageNotAllowed", t0));
        assert!(events.admit_at("team-b", "NamespaceNotPrepared", t0));
        // After the window, once more.
        assert!(events.admit_at("team-a", "NamespaceNotPrepared", t0 + WINDOW));
    }

    #[test]
    fn the_memory_is_bounded() {
        let events = FailureEvents::default();
        let t0 = Instant::now();
        let names: Vec<String> = (0..MAX_KEYS + 10).map(|i| format!("ns-{i}")).collect();
        for ns in &names {
            assert!(events.admit_at(ns, "NamespaceNotPrepared", t0));
        }
        assert!(events.last.lock().unwrap().len() <= MAX_KEYS);
    }
}

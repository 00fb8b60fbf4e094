//! How many times helm may fail before the operator gives up (pure). The
//! budget is per rendering (values, chart digest, rendering epoch) and
//! reconcile request: a new spec, chart or `tinycode.dev/reconcile-requested-at`
//! value starts a fresh budget; an exhausted one means `Stalled` and no more
//! helm runs until then.

use std::collections::HashMap;
use std::hash::Hash;

/// Failures of the current attempt key.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Attempts {
    key: String,
    failures: u32,
    /// The last failure's message (helm's stderr excerpt), for the Stalled condition.
    last_error: String,
}

/// Per-object failure counts.
#[derive(Debug)]
pub struct RetryBudget<K> {
    max: u32,
    by_object: HashMap<K, Attempts>,
}

impl<K: Hash + Eq + Clone> RetryBudget<K> {
    pub fn new(max: u32) -> Self {
        Self { max: max.max(1), by_object: HashMap::new() }
    }

    /// Whether helm may run for `key` (false: retries are exhausted for it).
    pub fn may_run(&self, object: &K, key: &str) -> bool {
        self.by_object.get(object).is_none_or(|a| a.key != key || a.failures < self.max)
    }

    /// Counts one failure; returns the failures so far for this key.
    pub fn failed(&mut self, object: &K, key: &str, error: &str) -> u32 {
        let fresh = || Attempts { key: key.into(), failures: 0, last_error: String::new() };
        let entry = self.by_object.entry(object.clone()).or_insert_with(fresh);
        if entry.key != key {
            *entry = fresh();
        }
        entry.failures += 1;
        entry.last_error = error.to_string();
        entry.failures
    }

    /// Takes the failures recorded on the object (its status) when this
    /// process has none of its own: after a restart or a change of leader.
    pub fn seed(&mut self, object: &K, key: &str, failures: u32, last_error: &str) {
        self.by_object.entry(object.clone()).or_insert_with(|| Attempts {
            key: key.into(),
            failures,
            last_error: last_error.into(),
        });
    }

    /// The object's failures: (attempt key, count, last error).
    pub fn failures(&self, object: &K) -> Option<(&str, u32, &str)> {
        self.by_object.get(object).map(|a| (a.key.as_str(), a.failures, a.last_error.as_str()))
    }

    /// The last failure recorded for the object, if any.
    pub fn last_error(&self, object: &K) -> Option<&str> {
        self.by_object.get(object).map(|a| a.last_error.as_str())
    }

    /// A success (or the object's deletion) clears its count.
    pub fn clear(&mut self, object: &K) {
        self.by_object.remove(object);
    }

    pub fn max(&self) -> u32 {
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exhausted_after_max_failures_of_the_same_key() {
        let mut b = RetryBudget::new(3);
        assert!(b.may_run(&"a", "k1"));
        assert_eq!((b.failed(&"a", "k1", "e1"), b.failed(&"a", "k1", "e2")), (1, 2));
        assert!(b.may_run(&"a", "k1"));
        assert_eq!(b.failed(&"a", "k1", "e3"), 3);
        assert_eq!(b.last_error(&"a"), Some("e3"));
        assert!(!b.may_run(&"a", "k1"), "stalled");
        assert!(b.may_run(&"b", "k1"), "per object");
        assert!(b.may_run(&"a", "k2"), "a new spec, chart or request starts a fresh budget");
        assert_eq!(b.failed(&"a", "k2", "e"), 1);
        b.clear(&"a");
        assert!(b.may_run(&"a", "k1"));
    }

    #[test]
    fn failures_recorded_elsewhere_seed_an_empty_budget_only() {
        let mut b = RetryBudget::new(3);
        b.seed(&"a", "k1", 3, "boom");
        assert!(!b.may_run(&"a", "k1"), "a budget spent before the restart stays spent");
        assert_eq!(b.failures(&"a"), Some(("k1", 3, "boom")));
        assert!(b.may_run(&"a", "k2"), "another attempt starts afresh");
        b.failed(&"b", "k1", "e");
        b.seed(&"b", "k1", 3, "old");
        assert_eq!(b.failures(&"b"), Some(("k1", 1, "e")), "this process's own count wins");
    }

    #[test]
    fn at_least_one_try() {
        let b: RetryBudget<&str> = RetryBudget::new(0);
        assert!(b.may_run(&"a", "k"));
        assert_eq!(b.max(), 1);
    }
}

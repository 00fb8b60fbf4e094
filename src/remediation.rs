//! How many times helm may fail before the operator gives up (pure). The
//! budget is per rendering (values, chart digest, operator version) and
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
    pub fn failed(&mut self, object: &K, key: &str) -> u32 {
        let entry = self.by_object.entry(object.clone()).or_insert(Attempts { key: key.into(), failures: 0 });
        if entry.key != key {
            *entry = Attempts { key: key.into(), failures: 0 };
        }
        entry.failures += 1;
        entry.failures
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
        assert_eq!((b.failed(&"a", "k1"), b.failed(&"a", "k1")), (1, 2));
        assert!(b.may_run(&"a", "k1"));
        assert_eq!(b.failed(&"a", "k1"), 3);
        assert!(!b.may_run(&"a", "k1"), "stalled");
        assert!(b.may_run(&"b", "k1"), "per object");
        assert!(b.may_run(&"a", "k2"), "a new spec, chart or request starts a fresh budget");
        assert_eq!(b.failed(&"a", "k2"), 1);
        b.clear(&"a");
        assert!(b.may_run(&"a", "k1"));
    }

    #[test]
    fn at_least_one_try() {
        let b: RetryBudget<&str> = RetryBudget::new(0);
        assert!(b.may_run(&"a", "k"));
        assert_eq!(b.max(), 1);
    }
}

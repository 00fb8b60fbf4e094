//! Small pure helpers of every stage: the key an instance is known by, the
//! time to the second, a bounded string.

use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;

use crate::api::TinycodeInstance;

/// The `namespace/name` an instance is known by in metrics and in
/// [`super::caches::written::WrittenStatuses`].
pub fn instance_key(inst: &TinycodeInstance) -> String {
    format!("{}/{}", inst.namespace().unwrap_or_default(), inst.name_any())
}

/// Now, to the second (condition times are RFC 3339 seconds).
pub fn now() -> String {
    let t = Timestamp::now();
    Timestamp::from_second(t.as_second()).unwrap_or(t).to_string()
}

pub fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

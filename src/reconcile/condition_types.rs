//! The types of the conditions an instance's status carries. A leaf: the
//! blocking reasons ([`crate::reconcile::reason`]) and the error
//! ([`crate::reconcile::error`]) name the condition they set, and
//! [`crate::reconcile::conditions`] builds conditions from the error, so the
//! names live apart from all three.

pub const READY: &str = "Ready";
pub const VLLM_WARNING: &str = "VllmWarning";
pub const VLLM_CONFIG_READY: &str = "VllmConfigReady";
pub const CLUSTER_ADMIN_READY: &str = "ClusterAdminReady";
/// Kubernetes only: whether the Ingress exists and has an address, or how else to reach the instance.
pub const INGRESS_READY: &str = "IngressReady";
/// kstatus: work is in progress (a rollout, a helm run to retry).
pub const RECONCILING: &str = "Reconciling";
/// kstatus: the operator gave up until something changes.
pub const STALLED: &str = "Stalled";
/// A PVC grew: False while a volume reports less than its claim asks
/// (Resizing, FileSystemResizePending), True (Resized) once all do.
pub const STORAGE_RESIZED: &str = "StorageResized";

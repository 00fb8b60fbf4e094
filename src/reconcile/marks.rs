//! Names the operator writes on objects and reads back: annotations and
//! Secret keys. A leaf module, so the stages that write a mark (plan,
//! validate) and those that read it (observe, stores) need not import each other.

/// Annotation on the Deployment holding the digest of the values it was rendered from.
pub const VALUES_HASH_ANNOTATION: &str = "tinycode.dev/values-hash";
/// Annotation on objects the operator applies itself: a digest of what it applied.
pub const APPLIED_HASH_ANNOTATION: &str = "tinycode.dev/applied-hash";
/// Annotation on each PVC the chart renders: the size it asks for, so the
/// cache of PVC metadata tells a size change without reading the PVC.
pub const PVC_SIZE_ANNOTATION: &str = "tinycode.dev/size";
/// Annotation helm puts on every object it manages: the namespace of the release records.
pub const HELM_RELEASE_NAMESPACE_ANNOTATION: &str = "meta.helm.sh/release-namespace";
/// The key the tinycode server reads its password from.
pub const PASSWORD_KEY: &str = "TINYCODE_SERVER_PASSWORD";

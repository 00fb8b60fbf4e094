//! Why an instance is blocked on something outside its spec. One enum, so
//! the condition a reason sets, its metric label and its event reason cannot
//! disagree, and matching on a reason is checked by the compiler.

use crate::reconcile::condition_types::{CLUSTER_ADMIN_READY, READY};

/// A blocking reason; its name (CamelCase) is the condition and event reason.
/// The list of reasons ([`Blocked::ALL`]) and their names ([`Blocked::as_str`],
/// `Display`) are derived from the variants, so a new reason is one line here.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, strum::VariantArray, strum::IntoStaticStr, strum::Display)]
pub enum Blocked {
    NamespaceNotEnabled,
    NamespaceNotPrepared,
    SccNotApproved,
    SccMissing,
    PodSecurityNotAllowed,
    ClusterRoleNotApproved,
    PasswordSecretMissing,
    PasswordSecretInvalid,
    PasswordGenerationFailed,
    GitCredentialsMissing,
    SignInUnsupported,
    SignInNotConfigured,
    SignInUnavailable,
    KubeconfigNotShared,
    KubeconfigSecretMissing,
    KubeconfigKeyMissing,
    KubeconfigInvalid,
    /// The spec asks for more than its TinycodeClass allows.
    ExceedsPolicy,
    /// spec.className names no TinycodeClass.
    ClassNotFound,
    /// The class (named, or the default) is not for this namespace (its namespaceSelector).
    ClassNotPermitted,
    /// A Secret the spec names (imagePullSecrets, env, apiKeySecret) is missing.
    SecretReferenceMissing,
    /// spec.hostname is served by, or was asked for earlier by, another instance.
    HostnameTaken,
    /// A larger storage size that the PVC cannot take (its StorageClass does
    /// not allow expansion, or it is not bound).
    StorageCannotGrow,
    /// A storage size below what the PVC already asks for (a PVC never shrinks).
    StorageCannotShrink,
    ReleaseRecordUnreadable,
    HelmOperationPending,
    FinalizerError,
}

impl Blocked {
    /// Every reason, in declaration order.
    pub const ALL: &'static [Blocked] = <Blocked as strum::VariantArray>::VARIANTS;

    /// The reason as conditions, events and the metrics' `result` label spell it.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Besides Ready (always False while blocked), the condition this reason
    /// also sets False: cluster-admin mode problems show on ClusterAdminReady.
    pub fn condition_type(self) -> &'static str {
        match self {
            Blocked::ClusterRoleNotApproved
            | Blocked::KubeconfigNotShared
            | Blocked::KubeconfigSecretMissing
            | Blocked::KubeconfigKeyMissing
            | Blocked::KubeconfigInvalid => CLUSTER_ADMIN_READY,
            _ => READY,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_camel_case() {
        let names: std::collections::BTreeSet<_> = Blocked::ALL.iter().map(|b| b.as_str()).collect();
        assert_eq!(names.len(), Blocked::ALL.len());
        assert!(names.iter().all(|n| n.chars().next().is_some_and(|c| c.is_ascii_uppercase()) && !n.contains(' ')));
        assert!(Blocked::ALL.iter().all(|b| format!("{b:?}") == b.as_str() && b.to_string() == b.as_str()));
        assert_eq!(Blocked::ALL.first(), Some(&Blocked::NamespaceNotEnabled));
        assert_eq!(Blocked::ALL.last(), Some(&Blocked::FinalizerError));
    }

    #[test]
    fn cluster_admin_reasons_set_their_condition() {
        assert_eq!(Blocked::KubeconfigNotShared.condition_type(), CLUSTER_ADMIN_READY);
        assert_eq!(Blocked::ClusterRoleNotApproved.condition_type(), CLUSTER_ADMIN_READY);
        assert_eq!(Blocked::SccMissing.condition_type(), READY);
        assert_eq!(Blocked::PasswordSecretMissing.condition_type(), READY);
    }
}

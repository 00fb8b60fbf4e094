//! Why an instance is blocked on something outside its spec. One enum, so
//! the condition a reason sets, its metric label and its event reason cannot
//! disagree, and matching on a reason is checked by the compiler.

use crate::reconcile::conditions::{CLUSTER_ADMIN_READY, READY};

/// A blocking reason; its name (CamelCase) is the condition and event reason.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
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
    KubeconfigNotShared,
    KubeconfigSecretMissing,
    KubeconfigKeyMissing,
    KubeconfigInvalid,
    ReleaseRecordUnreadable,
    HelmOperationPending,
    FinalizerError,
}

impl Blocked {
    pub const ALL: [Blocked; 17] = [
        Blocked::NamespaceNotEnabled,
        Blocked::NamespaceNotPrepared,
        Blocked::SccNotApproved,
        Blocked::SccMissing,
        Blocked::PodSecurityNotAllowed,
        Blocked::ClusterRoleNotApproved,
        Blocked::PasswordSecretMissing,
        Blocked::PasswordSecretInvalid,
        Blocked::PasswordGenerationFailed,
        Blocked::GitCredentialsMissing,
        Blocked::KubeconfigNotShared,
        Blocked::KubeconfigSecretMissing,
        Blocked::KubeconfigKeyMissing,
        Blocked::KubeconfigInvalid,
        Blocked::ReleaseRecordUnreadable,
        Blocked::HelmOperationPending,
        Blocked::FinalizerError,
    ];

    /// The reason as conditions, events and the metrics' `result` label spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Blocked::NamespaceNotEnabled => "NamespaceNotEnabled",
            Blocked::NamespaceNotPrepared => "NamespaceNotPrepared",
            Blocked::SccNotApproved => "SccNotApproved",
            Blocked::SccMissing => "SccMissing",
            Blocked::PodSecurityNotAllowed => "PodSecurityNotAllowed",
            Blocked::ClusterRoleNotApproved => "ClusterRoleNotApproved",
            Blocked::PasswordSecretMissing => "PasswordSecretMissing",
            Blocked::PasswordSecretInvalid => "PasswordSecretInvalid",
            Blocked::PasswordGenerationFailed => "PasswordGenerationFailed",
            Blocked::GitCredentialsMissing => "GitCredentialsMissing",
            Blocked::KubeconfigNotShared => "KubeconfigNotShared",
            Blocked::KubeconfigSecretMissing => "KubeconfigSecretMissing",
            Blocked::KubeconfigKeyMissing => "KubeconfigKeyMissing",
            Blocked::KubeconfigInvalid => "KubeconfigInvalid",
            Blocked::ReleaseRecordUnreadable => "ReleaseRecordUnreadable",
            Blocked::HelmOperationPending => "HelmOperationPending",
            Blocked::FinalizerError => "FinalizerError",
        }
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

impl std::fmt::Display for Blocked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
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
        assert!(Blocked::ALL.iter().all(|b| format!("{b:?}") == b.as_str()));
    }

    #[test]
    fn cluster_admin_reasons_set_their_condition() {
        assert_eq!(Blocked::KubeconfigNotShared.condition_type(), CLUSTER_ADMIN_READY);
        assert_eq!(Blocked::ClusterRoleNotApproved.condition_type(), CLUSTER_ADMIN_READY);
        assert_eq!(Blocked::SccMissing.condition_type(), READY);
        assert_eq!(Blocked::PasswordSecretMissing.condition_type(), READY);
    }
}

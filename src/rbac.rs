//! Every API call the operator makes outside an instance namespace's `admin`
//! grant, declared once. `config/rbac/role.yaml` is generated from it
//! (`tinycode-operator rbac`) and a test fails when they drift, so the
//! operator cannot silently 403 at run time.
//!
//! Writes inside an instance namespace come from the `admin` RoleBinding a
//! cluster-admin creates when preparing the namespace; cluster-wide the
//! operator only reads what it watches.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::scc::ALL_TIERS;

/// Name of the operator's ClusterRole.
pub const OPERATOR_CLUSTER_ROLE: &str = "tinycode-operator-manager";

/// One permission and why the operator needs it.
pub struct Permission {
    pub group: &'static str,
    pub resources: &'static [&'static str],
    pub verbs: &'static [&'static str],
    /// Restricts the rule to these names (empty: any).
    pub names: fn() -> Vec<String>,
    pub why: &'static str,
}

fn any() -> Vec<String> {
    Vec::new()
}
fn scc_names() -> Vec<String> {
    ALL_TIERS.iter().map(|t| t.scc_name()).collect()
}
fn agent_roles() -> Vec<String> {
    vec!["view".into(), "edit".into()]
}
fn scc_use_roles() -> Vec<String> {
    ALL_TIERS.iter().map(|t| t.use_cluster_role()).collect()
}

/// The declaration.
pub const PERMISSIONS: &[Permission] = &[
    Permission {
        group: "tinycode.dev",
        resources: &["tinycodeinstances"],
        verbs: &["get", "list", "watch", "patch", "update"],
        names: any,
        why: "watch instances and add/remove the finalizer",
    },
    Permission {
        group: "tinycode.dev",
        resources: &["tinycodeinstances/status"],
        verbs: &["get", "patch", "update"],
        names: any,
        why: "report phase, URL and conditions",
    },
    Permission {
        group: "tinycode.dev",
        resources: &["tinycodeinstances/finalizers"],
        verbs: &["update"],
        names: any,
        why: "own child objects where OwnerReferencesPermissionEnforcement is on",
    },
    Permission {
        group: "",
        resources: &["namespaces"],
        verbs: &["get"],
        names: any,
        why: "read namespace opt-in and SCC approval labels",
    },
    Permission {
        group: "",
        resources: &["services"],
        verbs: &["get", "list", "watch"],
        names: any,
        why: "watch owned Services; hold what discovery ClusterRoles grant",
    },
    Permission {
        group: "",
        resources: &["serviceaccounts", "configmaps"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned objects to repair drift",
    },
    Permission {
        group: "apps",
        resources: &["deployments"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned Deployments for readiness and drift",
    },
    Permission {
        group: "networking.k8s.io",
        resources: &["networkpolicies"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned NetworkPolicies to repair drift",
    },
    Permission {
        group: "rbac.authorization.k8s.io",
        resources: &["roles", "rolebindings"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned discovery Roles and SCC grants to repair drift",
    },
    Permission {
        group: "route.openshift.io",
        resources: &["routes"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned Routes for their admitted host",
    },
    Permission {
        group: "rbac.authorization.k8s.io",
        resources: &["clusterroles", "clusterrolebindings"],
        verbs: &["get", "list", "watch", "create", "update", "patch", "delete"],
        names: any,
        why: "helm manages the per-instance cross-namespace discovery ClusterRole and its binding",
    },
    Permission {
        group: "rbac.authorization.k8s.io",
        resources: &["clusterroles"],
        verbs: &["bind"],
        names: scc_use_roles,
        why: "bind an instance's ServiceAccount to its SCC tier's use role",
    },
    Permission {
        group: "rbac.authorization.k8s.io",
        resources: &["clusterroles"],
        verbs: &["bind"],
        names: agent_roles,
        why: "helm binds a cluster-admin-mode instance's ServiceAccount to spec.clusterAdmin.clusterRole (view or edit; a tinycode-* role must be added here by the cluster-admin)",
    },
    Permission {
        group: "security.openshift.io",
        resources: &["securitycontextconstraints"],
        verbs: &["get"],
        names: scc_names,
        why: "check the tier's SCC is installed",
    },
    Permission {
        group: "authorization.k8s.io",
        resources: &["selfsubjectrulesreviews"],
        verbs: &["create"],
        names: any,
        why: "check that a namespace is prepared",
    },
    Permission {
        group: "events.k8s.io",
        resources: &["events"],
        verbs: &["create", "patch"],
        names: any,
        why: "record events on instances",
    },
];

/// Name of the Role (in the operator namespace) for the leader lease.
pub const LEADER_ELECTION_ROLE: &str = "tinycode-operator-leader-election";

/// Calls the operator makes in its own namespace only: the leader Lease.
pub const LEADER_ELECTION_PERMISSIONS: &[Permission] = &[Permission {
    group: "coordination.k8s.io",
    resources: &["leases"],
    verbs: &["get", "create", "update"],
    names: any,
    why: "hold the leader Lease so only one replica reconciles",
}];

fn rules(permissions: &[Permission]) -> Vec<PolicyRule> {
    permissions
        .iter()
        .map(|p| {
            let names = (p.names)();
            PolicyRule {
                api_groups: Some(vec![p.group.into()]),
                resources: Some(p.resources.iter().map(|r| r.to_string()).collect()),
                verbs: p.verbs.iter().map(|v| v.to_string()).collect(),
                resource_names: (!names.is_empty()).then_some(names),
                non_resource_urls: None,
            }
        })
        .collect()
}

/// The leader-election Role in the operator namespace.
pub fn leader_election_role(namespace: &str) -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(LEADER_ELECTION_ROLE.into()),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/name".into(), "tinycode-operator".into())])),
            ..Default::default()
        },
        rules: Some(rules(LEADER_ELECTION_PERMISSIONS)),
    }
}

/// The leader-election Role as a manifest.
pub fn leader_election_role_manifest(namespace: &str) -> serde_json::Value {
    let mut v = serde_json::to_value(leader_election_role(namespace)).expect("role serialises");
    v["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    v["kind"] = "Role".into();
    v
}

/// The operator's ClusterRole, generated from [`PERMISSIONS`].
pub fn cluster_role() -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(OPERATOR_CLUSTER_ROLE.into()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/name".into(), "tinycode-operator".into())])),
            ..Default::default()
        },
        rules: Some(rules(PERMISSIONS)),
        ..Default::default()
    }
}

/// The ClusterRole as a manifest with apiVersion and kind.
pub fn cluster_role_manifest() -> serde_json::Value {
    let mut v = serde_json::to_value(cluster_role()).expect("role serialises");
    v["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
    v["kind"] = "ClusterRole".into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn never_grants_cluster_wide_writes_to_namespaced_workloads() {
        let role = cluster_role();
        for rule in role.rules.unwrap() {
            let resources = rule.resources.unwrap();
            let writes = rule.verbs.iter().any(|v| ["create", "update", "patch", "delete", "*"].contains(&v.as_str()));
            for r in &resources {
                if ["deployments", "secrets", "services", "roles", "rolebindings", "routes", "persistentvolumeclaims"]
                    .contains(&r.as_str())
                {
                    assert!(!writes, "cluster-wide write on {r}: writes come from the namespace admin grant");
                }
            }
            assert!(!rule.verbs.contains(&"*".to_string()) && !resources.contains(&"*".to_string()));
        }
    }

    #[test]
    fn bind_is_limited_to_the_scc_use_roles() {
        let role = cluster_role();
        let bind = role.rules.unwrap().into_iter().find(|r| r.verbs.contains(&"bind".to_string())).unwrap();
        assert_eq!(
            bind.resource_names.unwrap(),
            vec!["tinycode-scc-restricted", "tinycode-scc-hostpath", "tinycode-scc-shell"]
        );
    }
}

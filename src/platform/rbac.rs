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

use crate::platform::scc::ALL_TIERS;

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
/// The default `--allowed-cluster-roles`: the operator may bind exactly
/// these for instances. A cluster-admin who allows more adds them here too
/// (and regenerates), or grants `bind` on them in a ClusterRole of their own.
pub const DEFAULT_ALLOWED_CLUSTER_ROLES: &[&str] = &["view"];

/// The ClusterRole (installed with the operator) that discovery RoleBindings refer to.
pub const DISCOVERY_CLUSTER_ROLE: &str = "tinycode-discovery";

fn agent_roles() -> Vec<String> {
    DEFAULT_ALLOWED_CLUSTER_ROLES.iter().map(|r| r.to_string()).collect()
}
fn discovery_role() -> Vec<String> {
    vec![DISCOVERY_CLUSTER_ROLE.into()]
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
        why: "watch instances, add/remove the finalizer, and start an idle-stopped one its gate asks the relay to",
    },
    Permission {
        group: "tinycode.dev",
        resources: &["tinycodeclasses"],
        verbs: &["get", "list", "watch"],
        names: any,
        why: "read the classes (defaults and limits) cluster-admins offer",
    },
    Permission {
        group: "tinycode.dev",
        resources: &["tinycodeinstances/status"],
        verbs: &["get", "patch", "update"],
        names: any,
        why: "report phase, URL and conditions, and who last used a sign-in instance (the relay)",
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
        verbs: &["get", "list", "watch"],
        names: any,
        why: "cache namespace opt-in and approval labels; find namespaces opened to vLLM discovery",
    },
    Permission {
        group: "",
        resources: &["services"],
        verbs: &["get", "list", "watch"],
        names: any,
        why: "watch owned Services and find vLLM Services; hold what discovery ClusterRoles grant",
    },
    Permission {
        group: "",
        resources: &["persistentvolumeclaims"],
        verbs: &["list", "watch"],
        names: any,
        why: "cache the metadata of the instances' PVCs, to notice a deleted one",
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
        group: "networking.k8s.io",
        resources: &["ingresses"],
        verbs: &["list", "watch"],
        names: any,
        why: "watch owned Ingresses (Kubernetes without Routes) for their published address",
    },
    Permission {
        group: "storage.k8s.io",
        resources: &["storageclasses"],
        verbs: &["get"],
        names: any,
        why: "read the StorageClass of a PVC that is to grow: whether it allows expansion",
    },
    Permission {
        group: "networking.k8s.io",
        resources: &["ingressclasses"],
        verbs: &["get", "list", "watch"],
        names: any,
        why: "find the cluster's default IngressClass",
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
        resources: &["clusterrolebindings"],
        verbs: &["get", "list", "watch", "create", "update", "patch", "delete"],
        names: any,
        // Any name: RBAC cannot limit create by name (resourceNames do not apply to
        // create), and the names are derived per instance, so no fixed list could limit
        // update, patch or delete. What a binding grants is limited by `bind` below.
        why: "helm binds an approved spec.clusterAdmin.clusterRole; cleanup finds bindings by instance label (no ClusterRole is ever written)",
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
        why: "helm binds an approved spec.clusterAdmin.clusterRole (exactly the default --allowed-cluster-roles)",
    },
    Permission {
        group: "rbac.authorization.k8s.io",
        resources: &["clusterroles"],
        verbs: &["bind"],
        names: discovery_role,
        why: "helm binds tinycode-discovery in namespaces opened to vLLM discovery",
    },
    Permission {
        group: "security.openshift.io",
        resources: &["securitycontextconstraints"],
        verbs: &["get", "list", "watch"],
        names: any,
        why: "cache which SCC tiers are installed",
    },
    Permission {
        group: "authorization.k8s.io",
        resources: &["selfsubjectrulesreviews"],
        verbs: &["create"],
        names: any,
        why: "check that a namespace is prepared",
    },
    Permission {
        group: "authentication.k8s.io",
        resources: &["tokenreviews"],
        verbs: &["create"],
        names: any,
        why: "authenticate the bearer token of a /metrics caller (--metrics-auth rbac)",
    },
    Permission {
        group: "authorization.k8s.io",
        resources: &["subjectaccessreviews"],
        verbs: &["create"],
        names: any,
        why: "authorize a /metrics caller for get on the non-resource URL /metrics (--metrics-auth rbac); answer an oidc instance's gate, through the relay, whether a signed-in user may use that instance",
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

/// Calls the operator makes in its own namespace only: the leader Lease and
/// the Helm release records (kept here, out of tenants' reach).
pub const LEADER_ELECTION_PERMISSIONS: &[Permission] = &[
    Permission {
        group: "coordination.k8s.io",
        resources: &["leases"],
        verbs: &["get", "create", "update"],
        names: any,
        why: "hold the leader Lease so only one replica reconciles",
    },
    Permission {
        group: "",
        resources: &["secrets"],
        verbs: &["get", "list", "watch", "create", "update", "patch", "delete", "deletecollection"],
        names: any,
        why: "helm stores each instance's release records here (the operator caches their metadata); stale records are cleaned up",
    },
    Permission {
        group: "",
        resources: &["configmaps"],
        verbs: &["get", "create", "patch"],
        names: any,
        why: "write the host-directory admission policy's parameter (--hostpath-allowed-prefixes) at start",
    },
];

/// What an instance's ServiceAccount may do in a namespace opened to discovery.
pub const DISCOVERY_PERMISSIONS: &[Permission] = &[Permission {
    group: "",
    resources: &["services"],
    verbs: &["get", "list", "watch"],
    names: any,
    why: "find vLLM Services annotated tinycode.dev/discover=vllm",
}];

/// The `tinycode-discovery` ClusterRole, installed once with the operator and
/// bound per namespace with RoleBindings, so the operator never writes ClusterRoles.
pub fn discovery_cluster_role_manifest() -> serde_json::Value {
    let role = ClusterRole {
        metadata: ObjectMeta {
            name: Some(DISCOVERY_CLUSTER_ROLE.into()),
            labels: Some(BTreeMap::from([("app.kubernetes.io/name".into(), "tinycode-operator".into())])),
            ..Default::default()
        },
        rules: Some(rules(DISCOVERY_PERMISSIONS)),
        ..Default::default()
    };
    crate::platform::manifest(&role)
}

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
    crate::platform::manifest(&leader_election_role(namespace))
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
    crate::platform::manifest(&cluster_role())
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
    fn kubernetes_needs_ingress_reads_only() {
        let rules = cluster_role().rules.unwrap();
        let find = |res: &str| {
            rules
                .iter()
                .find(|r| r.resources.as_ref().unwrap().contains(&res.to_string()))
                .map(|r| r.verbs.clone())
                .unwrap_or_default()
        };
        assert_eq!(find("ingresses"), vec!["list", "watch"], "writes come from the namespace admin grant");
        assert_eq!(find("ingressclasses"), vec!["get", "list", "watch"]);
    }

    #[test]
    fn bind_is_limited_to_named_roles() {
        let role = cluster_role();
        let mut bindable: Vec<String> = role
            .rules
            .unwrap()
            .into_iter()
            .filter(|r| r.verbs.contains(&"bind".to_string()))
            .flat_map(|r| r.resource_names.expect("bind always names its roles"))
            .collect();
        bindable.sort();
        assert_eq!(
            bindable,
            vec![
                "tinycode-discovery",
                "tinycode-scc-hostpath",
                "tinycode-scc-restricted",
                "tinycode-scc-shell",
                "view"
            ]
        );
    }

    /// The operator's power must not grow into writing ClusterRoles (it could
    /// then grant itself anything) or escalating.
    #[test]
    fn no_cluster_role_writes_no_escalate_no_secrets_cluster_wide() {
        for rule in cluster_role().rules.unwrap() {
            let resources = rule.resources.unwrap();
            let verbs = rule.verbs;
            if resources.contains(&"clusterroles".to_string()) {
                assert_eq!(verbs, vec!["bind"], "clusterroles: bind only, by name");
                assert!(rule.resource_names.is_some());
            }
            assert!(!verbs.contains(&"escalate".to_string()) && !verbs.contains(&"impersonate".to_string()));
            assert!(!resources.contains(&"secrets".to_string()), "no cluster-wide Secret access: {verbs:?}");
        }
        let ns_rules = leader_election_role("ops").rules.unwrap();
        assert!(ns_rules.iter().any(|r| r.resources.as_ref().unwrap().contains(&"secrets".to_string())));
    }
}

//! Approvals recorded on the cluster by someone other than the tenant, and
//! the pure decisions made from them (tenancy model: README.md, "Security model").
//!
//! A tenant can write anything in their own namespace, so no approval may
//! live there: cluster roles and discovery are approved by namespace labels
//! (only a cluster-admin can label a namespace), a kubeconfig copy by an
//! annotation on the source Secret in the owner's namespace.

use std::collections::{BTreeMap, BTreeSet};

use crate::api::{ClusterAdmin, TinycodeInstanceSpec};
use crate::platform::rbac::DISCOVERY_CLUSTER_ROLE;

/// Namespace label naming the one ClusterRole instances there may bind.
pub const ALLOW_CLUSTER_ROLE_LABEL: &str = "tinycode.dev/allow-cluster-role";
/// Annotation on a kubeconfig Secret listing the namespaces it may be copied to.
pub const KUBECONFIG_SHARE_ANNOTATION: &str = "tinycode.dev/kubeconfig-share-with";
/// Namespace label (`true`) that lets instances of other namespaces discover its vLLM Services.
pub const DISCOVERY_LABEL: &str = "tinycode.dev/vllm-discovery";

/// Roles no instance ever gets, whatever the allow-list says: they are
/// cluster-admin powers, the operator's own, or the keys to the SCC tiers.
pub fn reserved_cluster_role(role: &str) -> bool {
    matches!(role, "admin" | "cluster-admin" | DISCOVERY_CLUSTER_ROLE)
        || role.starts_with("system:")
        || role.starts_with("tinycode-operator")
        || role.starts_with("tinycode-scc-")
}

/// The ClusterRole to bind for an instance, `None` when it asks for none, or
/// why it may not have it (with the command that approves it).
pub fn cluster_role(
    cli: &str,
    namespace: &str,
    spec: &ClusterAdmin,
    namespace_labels: &BTreeMap<String, String>,
    allowed: &[String],
) -> Result<Option<String>, String> {
    let Some(role) = spec.cluster_role.as_deref().filter(|r| !r.is_empty()) else { return Ok(None) };
    if !spec.enabled {
        return Err(format!(
            "spec.clusterAdmin.clusterRole {role} is bound only in cluster-admin mode; set spec.clusterAdmin.enabled to true or remove clusterRole"
        ));
    }
    if reserved_cluster_role(role) {
        return Err(format!(
            "ClusterRole {role} is never bound to an instance (admin, cluster-admin, system:*, the operator's own and the SCC use roles are reserved); use a role such as view"
        ));
    }
    if !allowed.iter().any(|a| a == role) {
        return Err(format!(
            "ClusterRole {role} is not in the operator's allow-list ({}); a cluster-admin adds it to --allowed-cluster-roles (TINYCODE_ALLOWED_CLUSTER_ROLES) and to the operator's bind rule, then approves it here with `{cli} label namespace {namespace} {ALLOW_CLUSTER_ROLE_LABEL}={role} --overwrite`",
            if allowed.is_empty() { "empty".to_string() } else { allowed.join(", ") }
        ));
    }
    if namespace_labels.get(ALLOW_CLUSTER_ROLE_LABEL).map(String::as_str) != Some(role) {
        return Err(format!(
            "ClusterRole {role} is not approved for namespace {namespace}; a cluster-admin approves it with `{cli} label namespace {namespace} {ALLOW_CLUSTER_ROLE_LABEL}={role} --overwrite`"
        ));
    }
    Ok(Some(role.to_string()))
}

/// Whether a Secret's owner shares it with `namespace` (exact names, comma-separated).
pub fn kubeconfig_shared(annotations: Option<&BTreeMap<String, String>>, namespace: &str) -> bool {
    annotations
        .and_then(|a| a.get(KUBECONFIG_SHARE_ANNOTATION))
        .is_some_and(|v| v.split(',').map(str::trim).any(|n| n == namespace))
}

/// The one message for a kubeconfig that may not be copied, the same whether
/// the Secret is missing, unreadable or simply not shared, so a tenant learns
/// nothing about other namespaces from it.
pub fn kubeconfig_not_shared_message(cli: &str, secret: &str, source_ns: &str, namespace: &str) -> String {
    format!(
        "Secret {secret} in namespace {source_ns} is not shared with namespace {namespace}; its owner shares it with `{cli} annotate secret {secret} -n {source_ns} {KUBECONFIG_SHARE_ANNOTATION}={namespace}` (a comma-separated list of namespaces), or create the Secret in {namespace}"
    )
}

/// The namespaces an instance lists for vLLM discovery (`*` for all).
pub fn requested_discovery(spec: &TinycodeInstanceSpec) -> impl Iterator<Item = &String> + Clone {
    spec.discovery.iter().flat_map(|d| d.namespaces.iter())
}

/// Namespaces besides its own whose Services the instance may discover
/// ([`discovery_namespaces`] of what it lists).
pub fn approved_discovery(ns: &str, spec: &TinycodeInstanceSpec, labelled: &BTreeSet<String>) -> Vec<String> {
    let requested: Vec<String> = requested_discovery(spec).cloned().collect();
    discovery_namespaces(&requested, ns, labelled).0
}

/// Namespaces (other than the instance's own) whose Services an instance may
/// discover: those it lists (or all, for `*`) that carry the discovery label.
/// Listed namespaces without it are left out, and returned second (for
/// [`not_labelled_warning`]).
pub fn discovery_namespaces(
    requested: &[String],
    own: &str,
    labelled: &BTreeSet<String>,
) -> (Vec<String>, Vec<String>) {
    let mut approved = BTreeSet::new();
    let mut not_labelled = Vec::new();
    for ns in requested {
        if ns == own {
            continue;
        }
        if ns == "*" {
            approved.extend(labelled.iter().filter(|n| n.as_str() != own).cloned());
        } else if labelled.contains(ns) {
            approved.insert(ns.clone());
        } else {
            not_labelled.push(ns.clone());
        }
    }
    (approved.into_iter().collect(), not_labelled)
}

/// The warning for a listed discovery namespace without the label.
pub fn not_labelled_warning(cli: &str, ns: &str) -> String {
    format!(
        "discovery namespace {ns} is not searched: it does not carry the label {DISCOVERY_LABEL}=true; a cluster-admin opens it with `{cli} label namespace {ns} {DISCOVERY_LABEL}=true`"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ca(enabled: bool, role: Option<&str>) -> ClusterAdmin {
        ClusterAdmin { enabled, cluster_role: role.map(Into::into), ..Default::default() }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn a_cluster_role_needs_mode_allow_list_and_namespace_label() {
        let allowed = vec!["view".to_string()];
        let approved = labels(&[(ALLOW_CLUSTER_ROLE_LABEL, "view")]);
        assert_eq!(cluster_role("oc", "team", &ca(true, None), &approved, &allowed), Ok(None));
        assert_eq!(cluster_role("oc", "team", &ca(true, Some("view")), &approved, &allowed), Ok(Some("view".into())));
        let e = cluster_role("oc", "team", &ca(false, Some("view")), &approved, &allowed).unwrap_err();
        assert!(e.contains("spec.clusterAdmin.enabled"), "{e}");
        let e = cluster_role("oc", "team", &ca(true, Some("view")), &labels(&[]), &allowed).unwrap_err();
        assert!(e.contains("`oc label namespace team tinycode.dev/allow-cluster-role=view --overwrite`"), "{e}");
        let e = cluster_role(
            "oc",
            "team",
            &ca(true, Some("edit")),
            &labels(&[(ALLOW_CLUSTER_ROLE_LABEL, "edit")]),
            &allowed,
        )
        .unwrap_err();
        assert!(e.contains("not in the operator's allow-list (view)"), "{e}");
        let e = cluster_role(
            "oc",
            "team",
            &ca(true, Some("view")),
            &labels(&[(ALLOW_CLUSTER_ROLE_LABEL, "edit")]),
            &allowed,
        )
        .unwrap_err();
        assert!(e.contains("not approved"), "a label for another role approves nothing: {e}");
    }

    #[test]
    fn reserved_roles_are_refused_even_when_listed_and_labelled() {
        for role in [
            "admin",
            "cluster-admin",
            "system:controller:foo",
            "tinycode-operator-manager",
            "tinycode-scc-shell",
            "tinycode-scc-hostpath",
            "tinycode-discovery",
        ] {
            assert!(reserved_cluster_role(role), "{role}");
            let allowed = vec![role.to_string()];
            let l = labels(&[(ALLOW_CLUSTER_ROLE_LABEL, role)]);
            assert!(cluster_role("oc", "team", &ca(true, Some(role)), &l, &allowed).is_err(), "{role}");
        }
        assert!(!reserved_cluster_role("view") && !reserved_cluster_role("tinycode-readonly"));
    }

    #[test]
    fn kubeconfig_share_names_exact_namespaces() {
        let a = labels(&[(KUBECONFIG_SHARE_ANNOTATION, "team-a, team-b")]);
        assert!(kubeconfig_shared(Some(&a), "team-a"));
        assert!(kubeconfig_shared(Some(&a), "team-b"));
        assert!(!kubeconfig_shared(Some(&a), "team"), "no prefix matches");
        assert!(!kubeconfig_shared(Some(&labels(&[(KUBECONFIG_SHARE_ANNOTATION, "*")])), "team-a"), "no wildcard");
        assert!(!kubeconfig_shared(None, "team-a"));
        let m = kubeconfig_not_shared_message("oc", "kc", "admins", "team-a");
        assert!(m.contains("tinycode.dev/kubeconfig-share-with=team-a") && !m.contains("exist"));
    }

    #[test]
    fn discovery_only_reaches_labelled_namespaces() {
        let labelled: BTreeSet<String> = ["models".to_string(), "team".to_string()].into();
        let (ok, unlabelled) =
            discovery_namespaces(&["models".into(), "other".into(), "team".into()], "team", &labelled);
        assert_eq!((ok, unlabelled), (vec!["models".to_string()], vec!["other".to_string()]));
        let w = not_labelled_warning("kubectl", "other");
        assert!(w.contains("`kubectl label namespace other tinycode.dev/vllm-discovery=true`"), "{w}");
        let (ok, warn) = discovery_namespaces(&["*".into()], "team", &labelled);
        assert_eq!((ok, warn.len()), (vec!["models".to_string()], 0));

        let spec = |namespaces: &[&str]| -> TinycodeInstanceSpec {
            serde_json::from_value(serde_json::json!({"discovery": {"namespaces": namespaces}})).unwrap()
        };
        assert!(approved_discovery("team", &spec(&[]), &labelled).is_empty());
        assert!(approved_discovery("team", &spec(&["team"]), &labelled).is_empty(), "its own is not another");
        assert_eq!(approved_discovery("team", &spec(&["*"]), &labelled), ["models"]);
        assert_eq!(approved_discovery("team", &spec(&["models", "other"]), &labelled), ["models"]);
    }
}

//! Is a namespace prepared for instances (pure)? The operator holds no
//! cluster-wide write access; a cluster-admin grants it `admin` per namespace
//! and records that act with a namespace label ([`PREPARED_LABEL`]). The
//! label is what makes a namespace prepared: a tenant who is `admin` of a
//! namespace can bind the operator there too (RBAC's escalation check allows
//! granting rights one holds), but only a cluster-admin can label a namespace.
//! The operator's own SelfSubjectRulesReview then says whether the rights are
//! (still) there, naming what is missing with the command that fixes it.

use k8s_openapi::api::authorization::v1::ResourceRule;

/// Namespace label (value `true`) that hack/prepare-namespace.sh sets: a
/// cluster-admin prepared this namespace for tinycode.
pub const PREPARED_LABEL: &str = "tinycode.dev/prepared";

/// Whether a namespace carries the cluster-admin's preparation mark.
pub fn labelled_prepared(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(PREPARED_LABEL).is_some_and(|v| v == "true")
}

/// The commands that prepare `namespace` (what hack/prepare-namespace.sh runs).
pub fn prepare_commands(cli: &str, namespace: &str, operator_ns: &str, operator_sa: &str) -> String {
    format!(
        "`{cli} create rolebinding tinycode-operator-admin --clusterrole=admin --serviceaccount={operator_ns}:{operator_sa} -n {namespace}` and `{cli} label namespace {namespace} {PREPARED_LABEL}=true` (or hack/prepare-namespace.sh {namespace})"
    )
}

/// The status message for a namespace without the preparation label.
pub fn not_labelled_message(cli: &str, namespace: &str, operator_ns: &str, operator_sa: &str) -> String {
    format!(
        "namespace {namespace} is not prepared for tinycode: it lacks the label {PREPARED_LABEL}=true that only a cluster-admin can set (a RoleBinding for the operator made by the namespace's own admin prepares nothing). A cluster-admin prepares it with {}",
        prepare_commands(cli, namespace, operator_ns, operator_sa)
    )
}

/// (API group, resource, verb) the reconcile and Helm need in an instance namespace.
pub const NEEDED: &[(&str, &str, &str)] = &[
    ("", "secrets", "create"),
    ("", "secrets", "delete"),
    ("", "serviceaccounts", "create"),
    ("", "services", "create"),
    ("", "configmaps", "create"),
    ("", "persistentvolumeclaims", "create"),
    ("apps", "deployments", "create"),
    ("apps", "deployments", "patch"),
    ("rbac.authorization.k8s.io", "roles", "create"),
    ("rbac.authorization.k8s.io", "rolebindings", "create"),
    ("networking.k8s.io", "networkpolicies", "create"),
];

fn matches(list: &[String], want: &str) -> bool {
    list.iter().any(|x| x == "*" || x == want)
}

/// Whether some rule allows `verb` on `group/resource` (any resource name).
pub fn allows(rules: &[ResourceRule], group: &str, resource: &str, verb: &str) -> bool {
    rules.iter().any(|r| {
        matches(&r.verbs, verb)
            && matches(r.api_groups.as_deref().unwrap_or_default(), group)
            && matches(r.resources.as_deref().unwrap_or_default(), resource)
            && r.resource_names.as_ref().is_none_or(Vec::is_empty)
    })
}

/// The needed permissions the rules lack, as `group/resource:verb`; the
/// exposure object depends on the platform (a Route or an Ingress).
pub fn missing(rules: &[ResourceRule], platform: crate::platform::Platform) -> Vec<String> {
    let exposure = if platform.routes {
        ("route.openshift.io", "routes", "create")
    } else {
        ("networking.k8s.io", "ingresses", "create")
    };
    NEEDED
        .iter()
        .chain(std::iter::once(&exposure))
        .filter(|(g, r, v)| !allows(rules, g, r, v))
        .map(|(g, r, v)| if g.is_empty() { format!("{r}:{v}") } else { format!("{g}/{r}:{v}") })
        .collect()
}

/// The status message for an unprepared namespace.
pub fn not_prepared_message(
    cli: &str,
    namespace: &str,
    missing: &[String],
    operator_ns: &str,
    operator_sa: &str,
) -> String {
    format!(
        "namespace {namespace} is not prepared for tinycode: the operator may not {} there. A cluster-admin prepares it with {}",
        missing.join(", "),
        prepare_commands(cli, namespace, operator_ns, operator_sa)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> ResourceRule {
        ResourceRule {
            api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
            resources: Some(resources.iter().map(|s| s.to_string()).collect()),
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            resource_names: None,
        }
    }

    #[test]
    fn wildcard_admin_rules_cover_everything() {
        use crate::platform::Platform;
        assert!(missing(&[rule(&["*"], &["*"], &["*"])], Platform::OPENSHIFT).is_empty());
        assert!(missing(&[rule(&["*"], &["*"], &["*"])], Platform::KUBERNETES).is_empty());
    }

    #[test]
    fn read_only_rules_are_not_enough() {
        let rules = vec![rule(&["", "apps"], &["*"], &["get", "list", "watch"])];
        let m = missing(&rules, crate::platform::Platform::OPENSHIFT);
        assert_eq!(m.len(), NEEDED.len() + 1);
        assert!(m.contains(&"route.openshift.io/routes:create".to_string()));
        let k = missing(&rules, crate::platform::Platform::KUBERNETES);
        assert!(
            k.contains(&"networking.k8s.io/ingresses:create".to_string()) && !k.iter().any(|x| x.contains("routes"))
        );
        assert!(m.contains(&"apps/deployments:create".to_string()));
        assert!(m.contains(&"secrets:create".to_string()));
    }

    #[test]
    fn resource_name_scoped_rules_do_not_count() {
        let mut r = rule(&["route.openshift.io"], &["routes"], &["create"]);
        r.resource_names = Some(vec!["only-this".into()]);
        assert!(!allows(&[r.clone()], "route.openshift.io", "routes", "create"));
        r.resource_names = Some(vec![]);
        assert!(allows(&[r], "route.openshift.io", "routes", "create"));
    }

    #[test]
    fn message_names_the_command() {
        let m = not_prepared_message(
            "oc",
            "team",
            &["apps/deployments:create".into()],
            "tinycode-operator-system",
            "tinycode-operator-manager",
        );
        assert!(m.contains("oc create rolebinding tinycode-operator-admin --clusterrole=admin --serviceaccount=tinycode-operator-system:tinycode-operator-manager -n team"));
        assert!(m.contains("apps/deployments:create"));
        assert!(m.contains("oc label namespace team tinycode.dev/prepared=true"));
    }

    #[test]
    fn only_the_label_value_true_marks_a_namespace_prepared() {
        let l = |v: &str| std::collections::BTreeMap::from([(PREPARED_LABEL.to_string(), v.to_string())]);
        assert!(labelled_prepared(&l("true")));
        assert!(!labelled_prepared(&l("yes")) && !labelled_prepared(&Default::default()));
        let m = not_labelled_message("oc", "team", "op", "sa");
        assert!(not_labelled_message("kubectl", "team", "op", "sa").contains("`kubectl label namespace team"));
        assert!(m.contains("oc label namespace team tinycode.dev/prepared=true"), "{m}");
        assert!(m.contains("--serviceaccount=op:sa -n team"), "{m}");
    }
}

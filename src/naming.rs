//! Names of everything the operator creates, derived from the instance's
//! namespace and name so that re-creating an instance finds its old objects
//! (kept PVCs, the Helm release) and two namespaces never collide.

use sha2::{Digest, Sha256};

/// Helm refuses release names longer than this.
pub const HELM_RELEASE_MAX: usize = 53;

/// `tinycode.<namespace>.<name>`: every release lives in the operator's
/// namespace, so the name must be unique across the cluster. Neither part can
/// hold a dot, so two instances never share a name (`a-b`/`c` and `a`/`b-c`
/// differ). Past Helm's limit the tail becomes a 64-bit digest of
/// `<namespace>/<name>`; a shortened name has fewer dots than a whole one, so
/// the two forms never meet, and no tenant can grind a collision.
pub fn release_name(namespace: &str, name: &str) -> String {
    let full = format!("tinycode.{namespace}.{name}");
    if full.len() <= HELM_RELEASE_MAX {
        return full;
    }
    let digest = hex::encode(Sha256::digest(format!("{namespace}/{name}").as_bytes()));
    let keep = HELM_RELEASE_MAX - 17;
    let head = full[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{}", &digest[..16])
}

/// The release name of builds before 0.2 (records kept in the instance
/// namespace); only used to migrate such releases.
pub fn legacy_release_name(namespace: &str, name: &str) -> String {
    shorten(&format!("tinycode-{namespace}-{name}"), HELM_RELEASE_MAX, &format!("{namespace}/{name}"))
}

/// The Secret holding the generated password when the spec names none.
pub fn generated_password(name: &str) -> String {
    format!("{name}-tinycode-password")
}

/// The ClusterRoleBinding of an approved `clusterAdmin.clusterRole`.
pub fn cluster_role_binding(namespace: &str, name: &str) -> String {
    format!("{}-cluster-role", cluster_scoped_prefix(namespace, name))
}

/// The RoleBinding an instance gets in each discovery namespace (unique per
/// instance, since instances of several namespaces may discover in one).
pub fn discovery_binding(namespace: &str, name: &str) -> String {
    format!("{}-discovery", cluster_scoped_prefix(namespace, name))
}

/// Prefix for cluster-scoped object names. `:` cannot occur in namespace or
/// instance names, so `tinycode:a-b:c` and `tinycode:a:b-c` stay distinct.
pub fn cluster_scoped_prefix(namespace: &str, name: &str) -> String {
    format!("tinycode:{namespace}:{name}")
}

/// Name shared by the Deployment, Service, ServiceAccount, NetworkPolicy and Route.
pub fn fullname(name: &str) -> String {
    format!("{name}-tinycode")
}

pub fn service_account(name: &str) -> String {
    fullname(name)
}

pub fn route(name: &str) -> String {
    fullname(name)
}

pub fn data_pvc(name: &str) -> String {
    format!("{name}-data")
}

pub fn projects_pvc(name: &str) -> String {
    format!("{name}-projects")
}

pub fn config_map(name: &str) -> String {
    format!("{name}-tinycode-config")
}

pub fn discovery_role(name: &str) -> String {
    format!("{name}-tinycode-discovery")
}

/// The copy of a kubeconfig Secret from another namespace.
pub fn kubeconfig_copy(name: &str) -> String {
    format!("{name}-tinycode-kubeconfig")
}

/// RoleBinding that grants `use` of one SCC tier; the tier is in the name
/// because a RoleBinding's roleRef cannot change.
pub fn scc_grant(name: &str, tier: &str) -> String {
    format!("{name}-tinycode-scc-{tier}")
}

/// Truncate `full` to `max` characters, replacing the tail with an 8-hex
/// digest of `key` so distinct keys stay distinct.
fn shorten(full: &str, max: usize, key: &str) -> String {
    if full.len() <= max {
        return full.to_string();
    }
    let digest = hex::encode(Sha256::digest(key.as_bytes()));
    let keep = max - 9;
    let head = full[..keep].trim_end_matches(['-', '.']);
    format!("{head}-{}", &digest[..8])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_release_names_are_kept_whole() {
        assert_eq!(release_name("tinycode-dev", "my-tinycode"), "tinycode.tinycode-dev.my-tinycode");
        assert_eq!(legacy_release_name("tinycode-dev", "my-tinycode"), "tinycode-tinycode-dev-my-tinycode");
    }

    #[test]
    fn release_names_never_collide_across_namespaces() {
        assert_ne!(release_name("a-b", "c"), release_name("a", "b-c"));
        let re = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$").unwrap();
        let long_ns = "project-frontend-team-production-environment";
        for (ns, name) in [("a", "b"), (long_ns, "dev"), ("ns", &"x".repeat(63)), (&"n".repeat(63), "y")] {
            let r = release_name(ns, name);
            assert!(r.len() <= HELM_RELEASE_MAX && re.is_match(&r), "{r}");
        }
        let shortened = release_name(long_ns, "dev");
        assert_eq!(shortened.matches('.').count(), 1, "{shortened}");
        assert_ne!(shortened, release_name(long_ns, "dev2"));
        // A whole name always has two dots, so it can never equal a shortened one.
        assert_eq!(release_name("ab", "cd").matches('.').count(), 2);
    }

    #[test]
    fn long_release_names_are_shortened_with_a_stable_hash() {
        let ns = "a-very-long-namespace-name-for-a-team";
        let a = legacy_release_name(ns, "alice-workspace-instance");
        let b = legacy_release_name(ns, "alice-workspace-instance2");
        assert!(a.len() <= HELM_RELEASE_MAX, "{a}");
        assert!(b.len() <= HELM_RELEASE_MAX, "{b}");
        assert_ne!(a, b);
        assert_eq!(a, legacy_release_name(ns, "alice-workspace-instance"));
        assert!(a.starts_with("tinycode-a-very-long-namespace"));
        let re = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").unwrap();
        assert!(re.is_match(&a), "release name must stay a DNS label: {a}");
    }

    #[test]
    fn exactly_53_is_not_shortened() {
        let name = "x".repeat(53 - "tinycode.ns.".len());
        assert_eq!(release_name("ns", &name).len(), 53);
        assert_eq!(release_name("ns", &name), format!("tinycode.ns.{name}"));
    }

    #[test]
    fn cluster_scoped_names_do_not_collide_across_namespaces() {
        assert_ne!(cluster_scoped_prefix("a-b", "c"), cluster_scoped_prefix("a", "b-c"));
        assert_ne!(cluster_scoped_prefix("team1", "dev"), cluster_scoped_prefix("team2", "dev"));
    }
}

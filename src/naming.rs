//! Names of everything the operator creates, derived from the instance's
//! namespace and name so that re-creating an instance finds its old objects
//! (kept PVCs, the Helm release) and two namespaces never collide.

use sha2::{Digest, Sha256};

/// Helm refuses release names longer than this.
pub const HELM_RELEASE_MAX: usize = 53;

/// `tinycode-<namespace>-<name>`, shortened deterministically with a hash
/// suffix when it exceeds Helm's limit.
pub fn release_name(namespace: &str, name: &str) -> String {
    shorten(&format!("tinycode-{namespace}-{name}"), HELM_RELEASE_MAX, &format!("{namespace}/{name}"))
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
        assert_eq!(release_name("tinycode-dev", "my-tinycode"), "tinycode-tinycode-dev-my-tinycode");
    }

    #[test]
    fn long_release_names_are_shortened_with_a_stable_hash() {
        let ns = "a-very-long-namespace-name-for-a-team";
        let a = release_name(ns, "alice-workspace-instance");
        let b = release_name(ns, "alice-workspace-instance2");
        assert!(a.len() <= HELM_RELEASE_MAX, "{a}");
        assert!(b.len() <= HELM_RELEASE_MAX, "{b}");
        assert_ne!(a, b);
        assert_eq!(a, release_name(ns, "alice-workspace-instance"));
        assert!(a.starts_with("tinycode-a-very-long-namespace"));
        let re = regex::Regex::new(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$").unwrap();
        assert!(re.is_match(&a), "release name must stay a DNS label: {a}");
    }

    #[test]
    fn exactly_53_is_not_shortened() {
        let name = "x".repeat(53 - "tinycode-ns-".len());
        assert_eq!(release_name("ns", &name).len(), 53);
        assert!(!release_name("ns", &name).contains(&hex::encode(Sha256::digest(b"ns/x"))[..8]));
    }

    #[test]
    fn cluster_scoped_names_do_not_collide_across_namespaces() {
        assert_ne!(cluster_scoped_prefix("a-b", "c"), cluster_scoped_prefix("a", "b-c"));
        assert_ne!(cluster_scoped_prefix("team1", "dev"), cluster_scoped_prefix("team2", "dev"));
    }
}

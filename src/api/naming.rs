//! Names of everything the operator creates, derived from the instance's
//! namespace and name so that re-creating an instance finds its old objects
//! (kept PVCs, the Helm release) and two namespaces never collide.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Helm refuses release names longer than this.
pub const HELM_RELEASE_MAX: usize = 53;

/// `tinycode.<namespace>.<name>`: every release lives in the operator's
/// namespace, so the name must be unique across the cluster. Neither part can
/// hold a dot, so two instances never share a name (`a-b`/`c` and `a`/`b-c`
/// differ). Past Helm's limit the tail becomes a 64-bit digest of
/// `<namespace>/<name>` and the head keeps only its first dot: a whole name
/// has exactly two dots, a shortened one exactly one, so the two forms never
/// meet (a tenant cannot name an instance after another's shortened release),
/// and no tenant can grind a collision between shortened ones.
pub fn release_name(namespace: &str, name: &str) -> String {
    let full = format!("tinycode.{namespace}.{name}");
    if full.len() <= HELM_RELEASE_MAX {
        return full;
    }
    let head = shortened_head(&full);
    let head = match head.match_indices('.').nth(1) {
        Some((second, _)) => format!("{}-{}", &head[..second], &head[second + 1..]),
        None => head.to_string(),
    };
    format!("{head}-{}", release_digest(namespace, name))
}

/// The release name builds before 0.4 gave a shortened name whose head kept
/// both dots (so an instance could be named to equal it), when it differs
/// from [`release_name`]: such a release is moved to the new name.
pub fn previous_release_name(namespace: &str, name: &str) -> Option<String> {
    let full = format!("tinycode.{namespace}.{name}");
    if full.len() <= HELM_RELEASE_MAX {
        return None;
    }
    let previous = format!("{}-{}", shortened_head(&full), release_digest(namespace, name));
    (previous != release_name(namespace, name)).then_some(previous)
}

fn shortened_head(full: &str) -> &str {
    full[..HELM_RELEASE_MAX - 17].trim_end_matches(['-', '.'])
}

fn release_digest(namespace: &str, name: &str) -> String {
    hex::encode(Sha256::digest(format!("{namespace}/{name}").as_bytes()))[..16].to_string()
}

/// The release name of builds before 0.2 (records kept in the instance
/// namespace); only used to migrate such releases.
pub fn legacy_release_name(namespace: &str, name: &str) -> String {
    shorten(&format!("tinycode-{namespace}-{name}"), HELM_RELEASE_MAX, &format!("{namespace}/{name}"))
}

/// Longest name of a DNS label: Services (DNS-1035), the first label of a
/// Route's default host, label values. Every name the chart gives a namespaced
/// object of its own stays within it.
pub const DNS_LABEL_MAX: usize = 63;

/// Longest name of a Secret, Role or RoleBinding (DNS subdomain; RBAC names
/// allow more, but no more is needed). Used for the names that a 45-character
/// instance name (the limit before 0.3) already pushed past 63: holding them to
/// 63 would rename the objects of existing instances and leave the old SCC
/// grants and kubeconfig copies behind, which cleanup finds only by name.
pub const OBJECT_NAME_MAX: usize = 253;

/// Length of the digest [`fit`] puts in a shortened name: `-` and 8 hex digits.
const FIT_DIGEST_LEN: usize = 9;

/// The one shortening rule for derived names: `<base><suffix>` when that is at
/// most `max` characters long (so every name that fit before stays as it was);
/// else `<head>-<8 hex of sha256(base)><suffix>`, `head` being the longest
/// prefix of `base` that fits, trailing `-` removed. Deterministic, keeps the
/// suffix (the kind of object stays readable) and the result a DNS label when
/// `base` and `suffix` are; two bases that differ anywhere differ in the digest.
pub fn fit(base: &str, suffix: &str, max: usize) -> String {
    if base.len() + suffix.len() <= max {
        return format!("{base}{suffix}");
    }
    let digest = hex::encode(Sha256::digest(base.as_bytes()));
    let keep = max.saturating_sub(suffix.len() + FIT_DIGEST_LEN).min(base.len());
    let head = base[..keep].trim_end_matches(['-', '.', ':']);
    format!("{head}-{}{suffix}", &digest[..FIT_DIGEST_LEN - 1])
}

/// The Secret holding the generated password when the spec names none.
pub fn generated_password(name: &str) -> String {
    fit(name, "-tinycode-password", DNS_LABEL_MAX)
}

/// The Secret of a sign-in instance's proxy: its cookie secret and, for
/// oidc, its credential at the operator's relay.
pub fn signin_secret(name: &str) -> String {
    fit(name, "-tinycode-signin", DNS_LABEL_MAX)
}

/// The ClusterRoleBinding of an approved `clusterAdmin.clusterRole`.
pub fn cluster_role_binding(namespace: &str, name: &str) -> String {
    fit(&cluster_scoped_prefix(namespace, name), "-cluster-role", OBJECT_NAME_MAX)
}

/// The RoleBinding an instance gets in each discovery namespace (unique per
/// instance, since instances of several namespaces may discover in one).
pub fn discovery_binding(namespace: &str, name: &str) -> String {
    fit(&cluster_scoped_prefix(namespace, name), "-discovery", OBJECT_NAME_MAX)
}

/// The cluster-wide discovery ClusterRoleBinding of builds before 0.2; only
/// used to delete it when such a release is migrated.
pub fn legacy_discovery_cluster_binding(namespace: &str, name: &str) -> String {
    format!("{}-discovery", cluster_scoped_prefix(namespace, name))
}

/// Prefix for cluster-scoped object names. `:` cannot occur in namespace or
/// instance names, so `tinycode:a-b:c` and `tinycode:a:b-c` stay distinct.
pub fn cluster_scoped_prefix(namespace: &str, name: &str) -> String {
    format!("tinycode:{namespace}:{name}")
}

/// Name shared by the Deployment, Service, ServiceAccount, NetworkPolicy and Route.
pub fn fullname(name: &str) -> String {
    fit(name, "-tinycode", DNS_LABEL_MAX)
}

pub fn service_account(name: &str) -> String {
    fullname(name)
}

/// The Route; its default host is `<route>-<namespace>.<apps domain>`, whose
/// first label OpenShift only admits up to 63 characters: long instance and
/// namespace names need `spec.hostname`.
pub fn route(name: &str) -> String {
    fullname(name)
}

/// The front's Deployment and NetworkPolicy: the gate (with the sign-in
/// proxy in the sign-in modes), which stays up while the agent is stopped.
pub fn front(name: &str) -> String {
    fit(name, "-tinycode-front", DNS_LABEL_MAX)
}

/// The egress proxy's Deployment, Service, ConfigMap (its allow-list) and NetworkPolicy.
pub fn egress(name: &str) -> String {
    fit(name, "-tinycode-egress", DNS_LABEL_MAX)
}

/// The ConfigMap of the sign-in proxy's own pages (its error page).
pub fn signin_pages(name: &str) -> String {
    fit(name, "-tinycode-signin-pages", OBJECT_NAME_MAX)
}

/// The Service the front reaches the agent by (sign-in modes).
pub fn agent_service(name: &str) -> String {
    fit(name, "-tinycode-agent", DNS_LABEL_MAX)
}

/// The bundled Ollama's Deployment, Service and NetworkPolicy.
pub fn ollama(name: &str) -> String {
    fit(name, "-ollama", DNS_LABEL_MAX)
}

pub fn data_pvc(name: &str) -> String {
    fit(name, "-data", DNS_LABEL_MAX)
}

pub fn projects_pvc(name: &str) -> String {
    fit(name, "-projects", DNS_LABEL_MAX)
}

pub fn ollama_models_pvc(name: &str) -> String {
    fit(name, "-ollama-models", DNS_LABEL_MAX)
}

pub fn config_map(name: &str) -> String {
    fit(name, "-tinycode-config", DNS_LABEL_MAX)
}

/// The Role (and its RoleBinding) that lets the pod list Services in its namespace.
pub fn discovery_role(name: &str) -> String {
    fit(name, "-tinycode-discovery", OBJECT_NAME_MAX)
}

/// The copy of a kubeconfig Secret from another namespace.
pub fn kubeconfig_copy(name: &str) -> String {
    fit(name, "-tinycode-kubeconfig", OBJECT_NAME_MAX)
}

/// RoleBinding that grants `use` of one SCC tier; the tier is in the name
/// because a RoleBinding's roleRef cannot change.
pub fn scc_grant(name: &str, tier: &str) -> String {
    fit(name, &format!("-tinycode-scc-{tier}"), OBJECT_NAME_MAX)
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

/// Labels the operator puts on objects it writes itself.
pub fn instance_labels(name: &str, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "tinycode".into()),
        ("app.kubernetes.io/instance".into(), name.into()),
        ("app.kubernetes.io/managed-by".into(), "tinycode-operator".into()),
        ("app.kubernetes.io/part-of".into(), "tinycode-operator".into()),
        ("app.kubernetes.io/component".into(), component.into()),
    ])
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

    /// The attack: name a second instance after the first one's shortened
    /// release. Builds before 0.4 gave both the same release.
    #[test]
    fn an_instance_cannot_be_named_after_a_shortened_release() {
        let long = "a-workspace-name-that-is-long-enough-to-be-shortened";
        let shortened = release_name("team", long);
        assert_eq!(shortened.matches('.').count(), 1, "{shortened}");
        let old = previous_release_name("team", long).expect("the old form kept two dots");
        assert_eq!(old.matches('.').count(), 2);
        let forged = old.strip_prefix("tinycode.team.").unwrap();
        assert_eq!(release_name("team", forged), old, "the old collision");
        assert_ne!(release_name("team", forged), shortened, "no collision with the new form");
        // Every shortened name has one dot, whatever the lengths.
        for (ns, name) in
            [("a".to_string(), "x".repeat(63)), ("n".repeat(30), "y".repeat(30)), ("n".repeat(63), "y".to_string())]
        {
            let r = release_name(&ns, &name);
            if r != format!("tinycode.{ns}.{name}") {
                assert_eq!(r.matches('.').count(), 1, "{r}");
                assert!(r.len() <= HELM_RELEASE_MAX, "{r}");
            }
        }
        assert_eq!(previous_release_name("team", "short"), None);
        assert_eq!(previous_release_name(&"n".repeat(50), "dev"), None, "one dot before already: unchanged");
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

    /// Every name derived from one instance, with the limit it must keep.
    fn derived(ns: &str, name: &str) -> Vec<(String, usize)> {
        let mut names = vec![
            (fullname(name), DNS_LABEL_MAX),
            (service_account(name), DNS_LABEL_MAX),
            (route(name), DNS_LABEL_MAX),
            (ollama(name), DNS_LABEL_MAX),
            (data_pvc(name), DNS_LABEL_MAX),
            (projects_pvc(name), DNS_LABEL_MAX),
            (ollama_models_pvc(name), DNS_LABEL_MAX),
            (config_map(name), DNS_LABEL_MAX),
            (generated_password(name), DNS_LABEL_MAX),
            (signin_secret(name), DNS_LABEL_MAX),
            (discovery_role(name), OBJECT_NAME_MAX),
            (kubeconfig_copy(name), OBJECT_NAME_MAX),
            (cluster_role_binding(ns, name), OBJECT_NAME_MAX),
            (discovery_binding(ns, name), OBJECT_NAME_MAX),
        ];
        for tier in ["restricted", "hostpath", "shell"] {
            names.push((scc_grant(name, tier), OBJECT_NAME_MAX));
        }
        names
    }

    /// An instance name of `len` characters that ends in a letter.
    fn name_of(len: usize, last: char) -> String {
        let mut n = "a-long-instance-name-".repeat(4)[..len - 1].to_string();
        n.push(last);
        n
    }

    #[test]
    fn derived_names_fit_their_limits_at_every_boundary() {
        let label = regex::Regex::new(r"^[a-z]([-a-z0-9]*[a-z0-9])?$").unwrap();
        let ns = "n".repeat(63);
        for len in [1, 45, 46, 54, 55, 56, 62, 63] {
            let name = name_of(len, 'x');
            for (derived, max) in derived(&ns, &name) {
                assert!(derived.len() <= max, "{derived} is {} > {max}", derived.len());
                if max == DNS_LABEL_MAX {
                    assert!(label.is_match(&derived), "{derived} must be a DNS-1035 label");
                }
            }
            assert_eq!(derived(&ns, &name), derived(&ns, &name), "deterministic");
        }
    }

    #[test]
    fn names_that_fit_keep_their_old_form() {
        // The forms every build before 0.3 used, for instance names up to 45.
        for name in ["dev", &name_of(45, 'x')] {
            let ns = "n".repeat(63);
            assert_eq!(fullname(name), format!("{name}-tinycode"));
            assert_eq!(ollama(name), format!("{name}-ollama"));
            assert_eq!(config_map(name), format!("{name}-tinycode-config"));
            assert_eq!(data_pvc(name), format!("{name}-data"));
            assert_eq!(projects_pvc(name), format!("{name}-projects"));
            assert_eq!(ollama_models_pvc(name), format!("{name}-ollama-models"));
            assert_eq!(generated_password(name), format!("{name}-tinycode-password"));
            assert_eq!(discovery_role(name), format!("{name}-tinycode-discovery"));
            assert_eq!(kubeconfig_copy(name), format!("{name}-tinycode-kubeconfig"));
            assert_eq!(scc_grant(name, "restricted"), format!("{name}-tinycode-scc-restricted"));
            assert_eq!(cluster_role_binding(&ns, name), format!("tinycode:{ns}:{name}-cluster-role"));
            assert_eq!(discovery_binding(&ns, name), format!("tinycode:{ns}:{name}-discovery"));
            assert_eq!(legacy_discovery_cluster_binding(&ns, name), discovery_binding(&ns, name));
        }
        assert_eq!(fullname("dev"), "dev-tinycode");
        // Exactly at the limit: whole; one past it: shortened to the limit.
        assert_eq!(fullname(&name_of(54, 'x')).len(), 63);
        assert_eq!(fullname(&name_of(54, 'x')), format!("{}-tinycode", name_of(54, 'x')));
        let long = fullname(&name_of(55, 'x'));
        assert!(long.len() <= 63 && long.ends_with("-tinycode") && !long.starts_with(&name_of(55, 'x')), "{long}");
    }

    #[test]
    fn long_names_that_differ_only_at_the_end_stay_distinct() {
        for len in [55, 62, 63] {
            let (a, b) = (name_of(len, 'x'), name_of(len, 'y'));
            for ((x, _), (y, _)) in derived("ns", &a).into_iter().zip(derived("ns", &b)) {
                assert_ne!(x, y);
            }
        }
        // A name and its one-longer extension, both shortened, still differ.
        assert_ne!(fullname(&name_of(62, 'x')), fullname(&format!("{}x", name_of(62, 'x'))));
    }

    #[test]
    fn fit_keeps_the_suffix_and_drops_dangling_dashes() {
        assert_eq!(fit("abc", "-s", 5), "abc-s");
        let f = fit("abcd-efghijkl", "-s", 14);
        assert_eq!(f, format!("abc-{}-s", &hex::encode(Sha256::digest(b"abcd-efghijkl"))[..8]));
        assert_eq!(f.len(), 14);
        let g = fit("abc-defghijkl", "-s", 15);
        assert!(g.starts_with("abc-") && !g.starts_with("abc--"), "{g}");
    }
}

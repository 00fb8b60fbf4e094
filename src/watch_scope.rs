//! Which namespaces the operator works in (`--watch-namespaces`, OLM's
//! install modes), and the only two ways `src/` builds an API over more than
//! one namespace: [`WatchScope::api`] for namespaced kinds, which honours the
//! scope, and [`cluster_api`] for cluster-scoped kinds, which compiles only
//! for them. `tests/watch_scope.rs` fails when anything else in `src/` calls
//! `Api::all`, so a new watch or list cannot reach other namespaces by
//! forgetting the scope.
//!
//! Several namespaces (OLM's MultiNamespace) are refused: a kube-runtime
//! reflector store is replaced by each watch's initial list, so one store
//! cannot be fed by one watch per namespace; see docs/olm-bundle.md.

use std::fmt;

use k8s_openapi::{ClusterResourceScope, NamespaceResourceScope};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// The flag and its environment variable, as every message names them.
pub const FLAG: &str = "--watch-namespaces (WATCH_NAMESPACE)";

/// The namespaces whose instances (and the objects they own) the operator
/// lists, watches and reconciles.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum WatchScope {
    /// Every namespace (OLM's AllNamespaces; the default).
    #[default]
    All,
    /// One namespace (OLM's SingleNamespace). Instances elsewhere are not
    /// seen at all: no finalizer, no status, no release.
    Namespace(String),
}

impl WatchScope {
    /// The scope a comma-separated list names, as given in one or more
    /// values of the flag. Blank entries are dropped, so an empty list (OLM's
    /// `olm.targetNamespaces` for all namespaces is `""`) means every
    /// namespace; a name given twice counts once.
    pub fn parse<S: AsRef<str>>(values: &[S]) -> Result<WatchScope, String> {
        let mut names: Vec<&str> = Vec::new();
        for name in values.iter().flat_map(|v| v.as_ref().split(',')).map(str::trim).filter(|n| !n.is_empty()) {
            if !is_namespace_name(name) {
                return Err(format!(
                    "{FLAG}: {name:?} is not a namespace name (lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters)"
                ));
            }
            if !names.contains(&name) {
                names.push(name);
            }
        }
        match names[..] {
            [] => Ok(WatchScope::All),
            [one] => Ok(WatchScope::Namespace(one.to_string())),
            _ => Err(format!(
                "{FLAG} names {} namespaces ({}): watching several namespaces (OLM's MultiNamespace install mode) is not supported; name one namespace, or none to watch all",
                names.len(),
                names.join(", ")
            )),
        }
    }

    /// The one namespace watched, or None for all.
    pub fn namespace(&self) -> Option<&str> {
        match self {
            WatchScope::All => None,
            WatchScope::Namespace(ns) => Some(ns),
        }
    }

    /// Whether objects in `namespace` are within the scope.
    pub fn covers(&self, namespace: &str) -> bool {
        self.namespace().is_none_or(|ns| ns == namespace)
    }

    /// The API of a namespaced kind over the scope: the one namespace, or all.
    pub fn api<K>(&self, client: &Client) -> Api<K>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug,
    {
        match self.namespace() {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

impl fmt::Display for WatchScope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.namespace() {
            None => f.write_str("all namespaces"),
            Some(ns) => write!(f, "namespace {ns}"),
        }
    }
}

/// The API of a cluster-scoped kind. Its bound is the point: a namespaced
/// kind does not compile here, so it cannot be listed across namespaces
/// behind the scope's back.
pub fn cluster_api<K>(client: &Client) -> Api<K>
where
    K: Resource<Scope = ClusterResourceScope, DynamicType = ()> + Clone + DeserializeOwned + fmt::Debug,
{
    Api::all(client.clone())
}

/// [`cluster_api`] for a kind known only at run time (an object a release
/// rendered without a namespace, which Kubernetes only allows for
/// cluster-scoped kinds).
pub fn cluster_api_dynamic(client: &Client, resource: &ApiResource) -> Api<DynamicObject> {
    Api::all_with(client.clone(), resource)
}

/// A namespace name: an RFC 1123 label, which is what the API server accepts.
fn is_namespace_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    (1..=63).contains(&bytes.len())
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(values: &[&str]) -> Result<WatchScope, String> {
        WatchScope::parse(values)
    }

    #[test]
    fn nothing_or_blanks_mean_every_namespace() {
        assert_eq!(parse(&[]), Ok(WatchScope::All));
        assert_eq!(parse(&[""]), Ok(WatchScope::All), "OLM's all-namespaces value");
        assert_eq!(parse(&[" , ,"]), Ok(WatchScope::All));
    }

    #[test]
    fn one_namespace_however_it_is_spelled() {
        let team = Ok(WatchScope::Namespace("team-a".into()));
        assert_eq!(parse(&["team-a"]), team);
        assert_eq!(parse(&[" team-a "]), team, "whitespace around it");
        assert_eq!(parse(&["team-a,"]), team, "a trailing comma");
        assert_eq!(parse(&["team-a", "team-a"]), team, "the flag given twice");
        assert_eq!(parse(&["team-a, team-a"]), team, "listed twice");
        assert_eq!(parse(&["a"]), Ok(WatchScope::Namespace("a".into())));
        assert_eq!(parse(&[&"n".repeat(63)]), Ok(WatchScope::Namespace("n".repeat(63))));
    }

    #[test]
    fn several_namespaces_are_refused_naming_the_flag_and_the_mode() {
        for values in [&["team-a,team-b"][..], &["team-a", "team-b"], &[" team-a , team-b ,team-c"]] {
            let e = parse(values).unwrap_err();
            assert!(e.starts_with("--watch-namespaces (WATCH_NAMESPACE) names "), "{e}");
            assert!(e.contains("MultiNamespace") && e.contains("not supported"), "{e}");
            assert!(e.contains("team-a, team-b"), "names them: {e}");
        }
    }

    #[test]
    fn invalid_names_are_refused_naming_the_flag() {
        let long = "n".repeat(64);
        for bad in ["Team-A", "team_a", "-team", "team-", "team.a", "*", "team a", "tëam", long.as_str()] {
            let e = parse(&[bad]).unwrap_err();
            assert!(e.starts_with("--watch-namespaces (WATCH_NAMESPACE): "), "{bad}: {e}");
            assert!(e.contains("is not a namespace name"), "{bad}: {e}");
        }
        let e = parse(&["team-a,Team-B"]).unwrap_err();
        assert!(e.contains("\"Team-B\""), "the bad one is named: {e}");
    }

    #[test]
    fn the_scope_covers_its_namespaces() {
        assert!(WatchScope::All.covers("anything"));
        let one = WatchScope::Namespace("team-a".into());
        assert!(one.covers("team-a"));
        assert!(!one.covers("team-b") && !one.covers(""));
        assert_eq!(one.namespace(), Some("team-a"));
        assert_eq!(WatchScope::All.namespace(), None);
        assert_eq!(WatchScope::default(), WatchScope::All, "today's behaviour unless told otherwise");
        assert_eq!(one.to_string(), "namespace team-a");
        assert_eq!(WatchScope::All.to_string(), "all namespaces");
    }

    #[tokio::test]
    async fn the_api_of_a_namespaced_kind_stays_in_the_scope() {
        use k8s_openapi::api::core::v1::{Namespace, Secret};
        // A client that is never called: only the request paths are read.
        let (service, _handle) =
            tower_test::mock::pair::<http::Request<kube::client::Body>, http::Response<kube::client::Body>>();
        let client = Client::new(service, "default");
        let one = WatchScope::Namespace("team-a".into());
        assert_eq!(one.api::<Secret>(&client).resource_url(), "/api/v1/namespaces/team-a/secrets");
        assert_eq!(WatchScope::All.api::<Secret>(&client).resource_url(), "/api/v1/secrets");
        assert_eq!(cluster_api::<Namespace>(&client).resource_url(), "/api/v1/namespaces");
    }
}

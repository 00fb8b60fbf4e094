//! One host, one instance (pure). On Kubernetes a tenant names the host of
//! their Ingress (`spec.hostname`), and could name another tenant's: the
//! ingress controller would then split or take that host's traffic, and the
//! sign-in relay, which trusts `status.url`, would accept callbacks to it.
//! The same check runs on OpenShift (whose router also refuses a second
//! claim): the host belongs to the instance that published it, else to the
//! oldest instance asking for it; any other is refused (`HostnameTaken`).

use std::sync::Arc;

use kube::ResourceExt;

use crate::api::TinycodeInstance;

/// An instance's claim on a host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// Its `status.url` names the host: it is served there now.
    pub published: bool,
    /// creationTimestamp, RFC 3339 (orders like time).
    pub created: String,
    pub namespace: String,
    pub name: String,
}

impl Claim {
    /// Who goes first: a published claim, then the oldest, then by name.
    fn rank(&self) -> (bool, &str, &str, &str) {
        (!self.published, &self.created, &self.namespace, &self.name)
    }
}

/// A host as compared: lower case, without a trailing dot.
pub fn normalize(host: &str) -> String {
    host.trim().trim_end_matches('.').to_ascii_lowercase()
}

/// The host of an http(s) URL (`status.url`), normalized; no port.
pub fn host_of_url(url: &str) -> Option<String> {
    let rest = url.strip_prefix("https://").or_else(|| url.strip_prefix("http://"))?;
    let authority = rest.split(['/', '?', '#']).next()?;
    let host = authority
        .rsplit_once(':')
        .map_or(authority, |(h, port)| if port.bytes().all(|b| b.is_ascii_digit()) { h } else { authority });
    (!host.is_empty()).then(|| normalize(host))
}

/// The host `inst` asks for, if it names one.
pub fn wanted(inst: &TinycodeInstance) -> Option<String> {
    inst.spec.hostname.as_deref().map(normalize).filter(|h| !h.is_empty())
}

/// `inst`'s claim on `host`.
pub fn claim_of(inst: &TinycodeInstance, host: &str) -> Claim {
    let url = inst.status.as_ref().and_then(|s| s.url.as_deref());
    Claim {
        published: url.and_then(host_of_url).as_deref() == Some(host),
        created: inst.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()).unwrap_or_default(),
        namespace: inst.namespace().unwrap_or_default(),
        name: inst.name_any(),
    }
}

/// The claims on `host` of every instance but `me` (by uid) that asks for it
/// or is served there, leaving out those being deleted.
pub fn others(all: &[Arc<TinycodeInstance>], me: &TinycodeInstance, host: &str) -> Vec<Claim> {
    all.iter()
        .filter(|i| i.metadata.uid != me.metadata.uid && i.metadata.deletion_timestamp.is_none())
        .filter_map(|i| {
            let claim = claim_of(i, host);
            (claim.published || wanted(i).as_deref() == Some(host)).then_some(claim)
        })
        .collect()
}

/// Whether `me` may have `host`; otherwise the message (which names no
/// other tenant's namespace or instance).
pub fn check(host: &str, me: &Claim, others: &[Claim]) -> Result<(), String> {
    match others.iter().filter(|o| o.rank() < me.rank()).min_by(|a, b| a.rank().cmp(&b.rank())) {
        None => Ok(()),
        Some(holder) => Err(format!(
            "spec.hostname {host} is {} by another instance; choose another host name",
            if holder.published { "already served" } else { "already asked for (earlier)" }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim(published: bool, created: &str, ns: &str) -> Claim {
        Claim { published, created: created.into(), namespace: ns.into(), name: "dev".into() }
    }

    #[test]
    fn the_host_belongs_to_who_serves_it_then_to_the_oldest() {
        let old = claim(false, "2026-01-01T00:00:00Z", "team-a");
        let new = claim(false, "2026-06-01T00:00:00Z", "team-b");
        assert_eq!(check("h", &old, std::slice::from_ref(&new)), Ok(()));
        assert!(check("h", &new, std::slice::from_ref(&old)).unwrap_err().contains("earlier"));
        // An older instance switching to a host another already serves does not take it.
        let serving = claim(true, "2026-06-01T00:00:00Z", "team-b");
        assert_eq!(check("h", &serving, std::slice::from_ref(&old)), Ok(()));
        let message = check("h", &old, &[serving]).unwrap_err();
        assert!(message.contains("already served") && !message.contains("team-b"), "{message}");
        assert_eq!(check("h", &old, &[]), Ok(()));
    }

    #[test]
    fn hosts_compare_without_case_port_or_trailing_dot() {
        assert_eq!(normalize(" Dev.Example.TEST. "), "dev.example.test");
        assert_eq!(host_of_url("https://Dev.example.test/").as_deref(), Some("dev.example.test"));
        assert_eq!(host_of_url("http://dev.example.test:8443/x").as_deref(), Some("dev.example.test"));
        assert_eq!(host_of_url("ftp://dev"), None);
    }
}

//! Which platform the operator runs on: OpenShift (Routes, SCC grants) or any
//! other conformant Kubernetes (Ingress, Pod Security labels). Decided once at
//! start-up from API discovery (or `--platform`), then passed around as a
//! value: one code path, never a fork.

pub mod admission;
pub mod openshift;
pub mod prepare;
pub mod rbac;
pub mod scc;

use std::collections::BTreeMap;

use crate::platform::scc::SccTier;

/// `--platform`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PlatformChoice {
    /// Detect from the APIs the cluster serves.
    Auto,
    #[value(name = "openshift")]
    OpenShift,
    Kubernetes,
}

/// What the cluster offers for exposure and privilege.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Platform {
    /// `route.openshift.io/v1` is served: instances get a Route.
    pub routes: bool,
    /// `security.openshift.io/v1` is served: instances get an SCC grant.
    pub sccs: bool,
}

/// Namespace label that Pod Security admission enforces.
pub const POD_SECURITY_ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";

impl Platform {
    pub const OPENSHIFT: Platform = Platform { routes: true, sccs: true };
    pub const KUBERNETES: Platform = Platform { routes: false, sccs: false };

    /// From the API groups discovery lists (names like `route.openshift.io`).
    pub fn from_groups(choice: PlatformChoice, groups: &[String]) -> Platform {
        match choice {
            PlatformChoice::OpenShift => Platform::OPENSHIFT,
            PlatformChoice::Kubernetes => Platform::KUBERNETES,
            PlatformChoice::Auto => Platform {
                routes: groups.iter().any(|g| g == "route.openshift.io"),
                sccs: groups.iter().any(|g| g == "security.openshift.io"),
            },
        }
    }

    /// The label value for logs and metrics.
    pub fn name(self) -> &'static str {
        match (self.routes, self.sccs) {
            (true, true) => "openshift",
            (false, false) => "kubernetes",
            (true, false) => "routes-without-sccs",
            (false, true) => "sccs-without-routes",
        }
    }

    /// The CLI users type in messages.
    pub fn cli(self) -> &'static str {
        if self.routes || self.sccs { "oc" } else { "kubectl" }
    }
}

/// Reads API discovery and decides (auto), or takes the setting as it is.
pub async fn detect(client: &kube::Client, choice: PlatformChoice) -> Result<Platform, kube::Error> {
    if choice != PlatformChoice::Auto {
        return Ok(Platform::from_groups(choice, &[]));
    }
    let groups = client.list_api_groups().await?;
    let names: Vec<String> = groups.groups.into_iter().map(|g| g.name).collect();
    Ok(Platform::from_groups(choice, &names))
}

/// Without SCCs, a privileged tier needs the namespace's Pod Security level to
/// allow it (a cluster-admin sets it; the operator never does): hostPath and
/// hostPID are outside `baseline`, so both need `privileged`. The tier's
/// `tinycode.dev/allow-*` approval is checked as on OpenShift.
pub fn check_pod_security(namespace: &str, tier: SccTier, labels: &BTreeMap<String, String>) -> Result<(), String> {
    if tier == SccTier::Restricted {
        return Ok(());
    }
    if labels.get(POD_SECURITY_ENFORCE_LABEL).map(String::as_str) == Some("privileged") {
        return Ok(());
    }
    Err(format!(
        "the {} tier runs pods outside the Pod Security baseline profile; a cluster-admin allows it with `kubectl label namespace {namespace} {POD_SECURITY_ENFORCE_LABEL}=privileged --overwrite` (the operator never changes Pod Security labels)",
        tier.as_str()
    ))
}

/// A typed object as a manifest to apply or print: serialised, with its
/// apiVersion and kind (which typed objects do not carry as fields).
pub fn manifest<K: kube::Resource<DynamicType = ()> + serde::Serialize>(obj: &K) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).expect("typed objects serialise");
    v["apiVersion"] = K::api_version(&()).into();
    v["kind"] = K::kind(&()).into();
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detection_follows_the_served_groups_unless_told() {
        let os = vec!["apps".to_string(), "route.openshift.io".into(), "security.openshift.io".into()];
        assert_eq!(Platform::from_groups(PlatformChoice::Auto, &os), Platform::OPENSHIFT);
        assert_eq!(Platform::from_groups(PlatformChoice::Auto, &["apps".into()]), Platform::KUBERNETES);
        assert_eq!(Platform::from_groups(PlatformChoice::Kubernetes, &os), Platform::KUBERNETES);
        assert_eq!(Platform::from_groups(PlatformChoice::OpenShift, &[]), Platform::OPENSHIFT);
        assert_eq!(Platform::KUBERNETES.name(), "kubernetes");
        assert_eq!((Platform::OPENSHIFT.cli(), Platform::KUBERNETES.cli()), ("oc", "kubectl"));
    }

    #[test]
    fn privileged_tiers_need_the_privileged_pod_security_level() {
        let none = BTreeMap::new();
        assert!(check_pod_security("team", SccTier::Restricted, &none).is_ok());
        let e = check_pod_security("team", SccTier::Hostpath, &none).unwrap_err();
        assert!(e.contains("kubectl label namespace team pod-security.kubernetes.io/enforce=privileged"), "{e}");
        let baseline = BTreeMap::from([(POD_SECURITY_ENFORCE_LABEL.to_string(), "baseline".to_string())]);
        assert!(check_pod_security("team", SccTier::Shell, &baseline).is_err(), "baseline forbids hostPID");
        let privileged = BTreeMap::from([(POD_SECURITY_ENFORCE_LABEL.to_string(), "privileged".to_string())]);
        assert!(check_pod_security("team", SccTier::Hostpath, &privileged).is_ok());
    }
}

//! Reconcile-time validation of a `TinycodeInstance` (pure).
//!
//! The CRD rejects most bad input at admission; this is the second line of
//! defence for objects admitted before a CRD upgrade and for rules that need
//! operator settings (the registry allow-list, reserved namespaces). Every
//! error names the field and says how to fix it.

use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use crate::api::{self, TinycodeInstanceSpec};
use crate::settings::Settings;

pub(crate) mod checks;
pub(crate) mod quantity;

/// One rule a spec breaks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// JSON path such as `spec.git.url`.
    pub field: String,
    /// What is wrong and what to do instead.
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// All the rules a spec breaks, in field order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct InvalidSpec(pub Vec<FieldError>);

impl fmt::Display for InvalidSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<String> = self.0.iter().map(ToString::to_string).collect();
        f.write_str(&parts.join("; "))
    }
}

macro_rules! pattern {
    ($name:ident, $re:expr) => {
        static $name: LazyLock<Regex> = LazyLock::new(|| Regex::new($re).expect("valid pattern"));
    };
}

pattern!(IMAGE, api::IMAGE_PATTERN);
pattern!(GIT_URL, api::GIT_URL_PATTERN);
pattern!(GIT_BRANCH, api::GIT_BRANCH_PATTERN);
pattern!(VLLM_NAME, api::VLLM_NAME_PATTERN);
pattern!(HTTP_URL, api::HTTP_URL_PATTERN);
pattern!(DNS_SUBDOMAIN, api::DNS_SUBDOMAIN_PATTERN);
pattern!(NAMESPACE_OR_STAR, api::NAMESPACE_OR_STAR_PATTERN);
pattern!(URL_USERINFO, api::URL_USERINFO_PATTERN);
pattern!(GIT_USERINFO, api::GIT_USERINFO_PATTERN);
pattern!(SSH_PASSWORD, api::SSH_PASSWORD_PATTERN);
pattern!(INSTANCE_NAME, r"^[a-z]([-a-z0-9]*[a-z0-9])?$");

/// Validates an instance; returns its non-blocking warnings when it is valid.
///
/// One check per concern (in `checks.rs`), run in field order, so the
/// errors read in the order of the spec.
pub fn validate(
    name: &str,
    namespace: &str,
    spec: &TinycodeInstanceSpec,
    settings: &Settings,
) -> Result<Vec<String>, InvalidSpec> {
    let mut errs = Vec::new();
    let mut err = |field: &str, message: String| errs.push(FieldError { field: field.into(), message });

    checks::metadata(name, namespace, settings, &mut err);
    if let Some(image) = &spec.image {
        checks::image(image, "spec.image", settings, &mut err);
    }
    checks::replicas(spec.replicas, &mut err);
    checks::quantities(spec, &mut err);
    checks::storage(spec, settings, &mut err);
    checks::hostname(spec.hostname.as_deref(), &mut err);
    checks::ollama(spec, &mut err);
    checks::auth(spec, &mut err);
    checks::cluster_admin(spec, settings, &mut err);
    checks::vllm(spec.vllm.as_deref(), &mut err);
    checks::discovery(spec, &mut err);
    checks::git(spec, &mut err);

    if !errs.is_empty() {
        return Err(InvalidSpec(errs));
    }

    Ok(Vec::new())
}

/// What a URL carries besides an address, if anything: user-info, a query
/// or a fragment. Mirrors the CEL rules [`api::HTTP_URL_HYGIENE_RULE`] and
/// (with `git`) [`api::GIT_URL_HYGIENE_RULE`]: for git only a password is
/// refused in ssh:// URLs, and the scp-like `git@host:path` form is fine.
/// The URL itself is never echoed: it may hold a secret.
pub fn url_extras(url: &str, git: bool) -> Option<&'static str> {
    let userinfo =
        if git { GIT_USERINFO.is_match(url) || SSH_PASSWORD.is_match(url) } else { URL_USERINFO.is_match(url) };
    if userinfo {
        Some("the URL holds credentials (user-info before @)")
    } else if url.contains('?') {
        Some("the URL has a query (?)")
    } else if url.contains('#') {
        Some("the URL has a fragment (#)")
    } else {
        None
    }
}

/// `path` with `//` collapsed and a trailing `/` removed, or None when it is
/// not absolute or has a `.` or `..` component (which, with symlinks on the
/// node, could leave any prefix it seems to lie under).
pub fn normalise_host_path(path: &str) -> Option<String> {
    if !path.starts_with('/') {
        return None;
    }
    let mut parts = Vec::new();
    for part in path.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." {
            return None;
        }
        parts.push(part);
    }
    Some(format!("/{}", parts.join("/")))
}

/// Whether the normalised `path` lies under one of `prefixes` (whole
/// components: `/srv` admits `/srv/code`, not `/srvx`).
pub fn host_path_allowed(path: &str, prefixes: &[String]) -> bool {
    prefixes.iter().any(|p| p == "/" || path == p || path.strip_prefix(p.as_str()).is_some_and(|r| r.starts_with('/')))
}

/// Why a namespace may not hold instances, if it may not.
pub fn reserved_namespace(namespace: &str, settings: &Settings) -> Option<String> {
    let reserved = namespace == "default"
        || namespace.starts_with("kube-")
        || namespace.starts_with("openshift-")
        || namespace == "openshift"
        || namespace == settings.operator_namespace;
    let create = if settings.platform.cli() == "oc" { "oc new-project" } else { "kubectl create namespace" };
    reserved.then(|| {
        format!(
            "namespace {namespace:?} is reserved (default, kube-*, openshift-* and the operator's own); create the instance in a namespace prepared for tinycode, e.g. `{create} tinycode-dev`"
        )
    })
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `1e3`) to its exact
/// value ([`quantity`]), or None when it is not one.
pub fn parse_quantity(s: &str) -> Option<quantity::Quantity> {
    quantity::parse(s)
}

#[cfg(test)]
mod tests;

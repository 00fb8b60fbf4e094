//! Reconcile-time validation of a `TinycodeInstance` (pure).
//!
//! The CRD rejects most bad input at admission; this is the second line of
//! defence for objects admitted before a CRD upgrade and for rules that need
//! operator settings (the registry allow-list, reserved namespaces). Every
//! error names the field and says how to fix it.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

use crate::api::{self, AccessMode, TinycodeInstanceSpec};
use crate::settings::Settings;

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
pub fn validate(
    name: &str,
    namespace: &str,
    spec: &TinycodeInstanceSpec,
    settings: &Settings,
) -> Result<Vec<String>, InvalidSpec> {
    let mut errs = Vec::new();
    let mut err = |field: &str, message: String| errs.push(FieldError { field: field.into(), message });

    if !INSTANCE_NAME.is_match(name) || name.len() > api::MAX_NAME_LEN {
        err(
            "metadata.name",
            format!(
                "{name:?} must start with a letter, hold only lowercase letters, digits and '-', and be at most {} characters; re-create the instance under such a name",
                api::MAX_NAME_LEN
            ),
        );
    }
    if let Some(reason) = reserved_namespace(namespace, settings) {
        err("metadata.namespace", reason);
    }

    check_image(&spec.image, settings, &mut err);

    if !(1..=10).contains(&spec.replicas) {
        err("spec.replicas", format!("{} is out of range: use 1 to 10", spec.replicas));
    }

    for (field, value) in [
        ("spec.resources.limits.cpu", &spec.resources.limits.cpu),
        ("spec.resources.limits.memory", &spec.resources.limits.memory),
        ("spec.resources.requests.cpu", &spec.resources.requests.cpu),
        ("spec.resources.requests.memory", &spec.resources.requests.memory),
        ("spec.storage.dataSize", &spec.storage.data_size),
        ("spec.storage.projectsSize", &spec.storage.projects_size),
    ] {
        if parse_quantity(value).is_none() {
            err(field, format!("{value:?} is not a Kubernetes quantity; write it like 500m, 2, 512Mi or 10Gi"));
        }
    }
    for (what, req, lim) in [
        ("cpu", &spec.resources.requests.cpu, &spec.resources.limits.cpu),
        ("memory", &spec.resources.requests.memory, &spec.resources.limits.memory),
    ] {
        if let (Some(r), Some(l)) = (parse_quantity(req), parse_quantity(lim))
            && r > l
        {
            err(
                &format!("spec.resources.requests.{what}"),
                format!("{req} exceeds the limit {lim}; lower the request or raise spec.resources.limits.{what}"),
            );
        }
    }

    let host_path = spec.storage.host_path.as_ref();
    if let Some(hp) = host_path
        && !hp.path.starts_with('/')
    {
        err("spec.storage.hostPath.path", format!("{:?} must be an absolute path starting with /", hp.path));
    }
    if let Some(class) = &spec.storage.storage_class_name
        && !DNS_SUBDOMAIN.is_match(class)
    {
        err("spec.storage.storageClassName", format!("{class:?} is not a valid StorageClass name"));
    }
    if spec.shell.enabled && host_path.is_some() {
        err(
            "spec.shell.enabled",
            "cannot be combined with spec.storage.hostPath: no SCC tier allows both hostPID and hostPath; use a PVC workspace or disable the shell".into(),
        );
    }
    if spec.git.is_some() && host_path.is_some() {
        err(
            "spec.git.url",
            "is mutually exclusive with spec.storage.hostPath: a git workspace is cloned into the projects volume that a hostPath would replace; remove one of them".into(),
        );
    }
    if spec.replicas > 1 && spec.storage.projects_access_mode != AccessMode::ReadWriteMany && host_path.is_none() {
        err(
            "spec.replicas",
            format!(
                "{} replicas need a shared workspace: set spec.storage.projectsAccessMode to ReadWriteMany or use spec.storage.hostPath",
                spec.replicas
            ),
        );
    }

    if let Some(host) = &spec.hostname
        && (!DNS_SUBDOMAIN.is_match(host) || host.len() > 253)
    {
        err("spec.hostname", format!("{host:?} is not a valid DNS host name such as tinycode.apps.example.com"));
    }

    if spec.ollama.enabled && spec.ollama.host.is_some() {
        err(
            "spec.ollama.host",
            "points at an external Ollama while spec.ollama.enabled deploys one: set only one of them".into(),
        );
    }
    if let Some(host) = &spec.ollama.host
        && !HTTP_URL.is_match(host)
    {
        err("spec.ollama.host", format!("{host:?} must start with http:// or https://"));
    }
    if let Some(problem) = spec.ollama.host.as_deref().and_then(|h| url_extras(h, false)) {
        err(
            "spec.ollama.host",
            format!(
                "{problem}: no credentials, query or fragment in the URL; give the base URL such as http://ollama.models.svc:11434"
            ),
        );
    }

    if let Some(secret) = &spec.auth.password_secret
        && !DNS_SUBDOMAIN.is_match(secret)
    {
        err("spec.auth.passwordSecret", format!("{secret:?} is not a valid Secret name"));
    }

    let ca = &spec.cluster_admin;
    if ca.enabled && ca.kubeconfig_secret_name.as_deref().unwrap_or("").is_empty() {
        err(
            "spec.clusterAdmin.kubeconfigSecretName",
            "is required when spec.clusterAdmin.enabled is true: name the Secret that holds the kubeconfig".into(),
        );
    }
    if let Some(role) = &ca.cluster_role {
        if !ca.enabled {
            err(
                "spec.clusterAdmin.clusterRole",
                "is bound only in cluster-admin mode: set spec.clusterAdmin.enabled to true or remove clusterRole"
                    .into(),
            );
        } else if crate::reconcile::approval::reserved_cluster_role(role) {
            err(
                "spec.clusterAdmin.clusterRole",
                format!(
                    "{role:?} is never bound: admin, cluster-admin, system:*, the operator's own roles and the SCC use roles are reserved; use a role a cluster-admin approved for this namespace (default: view)"
                ),
            );
        }
    }

    if let Some(providers) = &spec.vllm {
        if providers.len() > 20 {
            err("spec.vllm", format!("{} providers listed; at most 20 are allowed", providers.len()));
        }
        let mut seen = BTreeSet::new();
        for (i, p) in providers.iter().enumerate() {
            if !VLLM_NAME.is_match(&p.name) || p.name.len() > 63 {
                err(
                    &format!("spec.vllm[{i}].name"),
                    format!(
                        "{:?} must be 1-63 lowercase letters, digits or '-', starting with a letter or digit",
                        p.name
                    ),
                );
            }
            if !seen.insert(p.name.as_str()) {
                err(
                    &format!("spec.vllm[{i}].name"),
                    format!("{:?} is used twice: give each provider its own name", p.name),
                );
            }
            if !HTTP_URL.is_match(&p.url) {
                err(&format!("spec.vllm[{i}].url"), format!("{:?} must start with http:// or https://", p.url));
            }
            if let Some(problem) = url_extras(&p.url, false) {
                err(
                    &format!("spec.vllm[{i}].url"),
                    format!(
                        "{problem}: no credentials, query or fragment in the URL; give the server's base URL such as http://vllm.models.svc:8000"
                    ),
                );
            }
            for (model, limits) in p.models.iter().flatten() {
                if limits.context_limit.is_some_and(|c| c < 1024) {
                    err(&format!("spec.vllm[{i}].models[{model}].contextLimit"), "must be at least 1024".into());
                }
                if limits.output_limit.is_some_and(|o| o < 256) {
                    err(&format!("spec.vllm[{i}].models[{model}].outputLimit"), "must be at least 256".into());
                }
            }
        }
    }

    if let Some(discovery) = &spec.discovery {
        if discovery.namespaces.len() > 50 {
            err(
                "spec.discovery.namespaces",
                format!("{} namespaces listed; at most 50 are allowed (use \"*\" for all)", discovery.namespaces.len()),
            );
        }
        for (i, ns) in discovery.namespaces.iter().enumerate() {
            if !NAMESPACE_OR_STAR.is_match(ns) || ns.len() > 63 {
                err(&format!("spec.discovery.namespaces[{i}]"), format!("{ns:?} is not a namespace name (or \"*\")"));
            }
        }
    }

    if let Some(git) = &spec.git {
        if !GIT_URL.is_match(&git.url) {
            err(
                "spec.git.url",
                "must be an http(s)://, ssh:// or git:// URL made of letters, digits and _ . / @ : ~ % + = - only"
                    .into(),
            );
        }
        if let Some(problem) = url_extras(&git.url, true) {
            err(
                "spec.git.url",
                format!(
                    "{problem}: put credentials in spec.git.credentialsSecret, not in the URL (and no query or fragment)"
                ),
            );
        }
        if let Some(branch) = &git.branch
            && (!GIT_BRANCH.is_match(branch) || branch.len() > 255)
        {
            err("spec.git.branch", "may hold only letters, digits and _ . / - (at most 255 characters)".into());
        }
        if git.depth < 1 {
            err("spec.git.depth", format!("{} must be at least 1", git.depth));
        }
    }

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

fn check_image(image: &str, settings: &Settings, err: &mut impl FnMut(&str, String)) {
    if !IMAGE.is_match(image) {
        err(
            "spec.image",
            format!(
                "{image:?} is not a full image reference; write it as registry/path[:tag][@sha256:digest], e.g. {}",
                api::DEFAULT_IMAGE
            ),
        );
        return;
    }
    let registry = image.split('/').next().unwrap_or_default();
    let registry_host = registry.split(':').next().unwrap_or_default();
    let allowed = settings.allowed_registries.iter().any(|r| r == registry || r == registry_host);
    if !allowed {
        err(
            "spec.image",
            format!(
                "registry {registry:?} is not allowed; use an image from {} or ask the cluster-admin to add it to the operator's allowed registries (TINYCODE_ALLOWED_REGISTRIES)",
                settings.allowed_registries.join(", ")
            ),
        );
    }
}

/// Why a namespace may not hold instances, if it may not.
pub fn reserved_namespace(namespace: &str, settings: &Settings) -> Option<String> {
    let reserved = namespace == "default"
        || namespace.starts_with("kube-")
        || namespace.starts_with("openshift-")
        || namespace == "openshift"
        || namespace == settings.operator_namespace;
    reserved.then(|| {
        format!(
            "namespace {namespace:?} is reserved (default, kube-*, openshift-* and the operator's own); create the instance in a namespace prepared for tinycode, e.g. `oc new-project tinycode-dev`"
        )
    })
}

/// Parses a Kubernetes quantity (`500m`, `2`, `1.5Gi`, `1e3`) to its value.
pub fn parse_quantity(s: &str) -> Option<f64> {
    let s = s.trim();
    if s.is_empty() || s.len() > 64 {
        return None;
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+' || c == '-')).unwrap_or(s.len());
    let (num, suffix) = s.split_at(split);
    let digits = num.trim_start_matches(['+', '-']);
    if digits.is_empty() || digits.contains(['+', '-']) || digits.matches('.').count() > 1 || digits == "." {
        return None;
    }
    let value: f64 = num.parse().ok()?;
    let factor = match suffix {
        "" => 1.0,
        "m" => 1e-3,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "P" => 1e15,
        "E" => 1e18,
        "Ki" => 1024f64,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        "Pi" => 1024f64.powi(5),
        "Ei" => 1024f64.powi(6),
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            10f64.powi(e)
        }
        _ => return None,
    };
    Some(value * factor)
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;

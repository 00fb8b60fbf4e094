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
mod tests {
    use super::*;
    use crate::api::*;

    fn spec(json: serde_json::Value) -> TinycodeInstanceSpec {
        serde_json::from_value(json).expect("spec parses")
    }

    fn errors(s: &TinycodeInstanceSpec) -> Vec<FieldError> {
        validate("my-tinycode", "tinycode-dev", s, &Settings::default()).expect_err("spec must be refused").0
    }

    fn fields(s: &TinycodeInstanceSpec) -> Vec<String> {
        errors(s).into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn defaults_are_valid() {
        let w =
            validate("my-tinycode", "tinycode-dev", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap();
        assert!(w.is_empty(), "no password is not a warning any more: one is generated");
        let s = spec(serde_json::json!({"auth": {"passwordSecret": "pw"}}));
        assert!(validate("a", "team", &s, &Settings::default()).unwrap().is_empty());
    }

    #[test]
    fn image_registry_must_be_allowed() {
        let s = spec(serde_json::json!({"image": "docker.io/library/nginx:1"}));
        let e = errors(&s);
        assert_eq!(e[0].field, "spec.image");
        assert!(e[0].message.contains("quay.io, ghcr.io"), "{}", e[0].message);
        let settings = Settings { allowed_registries: vec!["docker.io".into()], ..Settings::default() };
        assert!(validate("a", "team", &s, &settings).is_ok());
        let s = spec(serde_json::json!({"image": "registry.local:5000/team/tinycode:v1"}));
        let settings = Settings { allowed_registries: vec!["registry.local".into()], ..Settings::default() };
        assert!(validate("a", "team", &s, &settings).is_ok());
    }

    #[test]
    fn image_reference_syntax_is_checked() {
        for bad in ["nginx", "quay.io/Upper/x", "quay.io/a/b:tag with space", "quay.io/a/b;rm -rf /"] {
            let s = spec(serde_json::json!({ "image": bad }));
            assert_eq!(fields(&s), vec!["spec.image"], "{bad}");
        }
        let digest = format!("quay.io/bjohns/tinycode-container@sha256:{}", "a".repeat(64));
        assert!(validate("a", "team", &spec(serde_json::json!({ "image": digest })), &Settings::default()).is_ok());
    }

    #[test]
    fn reserved_namespaces_are_refused() {
        for ns in ["default", "kube-system", "openshift-monitoring", "tinycode-operator-system"] {
            let e = validate("a", ns, &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
            assert_eq!(e.0[0].field, "metadata.namespace", "{ns}");
            assert!(e.0[0].message.contains("oc new-project"));
        }
    }

    #[test]
    fn names_too_long_or_malformed_are_refused() {
        let long = "a".repeat(64);
        for name in [long.as_str(), "9lives", "has.dot", "ends-", "Upper"] {
            let e = validate(name, "team", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
            assert_eq!(e.0[0].field, "metadata.name", "{name}");
        }
    }

    #[test]
    fn names_up_to_63_characters_are_accepted() {
        for len in [1, 45, 46, 54, 55, 62, 63] {
            let name = format!("{}z", "a".repeat(len - 1));
            validate(&name, "team", &TinycodeInstanceSpec::default(), &Settings::default())
                .unwrap_or_else(|e| panic!("{name}: {e:?}"));
        }
        let e = validate(&"a".repeat(64), "team", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
        assert!(e.0[0].message.contains("at most 63 characters"), "{}", e.0[0].message);
    }

    #[test]
    fn cross_field_rules() {
        let s = spec(serde_json::json!({"shell": {"enabled": true}, "storage": {"hostPath": {"path": "/data"}}}));
        assert_eq!(fields(&s), vec!["spec.shell.enabled"]);
        let s =
            spec(serde_json::json!({"git": {"url": "https://x.io/r.git"}, "storage": {"hostPath": {"path": "/data"}}}));
        assert_eq!(fields(&s), vec!["spec.git.url"]);
        let s = spec(serde_json::json!({"replicas": 3}));
        let e = errors(&s);
        assert_eq!(e[0].field, "spec.replicas");
        assert!(e[0].message.contains("ReadWriteMany"));
        let ok = spec(serde_json::json!({"replicas": 3, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
        assert!(validate("a", "team", &ok, &Settings::default()).is_ok());
        let ok = spec(serde_json::json!({"replicas": 3, "storage": {"hostPath": {"path": "/srv"}}}));
        assert!(validate("a", "team", &ok, &Settings::default()).is_ok());
        let s = spec(serde_json::json!({"ollama": {"enabled": true, "host": "http://x:11434"}}));
        assert_eq!(fields(&s), vec!["spec.ollama.host"]);
    }

    #[test]
    fn quantities_and_requests_within_limits() {
        let s = spec(serde_json::json!({"resources": {"limits": {"cpu": "two", "memory": "2Gi"}}}));
        assert_eq!(fields(&s), vec!["spec.resources.limits.cpu"]);
        let s = spec(
            serde_json::json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1500m", "memory": "512Mi"}}}),
        );
        assert_eq!(fields(&s), vec!["spec.resources.requests.cpu"]);
        assert_eq!(parse_quantity("200m"), Some(0.2));
        assert_eq!(parse_quantity("2Gi"), Some(2.0 * 1024f64.powi(3)));
        assert_eq!(parse_quantity("1e3"), Some(1000.0));
        assert_eq!(parse_quantity("1.5"), Some(1.5));
        for bad in ["", "Gi", "1.2.3", "1 Gi", "1gb", "--1"] {
            assert_eq!(parse_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn reserved_cluster_roles_are_refused() {
        for bad in [
            "admin",
            "cluster-admin",
            "system:aggregate-to-admin",
            "tinycode-operator-manager",
            "tinycode-scc-shell",
            "tinycode-scc-hostpath",
            "tinycode-discovery",
        ] {
            let s = spec(
                serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": bad}}),
            );
            assert_eq!(fields(&s), vec!["spec.clusterAdmin.clusterRole"], "{bad}");
        }
        for good in ["view", "edit", "tinycode-readonly"] {
            let s = spec(
                serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": good}}),
            );
            assert!(validate("a", "team", &s, &Settings::default()).is_ok(), "{good}");
        }
        let s = spec(serde_json::json!({"clusterAdmin": {"enabled": true}}));
        assert_eq!(fields(&s), vec!["spec.clusterAdmin.kubeconfigSecretName"]);
        let s = spec(serde_json::json!({"clusterAdmin": {"enabled": false, "clusterRole": "view"}}));
        assert_eq!(fields(&s), vec!["spec.clusterAdmin.clusterRole"], "a role without cluster-admin mode");
    }

    #[test]
    fn vllm_rules() {
        let s = spec(serde_json::json!({"vllm": [
            {"name": "qwen", "url": "http://vllm:8000"},
            {"name": "qwen", "url": "ftp://vllm:8000"},
            {"name": "Bad_Name", "url": "http://x", "models": {"m": {"contextLimit": 100, "outputLimit": 10}}}
        ]}));
        assert_eq!(
            fields(&s),
            vec![
                "spec.vllm[1].name",
                "spec.vllm[1].url",
                "spec.vllm[2].name",
                "spec.vllm[2].models[m].contextLimit",
                "spec.vllm[2].models[m].outputLimit"
            ]
        );
    }

    #[test]
    fn git_rules_refuse_shell_metacharacters() {
        for url in ["https://x.io/r.git;reboot", "https://x.io/$(id)", "file:///etc", "https://x.io/r `id`"] {
            let s = spec(serde_json::json!({"git": {"url": url}}));
            assert_eq!(fields(&s), vec!["spec.git.url"], "{url}");
        }
        for branch in ["main;id", "$(id)", "a b", "x|y"] {
            let s = spec(serde_json::json!({"git": {"url": "https://x.io/r.git", "branch": branch}}));
            assert_eq!(fields(&s), vec!["spec.git.branch"], "{branch}");
        }
        let s = spec(
            serde_json::json!({"git": {"url": "ssh://git@x.io:22/team/r.git", "branch": "release/1.2", "depth": 5}}),
        );
        assert!(validate("a", "team", &s, &Settings::default()).is_ok());
        let s = spec(serde_json::json!({"git": {"url": "https://x.io/r.git", "depth": 0}}));
        assert_eq!(fields(&s), vec!["spec.git.depth"]);
    }

    #[test]
    fn urls_without_credentials_query_or_fragment() {
        for (url, problem) in [
            ("http://user:pw@vllm:8000", "credentials"),
            ("http://token@vllm:8000", "credentials"),
            ("https://u@vllm", "credentials"),
            ("http://a@b:c@vllm", "credentials"),
            ("http://vllm:8000/v1?key=x", "query"),
            ("http://vllm:8000/v1#x", "fragment"),
        ] {
            let s = spec(serde_json::json!({"vllm": [{"name": "a", "url": url}]}));
            let e = errors(&s);
            assert_eq!(e.len(), 1, "{url}: {e:?}");
            assert_eq!(e[0].field, "spec.vllm[0].url", "{url}");
            assert!(e[0].message.contains(problem), "{url}: {}", e[0].message);
            assert!(e[0].message.contains("no credentials, query or fragment"), "{}", e[0].message);
            assert!(!e[0].message.contains("pw@") && !e[0].message.contains("token"), "never echoed: {}", e[0].message);
            let s = spec(serde_json::json!({"ollama": {"host": url}}));
            assert_eq!(fields(&s), vec!["spec.ollama.host"], "{url}");
        }
        // An @ in the path is not user-info.
        let s = spec(serde_json::json!({"vllm": [{"name": "a", "url": "http://vllm:8000/@team/v1"}]}));
        assert!(validate("a", "team", &s, &Settings::default()).is_ok());

        for url in
            ["https://user:ghp_x@github.com/o/r.git", "https://ghp_x@github.com/o/r.git", "ssh://git:pw@x.io/r.git"]
        {
            let s = spec(serde_json::json!({"git": {"url": url}}));
            let e = errors(&s);
            assert_eq!(e.len(), 1, "{url}: {e:?}");
            assert_eq!(e[0].field, "spec.git.url");
            assert!(e[0].message.contains("spec.git.credentialsSecret"), "{}", e[0].message);
        }
        for url in ["ssh://git@x.io:22/team/r.git", "https://x.io/team/r.git", "https://x.io/@scope/r.git"] {
            let s = spec(serde_json::json!({"git": {"url": url}}));
            assert!(validate("a", "team", &s, &Settings::default()).is_ok(), "{url}");
        }
        // scp form: not refused for credentials (the URL pattern decides it).
        assert_eq!(url_extras("git@github.com:org/repo.git", true), None);
        assert_eq!(url_extras("git@github.com:org/repo.git", false), None);
    }

    #[test]
    fn cel_rules_hold_the_patterns_the_validator_uses() {
        assert!(api::HTTP_URL_HYGIENE_RULE.contains(&format!("'{}'", api::URL_USERINFO_PATTERN)));
        assert!(api::GIT_URL_HYGIENE_RULE.contains(&format!("'{}'", api::GIT_USERINFO_PATTERN)));
        assert!(api::GIT_URL_HYGIENE_RULE.contains(&format!("'{}'", api::SSH_PASSWORD_PATTERN)));
        let crd = serde_json::to_string(&<TinycodeInstance as kube::CustomResourceExt>::crd()).unwrap();
        for rule in [api::HTTP_URL_HYGIENE_RULE, api::GIT_URL_HYGIENE_RULE] {
            assert!(crd.contains(rule), "{rule} is in the CRD");
        }
        assert_eq!(crd.matches(api::HTTP_URL_HYGIENE_RULE).count(), 2, "spec.vllm[].url and spec.ollama.host");
        assert!(crd.contains("put credentials in spec.git.credentialsSecret"));
        assert!(crd.contains("spec.vllm[].url: no credentials, query or fragment"));
        assert!(crd.contains("spec.ollama.host: no credentials, query or fragment"));
    }

    #[test]
    fn discovery_namespaces() {
        let many: Vec<String> = (0..51).map(|i| format!("ns{i}")).collect();
        let s = spec(serde_json::json!({"discovery": {"namespaces": many}}));
        assert_eq!(fields(&s), vec!["spec.discovery.namespaces"]);
        let s = spec(serde_json::json!({"discovery": {"namespaces": ["*", "models", "Bad"]}}));
        assert_eq!(fields(&s), vec!["spec.discovery.namespaces[2]"]);
    }

    #[test]
    fn error_display_joins_field_and_fix() {
        let s = spec(serde_json::json!({"replicas": 11, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
        let e = validate("a", "team", &s, &Settings::default()).unwrap_err();
        assert_eq!(e.to_string(), "spec.replicas: 11 is out of range: use 1 to 10");
    }
}

//! The spec rules, one function per concern. Each reports what it finds
//! through `err` (field, message) and [`super::validate`] runs them in field
//! order, so the error list reads in the order of the spec.

use std::collections::BTreeSet;

use super::{
    DNS_SUBDOMAIN, GIT_BRANCH, GIT_URL, HTTP_URL, IMAGE, INSTANCE_NAME, NAMESPACE_OR_STAR, VLLM_NAME, parse_quantity,
    reserved_namespace, url_extras,
};
use crate::api::{self, AccessMode, TinycodeInstanceSpec};
use crate::settings::Settings;

/// The instance's name and namespace: the name prefixes every derived object,
/// and reserved namespaces never hold instances.
pub(super) fn metadata(name: &str, namespace: &str, settings: &Settings, err: &mut impl FnMut(&str, String)) {
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
}

/// The image: a full reference, from a registry on the operator's allow-list.
pub(crate) fn image(image: &str, field: &str, settings: &Settings, err: &mut impl FnMut(&str, String)) {
    if !IMAGE.is_match(image) {
        err(
            field,
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
            field,
            format!(
                "registry {registry:?} is not allowed; use an image from {} or ask the cluster-admin to add it to the operator's allowed registries (TINYCODE_ALLOWED_REGISTRIES)",
                settings.allowed_registries.join(", ")
            ),
        );
    }
}

/// The replica count's range (the shared-workspace rule is in [`storage`]).
pub(super) fn replicas(replicas: i32, err: &mut impl FnMut(&str, String)) {
    if !(1..=10).contains(&replicas) {
        err("spec.replicas", format!("{replicas} is out of range: use 1 to 10"));
    }
}

/// Every resource and volume size parses as a Kubernetes quantity, and no
/// request exceeds its limit (the pod would be refused at creation).
pub(super) fn quantities(spec: &TinycodeInstanceSpec, err: &mut impl FnMut(&str, String)) {
    let default = crate::api::Resources::default();
    let resources = spec.resources.as_ref().unwrap_or(&default);
    for (field, value) in [
        ("spec.resources.limits.cpu", &resources.limits.cpu),
        ("spec.resources.limits.memory", &resources.limits.memory),
        ("spec.resources.requests.cpu", &resources.requests.cpu),
        ("spec.resources.requests.memory", &resources.requests.memory),
        ("spec.storage.dataSize", &spec.storage.data_size),
        ("spec.storage.projectsSize", &spec.storage.projects_size),
    ] {
        if parse_quantity(value).is_none() {
            err(field, format!("{value:?} is not a Kubernetes quantity; write it like 500m, 2, 512Mi or 10Gi"));
        }
    }
    for (what, req, lim) in [
        ("cpu", &resources.requests.cpu, &resources.limits.cpu),
        ("memory", &resources.requests.memory, &resources.limits.memory),
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
    if let Some(lists) = &spec.ollama.resources {
        for (kind, map) in [("requests", &lists.requests), ("limits", &lists.limits)] {
            for (name, value) in map {
                if parse_quantity(value).is_none() {
                    err(
                        &format!("spec.ollama.resources.{kind}.{name}"),
                        format!("{value:?} is not a Kubernetes quantity; write it like 500m, 2, 8Gi or 1"),
                    );
                }
            }
        }
        for (name, req) in &lists.requests {
            if let (Some(r), Some(l)) = (parse_quantity(req), lists.limits.get(name).and_then(|l| parse_quantity(l)))
                && r > l
            {
                err(
                    &format!("spec.ollama.resources.requests.{name}"),
                    format!("{req} exceeds the limit; lower the request or raise spec.ollama.resources.limits.{name}"),
                );
            }
        }
    }
}

/// The workspace: a well-formed hostPath or StorageClass, and none of the
/// features a hostPath workspace rules out (the shell, git, unshared replicas).
pub(super) fn storage(spec: &TinycodeInstanceSpec, settings: &Settings, err: &mut impl FnMut(&str, String)) {
    let host_path = spec.storage.host_path.as_ref();
    if let Some(hp) = host_path {
        match super::normalise_host_path(&hp.path) {
            None => err(
                "spec.storage.hostPath.path",
                format!("{:?} must be an absolute path starting with / and without . or .. components", hp.path),
            ),
            Some(path) if !super::host_path_allowed(&path, &settings.hostpath_allowed_prefixes) => err(
                "spec.storage.hostPath.path",
                if settings.hostpath_allowed_prefixes.is_empty() {
                    format!(
                        "{path} is refused: this operator accepts no hostPath workspace (a cluster-admin lists the host directories allowed with --hostpath-allowed-prefixes); use a PVC workspace"
                    )
                } else {
                    format!(
                        "{path} is not under a host directory the cluster-admin allows ({}); use a path under one of them or a PVC workspace",
                        settings.hostpath_allowed_prefixes.join(", ")
                    )
                },
            ),
            Some(_) => {}
        }
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
}

/// The Route or Ingress host, when one is given.
pub(super) fn hostname(hostname: Option<&str>, err: &mut impl FnMut(&str, String)) {
    if let Some(host) = hostname
        && (!DNS_SUBDOMAIN.is_match(host) || host.len() > 253)
    {
        err("spec.hostname", format!("{host:?} is not a valid DNS host name such as tinycode.apps.example.com"));
    }
}

/// Ollama: either bundled or external, and an external one at a plain
/// http(s) base URL that carries no secret.
pub(super) fn ollama(spec: &TinycodeInstanceSpec, err: &mut impl FnMut(&str, String)) {
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
}

/// The password Secret's name, when one is given.
pub(super) fn auth(spec: &TinycodeInstanceSpec, err: &mut impl FnMut(&str, String)) {
    if let Some(secret) = &spec.auth.password_secret
        && !DNS_SUBDOMAIN.is_match(secret)
    {
        err("spec.auth.passwordSecret", format!("{secret:?} is not a valid Secret name"));
    }
}

/// Cluster-admin mode: it needs a kubeconfig Secret, and a cluster role is
/// bound only in that mode and never a reserved one.
pub(super) fn cluster_admin(spec: &TinycodeInstanceSpec, settings: &Settings, err: &mut impl FnMut(&str, String)) {
    let ca = &spec.cluster_admin;
    if let Some(source) = ca.kubeconfig_namespace.as_deref().filter(|n| !n.is_empty())
        && super::reserved_namespace(source, settings).is_some()
    {
        err(
            "spec.clusterAdmin.kubeconfigNamespace",
            format!(
                "{source:?} is reserved (default, kube-*, openshift-* and the operator's own): a kubeconfig is never copied from there; keep it in the instance namespace or in a team namespace that shares it"
            ),
        );
    }
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
}

/// The vLLM providers: at most 20, each under its own name (the names key
/// the generated config).
pub(super) fn vllm(providers: Option<&[api::VllmProvider]>, err: &mut impl FnMut(&str, String)) {
    let Some(providers) = providers else { return };
    if providers.len() > 20 {
        err("spec.vllm", format!("{} providers listed; at most 20 are allowed", providers.len()));
    }
    let mut seen = BTreeSet::new();
    for (i, p) in providers.iter().enumerate() {
        vllm_provider(i, p, &mut seen, err);
    }
}

/// One vLLM provider: its name (unique among `seen`), a clean http(s) base
/// URL, and model limits large enough to be of use.
fn vllm_provider<'a>(
    i: usize,
    p: &'a api::VllmProvider,
    seen: &mut BTreeSet<&'a str>,
    err: &mut impl FnMut(&str, String),
) {
    if !VLLM_NAME.is_match(&p.name) || p.name.len() > 63 {
        err(
            &format!("spec.vllm[{i}].name"),
            format!("{:?} must be 1-63 lowercase letters, digits or '-', starting with a letter or digit", p.name),
        );
    }
    if !seen.insert(p.name.as_str()) {
        err(&format!("spec.vllm[{i}].name"), format!("{:?} is used twice: give each provider its own name", p.name));
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

/// The namespaces to discover Services in: a bounded list of namespace
/// names or `*`.
pub(super) fn discovery(spec: &TinycodeInstanceSpec, err: &mut impl FnMut(&str, String)) {
    let Some(discovery) = &spec.discovery else { return };
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

/// The git workspace: a URL and branch in the alphabet the CRD allows, no
/// credentials in the URL (they belong in a Secret), a depth of at least 1.
pub(super) fn git(spec: &TinycodeInstanceSpec, err: &mut impl FnMut(&str, String)) {
    let Some(git) = &spec.git else { return };
    if !GIT_URL.is_match(&git.url) {
        err(
            "spec.git.url",
            "must be an http(s)://, ssh:// or git:// URL made of letters, digits and _ . / @ : ~ % + = - only".into(),
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

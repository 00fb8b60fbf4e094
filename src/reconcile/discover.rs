//! vLLM discovery: the namespaces a cluster-admin opened to it, and the
//! Services annotated there (from the Service store).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

pub use crate::reconcile::approval::approved_discovery;
use crate::reconcile::{Context, approval};
use crate::vllm;

/// Namespaces labelled open to discovery, when the instance asks for any besides its own.
pub fn labelled_namespaces(ctx: &Context, ns: &str, spec: &crate::api::TinycodeInstanceSpec) -> BTreeSet<String> {
    if approval::requested_discovery(spec).all(|n| n == ns) {
        return BTreeSet::new();
    }
    ctx.stores
        .namespaces
        .state()
        .iter()
        .filter(|n| n.metadata.deletion_timestamp.is_none())
        .filter(|n| {
            n.metadata.labels.as_ref().and_then(|l| l.get(approval::DISCOVERY_LABEL)).is_some_and(|v| v == "true")
        })
        .filter_map(|n| n.metadata.name.clone())
        .collect()
}

/// Services annotated `tinycode.dev/discover=vllm` in the instance namespace
/// and the approved discovery namespaces, as (name, base URL), and how many
/// more were found: tenants can annotate any number of Services, so only the
/// first [`vllm::MAX_DISCOVERED_PER_INSTANCE`] by namespace/name are returned
/// (the same ones every reconcile). Only the Service store is read, so a
/// namespace outside the watched ones is never listed (with one namespace
/// watched the namespace store shows no other as open anyway).
pub fn vllm_services(ctx: &Context, ns: &str, others: &[String]) -> (Vec<(String, String)>, usize) {
    let namespaces: Vec<&str> =
        std::iter::once(ns).chain(others.iter().map(String::as_str)).filter(|n| ctx.stores.covers(n)).collect();
    // Filtered under the store's lock, so only these namespaces' Services
    // are cloned (the store holds every watched namespace's).
    let services: Vec<Arc<Service>> =
        ctx.stores.services.state_filter(|s| s.metadata.namespace.as_deref().is_some_and(|n| namespaces.contains(&n)));
    vllm::first_discovered(services.iter().filter_map(|s| vllm_candidate(s)).collect())
}

/// (namespace/name, base URL) of a Service annotated for discovery.
fn vllm_candidate(svc: &Service) -> Option<(String, String)> {
    let annotations = svc.metadata.annotations.as_ref()?;
    if annotations.get(vllm::DISCOVER_ANNOTATION).map(String::as_str) != Some("vllm") {
        return None;
    }
    let (name, ns) = (svc.metadata.name.clone()?, svc.metadata.namespace.clone()?);
    let url = annotations.get(vllm::URL_ANNOTATION).cloned().or_else(|| {
        let ports = svc.spec.as_ref()?.ports.as_ref()?;
        let port = ports.iter().find(|p| p.name.as_deref() == Some("http")).or(ports.first())?.port;
        Some(format!("http://{name}.{ns}.svc:{port}"))
    })?;
    Some((format!("{ns}/{name}"), url))
}

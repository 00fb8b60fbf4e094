//! vLLM discovery: the namespaces a cluster-admin opened to it, and the
//! Services annotated there (from the Service store where it holds them).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::ListParams;

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
/// (the same ones every reconcile). Listing errors only shorten the list:
/// discovery feeds warnings, never failures.
pub async fn vllm_services(ctx: &Context, ns: &str, others: &[String]) -> (Vec<(String, String)>, usize) {
    let mut out = Vec::new();
    for namespace in std::iter::once(ns).chain(others.iter().map(String::as_str)) {
        let services: Vec<Arc<Service>> = if ctx.stores.covers(namespace) {
            ctx.stores
                .services
                .state()
                .into_iter()
                .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
                .collect()
        } else {
            match Api::<Service>::namespaced(ctx.client.clone(), namespace).list(&ListParams::default()).await {
                Ok(list) => list.items.into_iter().map(Arc::new).collect(),
                Err(e) => {
                    tracing::debug!(error = %e, "cannot list Services for vLLM discovery");
                    continue;
                }
            }
        };
        out.extend(services.iter().filter_map(|s| vllm_candidate(s)));
    }
    vllm::first_discovered(out)
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

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
    // Filtered under the store's lock, so only these namespaces' annotated
    // Services are cloned. The store holds every watched namespace's, two
    // per instance from the chart alone (none annotated): the annotation is
    // looked at first, so those are passed over without comparing names.
    let services: Vec<Arc<Service>> = ctx.stores.services.state_filter(|s| {
        annotated_for_discovery(s) && s.metadata.namespace.as_deref().is_some_and(|n| namespaces.contains(&n))
    });
    vllm::first_discovered(services.iter().filter_map(|s| vllm_candidate(s)).collect())
}

/// Whether a Service carries `tinycode.dev/discover=vllm`.
fn annotated_for_discovery(svc: &Service) -> bool {
    svc.metadata.annotations.as_ref().and_then(|a| a.get(vllm::DISCOVER_ANNOTATION)).map(String::as_str) == Some("vllm")
}

/// (namespace/name, base URL) of a Service annotated for discovery.
fn vllm_candidate(svc: &Service) -> Option<(String, String)> {
    if !annotated_for_discovery(svc) {
        return None;
    }
    let annotations = svc.metadata.annotations.as_ref()?;
    let (name, ns) = (svc.metadata.name.clone()?, svc.metadata.namespace.clone()?);
    let url = annotations.get(vllm::URL_ANNOTATION).cloned().or_else(|| {
        let ports = svc.spec.as_ref()?.ports.as_ref()?;
        let port = ports.iter().find(|p| p.name.as_deref() == Some("http")).or(ports.first())?.port;
        Some(format!("http://{name}.{ns}.svc:{port}"))
    })?;
    Some((format!("{ns}/{name}"), url))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort, ServiceSpec};

    fn service(ns: &str, name: &str, annotations: &[(&str, &str)]) -> Service {
        let mut svc = Service::default();
        svc.metadata.namespace = Some(ns.into());
        svc.metadata.name = Some(name.into());
        if !annotations.is_empty() {
            svc.metadata.annotations = Some(annotations.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        }
        svc.spec = Some(ServiceSpec {
            ports: Some(vec![ServicePort { name: Some("http".into()), port: 8000, ..Default::default() }]),
            ..Default::default()
        });
        svc
    }

    #[test]
    fn only_services_annotated_vllm_are_candidates() {
        let plain = service("ns", "a", &[]);
        let other = service("ns", "b", &[(vllm::DISCOVER_ANNOTATION, "ollama")]);
        let unrelated = service("ns", "c", &[("example.com/x", "vllm")]);
        let marked = service("ns", "d", &[(vllm::DISCOVER_ANNOTATION, "vllm")]);
        for svc in [&plain, &other, &unrelated] {
            assert!(!annotated_for_discovery(svc));
            assert_eq!(vllm_candidate(svc), None);
        }
        assert!(annotated_for_discovery(&marked));
        assert_eq!(vllm_candidate(&marked), Some(("ns/d".into(), "http://d.ns.svc:8000".into())));
        let with_url =
            service("ns", "e", &[(vllm::DISCOVER_ANNOTATION, "vllm"), (vllm::URL_ANNOTATION, "http://models:9000")]);
        assert_eq!(vllm_candidate(&with_url), Some(("ns/e".into(), "http://models:9000".into())));
    }
}

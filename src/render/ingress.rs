//! The instance's Ingress on Kubernetes without Routes (pure): created by the
//! operator, like the Route on OpenShift, so its address can be read back
//! into `status.url`.

use k8s_openapi::api::networking::v1::{
    HTTPIngressPath, HTTPIngressRuleValue, Ingress, IngressBackend, IngressRule, IngressServiceBackend, IngressSpec,
    IngressTLS, ServiceBackendPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::api::naming;
use crate::api::naming::instance_labels;
use crate::api::{TinycodeInstanceSpec, TlsTermination};
use crate::settings::IngressSettings;

/// The desired Ingress, or `None` when the instance has no host name.
pub fn build(
    name: &str,
    namespace: &str,
    spec: &TinycodeInstanceSpec,
    owner: OwnerReference,
    settings: &IngressSettings,
    class: Option<String>,
) -> Option<Ingress> {
    let host = spec.hostname.clone().filter(|h| !h.is_empty())?;
    let tls_secret = spec.ingress.as_ref().and_then(|i| i.tls_secret_name.clone());
    Some(Ingress {
        metadata: ObjectMeta {
            name: Some(naming::route(name)),
            namespace: Some(namespace.into()),
            labels: Some(instance_labels(name, "server")),
            // An empty map would make every server-side apply a write.
            annotations: (!settings.annotations.is_empty()).then(|| settings.annotations.clone()),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: Some(IngressSpec {
            ingress_class_name: class,
            rules: Some(vec![IngressRule {
                host: Some(host.clone()),
                http: Some(HTTPIngressRuleValue {
                    paths: vec![HTTPIngressPath {
                        path: Some("/".into()),
                        path_type: "Prefix".into(),
                        backend: IngressBackend {
                            service: Some(IngressServiceBackend {
                                name: naming::fullname(name),
                                port: Some(ServiceBackendPort { name: Some("http".into()), number: None }),
                            }),
                            resource: None,
                        },
                    }],
                }),
            }]),
            tls: tls_secret.map(|secret| vec![IngressTLS { hosts: Some(vec![host]), secret_name: Some(secret) }]),
            default_backend: None,
        }),
        status: None,
    })
}

/// The URL once an ingress controller published an address for it.
pub fn url(ingress: &Ingress) -> Option<String> {
    published(ingress).map(|(host, tls)| format!("{}://{host}", if tls { "https" } else { "http" }))
}

/// (host, TLS) once an ingress controller published an address for it.
pub fn published(ingress: &Ingress) -> Option<(String, bool)> {
    let published = ingress
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|list| !list.is_empty());
    if !published {
        return None;
    }
    let spec = ingress.spec.as_ref()?;
    let host = spec.rules.as_ref()?.iter().find_map(|r| r.host.clone())?;
    let tls = spec.tls.as_ref().is_some_and(|t| !t.is_empty());
    Some((host, tls))
}

/// Route-only settings that mean nothing to an Ingress, as warnings.
pub fn warnings(spec: &TinycodeInstanceSpec) -> Vec<String> {
    let mut out = Vec::new();
    if spec.tls_termination != TlsTermination::Edge {
        out.push(format!(
            "spec.tlsTermination {} applies to OpenShift Routes only; on this cluster TLS comes from spec.ingress.tlsSecretName",
            spec.tls_termination.as_str()
        ));
    }
    if spec.replicas > 1 {
        out.push(
            "several replicas need sticky sessions: with ingress-nginx add the annotations nginx.ingress.kubernetes.io/affinity=cookie and nginx.ingress.kubernetes.io/affinity-mode=persistent through --ingress-annotations".into(),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use k8s_openapi::api::networking::v1::{IngressLoadBalancerIngress, IngressLoadBalancerStatus, IngressStatus};

    fn owner() -> OwnerReference {
        OwnerReference {
            api_version: "tinycode.dev/v1alpha1".into(),
            kind: "TinycodeInstance".into(),
            name: "dev".into(),
            uid: "u".into(),
            controller: Some(true),
            ..Default::default()
        }
    }

    fn spec(v: serde_json::Value) -> TinycodeInstanceSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn no_host_no_ingress() {
        assert!(build("dev", "team", &spec(serde_json::json!({})), owner(), &Default::default(), None).is_none());
    }

    #[test]
    fn host_class_tls_and_backend() {
        let s = spec(serde_json::json!({"hostname": "dev.example.com", "ingress": {"tlsSecretName": "dev-tls"}}));
        let settings = IngressSettings {
            class: None,
            annotations: BTreeMap::from([("cert-manager.io/cluster-issuer".into(), "letsencrypt".into())]),
        };
        let ing = build("dev", "team", &s, owner(), &settings, Some("nginx".into())).unwrap();
        assert_eq!(ing.metadata.name.as_deref(), Some("dev-tinycode"));
        assert_eq!(ing.metadata.annotations.as_ref().unwrap()["cert-manager.io/cluster-issuer"], "letsencrypt");
        let sp = ing.spec.clone().unwrap();
        assert_eq!(sp.ingress_class_name.as_deref(), Some("nginx"));
        let rule = &sp.rules.unwrap()[0];
        assert_eq!(rule.host.as_deref(), Some("dev.example.com"));
        let backend = rule.http.as_ref().unwrap().paths[0].backend.service.clone().unwrap();
        assert_eq!((backend.name.as_str(), backend.port.unwrap().name.as_deref()), ("dev-tinycode", Some("http")));
        assert_eq!(sp.tls.unwrap()[0].secret_name.as_deref(), Some("dev-tls"));
        assert_eq!(url(&ing), None, "no address published yet");
        let mut published = ing;
        published.status = Some(IngressStatus {
            load_balancer: Some(IngressLoadBalancerStatus {
                ingress: Some(vec![IngressLoadBalancerIngress { ip: Some("192.0.2.1".into()), ..Default::default() }]),
            }),
        });
        assert_eq!(url(&published).as_deref(), Some("https://dev.example.com"));
    }

    #[test]
    fn route_only_fields_become_warnings() {
        assert!(warnings(&spec(serde_json::json!({}))).is_empty());
        let w = warnings(&spec(serde_json::json!({"tlsTermination": "passthrough"})));
        assert!(w[0].contains("OpenShift Routes only"));
    }
}

//! The instance's OpenShift Route (pure): created by the operator rather than
//! the chart so that its host can be read back into `status.url`.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::api::naming;
use crate::api::naming::instance_labels;
use crate::api::{TinycodeInstanceSpec, TlsTermination};
use crate::platform::openshift::{Route, RoutePort, RouteSpec, RouteTargetReference, TlsConfig};

/// The desired Route for an instance.
pub fn build(name: &str, namespace: &str, spec: &TinycodeInstanceSpec, owner: OwnerReference) -> Route {
    let mut annotations = BTreeMap::new();
    if spec.replicas > 1 {
        // Sticky sessions: a browser's websocket must keep talking to one pod.
        annotations.insert("haproxy.router.openshift.io/balance".to_string(), "source".to_string());
        annotations.insert("haproxy.router.openshift.io/disable_cookies".to_string(), "false".to_string());
    }
    Route {
        metadata: ObjectMeta {
            name: Some(naming::route(name)),
            namespace: Some(namespace.into()),
            labels: Some(instance_labels(name, "server")),
            // An empty map would make every server-side apply a write (and a watch event).
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        spec: RouteSpec {
            host: spec.hostname.clone(),
            to: RouteTargetReference { kind: "Service".into(), name: naming::fullname(name), weight: Some(100) },
            port: Some(RoutePort { target_port: IntOrString::String("http".into()) }),
            tls: Some(TlsConfig {
                termination: spec.tls_termination.as_str().into(),
                insecure_edge_termination_policy: (spec.tls_termination == TlsTermination::Edge)
                    .then(|| "Redirect".to_string()),
            }),
        },
        status: None,
    }
}

/// The host a router admitted the Route under.
pub fn admitted_host(route: &Route) -> Option<String> {
    route.status.as_ref()?.ingress.iter().find_map(|ing| {
        let admitted = ing.conditions.iter().any(|c| c.type_ == "Admitted" && c.status == "True");
        if admitted { ing.host.clone() } else { None }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::platform::openshift::{RouteIngress, RouteIngressCondition, RouteStatus};

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

    #[test]
    fn edge_route_redirects_http_and_targets_the_service() {
        let r = build("dev", "team", &TinycodeInstanceSpec::default(), owner());
        assert_eq!(r.metadata.name.as_deref(), Some("dev-tinycode"));
        assert_eq!(r.spec.to.name, "dev-tinycode");
        assert_eq!(r.spec.to.kind, "Service");
        assert_eq!(r.spec.port.as_ref().unwrap().target_port, IntOrString::String("http".into()));
        let tls = r.spec.tls.unwrap();
        assert_eq!(
            (tls.termination.as_str(), tls.insecure_edge_termination_policy.as_deref()),
            ("edge", Some("Redirect"))
        );
        assert_eq!(r.spec.host, None);
        assert_eq!(r.metadata.annotations, None, "an empty annotations map makes each apply a write");
        assert_eq!(r.metadata.owner_references.unwrap()[0].uid, "u");
    }

    #[test]
    fn passthrough_host_and_session_affinity() {
        let spec: TinycodeInstanceSpec = serde_json::from_value(serde_json::json!({
            "tlsTermination": "passthrough", "hostname": "code.example.com", "replicas": 2,
            "storage": {"projectsAccessMode": "ReadWriteMany"}
        }))
        .unwrap();
        let r = build("dev", "team", &spec, owner());
        let tls = r.spec.tls.unwrap();
        assert_eq!((tls.termination.as_str(), tls.insecure_edge_termination_policy), ("passthrough", None));
        assert_eq!(r.spec.host.as_deref(), Some("code.example.com"));
        let a = r.metadata.annotations.unwrap();
        assert_eq!(a["haproxy.router.openshift.io/balance"], "source");
        assert_eq!(a["haproxy.router.openshift.io/disable_cookies"], "false");
    }

    #[test]
    fn only_admitted_ingress_gives_a_host() {
        let mut r = build("dev", "team", &TinycodeInstanceSpec::default(), owner());
        assert_eq!(admitted_host(&r), None);
        let ingress = |status: &str| RouteIngress {
            host: Some("dev-tinycode-team.apps.local".into()),
            router_name: Some("default".into()),
            conditions: vec![RouteIngressCondition {
                type_: "Admitted".into(),
                status: status.into(),
                reason: None,
                message: None,
            }],
        };
        r.status = Some(RouteStatus { ingress: vec![ingress("False")] });
        assert_eq!(admitted_host(&r), None);
        r.status = Some(RouteStatus { ingress: vec![ingress("False"), ingress("True")] });
        assert_eq!(admitted_host(&r).as_deref(), Some("dev-tinycode-team.apps.local"));
    }
}

//! The OpenShift API types the operator touches: Route and
//! SecurityContextConstraints, typed with only the fields it uses.
//!
//! They also yield CRDs so the operator runs against a plain kube-apiserver in
//! local runs and tests; on OpenShift the real APIs serve them.

use std::borrow::Cow;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::CustomResource;
use kube::core::{ClusterResourceScope, Resource};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// `route.openshift.io/v1` Route spec (subset).
#[derive(CustomResource, JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "route.openshift.io",
    version = "v1",
    kind = "Route",
    plural = "routes",
    namespaced,
    status = "RouteStatus"
)]
#[serde(rename_all = "camelCase")]
pub struct RouteSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    pub to: RouteTargetReference,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<RoutePort>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteTargetReference {
    pub kind: String,
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weight: Option<i32>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RoutePort {
    pub target_port: IntOrString,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TlsConfig {
    pub termination: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub insecure_edge_termination_policy: Option<String>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteStatus {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress: Vec<RouteIngress>,
}

/// One router's view of the Route.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteIngress {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_name: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<RouteIngressCondition>,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RouteIngressCondition {
    #[serde(rename = "type")]
    pub type_: String,
    pub status: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `security.openshift.io/v1` SecurityContextConstraints (fields at the top level, no spec).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContextConstraints {
    #[serde(default)]
    pub metadata: ObjectMeta,
    pub allow_host_dir_volume_plugin: bool,
    #[serde(rename = "allowHostIPC")]
    pub allow_host_ipc: bool,
    pub allow_host_network: bool,
    #[serde(rename = "allowHostPID")]
    pub allow_host_pid: bool,
    pub allow_host_ports: bool,
    pub allow_privilege_escalation: Option<bool>,
    pub allow_privileged_container: bool,
    pub allowed_capabilities: Option<Vec<String>>,
    pub default_add_capabilities: Option<Vec<String>>,
    pub required_drop_capabilities: Option<Vec<String>>,
    /// Required (but nullable) in the real SCC schema. The operator's SCCs always
    /// set it (to 0): a `null` is dropped by a client-side `kubectl apply`, and the
    /// apiserver then refuses the object with `priority: Required value`. `None`
    /// remains readable because other SCCs on a cluster may carry `null`.
    pub priority: Option<i32>,
    pub read_only_root_filesystem: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_as_user: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub se_linux_context: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fs_group: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplemental_groups: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profiles: Option<Vec<String>>,
    pub volumes: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub users: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub groups: Option<Vec<String>>,
}

impl Resource for SecurityContextConstraints {
    type DynamicType = ();
    type Scope = ClusterResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        "SecurityContextConstraints".into()
    }
    fn group(_: &()) -> Cow<'_, str> {
        "security.openshift.io".into()
    }
    fn version(_: &()) -> Cow<'_, str> {
        "v1".into()
    }
    fn plural(_: &()) -> Cow<'_, str> {
        "securitycontextconstraints".into()
    }
    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

/// Serialises an SCC with its apiVersion and kind, ready to apply.
pub fn scc_manifest(scc: &SecurityContextConstraints) -> serde_json::Value {
    crate::platform::manifest(scc)
}

/// CRDs standing in for the OpenShift APIs on a plain kube-apiserver (local runs
/// and tests). They accept unknown fields so the real objects stay intact.
pub fn stand_in_crds() -> Vec<CustomResourceDefinition> {
    use kube::CustomResourceExt;
    let mut route = Route::crd();
    preserve_unknown(&mut route, &["spec"]);
    let scc: CustomResourceDefinition = serde_json::from_value(serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "securitycontextconstraints.security.openshift.io"},
        "spec": {
            "group": "security.openshift.io",
            "names": {"kind": "SecurityContextConstraints", "plural": "securitycontextconstraints",
                      "singular": "securitycontextconstraint", "shortNames": ["scc"],
                      "listKind": "SecurityContextConstraintsList"},
            "scope": "Cluster",
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}},
                    "required": ["allowHostDirVolumePlugin", "allowHostIPC", "allowHostNetwork", "allowHostPID", "allowHostPorts",
                                 "allowPrivilegedContainer", "readOnlyRootFilesystem"]}}}]
        }
    }))
    .expect("SCC CRD literal is valid");
    vec![route, scc]
}

fn preserve_unknown(crd: &mut CustomResourceDefinition, props: &[&str]) {
    for v in &mut crd.spec.versions {
        if let Some(schema) = v.schema.as_mut().and_then(|s| s.open_api_v3_schema.as_mut())
            && let Some(properties) = schema.properties.as_mut()
        {
            for p in props {
                if let Some(prop) = properties.get_mut(*p) {
                    prop.x_kubernetes_preserve_unknown_fields = Some(true);
                }
            }
        }
    }
}

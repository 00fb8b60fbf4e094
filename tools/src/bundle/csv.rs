//! The ClusterServiceVersion: what OperatorHub shows, what OLM installs
//! (the manager Deployment and its permissions) and the CRD it owns.

use base64::Engine;
use kube::CustomResourceExt;
use serde_json::{Value, json};

use super::descriptors::{CLASS_SPEC_DESCRIPTORS, SPEC_DESCRIPTORS, STATUS_DESCRIPTORS, descriptors};
use super::{MIN_KUBE_VERSION, PACKAGE, alm_examples, manager_deployment, operator_image};
use tinycode_operator::api::{DEFAULT_IMAGE, TinycodeInstance};
use tinycode_operator::platform::rbac;
use tinycode_operator::settings::DEFAULT_OPERATOR_NAMESPACE;

const REPOSITORY: &str = "https://github.com/bobbyjohnstx/tinycode-operator";
const ICON_SVG: &str = include_str!("../../../config/manifests/icon.svg");

/// The ClusterServiceVersion.
pub fn cluster_service_version() -> Value {
    let version = tinycode_operator::VERSION;
    let image = operator_image();
    let signin = tinycode_operator::settings::SigninSettings::default();
    json!({
        "apiVersion": "operators.coreos.com/v1alpha1",
        "kind": "ClusterServiceVersion",
        "metadata": csv_metadata(version, &image),
        "spec": {
            "displayName": "Tinycode Operator",
            "description": description(),
            "version": version,
            "minKubeVersion": MIN_KUBE_VERSION,
            "maturity": "alpha",
            "provider": {"name": "tinycode-operator maintainers", "url": REPOSITORY},
            "maintainers": [{"name": "tinycode-operator maintainers", "email": "tinycode-operator@example.com"}],
            "links": [
                {"name": "Source", "url": REPOSITORY},
                {"name": "tinycode", "url": "https://github.com/bobbyjohnstx/tinycode"},
                {"name": "tinycode container", "url": "https://github.com/bobbyjohnstx/tinycode-container"},
            ],
            "keywords": ["tinycode", "ai", "coding assistant", "llm", "vllm", "ollama", "developer tools"],
            "icon": [{"base64data": icon_base64(), "mediatype": "image/svg+xml"}],
            "installModes": install_modes(),
            "customresourcedefinitions": {"owned": [owned_crd(), owned_class_crd()]},
            "install": install_strategy(),
            // Every image an instance can run by default, for disconnected
            // mirroring (oc adm catalog mirror reads this list). Tags, not
            // digests: neither upstream publishes a digest this repository
            // could pin and check here.
            // The operator's image is also the sign-in pods' gate.
            "relatedImages": [
                {"name": "tinycode-operator", "image": image},
                {"name": "tinycode", "image": DEFAULT_IMAGE},
                {"name": "ollama", "image": tinycode_operator::settings::Settings::default().ollama_image},
                {"name": "oauth2-proxy", "image": signin.oauth2_proxy_image},
                {"name": "openshift-oauth-proxy", "image": signin.openshift_oauth_proxy_image},
            ],
        },
    })
}

/// The OLM install modes the operator honours (docs/olm-bundle.md, Install
/// modes). OwnNamespace is refused because the operator's own namespace holds
/// every release record and refuses instances: an operator watching only it
/// would refuse everything it sees. MultiNamespace is refused by the operator
/// itself (`--watch-namespaces` takes one namespace): a kube-runtime
/// reflector store cannot be fed by one watch per namespace.
fn install_modes() -> Value {
    json!([
        {"type": "OwnNamespace", "supported": false},
        {"type": "SingleNamespace", "supported": true},
        {"type": "MultiNamespace", "supported": false},
        {"type": "AllNamespaces", "supported": true},
    ])
}

/// OLM's annotation on the operator's pod template listing the
/// OperatorGroup's target namespaces (comma-separated; `""` for all).
const TARGET_NAMESPACES_ANNOTATION: &str = "olm.targetNamespaces";

/// The CSV's metadata: the annotations OperatorHub and the console show
/// (alm-examples pre-fills the create form) and the supported platforms.
fn csv_metadata(version: &str, image: &str) -> Value {
    let examples = serde_json::to_string_pretty(&alm_examples()).expect("examples serialise");
    json!({
        "name": format!("{PACKAGE}.v{version}"),
        "namespace": "placeholder",
        "annotations": {
            "alm-examples": examples,
            "capabilities": "Basic Install",
            // The upgrade graph: this version replaces every earlier one in
            // the channel, so OLM upgrades any installed build to it.
            "olm.skipRange": format!("<{version}"),
            "categories": "AI/Machine Learning,Developer Tools",
            "containerImage": image,
            "description": "Installs and manages tinycode AI coding assistant instances on OpenShift and Kubernetes",
            "operatorframework.io/suggested-namespace": DEFAULT_OPERATOR_NAMESPACE,
            "repository": REPOSITORY,
            "support": "tinycode-operator maintainers",
            // The release date of this version, from CHANGELOG.md (not the
            // time of generation: the bundle is generated and compared).
            "createdAt": release_date(version),
            // What OpenShift's console filters operators by. Disconnected:
            // every image an instance runs by default is in relatedImages,
            // and the registry allow-list and images are settings. The rest
            // is not claimed: no FIPS build, no cluster-wide proxy or TLS
            // profile read, no cloud token authentication, no CNF/CNI/CSI.
            "features.operators.openshift.io/disconnected": "true",
            "features.operators.openshift.io/fips-compliant": "false",
            "features.operators.openshift.io/proxy-aware": "false",
            "features.operators.openshift.io/tls-profiles": "false",
            "features.operators.openshift.io/token-auth-aws": "false",
            "features.operators.openshift.io/token-auth-azure": "false",
            "features.operators.openshift.io/token-auth-gcp": "false",
            "features.operators.openshift.io/cnf": "false",
            "features.operators.openshift.io/cni": "false",
            "features.operators.openshift.io/csi": "false",
        },
        "labels": {
            // What the Dockerfile builds (its `# Architectures:` line; tools/tests/bundle.rs compares).
            "operatorframework.io/arch.amd64": "supported",
            "operatorframework.io/arch.arm64": "supported",
            "operatorframework.io/os.linux": "supported",
        },
    })
}

/// The owned CRD: the kinds an instance creates (the console's resources
/// tab) and the descriptors of its form and status view.
fn owned_crd() -> Value {
    let crd = TinycodeInstance::crd();
    let owned_resources = json!([
        {"kind": "Deployment", "name": "", "version": "v1"},
        {"kind": "Service", "name": "", "version": "v1"},
        {"kind": "PersistentVolumeClaim", "name": "", "version": "v1"},
        {"kind": "ServiceAccount", "name": "", "version": "v1"},
        {"kind": "ConfigMap", "name": "", "version": "v1"},
        {"kind": "NetworkPolicy", "name": "", "version": "v1"},
        {"kind": "Role", "name": "", "version": "v1"},
        {"kind": "RoleBinding", "name": "", "version": "v1"},
        {"kind": "Route", "name": "", "version": "v1"},
    ]);
    json!({
        "name": crd.metadata.name.clone().expect("crd name"),
        "version": tinycode_operator::api::VERSION,
        "kind": crd.spec.names.kind.clone(),
        "displayName": "Tinycode Instance",
        "description": "One tinycode AI coding assistant: a Helm release of the bundled chart, a Route on OpenShift or an Ingress on Kubernetes, and an SCC grant on OpenShift",
        "resources": owned_resources,
        "specDescriptors": descriptors(SPEC_DESCRIPTORS),
        "statusDescriptors": descriptors(STATUS_DESCRIPTORS),
    })
}

/// The cluster-scoped TinycodeClass: what a cluster-admin offers tenants.
fn owned_class_crd() -> Value {
    let crd = tinycode_operator::api::TinycodeClass::crd();
    json!({
        "name": crd.metadata.name.clone().expect("crd name"),
        "version": tinycode_operator::api::VERSION,
        "kind": crd.spec.names.kind.clone(),
        "displayName": "Tinycode Class",
        "description": "What a cluster-admin offers tenants: image, default and maximum resources (GPUs included), placement, storage and idle limits, permitted modes, instances per namespace",
        "specDescriptors": descriptors(CLASS_SPEC_DESCRIPTORS),
    })
}

/// How OLM installs the operator: the manager Deployment, with the
/// permissions of [`rbac`] granted to its ServiceAccount (cluster-wide, and
/// leader election in the install namespace).
fn install_strategy() -> Value {
    let deployment = manager_deployment();
    let sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
        .as_str()
        .expect("manager.yaml names a serviceAccountName")
        .to_string();
    let cluster_rules = serde_json::to_value(rbac::cluster_role().rules.unwrap_or_default()).expect("rules");
    let leader_rules =
        serde_json::to_value(rbac::leader_election_role(DEFAULT_OPERATOR_NAMESPACE).rules.unwrap_or_default())
            .expect("rules");
    json!({
        "strategy": "deployment",
        "spec": {
            "clusterPermissions": [{"serviceAccountName": sa, "rules": cluster_rules}],
            "permissions": [{"serviceAccountName": sa, "rules": leader_rules}],
            "deployments": [{
                "name": deployment["metadata"]["name"],
                "label": deployment["metadata"]["labels"],
                "spec": olm_deployment_spec(),
            }],
        },
    })
}

/// The Deployment spec OLM installs: the manager's, with two changes.
///
/// No fixed UID: on OpenShift a Deployment that OLM installs runs under the
/// install namespace's restricted-v2 SCC, which assigns a UID from the
/// namespace's range and rejects `runAsUser: 1001`; the image's USER is 1001
/// anyway, so plain Kubernetes still runs it as 1001, and the pod stays
/// non-root either way (`runAsNonRoot`).
///
/// `WATCH_NAMESPACE` from the OperatorGroup: OLM sets its target namespaces
/// on the pod template, so the install mode the cluster-admin chose is the
/// one the operator runs in (`""`, AllNamespaces, watches every namespace).
fn olm_deployment_spec() -> Value {
    let mut spec = manager_deployment()["spec"].clone();
    let pod = &mut spec["template"]["spec"];
    if let Some(sc) = pod["securityContext"].as_object_mut() {
        sc.remove("runAsUser");
    }
    for c in pod["containers"].as_array_mut().into_iter().flatten() {
        if let Some(sc) = c["securityContext"].as_object_mut() {
            sc.remove("runAsUser");
        }
        let watch = c["env"]
            .as_array_mut()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == "WATCH_NAMESPACE")
            .expect("config/manager/manager.yaml sets WATCH_NAMESPACE on every container");
        *watch = json!({
            "name": "WATCH_NAMESPACE",
            "valueFrom": {"fieldRef": {"fieldPath": format!("metadata.annotations['{TARGET_NAMESPACES_ANNOTATION}']")}},
        });
    }
    spec
}

fn description() -> String {
    format!(
        "tinycode-operator installs and manages [tinycode](https://github.com/bobbyjohnstx/tinycode), a web-based AI \
coding assistant, on OpenShift and Kubernetes. Each `TinycodeInstance` becomes one Helm release of the bundled chart \
(Deployment, Service, PVCs, NetworkPolicy, optional Ollama), a Route on OpenShift or an Ingress on Kubernetes, and on \
OpenShift the least-privileged SecurityContextConstraints grant its spec needs.

## Before the first instance (cluster-admin)

1. Install the three SCCs once; OLM bundles cannot carry SCCs:
   `oc apply -f config/scc/sccs.yaml` (from the operator's repository).
2. Prepare each namespace instances go into: the operator's ServiceAccount needs `admin` there, and the
   namespace carries the label `tinycode.dev/prepared=true`, the record that a cluster-admin prepared it:
   `hack/prepare-namespace.sh tinycode-dev --operator-namespace <namespace this operator runs in>`,
   or by hand:
   `oc create rolebinding tinycode-operator-admin --clusterrole=admin --serviceaccount=<operator namespace>:tinycode-operator-manager -n tinycode-dev`
   and `oc label namespace tinycode-dev tinycode.dev/prepared=true`.
   An instance in an unprepared namespace reports the exact commands in its status. A password Secret is
   optional: an instance that names none gets a generated password (`status.passwordSecret` names its Secret).
3. The `tinycode-hostpath` and `tinycode-shell` tiers need the namespace approved:
   `oc label namespace tinycode-dev tinycode.dev/allow-hostpath=true` (or `tinycode.dev/allow-shell=true`).

## Install modes

All namespaces (the default), or a single namespace: install the operator into a namespace of its own (for example
`tinycode-operator-system`) with an OperatorGroup that targets the namespace instances go into. \"Own namespace\" is
not offered: the operator's namespace holds every instance's Helm release records and never runs instances. Nor is
\"multiple namespaces\": the operator watches one namespace or all.

## Self-service

`tinycode-user-role` lets a user manage instances in one namespace when bound there with a RoleBinding
(README.md, Requirements, lists exactly what it grants); namespace admins and editors can manage instances without it.

## Data

Deleting an instance uninstalls its release and keeps its PVCs (`spec.storage.retainOnDelete`, default true);
an instance created again with the same name re-uses them.

Source and documentation: {REPOSITORY}"
    )
}

const CHANGELOG: &str = include_str!("../../../CHANGELOG.md");

/// The date of `version`'s heading in CHANGELOG.md (`## <version> - <YYYY-MM-DD>`).
pub fn release_date(version: &str) -> String {
    CHANGELOG
        .lines()
        .filter_map(|l| l.strip_prefix("## "))
        .find_map(|l| l.strip_prefix(version).and_then(|rest| rest.strip_prefix(" - ")))
        .map(|date| date.trim().to_string())
        .unwrap_or_else(|| panic!("CHANGELOG.md has no heading `## {version} - <date>`: add one for this version"))
}

fn icon_base64() -> String {
    base64::engine::general_purpose::STANDARD.encode(ICON_SVG.as_bytes())
}

//! Turns a bare kube-apiserver (hack/local-cluster.sh) into enough of an
//! OpenShift cluster to run the operator for real: the Route and SCC APIs,
//! the operator's CRD, SCCs and RBAC, a prepared namespace, and a kubeconfig
//! that authenticates as the operator's own ServiceAccount. Used by the
//! end-to-end tests and `make run-local`; never by the operator itself.

use std::path::Path;
use std::time::Duration;

use base64::Engine;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{
    AggregationRule, ClusterRole, ClusterRoleBinding, PolicyRule, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, CustomResourceExt};
use serde_json::json;

use tinycode_operator::api::TinycodeInstance;
use tinycode_operator::platform::openshift::{self, SecurityContextConstraints};
use tinycode_operator::platform::scc::ALL_TIERS;
use tinycode_operator::platform::{manifest, rbac};
use tinycode_operator::settings;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

const MANAGER: &str = "tinycode-local-setup";
/// Where the operator is installed: its defaults, as `hack/install.sh` installs it.
pub const OPERATOR_NAMESPACE: &str = settings::DEFAULT_OPERATOR_NAMESPACE;
pub const OPERATOR_SERVICE_ACCOUNT: &str = settings::DEFAULT_OPERATOR_SERVICE_ACCOUNT;

fn pp() -> PatchParams {
    PatchParams::apply(MANAGER).force()
}

/// Applies a CRD and waits until the apiserver serves it.
pub async fn apply_crd(client: &Client, crd: &CustomResourceDefinition) -> Result<(), BoxError> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let name = crd.metadata.name.clone().ok_or("CRD without a name")?;
    let mut crd = crd.clone();
    crd.metadata.resource_version = None;
    crd.status = None;
    api.patch(&name, &pp(), &Patch::Apply(&crd)).await?;
    for _ in 0..300 {
        let live = api.get(&name).await?;
        let established = live
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            // Discovery lags Established by a moment.
            tokio::time::sleep(Duration::from_millis(300)).await;
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Err(format!("CRD {name} was not Established within 30 s").into())
}

/// Route and SCC APIs: the real OpenShift schemas from `dir` when given, else
/// the operator's own stand-ins.
pub async fn install_openshift_apis(client: &Client, dir: Option<&Path>) -> Result<(), BoxError> {
    let crds = match dir {
        Some(dir) => {
            let mut crds = Vec::new();
            for file in ["routes.route.openshift.io.yaml", "securitycontextconstraints.security.openshift.io.yaml"] {
                let text = std::fs::read_to_string(dir.join(file))?;
                crds.push(serde_saphyr::from_str::<CustomResourceDefinition>(&text)?);
            }
            crds
        }
        None => openshift::stand_in_crds(),
    };
    for crd in &crds {
        apply_crd(client, crd).await?;
    }
    Ok(())
}

/// What `make install` puts on a cluster that the tests need: CRD, SCCs and
/// their use roles, the operator's namespace, ServiceAccount and ClusterRole.
pub async fn install_operator(client: &Client) -> Result<(), BoxError> {
    apply_crd(client, &TinycodeInstance::crd()).await?;
    apply_crd(client, &tinycode_operator::api::TinycodeClass::crd()).await?;
    install_scc_tiers(client).await?;
    install_operator_account(client).await?;
    install_cluster_rbac(client).await?;
    install_leader_election_rbac(client).await?;
    install_admission(client).await?;
    Ok(())
}

/// The host-directory admission policy and its binding, as hack/install.sh
/// applies them (the operator writes their parameter when it starts).
async fn install_admission(client: &Client) -> Result<(), BoxError> {
    use k8s_openapi::api::admissionregistration::v1::{ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding};
    use tinycode_operator::platform::admission;
    let docs = admission::manifests(OPERATOR_NAMESPACE);
    apply_named::<ValidatingAdmissionPolicy>(client, admission::POLICY, docs[0].clone()).await?;
    apply_named::<ValidatingAdmissionPolicyBinding>(client, admission::POLICY, docs[1].clone()).await?;
    Ok(())
}

/// Each SCC tier and the ClusterRole that grants its use. On a plain
/// Kubernetes (no SCC API) only the use roles are installed, as hack/install.sh does.
async fn install_scc_tiers(client: &Client) -> Result<(), BoxError> {
    let sccs: Api<SecurityContextConstraints> = Api::all(client.clone());
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let has_sccs = client.list_api_groups().await?.groups.iter().any(|g| g.name == "security.openshift.io");
    for tier in ALL_TIERS {
        if has_sccs {
            sccs.patch(&tier.scc_name(), &pp(), &Patch::Apply(&openshift::scc_manifest(&tier.scc()))).await?;
        }
        roles.patch(&tier.use_cluster_role(), &pp(), &Patch::Apply(tier.use_role_manifest())).await?;
    }
    Ok(())
}

/// The operator's namespace and the ServiceAccount it runs as.
async fn install_operator_account(client: &Client) -> Result<(), BoxError> {
    apply_named::<Namespace>(
        client,
        OPERATOR_NAMESPACE,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": OPERATOR_NAMESPACE}}),
    )
    .await?;
    Api::<ServiceAccount>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .patch(
            OPERATOR_SERVICE_ACCOUNT,
            &pp(),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": OPERATOR_SERVICE_ACCOUNT, "namespace": OPERATOR_NAMESPACE}})),
        )
        .await?;
    Ok(())
}

/// The operator's ClusterRole, bound to its ServiceAccount, and the
/// discovery ClusterRole it binds per namespace.
async fn install_cluster_rbac(client: &Client) -> Result<(), BoxError> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.patch(rbac::OPERATOR_CLUSTER_ROLE, &pp(), &Patch::Apply(rbac::cluster_role_manifest())).await?;
    roles.patch(rbac::DISCOVERY_CLUSTER_ROLE, &pp(), &Patch::Apply(rbac::discovery_cluster_role_manifest())).await?;
    let binding = ClusterRoleBinding {
        metadata: ObjectMeta { name: Some(rbac::OPERATOR_CLUSTER_ROLE.into()), ..Default::default() },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: rbac::OPERATOR_CLUSTER_ROLE.into(),
        },
        subjects: Some(vec![operator_subject()]),
    };
    Api::<ClusterRoleBinding>::all(client.clone())
        .patch(rbac::OPERATOR_CLUSTER_ROLE, &pp(), &Patch::Apply(manifest(&binding)))
        .await?;
    Ok(())
}

/// The leader-election Role in the operator's namespace, bound to its ServiceAccount.
async fn install_leader_election_rbac(client: &Client) -> Result<(), BoxError> {
    Api::<k8s_openapi::api::rbac::v1::Role>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .patch(
            rbac::LEADER_ELECTION_ROLE,
            &pp(),
            &Patch::Apply(rbac::leader_election_role_manifest(OPERATOR_NAMESPACE)),
        )
        .await?;
    let le_binding = RoleBinding {
        metadata: ObjectMeta {
            name: Some(rbac::LEADER_ELECTION_ROLE.into()),
            namespace: Some(OPERATOR_NAMESPACE.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Role".into(),
            name: rbac::LEADER_ELECTION_ROLE.into(),
        },
        subjects: Some(vec![operator_subject()]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), OPERATOR_NAMESPACE)
        .patch(rbac::LEADER_ELECTION_ROLE, &pp(), &Patch::Apply(manifest(&le_binding)))
        .await?;
    Ok(())
}

/// OpenShift aggregates Route permissions into `admin`/`edit`; a bare
/// apiserver has no aggregation controller, so this plays it: it adds the
/// Route rules OpenShift ships and fills each aggregated ClusterRole's rules
/// from the roles its selectors match.
pub async fn aggregate_cluster_roles(client: &Client) -> Result<(), BoxError> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    install_routes_admin_role(client).await?;
    let mut all = roles.list(&Default::default()).await?.items;
    aggregate(&mut all);
    for role in all.iter().filter(|r| r.aggregation_rule.is_some()) {
        let name = role.metadata.name.clone().unwrap_or_default();
        roles.patch(&name, &PatchParams::default(), &Patch::Merge(json!({"rules": role.rules}))).await?;
    }
    Ok(())
}

/// The Route rules OpenShift gives `admin` and `edit`, as a ClusterRole that
/// aggregates into them: on a cluster with a controller-manager (the local
/// node) the real aggregation adds them.
pub async fn install_routes_admin_role(client: &Client) -> Result<(), BoxError> {
    let roles: Api<ClusterRole> = Api::all(client.clone());
    roles.patch(ROUTES_ADMIN_ROLE, &pp(), &Patch::Apply(manifest(&routes_admin_role()))).await?;
    Ok(())
}

/// The ClusterRole that stands in for OpenShift's Route rules.
const ROUTES_ADMIN_ROLE: &str = "tinycode-local:openshift-routes-admin";

/// The Route rules OpenShift aggregates into `admin` and `edit`.
fn routes_admin_role() -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(ROUTES_ADMIN_ROLE.into()),
            labels: Some(
                [
                    ("rbac.authorization.k8s.io/aggregate-to-admin".to_string(), "true".to_string()),
                    ("rbac.authorization.k8s.io/aggregate-to-edit".to_string(), "true".to_string()),
                ]
                .into(),
            ),
            ..Default::default()
        },
        rules: Some(vec![PolicyRule {
            api_groups: Some(vec!["route.openshift.io".into()]),
            resources: Some(vec!["routes".into(), "routes/custom-host".into()]),
            verbs: ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        }]),
        ..Default::default()
    }
}

/// Fills each aggregated role's rules from the roles its selectors match.
/// Aggregated roles feed each other (edit aggregates into admin), so this
/// repeats until nothing changes, as the controller would converge.
fn aggregate(all: &mut [ClusterRole]) {
    for _ in 0..5 {
        let mut changed = false;
        for i in 0..all.len() {
            let Some(rule) = all[i].aggregation_rule.clone() else { continue };
            let rules = matched_rules(all, &rule, all[i].metadata.name.as_ref());
            if all[i].rules.as_ref() != Some(&rules) {
                all[i].rules = Some(rules);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
}

/// The rules of every other role (not `own`) that one of `rule`'s selectors
/// matches, each once, in the order found.
fn matched_rules(all: &[ClusterRole], rule: &AggregationRule, own: Option<&String>) -> Vec<PolicyRule> {
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in rule.cluster_role_selectors.iter().flatten() {
        let wanted = selector.match_labels.clone().unwrap_or_default();
        for other in all {
            let labels = other.metadata.labels.clone().unwrap_or_default();
            if other.metadata.name.as_ref() != own && wanted.iter().all(|(k, v)| labels.get(k) == Some(v)) {
                for r in other.rules.iter().flatten() {
                    if !rules.contains(r) {
                        rules.push(r.clone());
                    }
                }
            }
        }
    }
    rules
}

/// Prepares a namespace as the README tells a cluster-admin to: the
/// operator's `admin` RoleBinding and a password Secret.
pub async fn prepare_namespace(client: &Client, ns: &str, password: Option<&str>) -> Result<(), BoxError> {
    // The label records the cluster-admin's act (the operator requires it).
    let labels = json!({tinycode_operator::platform::prepare::PREPARED_LABEL: "true"});
    apply_named::<Namespace>(
        client,
        ns,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": labels}}),
    )
    .await?;
    let rb = RoleBinding {
        metadata: ObjectMeta {
            name: Some("tinycode-operator-admin".into()),
            namespace: Some(ns.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "ClusterRole".into(),
            name: "admin".into(),
        },
        subjects: Some(vec![operator_subject()]),
    };
    Api::<RoleBinding>::namespaced(client.clone(), ns)
        .patch("tinycode-operator-admin", &pp(), &Patch::Apply(manifest(&rb)))
        .await?;
    if let Some(pw) = password {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "tinycode-password", "namespace": ns},
                            "stringData": {"TINYCODE_SERVER_PASSWORD": pw}});
        Api::<Secret>::namespaced(client.clone(), ns).patch("tinycode-password", &pp(), &Patch::Apply(secret)).await?;
    }
    Ok(())
}

/// Writes a kubeconfig that authenticates as the operator's ServiceAccount
/// with a fresh token, pointing at the same server as `admin_kubeconfig`.
pub async fn write_operator_kubeconfig(client: &Client, admin_kubeconfig: &Path, out: &Path) -> Result<(), BoxError> {
    let admin = kube::config::Kubeconfig::read_from(admin_kubeconfig)?;
    let cluster = admin.clusters.first().and_then(|c| c.cluster.clone()).ok_or("admin kubeconfig has no cluster")?;
    let server = cluster.server.ok_or("admin kubeconfig has no server")?;
    let ca = match (cluster.certificate_authority_data, cluster.certificate_authority) {
        (Some(data), _) => data,
        (None, Some(path)) => {
            use std::io::Read;
            let mut pem = Vec::new();
            std::fs::File::open(path)?.read_to_end(&mut pem)?;
            base64::engine::general_purpose::STANDARD.encode(&pem)
        }
        (None, None) => return Err("admin kubeconfig has no certificate authority".into()),
    };
    let request = TokenRequest {
        spec: Some(TokenRequestSpec { expiration_seconds: Some(24 * 3600), ..Default::default() }),
        ..Default::default()
    };
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), OPERATOR_NAMESPACE);
    let token: TokenRequest =
        sas.create_subresource("token", OPERATOR_SERVICE_ACCOUNT, &PostParams::default(), &request).await?;
    let token = token.status.ok_or("token request returned no token")?.token;
    let config = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "local", "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": "operator", "user": {"token": token}}],
        "contexts": [{"name": "operator", "context": {"cluster": "local", "user": "operator"}}],
        "current-context": "operator",
    });
    // JSON is YAML too: every kubeconfig reader takes it, and scripts read it without a YAML parser.
    write_private(out, serde_json::to_string_pretty(&config)?.as_bytes())?;
    Ok(())
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    f.write_all(bytes)
}

fn operator_subject() -> Subject {
    Subject {
        kind: "ServiceAccount".into(),
        name: OPERATOR_SERVICE_ACCOUNT.into(),
        namespace: Some(OPERATOR_NAMESPACE.into()),
        ..Default::default()
    }
}

async fn apply_named<K>(client: &Client, name: &str, obj: serde_json::Value) -> Result<(), BoxError>
where
    K: kube::Resource<Scope = k8s_openapi::ClusterResourceScope, DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    Api::<K>::all(client.clone()).patch(name, &pp(), &Patch::Apply(obj)).await?;
    Ok(())
}

/// Plays the kubelet this control plane lacks: reports a Deployment's current
/// generation as rolled out with all its replicas available.
pub async fn mark_deployment_available(client: &Client, ns: &str, name: &str) -> Result<(), BoxError> {
    let api: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client.clone(), ns);
    let d = api.get(name).await?;
    let replicas = d.spec.replicas.unwrap_or(1);
    let status = json!({"status": {
        "observedGeneration": d.metadata.generation, "replicas": replicas, "updatedReplicas": replicas,
        "readyReplicas": replicas, "availableReplicas": replicas,
        "conditions": [{"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable",
                        "message": "played by the tests (no kubelet)"}]
    }});
    let pp = PatchParams { field_manager: Some("tinycode-test-kubelet".into()), ..Default::default() };
    api.patch_status(name, &pp, &Patch::Merge(&status)).await?;
    Ok(())
}

/// Plays the OpenShift router this control plane lacks: admits a Route under `host`.
pub async fn admit_route(client: &Client, ns: &str, name: &str, host: &str) -> Result<(), BoxError> {
    let api: Api<openshift::Route> = Api::namespaced(client.clone(), ns);
    let status = json!({"status": {"ingress": [{"host": host, "routerName": "default", "wildcardPolicy": "None",
        "conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status)).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(name: &str, labels: &[&str], aggregates: Option<&str>, resource: Option<&str>) -> ClusterRole {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels.iter().map(|l| (*l, "true")).collect::<std::collections::BTreeMap<_, _>>()},
            "aggregationRule": aggregates.map(|l| json!({"clusterRoleSelectors": [{"matchLabels": {l: "true"}}]})),
            "rules": resource.map(|r| json!([{"apiGroups": [""], "resources": [r], "verbs": ["get"]}])),
        }))
        .unwrap()
    }

    fn resources(role: &ClusterRole) -> Vec<String> {
        role.rules.iter().flatten().flat_map(|r| r.resources.clone().unwrap_or_default()).collect()
    }

    #[test]
    fn aggregation_reaches_through_an_aggregated_role() {
        // admin aggregates edit, which aggregates the routes role: listed in
        // the order that needs a second pass.
        let mut all = vec![
            role("admin", &[], Some("to-admin"), None),
            role("edit", &["to-admin"], Some("to-edit"), Some("pods")),
            role("routes", &["to-edit"], None, Some("routes")),
        ];
        aggregate(&mut all);
        assert_eq!(resources(&all[1]), ["routes"]);
        assert_eq!(resources(&all[0]), ["routes"]);
        assert_eq!(resources(&all[2]), ["routes"]);
    }
}

//! The requests `execute` makes, against a mocked API server (tower-test):
//! the sequence for a new instance, for an update, for an unchanged one
//! (none at all) and for withdrawn approvals.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::client::Body;
use tower_test::mock;

use super::*;
use crate::platform::scc::SccTier;
use crate::reconcile::caches::stores;
use crate::reconcile::revoke::{Withdraw, withdraw_one};
use crate::reconcile::stages::plan::tests::{instance, observed, plan_for};
use crate::settings::Settings;

type Seen = Arc<Mutex<Vec<String>>>;

/// A Context whose client talks to a mock that answers every request by
/// echoing its body (what server-side apply and create return) and records
/// "METHOD path" for each.
fn mocked() -> (Context, Seen) {
    let (service, mut handle) = mock::pair::<Request<Body>, Response<Body>>();
    let seen: Seen = Arc::default();
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((request, send)) = handle.next_request().await {
            log.lock().unwrap().push(format!("{} {}", request.method(), request.uri().path()));
            let method = request.method().clone();
            let body = request.into_body().collect_bytes().await.unwrap_or_default();
            let reply = if method == http::Method::DELETE || body.is_empty() {
                br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Success"}"#.to_vec()
            } else {
                body.to_vec()
            };
            send.send_response(Response::builder().status(200).body(Body::from(reply)).unwrap());
        }
    });
    let client = kube::Client::new(service, "default");
    let metrics = Arc::new(crate::ops::metrics::Metrics::new());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let helm = crate::helm::Helm::new("helm".into(), "chart".into(), Duration::from_secs(1), rx, metrics.clone())
        .expect("helm dir");
    let settings = Settings::default();
    let stores = stores::empty(settings.platform);
    (Context::new(client, settings, helm, metrics, stores), seen)
}

fn requests(seen: &Seen) -> Vec<String> {
    seen.lock().unwrap().clone()
}

/// A plan without the helm step (helm is a subprocess, proven end to end).
fn without_helm(mut plan: Plan) -> Plan {
    plan.helm = None;
    plan.revision = Some(1);
    plan
}

#[tokio::test]
async fn a_new_instance_gets_its_password_grant_and_route() {
    let (ctx, seen) = mocked();
    let inst = instance(serde_json::json!({}));
    let mut obs = observed();
    obs.password = crate::reconcile::stages::observe::SecretFacts::Missing;
    obs.fresh_password = Some("x".repeat(32));
    // Nor its front's Secret (the start credential).
    obs.signin = Some(Default::default());
    let plan = without_helm(plan_for(&inst, &obs));
    let outcome = execute(&ctx, &inst, &plan).await.expect("execute");
    assert!(outcome.route.is_some(), "the applied Route is what status reads");
    let got = requests(&seen);
    let grant = naming::scc_grant("dev", SccTier::select(&inst.spec).as_str());
    assert_eq!(
        got.iter().filter(|r| !r.contains("/events")).cloned().collect::<Vec<_>>(),
        vec![
            "POST /api/v1/namespaces/team/secrets".to_string(),
            "PATCH /api/v1/namespaces/team/secrets/dev-tinycode-signin".to_string(),
            format!("PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/{grant}"),
            "PATCH /apis/route.openshift.io/v1/namespaces/team/routes/dev-tinycode".to_string(),
        ]
    );
    assert_eq!(got.iter().filter(|r| r.contains("/events")).count(), 1, "one PasswordGenerated event");
}

#[tokio::test]
async fn an_unchanged_instance_costs_no_request() {
    let (ctx, seen) = mocked();
    let inst = instance(serde_json::json!({}));
    let first = plan_for(&inst, &observed());
    // The cluster holds what the first plan applied, written by the operator.
    let mut obs = observed();
    let mut grant = first.grant.clone().unwrap().metadata;
    grant.managed_fields = Some(vec![k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
        manager: Some(crate::FIELD_MANAGER.into()),
        operation: Some("Apply".into()),
        time: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now())),
        ..Default::default()
    }]);
    obs.grants.insert(grant.name.clone().unwrap(), grant.clone());
    let Exposure::Route { apply: Some(mut route), .. } = first.exposure.clone() else { panic!() };
    route.metadata.managed_fields = grant.managed_fields.clone();
    obs.route = Some(Arc::new(route));
    let plan = without_helm(plan_for(&inst, &obs));
    execute(&ctx, &inst, &plan).await.expect("execute");
    assert_eq!(requests(&seen), Vec::<String>::new());
}

#[tokio::test]
async fn a_tier_change_applies_the_new_grant_and_deletes_the_old() {
    let (ctx, seen) = mocked();
    let inst = instance(serde_json::json!({}));
    let mut obs = observed();
    let old = naming::scc_grant("dev", "privileged");
    obs.grants.insert(old.clone(), Default::default());
    let mut plan = without_helm(plan_for(&inst, &obs));
    plan.exposure = Exposure::Route { apply: None, live: None };
    execute(&ctx, &inst, &plan).await.expect("execute");
    let new = naming::scc_grant("dev", SccTier::select(&inst.spec).as_str());
    assert_eq!(
        requests(&seen),
        vec![
            format!("PATCH /apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/{new}"),
            format!("DELETE /apis/rbac.authorization.k8s.io/v1/namespaces/team/rolebindings/{old}"),
        ]
    );
}

#[tokio::test]
async fn withdrawn_approvals_delete_what_they_granted() {
    let (ctx, seen) = mocked();
    let inst = instance(serde_json::json!({}));
    for w in [Withdraw::ClusterRoleBinding, Withdraw::KubeconfigCopy] {
        withdraw_one(&ctx, &inst, &w).await.expect("withdraw");
    }
    assert_eq!(
        requests(&seen),
        vec![
            format!(
                "DELETE /apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{}",
                naming::cluster_role_binding("team", "dev")
            ),
            format!("DELETE /api/v1/namespaces/team/secrets/{}", naming::kubeconfig_copy("dev")),
        ]
    );
}

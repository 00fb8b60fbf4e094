//! Table tests of the plan (pure): what is written, and when helm runs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ManagedFieldsEntry, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use super::*;
use crate::api::TinycodeInstance;
use crate::reconcile::conditions;
use crate::reconcile::stages::observe::{Observed, ReleaseFacts, SecretFacts};
use crate::reconcile::stages::validate;

pub(crate) fn instance(spec: serde_json::Value) -> TinycodeInstance {
    let mut inst = TinycodeInstance::new("dev", serde_json::from_value(spec).expect("spec"));
    inst.metadata.namespace = Some("team".into());
    inst.metadata.uid = Some("uid-1".into());
    inst.metadata.generation = Some(1);
    inst
}

/// What a prepared namespace with everything in place looks like.
pub(crate) fn observed() -> Observed {
    Observed {
        namespace_labels: Some(BTreeMap::from([(
            crate::platform::prepare::PREPARED_LABEL.to_string(),
            "true".to_string(),
        )])),
        installed_sccs: crate::platform::scc::ALL_TIERS.iter().map(|t| t.scc_name()).collect::<BTreeSet<_>>(),
        password: SecretFacts::Present {
            keys: vec![crate::reconcile::marks::PASSWORD_KEY.into()],
            digest: "d1".into(),
        },
        // The front's Secret as written (password mode: the start credential).
        signin: Some(crate::reconcile::stages::observe::SigninFacts {
            current: Some(BTreeMap::from([(
                crate::render::signin::START_CREDENTIAL_KEY.to_string(),
                start_credential("dev"),
            )])),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// team/`name`'s start credential under the default settings' key.
pub(crate) fn start_credential(name: &str) -> String {
    crate::render::signin::start_credential(&crate::settings::Settings::default().digest_key.0, "team", name)
}

fn at(secs: i64) -> Timestamp {
    Timestamp::from_second(1_700_000_000 + secs).unwrap()
}

fn managed(manager: &str, secs: i64) -> ManagedFieldsEntry {
    ManagedFieldsEntry {
        manager: Some(manager.into()),
        operation: Some("Apply".into()),
        time: Some(Time(at(secs))),
        ..Default::default()
    }
}

fn record(version: i64, status: ReleaseStatus) -> release::Record {
    release::Record {
        secret_name: format!("sh.helm.release.v1.r.v{version}"),
        resource_version: None,
        version,
        status,
        created: Some(at(0)),
        writer: None,
    }
}

fn deployment(hash: &str, writers: Vec<ManagedFieldsEntry>) -> Deployment {
    Deployment {
        metadata: ObjectMeta {
            name: Some(naming::fullname("dev")),
            namespace: Some("team".into()),
            annotations: Some(BTreeMap::from([(VALUES_HASH_ANNOTATION.into(), hash.into())])),
            managed_fields: Some(writers),
            generation: Some(1),
            ..Default::default()
        },
        status: Some(DeploymentStatus {
            observed_generation: Some(1),
            available_replicas: Some(1),
            updated_replicas: Some(1),
            ..Default::default()
        }),
        ..Default::default()
    }
}

pub(crate) fn plan_for(inst: &TinycodeInstance, observed: &Observed) -> Plan {
    let settings = Settings::default();
    let valid = validate::validate(observed, inst, &settings, Vec::new()).expect("valid");
    plan(&valid, observed, &settings)
}

fn svc(name: &str) -> manifest::ObjectRef {
    manifest::ObjectRef {
        api_version: "v1".into(),
        kind: "Service".into(),
        namespace: "team".into(),
        name: name.into(),
    }
}

fn records(statuses: &[ReleaseStatus]) -> ReleaseFacts {
    let records = statuses.iter().enumerate().map(|(i, s)| record(i as i64 + 1, s.clone())).collect();
    ReleaseFacts { records, ..Default::default() }
}

#[test]
fn the_release_state_follows_the_records_and_the_cluster() {
    use ReleaseStatus::*;
    let inst = instance(serde_json::json!({}));
    let values = plan_for(&inst, &observed()).values;
    let hash = values.values_hash.clone();
    let deployed = || records(&[Superseded, Deployed]);
    let ours = || Some(deployment(&hash, vec![managed("helm", 0)]));
    let edited =
        |manager: &str| Some(ObjectMeta { managed_fields: Some(vec![managed(manager, 9)]), ..Default::default() });
    let service = || ReleaseObject::Rendered(svc("dev-tinycode"));
    let fullname = naming::fullname("dev");
    type Case<'a> = (&'a str, ReleaseFacts, Option<Deployment>, Option<&'a str>, ReleaseState);
    let cases: Vec<Case> = vec![
        ("no record", ReleaseFacts::default(), None, None, ReleaseState::Absent),
        (
            "earlier build's namespace",
            ReleaseFacts { legacy: true, ..Default::default() },
            ours(),
            None,
            ReleaseState::Legacy,
        ),
        (
            "earlier build's name",
            ReleaseFacts { renamed_from: Some("old".into()), ..Default::default() },
            None,
            None,
            ReleaseState::Renamed { from: "old".into() },
        ),
        ("an install never finished", records(&[PendingInstall]), None, None, ReleaseState::Unfinished),
        ("last run failed", records(&[Failed]), None, None, ReleaseState::NotDeployed { status: Failed }),
        (
            "failed, then interrupted: the failure comes first",
            records(&[Deployed, Failed, PendingUpgrade]),
            ours(),
            None,
            ReleaseState::NotDeployed { status: Failed },
        ),
        (
            "being uninstalled",
            records(&[Uninstalling]),
            ours(),
            None,
            ReleaseState::NotDeployed { status: Uninstalling },
        ),
        ("interrupted", records(&[Deployed, PendingUpgrade]), ours(), None, ReleaseState::Pending),
        (
            "interrupted and requested: the pending record comes first",
            records(&[Deployed, PendingRollback]),
            ours(),
            Some("now"),
            ReleaseState::Pending,
        ),
        ("requested", deployed(), ours(), Some("now"), ReleaseState::Requested { request: "now".into() }),
        (
            "requested and drifted: the request comes first",
            deployed(),
            None,
            Some("now"),
            ReleaseState::Requested { request: "now".into() },
        ),
        (
            "Deployment gone",
            deployed(),
            None,
            None,
            ReleaseState::Drifted(Drift::Missing(ReleaseObject::Deployment(fullname.clone()))),
        ),
        (
            "new values",
            deployed(),
            Some(deployment("old", vec![managed("helm", 0)])),
            None,
            ReleaseState::Drifted(Drift::ValuesChanged),
        ),
        (
            "Deployment edited",
            deployed(),
            Some(deployment(&hash, vec![managed("helm", 0), managed("kubectl-edit", 5)])),
            None,
            ReleaseState::Drifted(Drift::WrittenBy {
                object: ReleaseObject::Deployment(fullname.clone()),
                manager: "kubectl-edit".into(),
            }),
        ),
        (
            "new values and the Deployment edited: the repair comes first (it never waits)",
            deployed(),
            Some(deployment("old", vec![managed("helm", 0), managed("kubectl-edit", 5)])),
            None,
            ReleaseState::Drifted(Drift::WrittenBy {
                object: ReleaseObject::Deployment(fullname.clone()),
                manager: "kubectl-edit".into(),
            }),
        ),
        (
            "new values and a rendered object missing: the repair comes first",
            ReleaseFacts { rendered: vec![(svc("dev-tinycode"), None)], ..deployed() },
            Some(deployment("old", vec![managed("helm", 0)])),
            None,
            ReleaseState::Drifted(Drift::Missing(service())),
        ),
        (
            "Deployment edited before the release",
            ReleaseFacts {
                records: vec![release::Record { created: Some(at(10)), ..record(2, Deployed) }],
                ..Default::default()
            },
            Some(deployment(&hash, vec![managed("helm", 10), managed("kubectl-edit", 5)])),
            None,
            ReleaseState::InSync { revision: 2 },
        ),
        (
            "rendered object missing",
            ReleaseFacts { rendered: vec![(svc("dev-tinycode"), None)], ..deployed() },
            ours(),
            None,
            ReleaseState::Drifted(Drift::Missing(service())),
        ),
        (
            "rendered object edited",
            ReleaseFacts { rendered: vec![(svc("dev-tinycode"), edited("kubectl-edit"))], ..deployed() },
            ours(),
            None,
            ReleaseState::Drifted(Drift::WrittenBy { object: service(), manager: "kubectl-edit".into() }),
        ),
        (
            "rendered object written by the operator's own managers",
            ReleaseFacts { rendered: vec![(svc("dev-tinycode"), edited("kube-controller-manager"))], ..deployed() },
            ours(),
            None,
            ReleaseState::InSync { revision: 2 },
        ),
        ("unchanged", deployed(), ours(), None, ReleaseState::InSync { revision: 2 }),
    ];
    for (case, release, deployment, request, want) in cases {
        let got = release_state(&release, deployment.as_ref(), &values, request);
        assert_eq!(got, want, "{case}");
        assert_eq!(
            got.revision().is_some(),
            next_action(&got).is_none(),
            "{case}: a revision exactly when helm does not run"
        );
    }
}

#[test]
fn the_next_action_is_a_function_of_the_state() {
    let service = ReleaseObject::Rendered(svc("dev-tinycode"));
    let cases = [
        (ReleaseState::Absent, Some(Mode::Install)),
        (ReleaseState::Legacy, Some(Mode::Adopt)),
        (ReleaseState::Renamed { from: "old".into() }, Some(Mode::Adopt)),
        (ReleaseState::Unfinished, Some(Mode::Upgrade)),
        (ReleaseState::NotDeployed { status: ReleaseStatus::Failed }, Some(Mode::Upgrade)),
        (ReleaseState::Pending, Some(Mode::Upgrade)),
        (ReleaseState::Requested { request: "now".into() }, Some(Mode::Upgrade)),
        (ReleaseState::Drifted(Drift::ValuesChanged), Some(Mode::Upgrade)),
        (ReleaseState::Drifted(Drift::Missing(service.clone())), Some(Mode::Upgrade)),
        (ReleaseState::Drifted(Drift::WrittenBy { object: service, manager: "m".into() }), Some(Mode::Upgrade)),
        (ReleaseState::InSync { revision: 3 }, None),
    ];
    for (state, want) in cases {
        let run = next_action(&state);
        assert_eq!(run.as_ref().map(|r| r.mode), want, "{state:?}");
        if let Some(run) = run {
            assert_eq!(run.reason, state, "the run carries the state that called for it");
        }
    }
}

#[test]
fn release_states_read_as_messages() {
    let fullname = naming::fullname("dev");
    let cases = [
        (ReleaseState::Absent, "release not installed".to_string()),
        (ReleaseState::Unfinished, "release not installed".into()),
        (ReleaseState::Legacy, "release of an earlier build moves to the operator namespace".into()),
        (
            ReleaseState::Renamed { from: "team-dev.x".into() },
            "release team-dev.x moves to its current name (a shortened name keeps one dot)".into(),
        ),
        (ReleaseState::NotDeployed { status: ReleaseStatus::Failed }, "release is failed".into()),
        (ReleaseState::NotDeployed { status: ReleaseStatus::Unknown("odd".into()) }, "release is odd".into()),
        (ReleaseState::Pending, "an interrupted helm operation left the release pending".into()),
        (ReleaseState::Requested { request: "now".into() }, "reconcile requested (now)".into()),
        (ReleaseState::Drifted(Drift::ValuesChanged), "values or chart changed".into()),
        (
            ReleaseState::Drifted(Drift::Missing(ReleaseObject::Deployment(fullname.clone()))),
            "Deployment dev-tinycode is missing".into(),
        ),
        (
            ReleaseState::Drifted(Drift::WrittenBy {
                object: ReleaseObject::Deployment(fullname),
                manager: "kubectl-edit".into(),
            }),
            "Deployment dev-tinycode was changed by kubectl-edit".into(),
        ),
        (
            ReleaseState::Drifted(Drift::Missing(ReleaseObject::Rendered(svc("dev-tinycode")))),
            "Service team/dev-tinycode is missing".into(),
        ),
        (
            ReleaseState::Drifted(Drift::WrittenBy {
                object: ReleaseObject::Rendered(svc("dev-tinycode")),
                manager: "kubectl-edit".into(),
            }),
            "Service team/dev-tinycode was changed by kubectl-edit".into(),
        ),
        (ReleaseState::InSync { revision: 4 }, "release deployed at revision 4".into()),
    ];
    for (state, want) in cases {
        assert_eq!(state.to_string(), want, "{state:?}");
    }
}

#[test]
fn the_plan_runs_helm_for_a_new_request_only_and_keeps_the_revision_otherwise() {
    let mut inst = instance(serde_json::json!({}));
    let hash = plan_for(&inst, &observed()).values.values_hash;
    let mut obs = observed();
    obs.release = records(&[ReleaseStatus::Superseded, ReleaseStatus::Deployed]);
    obs.deployment = Some(Arc::new(deployment(&hash, vec![managed("helm", 0)])));
    let p = plan_for(&inst, &obs);
    assert_eq!((p.helm, p.revision), (None, Some(2)), "in sync: no helm, the deployed revision");

    inst.metadata.annotations =
        Some(BTreeMap::from([(conditions::RECONCILE_REQUEST_ANNOTATION.to_string(), "r1".to_string())]));
    let p = plan_for(&inst, &obs);
    let want = HelmRun { reason: ReleaseState::Requested { request: "r1".into() }, mode: Mode::Upgrade };
    assert_eq!((p.helm, p.revision, p.request.as_deref()), (Some(want), None, Some("r1")));

    inst.status =
        Some(crate::api::TinycodeInstanceStatus { last_handled_reconcile_at: Some("r1".into()), ..Default::default() });
    let p = plan_for(&inst, &obs);
    assert_eq!((p.helm, p.revision), (None, Some(2)), "a handled request does not run helm again");

    obs.release.records.push(record(3, ReleaseStatus::PendingUpgrade));
    let p = plan_for(&inst, &obs);
    assert_eq!(p.helm.map(|h| h.reason), Some(ReleaseState::Pending));
    assert_eq!(p.pending.iter().map(|r| r.version).collect::<Vec<_>>(), [3], "the pending record to discard");
}

#[test]
fn applied_objects_are_not_applied_again() {
    let inst = instance(serde_json::json!({}));
    let first = plan_for(&inst, &observed());
    let grant = first.grant.clone().expect("a missing grant is applied");
    let Exposure::Route { apply: Some(route), .. } = first.exposure.clone() else {
        panic!("a missing Route is applied")
    };
    let mut obs = observed();
    let mut grant_meta = grant.metadata.clone();
    grant_meta.managed_fields = Some(vec![managed(crate::FIELD_MANAGER, 0)]);
    obs.grants.insert(grant.metadata.name.clone().unwrap(), grant_meta.clone());
    let mut live_route = route.clone();
    live_route.metadata.managed_fields = Some(vec![managed(crate::FIELD_MANAGER, 0)]);
    obs.route = Some(Arc::new(live_route.clone()));
    let again = plan_for(&inst, &obs);
    assert!(again.grant.is_none(), "an unchanged grant is not applied");
    assert!(matches!(again.exposure, Exposure::Route { apply: None, .. }), "an unchanged Route is not applied");

    // Someone else edits the Route: it is applied again.
    live_route.metadata.managed_fields = Some(vec![managed(crate::FIELD_MANAGER, 0), managed("kubectl-edit", 3)]);
    obs.route = Some(Arc::new(live_route));
    assert!(matches!(plan_for(&inst, &obs).exposure, Exposure::Route { apply: Some(_), .. }));
    // A spec change changes the desired Route: applied again.
    let changed = instance(serde_json::json!({"hostname": "dev.example.com"}));
    obs.route = Some(Arc::new(route));
    assert!(matches!(plan_for(&changed, &obs).exposure, Exposure::Route { apply: Some(_), .. }));
}

#[test]
fn needs_apply_table() {
    let stamped = |hash: &str, writers: Vec<ManagedFieldsEntry>| ObjectMeta {
        annotations: Some(BTreeMap::from([(APPLIED_HASH_ANNOTATION.into(), hash.into())])),
        managed_fields: Some(writers),
        ..Default::default()
    };
    let ours = || managed(crate::FIELD_MANAGER, 0);
    assert!(needs_apply(None, "h"), "missing");
    assert!(needs_apply(Some(&stamped("other", vec![ours()])), "h"), "applied from something else");
    assert!(!needs_apply(Some(&stamped("h", vec![ours()])), "h"), "as applied");
    assert!(needs_apply(Some(&stamped("h", vec![ours(), managed("someone", 1)])), "h"), "written by another since");
    assert!(needs_apply(Some(&stamped("h", vec![managed("someone", 1)])), "h"), "never written by the operator");
}

#[test]
fn tier_changes_leave_grants_to_delete_and_role_changes_replace_the_binding() {
    let inst = instance(
        serde_json::json!({"clusterAdmin": {"enabled": true, "clusterRole": "view", "kubeconfigSecretName": "kc"}}),
    );
    let mut obs = observed();
    obs.namespace_labels
        .as_mut()
        .unwrap()
        .insert(crate::reconcile::approval::ALLOW_CLUSTER_ROLE_LABEL.into(), "view".into());
    obs.kubeconfig = None;
    obs.grants.insert(naming::scc_grant("dev", "privileged"), ObjectMeta::default());
    obs.bound_cluster_role = Some("edit".into());
    let settings = Settings::default();
    let valid = validate::validate(&obs, &inst, &settings, Vec::new()).expect("valid");
    let p = plan(&valid, &obs, &settings);
    assert_eq!(p.stale_grants, vec![naming::scc_grant("dev", "privileged")]);
    assert!(p.replace_cluster_role_binding, "a binding of another role is replaced");
    obs.bound_cluster_role = Some("view".into());
    assert!(!plan(&valid, &obs, &settings).replace_cluster_role_binding);
}

#[test]
fn a_generated_password_is_created_once_and_digested_before_it_exists() {
    let inst = instance(serde_json::json!({}));
    let mut obs = observed();
    obs.password = SecretFacts::Missing;
    obs.fresh_password = Some("p".repeat(32));
    let p = plan_for(&inst, &obs);
    let secret = p.password_secret.expect("created when missing");
    assert_eq!(secret.metadata.name.as_deref(), Some(naming::generated_password("dev").as_str()));
    // The digest the created Secret will have is the one the values carry already.
    let created = k8s_openapi::api::core::v1::Secret {
        metadata: secret.metadata.clone(),
        data: Some(BTreeMap::from([(
            crate::reconcile::marks::PASSWORD_KEY.to_string(),
            k8s_openapi::ByteString("p".repeat(32).into_bytes()),
        )])),
        ..Default::default()
    };
    let mut obs2 = observed();
    obs2.password = SecretFacts::Present {
        keys: vec![crate::reconcile::marks::PASSWORD_KEY.into()],
        digest: crate::reconcile::stages::observe::secret_digest(&created),
    };
    assert_eq!(plan_for(&inst, &obs2).values.values_hash, p.values.values_hash, "no second rollout after creation");
    assert!(plan_for(&inst, &obs2).password_secret.is_none());
}

#[test]
fn a_repair_of_a_write_seconds_old_looks_again_soon() {
    let inst = instance(serde_json::json!({}));
    let hash = plan_for(&inst, &observed()).values.values_hash;
    // The record of the last run was written at at(0); alice writes at `edit`; it is now at(10).
    let case = |edit: i64, status_only: bool| {
        let mut obs = observed();
        obs.now = at(10);
        obs.release = records(&[ReleaseStatus::Deployed]);
        let mut write = managed("kubectl-edit", edit);
        if status_only {
            write.subresource = Some("status".into());
        }
        obs.deployment = Some(Arc::new(deployment(&hash, vec![managed("helm", 0), write])));
        let p = plan_for(&inst, &obs);
        (p.helm.map(|h| h.reason.to_string()), p.look_again_soon)
    };
    let repair = Some("Deployment dev-tinycode was changed by kubectl-edit".to_string());
    assert_eq!(case(9, false), (repair.clone(), true), "a write in the last two seconds");
    assert_eq!(case(8, false), (repair.clone(), true), "two seconds: clocks may disagree by one");
    assert_eq!(case(5, false), (repair, false), "a write five seconds old is repaired in a later second");
    assert_eq!(case(9, true), (None, false), "a status write is nobody's drift");
    // A rendered object written a moment ago counts as well; one the
    // operator's own manager wrote does not.
    let mut obs = observed();
    obs.now = at(10);
    obs.release = ReleaseFacts {
        rendered: vec![(
            svc("dev-tinycode"),
            Some(ObjectMeta { managed_fields: Some(vec![managed("kubectl-edit", 9)]), ..Default::default() }),
        )],
        ..records(&[ReleaseStatus::Deployed])
    };
    obs.deployment = Some(Arc::new(deployment(&hash, vec![managed("helm", 0)])));
    assert!(plan_for(&inst, &obs).look_again_soon, "a rendered Service edited a second ago");
    obs.release.rendered[0].1 =
        Some(ObjectMeta { managed_fields: Some(vec![managed("helm", 9)]), ..Default::default() });
    let p = plan_for(&inst, &obs);
    assert_eq!((p.helm.is_some(), p.look_again_soon), (false, false), "helm's own write is no drift");
}

//! Tables of the class decisions: which class, each limit, each mode,
//! defaults filled in, and the rendering digest following the class.

use super::*;
use crate::render::values::{Approved, InstanceRef, build};
use serde_json::json;

fn spec(v: serde_json::Value) -> TinycodeInstanceSpec {
    serde_json::from_value(v).unwrap()
}

fn class(name: &str, v: serde_json::Value) -> Arc<TinycodeClass> {
    Arc::new(TinycodeClass::new(name, serde_json::from_value(v).unwrap()))
}

fn found(name: &str, v: serde_json::Value) -> Choice {
    Choice::Found { name: name.into(), spec: Box::new(serde_json::from_value(v).unwrap()), warning: None }
}

fn fields(r: Result<Applied, Vec<Exceeds>>) -> Vec<String> {
    r.err().unwrap_or_default().into_iter().map(|e| e.field).collect()
}

fn gpu_class() -> serde_json::Value {
    json!({
        "image": "quay.io/team/tinycode@sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
        "tinycode": {"defaults": {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"cpu": "2", "memory": "4Gi"}},
                     "max": {"cpu": "4", "memory": "8Gi"}},
        "ollama": {"defaults": {"limits": {"nvidia.com/gpu": "1", "memory": "16Gi"}},
                   "max": {"nvidia.com/gpu": "1", "memory": "32Gi"},
                   "nodeSelector": {"gpu": "true"},
                   "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                   "runtimeClassName": "nvidia"},
        "storage": {"maxDataSize": "5Gi", "maxProjectsSize": "50Gi"},
        "idle": {"timeout": "1h", "maxTimeout": "8h", "required": true},
        "permittedModes": ["git", "ollama"],
        "maxInstancesPerNamespace": 3,
        "imagePullSecrets": [{"name": "team-pull"}]
    })
}

#[test]
fn the_named_class_or_else_the_default_applies() {
    let classes = vec![class("gpu", json!({})), class("std", json!({"default": true}))];
    assert!(matches!(choose(Some("gpu"), &classes), Choice::Found { name, .. } if name == "gpu"));
    assert!(matches!(choose(None, &classes), Choice::Found { name, warning: None, .. } if name == "std"));
    assert_eq!(choose(Some("gone"), &classes), Choice::Missing("gone".into()));
    assert_eq!(choose(None, &classes[..1]), Choice::None);
    let two = vec![class("b", json!({"default": true})), class("a", json!({"default": true}))];
    match choose(None, &two) {
        Choice::Found { name, warning: Some(w), .. } => {
            assert_eq!(name, "a", "the first by name");
            assert!(w.contains("a, b"), "{w}");
        }
        other => panic!("{other:?}"),
    }
    for (named, want) in [(Some("gpu"), Some("gpu")), (None, Some("std")), (Some("gone"), None)] {
        assert_eq!(chosen_name(named, &classes), want, "{named:?}");
        let chosen = match choose(named, &classes) {
            Choice::Found { name, .. } => Some(name),
            _ => None,
        };
        assert_eq!(chosen.as_deref(), want, "chosen_name agrees with choose");
    }
    assert_eq!(chosen_name(None, &two), Some("a"));
    let r = apply(&Choice::Missing("gone".into()), &spec(json!({})), &Settings::default(), 0);
    assert_eq!(fields(r), vec!["spec.className"]);
}

#[test]
fn without_a_class_the_spec_applies_as_written_with_the_operators_defaults() {
    let a = apply(&Choice::None, &spec(json!({"shell": {"enabled": true}})), &Settings::default(), 99).unwrap();
    assert_eq!(a.spec.image.as_deref(), Some(DEFAULT_IMAGE));
    assert_eq!(a.spec.resources, Some(Resources::default()));
    assert_eq!(a.from_class, FromClass::default());
    assert_eq!(a.idle, Settings::default().idle);
}

#[test]
fn defaults_are_filled_from_the_class() {
    let s = spec(json!({"ollama": {"enabled": true}, "nodeSelector": {"zone": "a"}}));
    let a = apply(&found("gpu", gpu_class()), &s, &Settings::default(), 0).unwrap();
    assert!(a.spec.image.as_deref().unwrap().starts_with("quay.io/team/tinycode@sha256:"));
    let r = a.spec.resources.clone().unwrap();
    assert_eq!((r.requests.cpu.as_str(), r.limits.memory.as_str()), ("500m", "4Gi"));
    let ollama = a.spec.ollama.resources.clone().unwrap();
    assert_eq!(ollama.limits.get("nvidia.com/gpu").map(String::as_str), Some("1"));
    assert_eq!(a.spec.ollama.node_selector.as_ref().unwrap()["gpu"], "true");
    assert_eq!(a.spec.ollama.tolerations.as_ref().unwrap().len(), 1);
    // The IDE keeps its own placement: the GPU selector is Ollama's alone.
    assert_eq!(a.spec.node_selector.as_ref().unwrap().get("gpu"), None);
    assert_eq!(a.spec.node_selector.as_ref().unwrap()["zone"], "a");
    assert_eq!(a.from_class.ollama_runtime_class_name.as_deref(), Some("nvidia"));
    assert_eq!(a.from_class.runtime_class_name, None);
    assert_eq!(a.spec.image_pull_secrets, vec![SecretName { name: "team-pull".into() }]);
    assert_eq!(a.idle.default_timeout, Some(Duration::from_secs(3600)));
    assert_eq!(a.idle.max_timeout, Some(Duration::from_secs(8 * 3600)));
    assert!(a.idle.required);
}

#[test]
fn each_limit_is_enforced_and_named() {
    let c = found("gpu", gpu_class());
    let s = Settings::default();
    let cases: Vec<(serde_json::Value, usize, Vec<&str>)> = vec![
        (json!({}), 0, vec![]),
        (
            json!({"resources": {"limits": {"cpu": "8", "memory": "4Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}),
            0,
            vec!["spec.resources.limits.cpu"],
        ),
        (
            json!({"resources": {"limits": {"cpu": "4", "memory": "16Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}),
            0,
            vec!["spec.resources.limits.memory"],
        ),
        (
            json!({"ollama": {"enabled": true, "resources": {"limits": {"nvidia.com/gpu": "2"}}}}),
            0,
            vec!["spec.ollama.resources.limits.nvidia.com/gpu"],
        ),
        (
            json!({"ollama": {"enabled": true, "resources": {"limits": {"amd.com/gpu": "1"}}}}),
            0,
            vec!["spec.ollama.resources.limits.amd.com/gpu"],
        ),
        (json!({"storage": {"dataSize": "10Gi"}}), 0, vec!["spec.storage.dataSize"]),
        (json!({"storage": {"projectsSize": "100Gi"}}), 0, vec!["spec.storage.projectsSize"]),
        (json!({"shell": {"enabled": true}}), 0, vec!["spec.shell.enabled"]),
        (json!({"storage": {"hostPath": {"path": "/srv"}}}), 0, vec!["spec.storage.hostPath"]),
        (
            json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc"}}),
            0,
            vec!["spec.clusterAdmin.enabled"],
        ),
        (json!({"git": {"url": "https://example.com/r.git"}}), 0, vec![]),
        (json!({}), 2, vec![]),
        (json!({}), 3, vec!["spec.className"]),
    ];
    for (v, rank, want) in cases {
        let got = fields(apply(&c, &spec(v.clone()), &s, rank));
        assert_eq!(got, want, "{v} at rank {rank}");
    }
    let e = apply(
        &c,
        &spec(
            json!({"resources": {"limits": {"cpu": "8", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}),
        ),
        &s,
        0,
    )
    .unwrap_err();
    assert!(e[0].message.contains("8 exceeds 4") && e[0].message.contains("\"gpu\""), "{}", e[0].message);
}

#[test]
fn extended_resources_need_the_class_to_offer_them() {
    let s = spec(json!({"ollama": {"enabled": true, "resources": {"limits": {"nvidia.com/gpu": "1"}}}}));
    assert_eq!(
        fields(apply(&found("plain", json!({})), &s, &Settings::default(), 0)),
        vec!["spec.ollama.resources.limits.nvidia.com/gpu"]
    );
    // Without a class no policy applies: the tenant's own quota decides.
    assert!(apply(&Choice::None, &s, &Settings::default(), 0).is_ok());
}

#[test]
fn the_image_follows_the_class_and_the_allow_list() {
    let locked = found("locked", json!({"image": "quay.io/team/tc:1", "allowCustomImage": false}));
    let s = Settings::default();
    assert_eq!(apply(&locked, &spec(json!({})), &s, 0).unwrap().spec.image.as_deref(), Some("quay.io/team/tc:1"));
    assert!(apply(&locked, &spec(json!({"image": "quay.io/team/tc:1"})), &s, 0).is_ok());
    assert_eq!(fields(apply(&locked, &spec(json!({"image": "quay.io/me/tc:2"})), &s, 0)), vec!["spec.image"]);
    let open = found("open", json!({"image": "quay.io/team/tc:1"}));
    assert_eq!(
        apply(&open, &spec(json!({"image": "ghcr.io/me/tc:2"})), &s, 0).unwrap().spec.image.as_deref(),
        Some("ghcr.io/me/tc:2")
    );
    let elsewhere = found("elsewhere", json!({"image": "registry.example.com/tc:1"}));
    assert_eq!(fields(apply(&elsewhere, &spec(json!({})), &s, 0)), vec!["spec.image"]);
}

#[test]
fn storage_classes_are_limited_to_the_listed_ones() {
    let c = found("fast", json!({"storage": {"allowedStorageClasses": ["fast"]}}));
    let s = Settings::default();
    assert!(apply(&c, &spec(json!({"storage": {"storageClassName": "fast"}})), &s, 0).is_ok());
    assert_eq!(
        fields(apply(&c, &spec(json!({"storage": {"storageClassName": "slow"}})), &s, 0)),
        vec!["spec.storage.storageClassName"]
    );
    assert_eq!(fields(apply(&c, &spec(json!({})), &s, 0)), vec!["spec.storage.storageClassName"]);
}

#[test]
fn a_class_node_selector_wins_and_says_so() {
    let c = found("pool", json!({"tinycode": {"nodeSelector": {"pool": "dev"}, "runtimeClassName": "kata"}}));
    let a = apply(&c, &spec(json!({"nodeSelector": {"pool": "gpu", "zone": "a"}})), &Settings::default(), 0).unwrap();
    let ns = a.spec.node_selector.unwrap();
    assert_eq!((ns["pool"].as_str(), ns["zone"].as_str()), ("dev", "a"));
    assert!(a.warnings.iter().any(|w| w.contains("spec.nodeSelector.pool=gpu")), "{:?}", a.warnings);
    assert_eq!(a.from_class.runtime_class_name.as_deref(), Some("kata"));
}

#[test]
fn the_class_idle_policy_stays_under_the_operators() {
    let operator = IdleSettings { max_timeout: Some(Duration::from_secs(3600)), ..Default::default() };
    let p = crate::api::IdlePolicy { timeout: Some("30m".into()), max_timeout: Some("8h".into()), required: false };
    let s = idle_settings(Some(&p), &operator);
    assert_eq!(s.default_timeout, Some(Duration::from_secs(1800)));
    assert_eq!(s.max_timeout, Some(Duration::from_secs(3600)), "the operator's maximum still caps");
    assert_eq!(idle_settings(None, &operator), operator);
}

/// spec.env under a class that keeps Secrets out of the agent: refused on
/// the spec, and stopped where it already runs; a keyed model server is not.
#[test]
fn a_class_can_keep_secrets_out_of_the_agents_environment() {
    let closed = found("closed", json!({"allowEnvSecrets": false}));
    let env = spec(json!({"env": [{"name": "OPENROUTER_API_KEY", "secretKeyRef": {"name": "k", "key": "or"}}]}));
    let refused = apply(&closed, &env, &Settings::default(), 0).unwrap_err();
    assert_eq!(refused.iter().map(|e| e.field.as_str()).collect::<Vec<_>>(), vec!["spec.env"]);
    assert!(refused[0].message.contains("allowEnvSecrets: false") && refused[0].message.contains("apiKeySecret"));
    let keyed = spec(json!({"vllm": [{"name": "a", "url": "http://a", "apiKeySecret": {"name": "k", "key": "v"}}]}));
    assert!(apply(&closed, &keyed, &Settings::default(), 0).is_ok());
    assert!(apply(&found("open", json!({})), &env, &Settings::default(), 0).is_ok());

    let class: TinycodeClassSpec = serde_json::from_value(json!({"allowEnvSecrets": false})).unwrap();
    let running = Running { image: Some("quay.io/x/y:1".into()), replicas: 1, env_secrets: true, ..Running::default() };
    let beyond = beyond_class("closed", &class, &running);
    assert_eq!(beyond.iter().map(|b| b.exceeds.field.as_str()).collect::<Vec<_>>(), vec!["spec.env"]);
    assert!(beyond_class("closed", &class, &Running { env_secrets: false, ..running }).is_empty());
}

#[test]
fn modes_permitted_and_withheld() {
    assert!(permits(None, Mode::Shell));
    let open: TinycodeClassSpec = serde_json::from_value(json!({})).unwrap();
    assert!(Mode::ALL.iter().all(|m| permits(Some(&open), *m)));
    let git_only: TinycodeClassSpec = serde_json::from_value(json!({"permittedModes": ["git"]})).unwrap();
    assert!(permits(Some(&git_only), Mode::Git));
    assert!(!permits(Some(&git_only), Mode::Shell) && !permits(Some(&git_only), Mode::ClusterAdmin));
}

#[test]
fn older_instances_rank_first() {
    let others = [("2026-01-01T00:00:00Z", "b"), ("2026-01-02T00:00:00Z", "a"), ("2026-01-01T00:00:00Z", "z")];
    assert_eq!(rank(("2026-01-01T00:00:00Z", "c"), others.iter().copied()), 1);
    assert_eq!(rank(("2026-01-03T00:00:00Z", "a"), others.iter().copied()), 3);
    assert_eq!(rank(("2025-12-31T00:00:00Z", "z"), others.iter().copied()), 0);
}

#[test]
fn the_rendering_digest_changes_when_the_class_does() {
    let inst = InstanceRef { name: "dev", namespace: "team", uid: "u" };
    let s = Settings::default();
    let render = |c: serde_json::Value| {
        let a = apply(&found("std", c), &spec(json!({})), &s, 0).unwrap();
        let approved = Approved { class: a.from_class, ..Approved::default() };
        build(&inst, &a.spec, &s, &approved, None)
    };
    let base = render(json!({}));
    assert_eq!(base.class_name, "std");
    assert_eq!(base.values_hash, render(json!({})).values_hash);
    let bigger = render(json!({"tinycode": {"defaults": {"limits": {"cpu": "3"}}}}));
    assert_eq!(bigger.resources.limits["cpu"], "3");
    assert_ne!(base.values_hash, bigger.values_hash);
    let placed = render(json!({"tinycode": {"nodeSelector": {"pool": "dev"}}}));
    assert_ne!(base.values_hash, placed.values_hash);
    let gpu =
        render(json!({"tinycode": {"defaults": {"limits": {"nvidia.com/gpu": "1"}}, "max": {"nvidia.com/gpu": "1"}}}));
    assert_eq!(gpu.resources.limits["nvidia.com/gpu"], "1");
    let none =
        build(&inst, &apply(&Choice::None, &spec(json!({})), &s, 0).unwrap().spec, &s, &Approved::default(), None);
    assert_ne!(base.values_hash, none.values_hash, "naming a class re-renders");
}

#[test]
fn a_stricter_class_withdraws_what_it_no_longer_permits() {
    use crate::platform::scc::SccTier;
    use crate::reconcile::revoke::{Held, Withdraw, class_withdrawals};
    let held = Held {
        scc_grants: vec![SccTier::Restricted, SccTier::Shell],
        cluster_role: Some("view".into()),
        kubeconfig_copy: Some(true),
        workload_running: true,
        ..Held::default()
    };
    let open: TinycodeClassSpec = serde_json::from_value(json!({})).unwrap();
    assert_eq!(class_withdrawals(Some(("open", &open)), &held), vec![]);
    assert_eq!(class_withdrawals(None, &held), vec![]);
    let strict: TinycodeClassSpec = serde_json::from_value(json!({"permittedModes": ["git"]})).unwrap();
    assert_eq!(
        class_withdrawals(Some(("strict", &strict)), &held),
        vec![Withdraw::SccGrant(SccTier::Shell), Withdraw::ClusterRoleBinding, Withdraw::KubeconfigCopy]
    );
}

#[test]
fn under_a_cap_every_capped_resource_has_a_limit() {
    let class = found("gpu", gpu_class());
    let settings = Settings::default();
    let limits = |resources: serde_json::Value| {
        let s = spec(json!({"ollama": {"enabled": true, "resources": resources}}));
        apply(&class, &s, &settings, 0).expect("within the class").spec.ollama.resources.unwrap().limits
    };
    // Requests only: the class's default limits, which are above them.
    let l = limits(json!({"requests": {"memory": "1Gi"}}));
    assert_eq!((l["memory"].as_str(), l["nvidia.com/gpu"].as_str()), ("16Gi", "1"));
    // A request above the default limit: the class's max (a limit below a request is no pod).
    let l = limits(json!({"requests": {"memory": "20Gi"}}));
    assert_eq!(l["memory"], "32Gi");
    // The spec's own limits stay (and are capped as before).
    let l = limits(json!({"limits": {"memory": "8Gi"}}));
    assert_eq!(l["memory"], "8Gi");
    // No class cap, no invented limit.
    let s = spec(json!({"ollama": {"enabled": true, "resources": {"requests": {"memory": "1Gi"}}}}));
    let none = apply(&Choice::None, &s, &settings, 0).unwrap().spec.ollama.resources.unwrap();
    assert!(none.limits.is_empty());
}

#[test]
fn an_instance_counts_against_the_class_it_runs_under_whatever_its_spec_says_now() {
    let classes = vec![class("gpu", json!({"maxInstancesPerNamespace": 1})), class("std", json!({}))];
    let mut inst = crate::api::TinycodeInstance::new("dev", spec(json!({"className": "gpu"})));
    assert!(counts_against(&inst, "gpu", &classes));
    // Renamed to a class that does not exist: its release still runs under gpu.
    inst.spec.class_name = Some("missing".into());
    assert!(!counts_against(&inst, "gpu", &classes), "by the spec alone it escapes");
    inst.status = Some(crate::api::TinycodeInstanceStatus { class: Some("gpu".into()), ..Default::default() });
    assert!(counts_against(&inst, "gpu", &classes), "what runs counts");
    // Re-rendered under another class: it counts there, not here.
    inst.spec.class_name = Some("std".into());
    inst.status = Some(crate::api::TinycodeInstanceStatus { class: Some("std".into()), ..Default::default() });
    assert!(!counts_against(&inst, "gpu", &classes) && counts_against(&inst, "std", &classes));
}

#[test]
fn a_stricter_class_stops_what_runs_beyond_it() {
    use crate::reconcile::revoke::{Held, Withdraw, class_withdrawals, stops_ollama, stops_workload};
    let lists = |cpu: &str, memory: &str| crate::api::ResourceLists {
        requests: [("cpu".to_string(), "100m".to_string())].into(),
        limits: [("cpu".to_string(), cpu.to_string()), ("memory".to_string(), memory.to_string())].into(),
    };
    let running = Running {
        image: Some("registry.example/me/tinycode:dev".into()),
        tinycode: lists("4", "8Gi"),
        git: true,
        replicas: 1,
        env_secrets: false,
        ollama: Some(lists("2", "4Gi")),
        ..Running::default()
    };
    let held = Held { workload_running: true, running: running.clone(), ..Held::default() };
    // A class that allows all of it: nothing stops.
    let open: TinycodeClassSpec =
        serde_json::from_value(json!({"tinycode": {"max": {"cpu": "4", "memory": "8Gi"}}})).unwrap();
    assert_eq!(beyond_class("open", &open, &running), vec![]);
    assert!(class_withdrawals(Some(("open", &open)), &held).is_empty());

    // Tightened: the image, git, the tinycode cap; each named by field, limit and class.
    let strict: TinycodeClassSpec = serde_json::from_value(json!({
        "image": "registry.example/tinycode:1", "allowCustomImage": false,
        "permittedModes": ["ollama"],
        "tinycode": {"max": {"cpu": "2", "memory": "8Gi"}},
        "ollama": {"max": {"cpu": "2", "memory": "4Gi"}},
    }))
    .unwrap();
    let beyond = beyond_class("small", &strict, &running);
    let fields: Vec<&str> = beyond.iter().map(|b| b.exceeds.field.as_str()).collect();
    assert_eq!(fields, vec!["spec.image", "spec.git", "spec.resources.limits.cpu"]);
    assert!(beyond.iter().all(|b| !b.ollama && b.exceeds.message.contains("class \"small\"")));
    assert!(beyond[2].exceeds.message.contains("4 exceeds 2"), "{}", beyond[2].exceeds.message);
    let w = class_withdrawals(Some(("small", &strict)), &held);
    assert!(stops_workload(&w, &held) && !stops_ollama(&w, &held), "Ollama is within the class");

    // Ollama no longer permitted, or above its cap: only Ollama stops.
    let no_ollama: TinycodeClassSpec = serde_json::from_value(json!({"permittedModes": ["git"]})).unwrap();
    let w = class_withdrawals(Some(("no-ollama", &no_ollama)), &held);
    assert!(
        matches!(&w[..], [Withdraw::BeyondClass(b)] if b.ollama && b.exceeds.field == "spec.ollama.enabled"),
        "{w:?}"
    );
    assert!(stops_ollama(&w, &held) && !stops_workload(&w, &held));
    let small_ollama: TinycodeClassSpec =
        serde_json::from_value(json!({"ollama": {"max": {"memory": "2Gi"}}})).unwrap();
    let beyond = beyond_class("c", &small_ollama, &running);
    assert_eq!(beyond.len(), 1);
    assert_eq!(beyond[0].exceeds.field, "spec.ollama.resources.limits.memory");

    // Nothing runs (stopped, or scaled down already): nothing to stop.
    let idle = Held { workload_running: false, running: Running::default(), ..Held::default() };
    let w = class_withdrawals(Some(("small", &strict)), &idle);
    assert!(w.is_empty() && !stops_workload(&w, &idle) && !stops_ollama(&w, &idle));
}

#[test]
fn every_cap_is_per_pod_so_a_capped_class_caps_replicas_too() {
    let shared = json!({"replicas": 3, "storage": {"projectsAccessMode": "ReadWriteMany"}});
    let capped = found("small", json!({"tinycode": {"max": {"cpu": "2"}}}));
    let e = apply(&capped, &spec(shared.clone()), &Settings::default(), 0).unwrap_err();
    assert!(e.iter().any(|x| x.field == "spec.replicas" && x.message.contains("maxReplicas")), "{e:?}");
    let three = found("team", json!({"tinycode": {"max": {"cpu": "2"}}, "maxReplicas": 3}));
    assert!(apply(&three, &spec(shared.clone()), &Settings::default(), 0).is_ok());
    let uncapped = found("open", json!({}));
    assert!(apply(&uncapped, &spec(shared), &Settings::default(), 0).is_ok(), "no cap per pod, none multiplied");
    // What runs is held to it too.
    let class: TinycodeClassSpec = serde_json::from_value(json!({"tinycode": {"max": {"cpu": "2"}}})).unwrap();
    let running = Running { image: Some(DEFAULT_IMAGE.into()), replicas: 3, ..Running::default() };
    let beyond = beyond_class("small", &class, &running);
    assert_eq!(beyond.iter().map(|b| b.exceeds.field.as_str()).collect::<Vec<_>>(), vec!["spec.replicas"]);
}

#[test]
fn a_class_egress_list_reaches_the_values_and_one_its_proxy_cannot_read_refuses() {
    let egress = json!({"hosts": [{"host": "git.example.com"}, {"host": "*.pypi.org", "ports": [80, 443]}],
                        "cidrs": [{"cidr": "10.96.0.1/32"}]});
    let a = apply(&found("locked", json!({"egress": egress})), &spec(json!({})), &Settings::default(), 0).unwrap();
    let want: crate::api::EgressPolicy = serde_json::from_value(egress).unwrap();
    assert_eq!(a.from_class.egress.as_ref(), Some(&want));
    let inst = InstanceRef { name: "dev", namespace: "team", uid: "u" };
    let approved = Approved { class: a.from_class.clone(), ..Approved::default() };
    let v = build(&inst, &a.spec, &Settings::default(), &approved, None);
    assert!(v.egress.enabled);
    assert_eq!(v.egress.hosts[0].ports, vec![443], "no ports: 443");
    assert_eq!(v.egress.hosts[1].ports, vec![80, 443]);
    assert_eq!(v.egress.cidrs[0].cidr, "10.96.0.1/32");
    assert!(v.egress.args.contains(&"--class=locked".to_string()));
    // The class changes the rendering: its instances get the proxy at once.
    let open = build(&inst, &a.spec, &Settings::default(), &Approved::default(), None);
    assert!(!open.egress.enabled);
    assert_ne!(v.values_hash, open.values_hash);

    // A label longer than DNS allows passes the schema's pattern; the proxy would refuse it.
    let long = format!("{}.example.com", "a".repeat(64));
    let bad = found("locked", json!({"egress": {"hosts": [{"host": long}]}}));
    let refused = apply(&bad, &spec(json!({})), &Settings::default(), 0).unwrap_err();
    assert_eq!(refused[0].field, "spec.className");
    assert!(
        refused[0].message.contains("egress") && refused[0].message.contains("cluster-admin"),
        "{}",
        refused[0].message
    );
}

#[test]
fn an_instance_narrows_its_class_egress_or_limits_itself() {
    let class = found("locked", json!({"egress": {"hosts": [{"host": "*.example.com"}, {"host": "pypi.org"}]}}));
    let own = json!({"hosts": [{"host": "git.example.com"}]});
    let a = apply(&class, &spec(json!({"egress": own})), &Settings::default(), 0).unwrap();
    let want: crate::api::EgressPolicy = serde_json::from_value(own).unwrap();
    assert_eq!(a.from_class.egress.as_ref(), Some(&want), "the instance's narrower list is the one enforced");
    let wider = json!({"egress": {"hosts": [{"host": "pypi.org"}, {"host": "evil.test"}, {"host": "pypi.org", "ports": [22]}]}});
    let refused = apply(&class, &spec(wider), &Settings::default(), 0).unwrap_err();
    let fields: Vec<&str> = refused.iter().map(|e| e.field.as_str()).collect();
    assert_eq!(fields, ["spec.egress.hosts[1]", "spec.egress.hosts[2]"]);
    assert!(
        refused[0].message.contains("evil.test") && refused[0].message.contains("locked"),
        "{}",
        refused[0].message
    );
    // No class egress, no class: the instance limits its own agent.
    let a = apply(
        &found("open", json!({})),
        &spec(json!({"egress": {"hosts": [{"host": "pypi.org"}]}})),
        &Settings::default(),
        0,
    );
    assert!(a.unwrap().from_class.egress.is_some());
    let a = apply(&Choice::None, &spec(json!({"egress": {}})), &Settings::default(), 0).unwrap();
    assert_eq!(a.from_class.egress, Some(crate::api::EgressPolicy::default()), "an empty list: DNS alone");
    let bad = json!({"egress": {"hosts": [{"host": format!("{}.com", "a".repeat(64))}]}});
    assert_eq!(fields_of(apply(&Choice::None, &spec(bad), &Settings::default(), 0)), vec!["spec.egress"]);
}

fn fields_of(r: Result<Applied, Vec<Exceeds>>) -> Vec<String> {
    fields(r)
}

#[test]
fn an_agent_running_without_its_proxy_is_beyond_a_class_that_limits_egress() {
    let class: TinycodeClassSpec =
        serde_json::from_value(json!({"egress": {"hosts": [{"host": "pypi.org"}]}})).unwrap();
    let open = Running { image: Some(DEFAULT_IMAGE.into()), replicas: 1, open_egress: true, ..Running::default() };
    let beyond = beyond_class("locked", &class, &open);
    assert_eq!(beyond.len(), 1, "{beyond:?}");
    assert!(!beyond[0].ollama && beyond[0].exceeds.message.contains("egress"), "{beyond:?}");
    let proxied = Running { open_egress: false, ..open.clone() };
    assert!(beyond_class("locked", &class, &proxied).is_empty());
    assert!(beyond_class("open", &TinycodeClassSpec::default(), &open).is_empty(), "a class without egress");
    let ollama = Running { ollama: Some(ResourceLists::default()), ollama_open_egress: true, ..proxied };
    let beyond = beyond_class("locked", &class, &ollama);
    assert_eq!(beyond.iter().map(|b| b.ollama).collect::<Vec<_>>(), vec![true], "Ollama's workload alone");
}

//! Tests of the chart values built from a spec.

use super::*;
use crate::api::AccessMode;

const INST: InstanceRef<'static> = InstanceRef { name: "dev", namespace: "team", uid: "uid-1" };

fn values(json: serde_json::Value) -> Values {
    build(&INST, &serde_json::from_value(json).unwrap(), &Settings::default(), &Approved::default(), None)
}

#[test]
fn defaults_are_filled_in() {
    let v = values(serde_json::json!({}));
    assert_eq!(v.image, "quay.io/bjohns/tinycode-container:latest");
    assert_eq!(v.replicas, 1);
    assert_eq!((v.resources.limits["cpu"].as_str(), v.resources.limits["memory"].as_str()), ("2", "2Gi"));
    assert_eq!((v.resources.requests["cpu"].as_str(), v.resources.requests["memory"].as_str()), ("200m", "512Mi"));
    assert_eq!((v.storage.data_size.as_str(), v.storage.projects_size.as_str()), ("1Gi", "10Gi"));
    assert_eq!(v.storage.projects_access_mode, AccessMode::ReadWriteOnce);
    assert!(v.storage.retain_on_delete);
    assert_eq!((v.storage.data_volume, v.storage.projects_volume), (VolumeSource::Pvc, VolumeSource::Pvc));
    assert_eq!(v.tls_termination, TlsTermination::Edge);
    assert_eq!(v.scc, SccValues { tier: SccTier::Restricted, name: "tinycode-restricted".into() });
    assert_eq!(v.git.depth, 1);
    assert_eq!(v.cluster_admin.kubeconfig_secret_key, "kubeconfig");
    assert_eq!(v.cluster_admin.oc_version, "stable");
    assert_eq!(v.names.fullname, "dev-tinycode");
    assert_eq!(v.names.cluster_role_binding, "tinycode:team:dev-cluster-role");
    assert_eq!(v.names.discovery_binding, "tinycode:team:dev-discovery");
    assert_eq!(v.config, ConfigValues { json: String::new(), checksum: String::new() });
}

#[test]
fn json_uses_spec_names_and_has_every_key() {
    let v = serde_json::to_value(values(serde_json::json!({}))).unwrap();
    for key in [
        "instance",
        "names",
        "valuesHash",
        "secretsChecksum",
        "progressDeadlineSeconds",
        "image",
        "replicas",
        "resources",
        "storage",
        "hostname",
        "tlsTermination",
        "ollama",
        "auth",
        "shell",
        "nodeSelector",
        "tolerations",
        "model",
        "clusterAdmin",
        "vllm",
        "discovery",
        "git",
        "scc",
        "config",
        "networkPolicy",
    ] {
        assert!(v.get(key).is_some(), "missing {key}");
    }
    assert_eq!(v["storage"]["projectsAccessMode"], "ReadWriteOnce");
    assert_eq!(v["storage"]["hostPath"]["path"], "");
    assert_eq!(v["auth"]["passwordSecret"], "dev-tinycode-password", "no password named: the generated one");
    assert_eq!(v["scc"]["tier"], "restricted");
}

#[test]
fn derived_volumes_follow_replicas_and_host_path() {
    let v = values(serde_json::json!({"replicas": 3, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
    assert_eq!((v.storage.data_volume, v.storage.projects_volume), (VolumeSource::EmptyDir, VolumeSource::Pvc));
    let v = values(serde_json::json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}}}));
    assert_eq!((v.storage.data_volume, v.storage.projects_volume), (VolumeSource::EmptyDir, VolumeSource::HostPath));
    assert_eq!(v.storage.host_path, HostPathValues { path: "/srv/code".into(), read_only: true });
    assert_eq!(v.scc.tier, SccTier::Hostpath);
}

#[test]
fn kubeconfig_from_another_namespace_mounts_the_copy() {
    let v = values(
        serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": "admins"}}),
    );
    assert_eq!(v.cluster_admin.mount_secret_name, "dev-tinycode-kubeconfig");
    let v = values(serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc"}}));
    assert_eq!(v.cluster_admin.mount_secret_name, "kc");
    let v = values(serde_json::json!({"clusterAdmin": {"enabled": false, "kubeconfigSecretName": "kc"}}));
    assert_eq!(v.cluster_admin.mount_secret_name, "");
}

#[test]
fn only_approved_roles_and_namespaces_reach_the_chart() {
    let spec = serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"},
                                  "discovery": {"namespaces": ["models", "other", "*"]}});
    let v = values(spec.clone());
    assert_eq!((v.cluster_admin.cluster_role.as_str(), v.discovery.namespaces.len()), ("", 0));
    let approved = Approved {
        cluster_role: Some("view".into()),
        discovery_namespaces: vec!["models".into()],
        ..Approved::default()
    };
    let v = build(&INST, &serde_json::from_value(spec).unwrap(), &Settings::default(), &approved, None);
    assert_eq!(v.cluster_admin.cluster_role, "view");
    assert_eq!(v.discovery.namespaces, vec!["models"]);
    let v = values(serde_json::json!({"auth": {"passwordSecret": "mine"}}));
    assert_eq!(v.auth.password_secret, "mine");
}

/// An operator upgrade that renders the same objects runs no helm (the hash
/// is what the plan compares): settings of the operator's own running, and
/// its version, do not enter the hash; a gate image does, for sign-in pods.
#[test]
fn hash_ignores_what_does_not_render() {
    let spec = || serde_json::json!({"auth": {"mode": "openshift"}});
    let a = build(&INST, &serde_json::from_value(spec()).unwrap(), &Settings::default(), &Approved::default(), None);
    let running = Settings {
        max_retries: 9,
        helm_timeout: std::time::Duration::from_secs(1234),
        blocked_requeue: std::time::Duration::from_secs(7),
        lease_duration: std::time::Duration::from_secs(99),
        ..Settings::default()
    };
    let b = build(&INST, &serde_json::from_value(spec()).unwrap(), &running, &Approved::default(), None);
    assert_eq!(a.values_hash, b.values_hash, "settings that render nothing leave the hash alone");
    assert!(
        !rendering(&Settings::default()).contains(crate::VERSION),
        "the operator's version is not in the rendering"
    );
    let mut gate = Settings::default();
    gate.signin.gate_image = "registry.example/tinycode-operator:v9".into();
    let c = build(&INST, &serde_json::from_value(spec()).unwrap(), &gate, &Approved::default(), None);
    assert_ne!(a.values_hash, c.values_hash, "a new gate image rolls sign-in pods");
}

#[test]
fn hash_changes_with_values_and_ignores_itself() {
    let a = values(serde_json::json!({}));
    let b = values(serde_json::json!({}));
    assert_eq!(a.values_hash, b.values_hash);
    assert_eq!(a.values_hash, hash(&a, &rendering(&Settings::default())));
    let new_chart = Settings { chart_digest: "0.1.1+abc".into(), ..Settings::default() };
    let f = build(&INST, &Default::default(), &new_chart, &Approved::default(), None);
    assert_ne!(a.values_hash, f.values_hash, "a new chart re-renders an unchanged spec");
    let rotated = Approved { secrets_digest: "new".into(), ..Approved::default() };
    let g = build(&INST, &Default::default(), &Settings::default(), &rotated, None);
    assert_ne!(a.values_hash, g.values_hash, "a rotated Secret rolls the pods");
    let c = values(serde_json::json!({"replicas": 2, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
    assert_ne!(a.values_hash, c.values_hash);
    let d = build(
        &InstanceRef { uid: "uid-2", ..INST },
        &Default::default(),
        &Settings::default(),
        &Approved::default(),
        None,
    );
    assert_ne!(a.values_hash, d.values_hash, "a re-created instance (new uid) must re-apply");
    let e =
        build(&INST, &Default::default(), &Settings::default(), &Approved::default(), Some("{\"model\":\"m\"}".into()));
    assert_ne!(a.values_hash, e.values_hash);
    assert_eq!(e.config.checksum, sha256_hex(b"{\"model\":\"m\"}"));
}

/// The front's gate is told why tinycode is down: the user's own stop first,
/// then idleness; password mode has a front of the same kind.
#[test]
fn the_front_is_told_whether_the_agent_runs() {
    let gate_agent = |spec: serde_json::Value, idle: bool| {
        let approved = Approved { idle_stopped: idle, ..Default::default() };
        let v = build(&INST, &serde_json::from_value(spec).unwrap(), &Settings::default(), &approved, None);
        assert!(v.stopped == (idle || v.auth.gate.args.iter().any(|a| a == "--agent=stopped")));
        v.auth.gate.args.iter().find_map(|a| a.strip_prefix("--agent=").map(str::to_string))
    };
    let openshift = serde_json::json!({"auth": {"mode": "openshift"}});
    let stopped = serde_json::json!({"auth": {"mode": "openshift"}, "stopped": true});
    assert_eq!(gate_agent(openshift.clone(), false).as_deref(), Some("runs"));
    assert_eq!(gate_agent(openshift, true).as_deref(), Some("idle"));
    assert_eq!(gate_agent(stopped.clone(), false).as_deref(), Some("stopped"));
    assert_eq!(gate_agent(stopped, true).as_deref(), Some("stopped"), "the user's own stop says so");
    assert_eq!(gate_agent(serde_json::json!({}), true).as_deref(), Some("idle"));
}

/// The cluster-admin's switch: with fronts off, a password instance has
/// none (tinycode answers its URL itself) and a sign-in front goes to zero
/// with the agent; on (the default), every front stays up while stopped.
#[test]
fn fronts_turned_off_leave_stopped_instances_dark() {
    let front = |spec: serde_json::Value, on: bool| {
        let mut settings = Settings::default();
        settings.signin.front = on;
        let v = build(&INST, &serde_json::from_value(spec).unwrap(), &settings, &Approved::default(), None);
        (v.front.enabled, v.front.replicas, v.auth.gate.args.is_empty())
    };
    let openshift = serde_json::json!({"auth": {"mode": "openshift"}});
    let openshift_stopped = serde_json::json!({"auth": {"mode": "openshift"}, "stopped": true});
    let stopped = serde_json::json!({"stopped": true});
    assert_eq!(front(serde_json::json!({}), true), (true, 1, false));
    assert_eq!(front(stopped.clone(), true), (true, 1, false));
    assert_eq!(front(openshift_stopped.clone(), true), (true, 1, false));
    assert_eq!(front(serde_json::json!({}), false), (false, 1, true));
    assert_eq!(front(stopped, false), (false, 0, true));
    assert_eq!(front(openshift, false), (true, 1, false));
    assert_eq!(front(openshift_stopped, false), (true, 0, false));
}

/// A provider's key goes to the model-key proxy (a file in its volume),
/// never to the agent's environment; spec.env stays the agent's.
#[test]
fn model_keys_go_to_the_proxy_and_env_to_the_agent() {
    let v = values(serde_json::json!({
        "vllm": [
            {"name": "keyed", "url": "https://models.example/", "apiKeySecret": {"name": "keys", "key": "vllm"}},
            {"name": "open", "url": "http://vllm.models.svc:8000/v1"}
        ],
        "env": [{"name": "OPENROUTER_API_KEY", "secretKeyRef": {"name": "keys", "key": "openrouter"}}]
    }));
    assert_eq!(
        v.secret_env,
        vec![SecretEnvValues { name: "OPENROUTER_API_KEY".into(), secret: "keys".into(), key: "openrouter".into() }]
    );
    let m = &v.model_keys;
    assert!(m.enabled);
    assert_eq!(m.image, Settings::default().signin.gate_image);
    assert_eq!(m.keys, vec![ModelKeyValues { provider: "keyed".into(), secret: "keys".into(), key: "vllm".into() }]);
    assert_eq!(
        m.args,
        [
            "model-keys",
            "--listen=127.0.0.1:4099",
            "--metrics-listen=0.0.0.0:4100",
            "--namespace=team",
            "--instance=dev",
            "--class=",
            "--provider=keyed=https://models.example/v1",
        ]
    );
    assert_eq!(
        values(serde_json::json!({"vllm": [{"name": "open", "url": "http://v"}]})).model_keys,
        ModelKeysValues::default()
    );
}

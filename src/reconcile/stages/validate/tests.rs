//! Table tests of validation (pure): which refusal a cluster state earns
//! (compared as [`Blocked`] variants), the wording only of the messages built
//! here, and what a [`ValidInstance`] carries for the later stages.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Secret;

use super::*;
use crate::platform::scc::HOSTPATH_APPROVAL_LABEL;
use crate::reconcile::stages::observe::KubeconfigFacts;
use crate::reconcile::stages::plan::tests::{instance, observed};

fn labelled(obs: &mut Observed, key: &str, value: &str) {
    obs.namespace_labels.get_or_insert_with(BTreeMap::new).insert(key.into(), value.into());
}

fn kubeconfig_secret(namespace: &str, data: Option<(&str, &str)>, shared_with: Option<&str>) -> Secret {
    let mut s = Secret::default();
    s.metadata.name = Some("kc".into());
    s.metadata.namespace = Some(namespace.into());
    s.metadata.annotations =
        shared_with.map(|ns| BTreeMap::from([(approval::KUBECONFIG_SHARE_ANNOTATION.to_string(), ns.to_string())]));
    s.data = data.map(|(k, v)| BTreeMap::from([(k.to_string(), ByteString(v.as_bytes().to_vec()))]));
    s
}

fn kubeconfig_facts(source_namespace: &str, source: Option<Secret>) -> Option<KubeconfigFacts> {
    Some(KubeconfigFacts { source_namespace: source_namespace.into(), source, copy: None })
}

const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.example:6443'}\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\ncurrent-context: a\nusers:\n- name: u\n  user: {token: eyJhbGciOi.payload.sig}\n";

#[test]
fn each_gate_refuses_with_its_own_reason() {
    let cluster_admin = serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc"}});
    let from_admins = serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": "admins"}});
    let opt_in = Settings {
        required_namespace_label: Some(("tinycode.dev/enabled".into(), "true".into())),
        ..Default::default()
    };
    let kubernetes = Settings { platform: Platform::KUBERNETES, ..Default::default() };
    type Case = (&'static str, serde_json::Value, Settings, fn(&mut Observed), Blocked);
    let cases: Vec<Case> = vec![
        ("namespace not opted in", serde_json::json!({}), opt_in, |_| {}, Blocked::NamespaceNotEnabled),
        (
            "namespace without the preparation label",
            serde_json::json!({}),
            Settings::default(),
            |o| o.namespace_labels = Some(BTreeMap::new()),
            Blocked::NamespaceNotPrepared,
        ),
        (
            "the operator's rules are missing",
            serde_json::json!({}),
            Settings::default(),
            |o| o.missing_rules = vec!["create secrets".into()],
            Blocked::NamespaceNotPrepared,
        ),
        (
            "shell tier not approved",
            serde_json::json!({"shell": {"enabled": true}}),
            Settings::default(),
            |_| {},
            Blocked::SccNotApproved,
        ),
        (
            "writable host directory approved read-only",
            serde_json::json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": false}}}),
            Settings::default(),
            |o| labelled(o, HOSTPATH_APPROVAL_LABEL, "true"),
            Blocked::SccNotApproved,
        ),
        (
            "host directory approval with an unknown value",
            serde_json::json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}}}),
            Settings::default(),
            |o| labelled(o, HOSTPATH_APPROVAL_LABEL, "yes"),
            Blocked::SccNotApproved,
        ),
        (
            "the tier's SCC is not installed",
            serde_json::json!({}),
            Settings::default(),
            |o| o.installed_sccs.clear(),
            Blocked::SccMissing,
        ),
        (
            "Pod Security forbids the tier (Kubernetes)",
            serde_json::json!({"shell": {"enabled": true}}),
            kubernetes,
            |o| labelled(o, "tinycode.dev/allow-shell", "true"),
            Blocked::PodSecurityNotAllowed,
        ),
        (
            "cluster role not approved for the namespace",
            serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}}),
            Settings::default(),
            |_| {},
            Blocked::ClusterRoleNotApproved,
        ),
        (
            "cluster role not in the allow-list",
            serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "edit"}}),
            Settings::default(),
            |o| labelled(o, approval::ALLOW_CLUSTER_ROLE_LABEL, "edit"),
            Blocked::ClusterRoleNotApproved,
        ),
        (
            "no password drawn for the generated Secret",
            serde_json::json!({}),
            Settings::default(),
            |o| o.password = SecretFacts::Missing,
            Blocked::PasswordGenerationFailed,
        ),
        (
            "the generated Secret lost its key",
            serde_json::json!({}),
            Settings::default(),
            |o| o.password = SecretFacts::Present { keys: vec!["other".into()], digest: "d".into() },
            Blocked::PasswordSecretInvalid,
        ),
        (
            "the named password Secret is missing",
            serde_json::json!({"auth": {"passwordSecret": "pw"}}),
            Settings::default(),
            |o| o.password = SecretFacts::Missing,
            Blocked::PasswordSecretMissing,
        ),
        (
            "the named password Secret has no key",
            serde_json::json!({"auth": {"passwordSecret": "pw"}}),
            Settings::default(),
            |o| o.password = SecretFacts::Present { keys: vec![], digest: "d".into() },
            Blocked::PasswordSecretInvalid,
        ),
        (
            "git credentials missing",
            serde_json::json!({"git": {"url": "https://x.io/r.git", "credentialsSecret": "gc"}}),
            Settings::default(),
            |o| o.git_credentials = Some(SecretFacts::Missing),
            Blocked::GitCredentialsMissing,
        ),
        (
            "kubeconfig of another namespace not shared",
            from_admins.clone(),
            Settings::default(),
            |o| {
                o.kubeconfig = kubeconfig_facts(
                    "admins",
                    Some(kubeconfig_secret("admins", Some(("kubeconfig", KUBECONFIG)), None)),
                )
            },
            Blocked::KubeconfigNotShared,
        ),
        (
            "kubeconfig of another namespace unreadable: not shared either",
            from_admins,
            Settings::default(),
            |o| o.kubeconfig = kubeconfig_facts("admins", None),
            Blocked::KubeconfigNotShared,
        ),
        (
            "kubeconfig Secret missing",
            cluster_admin.clone(),
            Settings::default(),
            |o| o.kubeconfig = kubeconfig_facts("team", None),
            Blocked::KubeconfigSecretMissing,
        ),
        (
            "kubeconfig key missing",
            cluster_admin.clone(),
            Settings::default(),
            |o| {
                o.kubeconfig =
                    kubeconfig_facts("team", Some(kubeconfig_secret("team", Some(("other", KUBECONFIG)), None)))
            },
            Blocked::KubeconfigKeyMissing,
        ),
        (
            "kubeconfig unreadable",
            cluster_admin,
            Settings::default(),
            |o| {
                o.kubeconfig = kubeconfig_facts(
                    "team",
                    Some(kubeconfig_secret("team", Some(("kubeconfig", "contexts: []")), None)),
                )
            },
            Blocked::KubeconfigInvalid,
        ),
    ];
    for (case, spec, settings, change, want) in cases {
        let mut obs = observed();
        change(&mut obs);
        let got = validate(&obs, &instance(spec), &settings, Vec::new()).map(|_| ()).map_err(|e| e.reason);
        assert_eq!(got, Err(want), "{case}");
    }
}

#[test]
fn what_each_gate_asks_for_passes() {
    let kubernetes = Settings { platform: Platform::KUBERNETES, ..Default::default() };
    let shared = serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": "admins", "clusterRole": "view"}});
    type Case = (&'static str, serde_json::Value, Settings, fn(&mut Observed));
    let cases: Vec<Case> = vec![
        ("restricted tier, prepared namespace", serde_json::json!({}), Settings::default(), |_| {}),
        (
            "namespace not prepared, the requirement off",
            serde_json::json!({}),
            Settings { require_prepared_label: false, ..Default::default() },
            |o| o.namespace_labels = Some(BTreeMap::new()),
        ),
        ("shell tier approved", serde_json::json!({"shell": {"enabled": true}}), Settings::default(), |o| {
            labelled(o, "tinycode.dev/allow-shell", "true")
        }),
        (
            "read-only host directory approved",
            serde_json::json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": true}}}),
            Settings::default(),
            |o| labelled(o, HOSTPATH_APPROVAL_LABEL, "true"),
        ),
        (
            "writable host directory approved for writes",
            serde_json::json!({"storage": {"hostPath": {"path": "/srv/code", "readOnly": false}}}),
            Settings::default(),
            |o| labelled(o, HOSTPATH_APPROVAL_LABEL, "readwrite"),
        ),
        ("Pod Security allows the tier", serde_json::json!({"shell": {"enabled": true}}), kubernetes, |o| {
            labelled(o, "tinycode.dev/allow-shell", "true");
            labelled(o, crate::platform::POD_SECURITY_ENFORCE_LABEL, "privileged");
        }),
        ("shared kubeconfig and approved role", shared, Settings::default(), |o| {
            labelled(o, approval::ALLOW_CLUSTER_ROLE_LABEL, "view");
            let secret = kubeconfig_secret("admins", Some(("kubeconfig", KUBECONFIG)), Some("team"));
            o.kubeconfig = kubeconfig_facts("admins", Some(secret));
        }),
    ];
    for (case, spec, settings, change) in cases {
        let mut obs = observed();
        change(&mut obs);
        let got = validate(&obs, &instance(spec), &settings, Vec::new());
        assert!(got.is_ok(), "{case}: {got:?}");
    }
}

#[test]
fn refusals_built_here_name_the_command_that_fixes_them() {
    let opt_in = Settings {
        required_namespace_label: Some(("tinycode.dev/enabled".into(), "true".into())),
        ..Default::default()
    };
    let e = validate(&observed(), &instance(serde_json::json!({})), &opt_in, Vec::new()).unwrap_err();
    assert_eq!(
        e.message,
        "namespace team has not opted in to tinycode; a cluster-admin enables it with `oc label namespace team tinycode.dev/enabled=true`"
    );
    let mut obs = observed();
    obs.password = SecretFacts::Missing;
    let e = validate(
        &obs,
        &instance(serde_json::json!({"auth": {"passwordSecret": "pw"}})),
        &Settings::default(),
        Vec::new(),
    )
    .unwrap_err();
    assert!(
        e.message.contains("`oc create secret generic pw --from-literal=TINYCODE_SERVER_PASSWORD=<password> -n team`"),
        "{}",
        e.message
    );
    let mut obs = observed();
    obs.installed_sccs.clear();
    let e = validate(&obs, &instance(serde_json::json!({})), &Settings::default(), Vec::new()).unwrap_err();
    assert!(
        e.message.contains("SecurityContextConstraints tinycode-restricted is not installed")
            && e.message.contains("`make install`"),
        "{}",
        e.message
    );
}

#[test]
fn the_valid_instance_carries_what_later_stages_read() {
    let mut inst = instance(serde_json::json!({"hostname": "dev.example.com", "replicas": 1}));
    let settings = Settings::default();
    let offline = Observed::assumed(Vec::new());
    for obs in [observed(), offline] {
        let valid = validate(&obs, &inst, &settings, Vec::new()).expect("valid");
        // The spec as validated: the operator's defaults filled in (no class applies).
        let mut effective = inst.spec.clone();
        effective.image = Some(crate::api::DEFAULT_IMAGE.into());
        effective.resources = Some(Default::default());
        assert_eq!(valid.spec, effective, "the spec as validated");
        assert_eq!(
            (valid.owner.kind.as_str(), valid.owner.name.as_str(), valid.owner.uid.as_str(), valid.owner.controller),
            ("TinycodeInstance", "dev", "uid-1", Some(true))
        );
        assert_eq!(valid.request, None, "no annotation, no request");
    }
    inst.metadata.annotations =
        Some(BTreeMap::from([(conditions::RECONCILE_REQUEST_ANNOTATION.to_string(), "r2".to_string())]));
    let request = |inst: &TinycodeInstance| validate(&observed(), inst, &settings, Vec::new()).expect("valid").request;
    assert_eq!(request(&inst), Some(ReconcileRequest { value: "r2".into(), handled: false }));
    inst.status =
        Some(crate::api::TinycodeInstanceStatus { last_handled_reconcile_at: Some("r1".into()), ..Default::default() });
    assert_eq!(request(&inst).and_then(|r| r.unhandled().map(String::from)), Some("r2".into()), "a new value");
    inst.status.as_mut().unwrap().last_handled_reconcile_at = Some("r2".into());
    assert_eq!(request(&inst), Some(ReconcileRequest { value: "r2".into(), handled: true }));
    assert_eq!(request(&inst).unwrap().unhandled(), None);
}

/// One vocabulary: on plain Kubernetes every command a refusal or warning
/// names is a kubectl command, on OpenShift an oc one.
#[test]
fn messages_name_the_platforms_cli() {
    let kubernetes = Settings { platform: Platform::KUBERNETES, ..Default::default() };
    let openshift = Settings::default();
    let role =
        serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": "view"}});
    let password = serde_json::json!({"auth": {"passwordSecret": "pw"}});
    let discovery = serde_json::json!({"discovery": {"namespaces": ["elsewhere"]}});
    let unprepared: fn(&mut Observed) = |o| o.namespace_labels = Some(BTreeMap::new());
    let missing_password: fn(&mut Observed) = |o| o.password = crate::reconcile::stages::observe::SecretFacts::Missing;
    type Case = (serde_json::Value, fn(&mut Observed));
    let refusals: Vec<Case> = vec![
        (serde_json::json!({}), unprepared),
        (role.clone(), |o| o.kubeconfig = kubeconfig_facts("team", None)),
        (password.clone(), missing_password),
        (serde_json::json!({"shell": {"enabled": true}}), |_| {}),
    ];
    for (settings, cli, other) in [(&kubernetes, "`kubectl ", "`oc "), (&openshift, "`oc ", "`kubectl ")] {
        for (spec, setup) in &refusals {
            let mut obs = observed();
            setup(&mut obs);
            let e = validate(&obs, &instance(spec.clone()), settings, Vec::new()).unwrap_err();
            assert!(e.message.contains(cli) && !e.message.contains(other), "{:?}: {}", e.reason, e.message);
        }
        let valid = validate(&observed(), &instance(discovery.clone()), settings, Vec::new()).unwrap();
        assert!(valid.warnings.iter().all(|w| w.contains(cli) && !w.contains(other)), "{:?}", valid.warnings);
        assert!(!valid.warnings.is_empty());
    }
}

/// With one namespace watched, a discovery namespace outside it is not
/// searched whatever its labels, and the warning says so instead of asking
/// a cluster-admin for a label that would change nothing.
#[test]
fn discovery_outside_the_watched_namespace_is_named_as_such() {
    let spec = serde_json::json!({"discovery": {"namespaces": ["models"]}});
    let ns = instance(spec.clone()).metadata.namespace.unwrap();
    let scoped = Settings { watch_scope: crate::watch_scope::WatchScope::Namespace(ns.clone()), ..Default::default() };
    let valid = validate(&observed(), &instance(spec.clone()), &scoped, Vec::new()).unwrap();
    assert_eq!(
        valid.warnings,
        [format!(
            "discovery namespace models is not searched: the operator watches only namespace {ns} (--watch-namespaces (WATCH_NAMESPACE))"
        )]
    );
    let valid = validate(&observed(), &instance(spec), &Settings::default(), Vec::new()).unwrap();
    assert!(valid.warnings.iter().all(|w| w.contains("does not carry the label")), "{:?}", valid.warnings);
}

fn oidc_settings() -> Settings {
    let oidc = crate::settings::OidcSettings {
        issuer_url: "https://idp.example.com".into(),
        client_id: "tinycode".into(),
        client_secret_file: "/nonexistent".into(),
        scopes: "openid".into(),
        username_claim: crate::settings::UsernameClaim::Email,
        username_prefix: String::new(),
        groups_claim: "groups".into(),
        groups_prefix: String::new(),
    };
    Settings {
        signin: crate::settings::SigninSettings { oidc: Some(oidc), ..Default::default() },
        ..Default::default()
    }
}

fn endpoints() -> crate::render::signin::OidcEndpoints {
    crate::render::signin::OidcEndpoints {
        issuer: "https://idp.example.com".into(),
        authorization: "https://idp.example.com/auth".into(),
        token: "https://idp.example.com/token".into(),
        jwks: "https://idp.example.com/keys".into(),
    }
}

fn signin_facts(
    current: Option<&[(&str, &str)]>,
    credential: Result<&str, &str>,
) -> crate::reconcile::stages::observe::SigninFacts {
    crate::reconcile::stages::observe::SigninFacts {
        current: current.map(|c| c.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()),
        fresh_cookie: current.is_none().then(|| "C".repeat(32)),
        relay_credential: Some(credential.map(str::to_string).map_err(str::to_string)),
        endpoints: Some(Ok(endpoints())),
    }
}

#[test]
fn sign_in_modes_are_refused_where_they_cannot_work() {
    let oidc = serde_json::json!({"auth": {"mode": "oidc"}});
    let openshift = serde_json::json!({"auth": {"mode": "openshift"}});
    let kubernetes = Settings { platform: Platform::KUBERNETES, ..Default::default() };
    let refused = |spec: &serde_json::Value, settings: &Settings, obs: &Observed| {
        validate(obs, &instance(spec.clone()), settings, Vec::new()).map(|_| ()).map_err(|e| e.reason)
    };
    assert_eq!(refused(&openshift, &kubernetes, &observed()), Err(Blocked::SignInUnsupported));
    assert_eq!(refused(&oidc, &Settings::default(), &observed()), Err(Blocked::SignInNotConfigured));
    let mut unreachable = observed();
    unreachable.signin = Some(crate::reconcile::stages::observe::SigninFacts {
        endpoints: Some(Err("GET https://idp.example.com/.well-known/openid-configuration: timed out".into())),
        ..signin_facts(None, Ok("trc1.x"))
    });
    assert_eq!(refused(&oidc, &oidc_settings(), &unreachable), Err(Blocked::SignInUnavailable));
    let mut no_secret = observed();
    no_secret.signin = Some(signin_facts(None, Err("cannot read the OIDC client secret")));
    assert_eq!(refused(&oidc, &oidc_settings(), &no_secret), Err(Blocked::SignInUnavailable));
    // Offline (`tinycode-operator values`) checks the mode the same way.
    let offline = Observed { offline: true, ..observed() };
    assert_eq!(refused(&oidc, &Settings::default(), &offline), Err(Blocked::SignInNotConfigured));
}

#[test]
fn the_sign_in_secret_keeps_its_cookie_and_follows_the_credential() {
    let oidc = instance(serde_json::json!({"auth": {"mode": "oidc"}}));
    let run = |facts| {
        let mut obs = observed();
        obs.signin = Some(facts);
        validate(&obs, &oidc, &oidc_settings(), Vec::new()).unwrap().signin.unwrap()
    };
    // Missing: created with a fresh cookie secret and the credential.
    let first = run(signin_facts(None, Ok("trc1.aa")));
    assert!(first.write);
    assert_eq!(first.data.get("cookie-secret").map(String::len), Some(32));
    assert_eq!(first.data.get("relay-credential").map(String::as_str), Some("trc1.aa"));
    assert_eq!(first.endpoints, Some(endpoints()));
    // Up to date: nothing to write.
    let cookie = "k".repeat(32);
    let start = crate::reconcile::stages::plan::tests::start_credential("dev");
    assert_eq!(first.data.get("start-credential"), Some(&start), "the front's start credential");
    let current = [("cookie-secret", cookie.as_str()), ("relay-credential", "trc1.aa"), ("start-credential", &start)];
    let same = run(signin_facts(Some(&current), Ok("trc1.aa")));
    assert!(!same.write);
    // A rotated client secret: the credential changes, the cookie (sessions) stays.
    let rotated =
        run(signin_facts(Some(&[("cookie-secret", &cookie), ("relay-credential", "trc1.aa")]), Ok("trc1.bb")));
    assert!(rotated.write);
    assert_eq!(rotated.data.get("cookie-secret"), Some(&cookie));
    assert_eq!(rotated.data.get("relay-credential").map(String::as_str), Some("trc1.bb"));
    // openshift: a cookie secret only, no credential, no endpoints.
    let mut obs = observed();
    obs.signin = Some(crate::reconcile::stages::observe::SigninFacts {
        relay_credential: None,
        endpoints: None,
        ..signin_facts(Some(&[("cookie-secret", &cookie), ("relay-credential", "trc1.aa")]), Ok(""))
    });
    let openshift = instance(serde_json::json!({"auth": {"mode": "openshift"}}));
    let got = validate(&obs, &openshift, &Settings::default(), Vec::new()).unwrap().signin.unwrap();
    assert!(got.write, "the former oidc credential is dropped");
    assert_eq!(got.data.keys().collect::<Vec<_>>(), vec!["cookie-secret", "start-credential"]);
    // Password mode: the start credential alone; with fronts off, no Secret.
    let password = instance(serde_json::json!({}));
    let got = validate(&observed(), &password, &Settings::default(), Vec::new()).unwrap().signin.unwrap();
    assert_eq!(got.data, BTreeMap::from([("start-credential".to_string(), start.clone())]));
    assert!(!got.write, "as written");
    let mut off = Settings::default();
    off.signin.front = false;
    assert_eq!(validate(&observed(), &password, &off, Vec::new()).unwrap().signin, None);
    // Another key, another credential: the Secret follows.
    let rekeyed = Settings {
        digest_key: crate::settings::DigestKey(std::sync::Arc::from(&b"another key"[..])),
        ..Default::default()
    };
    let got = validate(&observed(), &password, &rekeyed, Vec::new()).unwrap().signin.unwrap();
    assert!(got.write && got.data["start-credential"] != start, "{got:?}");
}

#[test]
fn referenced_secrets_must_exist_and_a_rotated_key_rolls_the_pods() {
    let inst = instance(serde_json::json!({
        "imagePullSecrets": [{"name": "pull"}],
        "env": [{"name": "OPENROUTER_API_KEY", "secretKeyRef": {"name": "keys", "key": "openrouter"}}],
        "vllm": [{"name": "big", "url": "http://vllm.models.svc:8000", "apiKeySecret": {"name": "keys", "key": "vllm"}}]
    }));
    let settings = Settings::default();
    let mut obs = observed();
    let refused = validate(&obs, &inst, &settings, Vec::new()).unwrap_err();
    assert_eq!(refused.reason, Blocked::SecretReferenceMissing);
    assert!(refused.message.contains("spec.imagePullSecrets[0]") && refused.message.contains("spec.env[0]"));
    let keys = |k: &[&str]| k.iter().map(|s| s.to_string()).collect::<std::collections::BTreeSet<_>>();
    obs.secrets_present.insert("pull".into(), keys(&[".dockerconfigjson"]));
    obs.secrets_present.insert("keys".into(), keys(&["openrouter"]));
    let refused = validate(&obs, &inst, &settings, Vec::new()).unwrap_err();
    assert_eq!(refused.reason, Blocked::SecretReferenceMissing);
    assert!(refused.message.contains("spec.vllm[0].apiKeySecret") && refused.message.contains("no such key"));
    obs.secrets_present.insert("keys".into(), keys(&["openrouter", "vllm"]));
    obs.secret_digests.insert("keys".into(), "digest-1".into());
    obs.secret_digests.insert("pull".into(), "pull-digest".into());
    let valid = validate(&obs, &inst, &settings, Vec::new()).expect("valid");
    assert!(valid.mounted.contains(&"digest-1".to_string()), "the key Secret's digest rolls the pods");
    assert!(!valid.mounted.contains(&"pull-digest".to_string()), "a pull secret does not");
    obs.secret_digests.insert("keys".into(), "digest-2".into());
    let rotated = validate(&obs, &inst, &settings, Vec::new()).expect("valid");
    assert_ne!(valid.mounted, rotated.mounted);
}

#[test]
fn a_host_another_instance_serves_or_asked_for_first_is_refused() {
    use crate::reconcile::hosts::Claim;
    let mut inst = instance(serde_json::json!({"hostname": "Dev.Example.test"}));
    inst.metadata.creation_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time("2026-06-01T00:00:00Z".parse().unwrap()));
    let settings = Settings::default();
    let mut obs = observed();
    assert!(validate(&obs, &inst, &settings, Vec::new()).is_ok(), "nobody else asks");
    let other = |published: bool, created: &str| Claim {
        published,
        created: created.into(),
        namespace: "team-b".into(),
        name: "dev".into(),
    };
    obs.host_claims = vec![other(false, "2026-07-01T00:00:00Z")];
    assert!(validate(&obs, &inst, &settings, Vec::new()).is_ok(), "a younger asker waits");
    obs.host_claims = vec![other(false, "2026-01-01T00:00:00Z")];
    let refused = validate(&obs, &inst, &settings, Vec::new()).unwrap_err();
    assert_eq!(refused.reason, Blocked::HostnameTaken);
    assert!(refused.message.contains("spec.hostname dev.example.test") && !refused.message.contains("team-b"));
    obs.host_claims = vec![other(true, "2026-07-01T00:00:00Z")];
    assert_eq!(validate(&obs, &inst, &settings, Vec::new()).unwrap_err().reason, Blocked::HostnameTaken, "served");
}

#[test]
fn a_class_serves_only_the_namespaces_it_selects_named_or_default() {
    let class = |default: bool| class_policy::Choice::Found {
        name: "gpu-pool".into(),
        spec: Box::new(
            serde_json::from_value(serde_json::json!({
                "default": default,
                "namespaceSelector": {"matchLabels": {"tinycode.dev/gpu": "true"}}
            }))
            .unwrap(),
        ),
        warning: None,
    };
    let settings = Settings::default();
    let named = instance(serde_json::json!({"className": "gpu-pool"}));
    let unnamed = instance(serde_json::json!({}));
    for (inst, default, how) in [(&named, false, "spec.className names"), (&unnamed, true, "the default class is")] {
        let mut obs = observed();
        obs.class = class(default);
        let refused = validate(&obs, inst, &settings, Vec::new()).unwrap_err();
        assert_eq!(refused.reason, Blocked::ClassNotPermitted);
        assert!(refused.message.starts_with(how) && refused.message.contains("gpu-pool"), "{}", refused.message);
        labelled(&mut obs, "tinycode.dev/gpu", "true");
        assert!(validate(&obs, inst, &settings, Vec::new()).is_ok(), "the labelled namespace may use it");
    }
    // A selector that cannot be read permits nothing.
    let mut obs = observed();
    obs.class = class_policy::Choice::Found {
        name: "odd".into(),
        spec: Box::new(
            serde_json::from_value(serde_json::json!({"namespaceSelector": {"matchExpressions": [
                {"key": "tier", "operator": "Sometimes", "values": ["x"]}]}}))
            .unwrap(),
        ),
        warning: None,
    };
    assert_eq!(validate(&obs, &named, &settings, Vec::new()).unwrap_err().reason, Blocked::ClassNotPermitted);
}

//! Tests of the spec rules: each rule, its field and its fix.

use super::*;
use crate::api::*;

fn spec(json: serde_json::Value) -> TinycodeInstanceSpec {
    serde_json::from_value(json).expect("spec parses")
}

/// Default settings, but host directories under /data and /srv allowed.
fn settings() -> Settings {
    Settings { hostpath_allowed_prefixes: vec!["/data".into(), "/srv".into()], ..Settings::default() }
}

fn errors(s: &TinycodeInstanceSpec) -> Vec<FieldError> {
    validate("my-tinycode", "tinycode-dev", s, &settings()).expect_err("spec must be refused").0
}

fn fields(s: &TinycodeInstanceSpec) -> Vec<String> {
    errors(s).into_iter().map(|e| e.field).collect()
}

#[test]
fn defaults_are_valid() {
    let w = validate("my-tinycode", "tinycode-dev", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap();
    assert!(w.is_empty(), "no password is not a warning any more: one is generated");
    let s = spec(serde_json::json!({"auth": {"passwordSecret": "pw"}}));
    assert!(validate("a", "team", &s, &Settings::default()).unwrap().is_empty());
}

#[test]
fn image_registry_must_be_allowed() {
    let s = spec(serde_json::json!({"image": "docker.io/library/nginx:1"}));
    let e = errors(&s);
    assert_eq!(e[0].field, "spec.image");
    assert!(e[0].message.contains("quay.io, ghcr.io"), "{}", e[0].message);
    let settings = Settings { allowed_registries: vec!["docker.io".into()], ..Settings::default() };
    assert!(validate("a", "team", &s, &settings).is_ok());
    let s = spec(serde_json::json!({"image": "registry.local:5000/team/tinycode:v1"}));
    let settings = Settings { allowed_registries: vec!["registry.local".into()], ..Settings::default() };
    assert!(validate("a", "team", &s, &settings).is_ok());
}

#[test]
fn image_reference_syntax_is_checked() {
    for bad in ["nginx", "quay.io/Upper/x", "quay.io/a/b:tag with space", "quay.io/a/b;rm -rf /"] {
        let s = spec(serde_json::json!({ "image": bad }));
        assert_eq!(fields(&s), vec!["spec.image"], "{bad}");
    }
    let digest = format!("quay.io/bjohns/tinycode-container@sha256:{}", "a".repeat(64));
    assert!(validate("a", "team", &spec(serde_json::json!({ "image": digest })), &Settings::default()).is_ok());
}

#[test]
fn reserved_namespaces_are_refused() {
    for ns in ["default", "kube-system", "openshift-monitoring", "tinycode-operator-system"] {
        let e = validate("a", ns, &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
        assert_eq!(e.0[0].field, "metadata.namespace", "{ns}");
        assert!(e.0[0].message.contains("oc new-project"));
    }
}

#[test]
fn names_too_long_or_malformed_are_refused() {
    let long = "a".repeat(64);
    for name in [long.as_str(), "9lives", "has.dot", "ends-", "Upper"] {
        let e = validate(name, "team", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
        assert_eq!(e.0[0].field, "metadata.name", "{name}");
    }
}

#[test]
fn names_up_to_63_characters_are_accepted() {
    for len in [1, 45, 46, 54, 55, 62, 63] {
        let name = format!("{}z", "a".repeat(len - 1));
        validate(&name, "team", &TinycodeInstanceSpec::default(), &Settings::default())
            .unwrap_or_else(|e| panic!("{name}: {e:?}"));
    }
    let e = validate(&"a".repeat(64), "team", &TinycodeInstanceSpec::default(), &Settings::default()).unwrap_err();
    assert!(e.0[0].message.contains("at most 63 characters"), "{}", e.0[0].message);
}

#[test]
fn cross_field_rules() {
    let s = spec(serde_json::json!({"shell": {"enabled": true}, "storage": {"hostPath": {"path": "/data"}}}));
    assert_eq!(fields(&s), vec!["spec.shell.enabled"]);
    let s = spec(serde_json::json!({"git": {"url": "https://x.io/r.git"}, "storage": {"hostPath": {"path": "/data"}}}));
    assert_eq!(fields(&s), vec!["spec.git.url"]);
    let s = spec(serde_json::json!({"replicas": 3}));
    let e = errors(&s);
    assert_eq!(e[0].field, "spec.replicas");
    assert!(e[0].message.contains("ReadWriteMany"));
    let ok = spec(serde_json::json!({"replicas": 3, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
    assert!(validate("a", "team", &ok, &Settings::default()).is_ok());
    let ok = spec(serde_json::json!({"replicas": 3, "storage": {"hostPath": {"path": "/srv"}}}));
    assert!(validate("a", "team", &ok, &settings()).is_ok());
    let s = spec(serde_json::json!({"ollama": {"enabled": true, "host": "http://x:11434"}}));
    assert_eq!(fields(&s), vec!["spec.ollama.host"]);
}

#[test]
fn quantities_and_requests_within_limits() {
    let s = spec(serde_json::json!({"resources": {"limits": {"cpu": "two", "memory": "2Gi"}}}));
    assert_eq!(fields(&s), vec!["spec.resources.limits.cpu"]);
    let s = spec(
        serde_json::json!({"resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1500m", "memory": "512Mi"}}}),
    );
    assert_eq!(fields(&s), vec!["spec.resources.requests.cpu"]);
    assert_eq!(parse_quantity("200m"), parse_quantity("0.2"));
    assert_eq!(parse_quantity("2Gi"), parse_quantity("2147483648"));
    assert_eq!(parse_quantity("1e3"), parse_quantity("1000"));
    assert_eq!(parse_quantity("1.5"), parse_quantity("1500m"));
    for bad in ["", "Gi", "1.2.3", "1 Gi", "1gb", "--1"] {
        assert_eq!(parse_quantity(bad), None, "{bad}");
    }
}

#[test]
fn reserved_cluster_roles_are_refused() {
    for bad in [
        "admin",
        "cluster-admin",
        "system:aggregate-to-admin",
        "tinycode-operator-manager",
        "tinycode-scc-shell",
        "tinycode-scc-hostpath",
        "tinycode-discovery",
    ] {
        let s = spec(
            serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": bad}}),
        );
        assert_eq!(fields(&s), vec!["spec.clusterAdmin.clusterRole"], "{bad}");
    }
    for good in ["view", "edit", "tinycode-readonly"] {
        let s = spec(
            serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "clusterRole": good}}),
        );
        assert!(validate("a", "team", &s, &Settings::default()).is_ok(), "{good}");
    }
    let s = spec(serde_json::json!({"clusterAdmin": {"enabled": true}}));
    assert_eq!(fields(&s), vec!["spec.clusterAdmin.kubeconfigSecretName"]);
    let s = spec(serde_json::json!({"clusterAdmin": {"enabled": false, "clusterRole": "view"}}));
    assert_eq!(fields(&s), vec!["spec.clusterAdmin.clusterRole"], "a role without cluster-admin mode");
}

#[test]
fn vllm_rules() {
    let s = spec(serde_json::json!({"vllm": [
        {"name": "qwen", "url": "http://vllm:8000"},
        {"name": "qwen", "url": "ftp://vllm:8000"},
        {"name": "Bad_Name", "url": "http://x", "models": {"m": {"contextLimit": 100, "outputLimit": 10}}}
    ]}));
    assert_eq!(
        fields(&s),
        vec![
            "spec.vllm[1].name",
            "spec.vllm[1].url",
            "spec.vllm[2].name",
            "spec.vllm[2].models[m].contextLimit",
            "spec.vllm[2].models[m].outputLimit"
        ]
    );
}

#[test]
fn git_rules_refuse_shell_metacharacters() {
    for url in ["https://x.io/r.git;reboot", "https://x.io/$(id)", "file:///etc", "https://x.io/r `id`"] {
        let s = spec(serde_json::json!({"git": {"url": url}}));
        assert_eq!(fields(&s), vec!["spec.git.url"], "{url}");
    }
    for branch in ["main;id", "$(id)", "a b", "x|y"] {
        let s = spec(serde_json::json!({"git": {"url": "https://x.io/r.git", "branch": branch}}));
        assert_eq!(fields(&s), vec!["spec.git.branch"], "{branch}");
    }
    let s =
        spec(serde_json::json!({"git": {"url": "ssh://git@x.io:22/team/r.git", "branch": "release/1.2", "depth": 5}}));
    assert!(validate("a", "team", &s, &Settings::default()).is_ok());
    let s = spec(serde_json::json!({"git": {"url": "https://x.io/r.git", "depth": 0}}));
    assert_eq!(fields(&s), vec!["spec.git.depth"]);
}

#[test]
fn urls_without_credentials_query_or_fragment() {
    for (url, problem) in [
        ("http://user:pw@vllm:8000", "credentials"),
        ("http://token@vllm:8000", "credentials"),
        ("https://u@vllm", "credentials"),
        ("http://a@b:c@vllm", "credentials"),
        ("http://vllm:8000/v1?key=x", "query"),
        ("http://vllm:8000/v1#x", "fragment"),
    ] {
        let s = spec(serde_json::json!({"vllm": [{"name": "a", "url": url}]}));
        let e = errors(&s);
        assert_eq!(e.len(), 1, "{url}: {e:?}");
        assert_eq!(e[0].field, "spec.vllm[0].url", "{url}");
        assert!(e[0].message.contains(problem), "{url}: {}", e[0].message);
        assert!(e[0].message.contains("no credentials, query or fragment"), "{}", e[0].message);
        assert!(!e[0].message.contains("pw@") && !e[0].message.contains("token"), "never echoed: {}", e[0].message);
        let s = spec(serde_json::json!({"ollama": {"host": url}}));
        assert_eq!(fields(&s), vec!["spec.ollama.host"], "{url}");
    }
    // An @ in the path is not user-info.
    let s = spec(serde_json::json!({"vllm": [{"name": "a", "url": "http://vllm:8000/@team/v1"}]}));
    assert!(validate("a", "team", &s, &Settings::default()).is_ok());

    for url in ["https://user:ghp_x@github.com/o/r.git", "https://ghp_x@github.com/o/r.git", "ssh://git:pw@x.io/r.git"]
    {
        let s = spec(serde_json::json!({"git": {"url": url}}));
        let e = errors(&s);
        assert_eq!(e.len(), 1, "{url}: {e:?}");
        assert_eq!(e[0].field, "spec.git.url");
        assert!(e[0].message.contains("spec.git.credentialsSecret"), "{}", e[0].message);
    }
    for url in ["ssh://git@x.io:22/team/r.git", "https://x.io/team/r.git", "https://x.io/@scope/r.git"] {
        let s = spec(serde_json::json!({"git": {"url": url}}));
        assert!(validate("a", "team", &s, &Settings::default()).is_ok(), "{url}");
    }
    // scp form: not refused for credentials (the URL pattern decides it).
    assert_eq!(url_extras("git@github.com:org/repo.git", true), None);
    assert_eq!(url_extras("git@github.com:org/repo.git", false), None);
}

#[test]
fn cel_rules_hold_the_patterns_the_validator_uses() {
    assert!(api::HTTP_URL_HYGIENE_RULE.contains(&format!("'{}'", api::URL_USERINFO_PATTERN)));
    assert!(api::GIT_URL_HYGIENE_RULE.contains(&format!("'{}'", api::GIT_USERINFO_PATTERN)));
    assert!(api::GIT_URL_HYGIENE_RULE.contains(&format!("'{}'", api::SSH_PASSWORD_PATTERN)));
    let crd = serde_json::to_string(&<TinycodeInstance as kube::CustomResourceExt>::crd()).unwrap();
    for rule in [api::HTTP_URL_HYGIENE_RULE, api::GIT_URL_HYGIENE_RULE] {
        assert!(crd.contains(rule), "{rule} is in the CRD");
    }
    assert_eq!(crd.matches(api::HTTP_URL_HYGIENE_RULE).count(), 2, "spec.vllm[].url and spec.ollama.host");
    assert!(crd.contains("put credentials in spec.git.credentialsSecret"));
    assert!(crd.contains("spec.vllm[].url: no credentials, query or fragment"));
    assert!(crd.contains("spec.ollama.host: no credentials, query or fragment"));
}

#[test]
fn discovery_namespaces() {
    let many: Vec<String> = (0..51).map(|i| format!("ns{i}")).collect();
    let s = spec(serde_json::json!({"discovery": {"namespaces": many}}));
    assert_eq!(fields(&s), vec!["spec.discovery.namespaces"]);
    let s = spec(serde_json::json!({"discovery": {"namespaces": ["*", "models", "Bad"]}}));
    assert_eq!(fields(&s), vec!["spec.discovery.namespaces[2]"]);
}

#[test]
fn error_display_joins_field_and_fix() {
    let s = spec(serde_json::json!({"replicas": 11, "storage": {"projectsAccessMode": "ReadWriteMany"}}));
    let e = validate("a", "team", &s, &Settings::default()).unwrap_err();
    assert_eq!(e.to_string(), "spec.replicas: 11 is out of range: use 1 to 10");
}

#[test]
fn host_directories_must_lie_under_an_allowed_prefix() {
    let hp = |path: &str| spec(serde_json::json!({"storage": {"hostPath": {"path": path}}}));
    // No prefix configured (the default): every hostPath is refused, with the flag to set.
    let e = validate("a", "team", &hp("/srv/code"), &Settings::default()).unwrap_err();
    assert_eq!(e.0[0].field, "spec.storage.hostPath.path");
    assert!(e.0[0].message.contains("--hostpath-allowed-prefixes"), "{}", e.0[0].message);
    for ok in ["/srv/code", "/srv//code/", "/data", "/srv/"] {
        assert!(validate("a", "team", &hp(ok), &settings()).is_ok(), "{ok}");
    }
    for bad in ["/srvx", "/srv/../etc", "/srv/./code", "/", "/etc/kubernetes", "srv/code"] {
        assert_eq!(fields(&hp(bad)), vec!["spec.storage.hostPath.path"], "{bad}");
    }
    assert_eq!(normalise_host_path("/srv//a/b/"), Some("/srv/a/b".into()));
    assert_eq!(normalise_host_path("/"), Some("/".into()));
    assert_eq!(normalise_host_path("/a/../b"), None);
    assert!(host_path_allowed("/anything", &["/".into()]));
}

#[test]
fn a_kubeconfig_is_never_copied_from_a_reserved_namespace() {
    for ns in ["kube-system", "openshift-config", "default", "tinycode-operator-system"] {
        let s = spec(
            serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": ns}}),
        );
        assert_eq!(fields(&s), vec!["spec.clusterAdmin.kubeconfigNamespace"], "{ns}");
    }
    let s = spec(
        serde_json::json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc", "kubeconfigNamespace": "admins"}}),
    );
    assert!(validate("a", "team", &s, &settings()).is_ok());
}

//! vLLM probing against a stand-in server on loopback.

#[path = "support/vllm_standin.rs"]
mod standin;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use standin::{Behaviour, Config};
use tinycode_operator::api::TinycodeInstanceSpec;
use tinycode_operator::reconcile::conditions;
use tinycode_operator::render::config;
use tinycode_operator::vllm::{self, ProbeSettings, Prober};

fn prober() -> Prober {
    let _ = rustls::crypto::ring::default_provider().install_default();
    Prober::new(ProbeSettings { timeout: Duration::from_secs(1), allow_loopback: true, ..Default::default() })
}

fn ok(models: &[(&str, i64)], tool_calling: bool) -> Config {
    Config { models: models.iter().map(|(m, l)| (m.to_string(), *l)).collect(), behaviour: Behaviour::Ok, tool_calling }
}

fn spec(v: Value) -> TinycodeInstanceSpec {
    serde_json::from_value(v).unwrap()
}

#[tokio::test]
async fn probed_limits_follow_the_80_20_rule_and_overrides_win() {
    let server = standin::start(ok(&[("small", 8192), ("big", 131072), ("pinned", 32768)], true)).await;
    let s = spec(json!({"vllm": [{"name": "q", "url": format!("{}/", server.url()),
        "models": {"pinned": {"contextLimit": 20000, "outputLimit": 2000}}}]}));
    let reports = prober().probe_all(&[("q".into(), format!("{}/", server.url()))]).await;
    assert!(reports[0].served.is_ok(), "{:?}", reports[0]);
    let cfg: Value = serde_json::from_str(&config::generate(&s, &vllm::served_by_name(&reports)).unwrap()).unwrap();
    let models = &cfg["providers"]["q"]["models"];
    assert_eq!(models["small"], json!({"contextLimit": 6553, "outputLimit": 1638}));
    assert_eq!(models["big"], json!({"contextLimit": 104857, "outputLimit": 4096}));
    assert_eq!(models["pinned"], json!({"contextLimit": 20000, "outputLimit": 2000}));
    assert_eq!(cfg["providers"]["q"]["url"], format!("{}/v1", server.url()));
    let conds = conditions::vllm(&vllm::summarize(&s, &reports, &[], 0));
    assert_eq!((conds[0].type_, conds[0].status), ("VllmConfigReady", true));
    // small has max_model_len 8192 < 16384
    assert_eq!((conds[1].type_, conds[1].status), ("VllmWarning", true));
    assert!(conds[1].message.contains("--max-model-len 32768"), "{}", conds[1].message);
}

#[tokio::test]
async fn tool_calling_off_is_a_warning_with_the_flags_to_set() {
    let server = standin::start(ok(&[("m", 65536)], false)).await;
    let reports = prober().probe_all(&[("q".into(), server.url())]).await;
    assert_eq!(reports[0].warnings.len(), 1);
    assert!(reports[0].warnings[0].contains("--enable-auto-tool-choice --tool-call-parser"));
    let server = standin::start(ok(&[("m", 65536)], true)).await;
    let reports = prober().probe_all(&[("q".into(), server.url())]).await;
    assert!(reports[0].warnings.is_empty(), "{:?}", reports[0].warnings);
}

#[tokio::test]
async fn misbehaving_servers_become_errors_within_seconds() {
    for behaviour in
        [Behaviour::ServerError, Behaviour::Garbage, Behaviour::Huge, Behaviour::Slow(Duration::from_secs(30))]
    {
        let server = standin::start(Config { models: vec![], behaviour: behaviour.clone(), tool_calling: true }).await;
        let started = Instant::now();
        let reports = prober().probe_all(&[("q".into(), server.url())]).await;
        let took = started.elapsed();
        let err = reports[0].served.clone().expect_err("must fail");
        assert!(took < Duration::from_secs(5), "{behaviour:?} took {took:?}");
        let s = spec(json!({"vllm": [{"name": "q", "url": server.url()}]}));
        let conds = conditions::vllm(&vllm::summarize(&s, &reports, &[], 0));
        assert_eq!((conds[0].status, conds[0].reason.as_str()), (false, "ProvidersUnavailable"), "{behaviour:?}");
        assert!(conds[0].message.contains(&err));
        assert_eq!(
            config::generate(&s, &vllm::served_by_name(&reports)),
            None,
            "a provider with no models is left out"
        );
    }
}

#[tokio::test]
async fn loopback_is_not_probed_unless_allowed() {
    let server = standin::start(ok(&[("m", 65536)], true)).await;
    let guarded = Prober::new(ProbeSettings::default());
    let reports = guarded.probe_all(&[("q".into(), server.url())]).await;
    assert!(reports[0].served.as_ref().unwrap_err().contains("loopback"));
    assert_eq!(server.requests(), 0, "the guard must refuse before dialling");
}

#[tokio::test]
async fn results_are_cached_between_reconciles() {
    let server = standin::start(ok(&[("m", 65536)], true)).await;
    let p = prober();
    p.probe_all(&[("q".into(), server.url())]).await;
    let after_first = server.requests();
    p.probe_all(&[("q".into(), server.url())]).await;
    assert_eq!(server.requests(), after_first);
}

#[tokio::test]
async fn loopback_in_any_spelling_is_refused_before_dialling() {
    let server = standin::start(ok(&[("m", 65536)], true)).await;
    let port = server.url().rsplit(':').next().unwrap().to_string();
    let guarded = Prober::new(ProbeSettings::default());
    let targets: Vec<(String, String)> = [
        "http://[::ffff:127.0.0.1]",
        "http://[::ffff:7f00:1]",
        "http://2130706433",
        "http://0177.0.0.1",
        "http://127.1",
        "http://0x7f.0.0.1",
        "http://localhost.",
        "http://LOCALHOST",
    ]
    .iter()
    .enumerate()
    .map(|(i, u)| (format!("q{i}"), format!("{u}:{port}")))
    .collect();
    for r in guarded.probe_all(&targets).await {
        assert!(r.served.as_ref().unwrap_err().contains("loopback"), "{r:?}");
    }
    assert_eq!(server.requests(), 0, "the guard must refuse before dialling");
}

#[tokio::test]
async fn names_go_through_the_guarded_resolver() {
    // `localhost` resolves from /etc/hosts; with the loopback exception the
    // resolver hands the client the checked loopback address.
    let server = standin::start(ok(&[("m", 65536)], true)).await;
    let port = server.url().rsplit(':').next().unwrap().to_string();
    let reports = prober().probe_all(&[("q".into(), format!("http://localhost:{port}"))]).await;
    assert!(reports[0].served.is_ok(), "{:?}", reports[0]);
    assert!(server.requests() > 0);
}

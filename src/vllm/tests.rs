//! Tests of the vLLM probe, its parsing and the conditions it feeds.

use super::*;

#[test]
fn ssrf_guard() {
    for bad in [
        "http://169.254.169.254/latest",
        "http://metadata.google.internal/v1",
        "http://100.100.100.200/",
        "http://169.254.10.1:8000",
        "http://[fe80::1]:8000",
        "http://127.0.0.1:8000",
        "http://[::1]:8000",
        "http://localhost:8000",
        "file:///etc/passwd",
    ] {
        assert!(ssrf_check(bad, false).is_err(), "{bad}");
    }
    for ok in
        ["http://10.0.0.5:8000/v1", "https://vllm.models.svc:8443", "http://192.168.1.9", "http://vllm-qwen.vllm:8000"]
    {
        assert!(ssrf_check(ok, false).is_ok(), "{ok}");
    }
    assert!(ssrf_check("http://127.0.0.1:8000", true).is_ok());
    assert!(ssrf_check("http://169.254.169.254", true).is_err(), "metadata stays refused");
}

/// Every spelling of a refused address, and why it is refused.
#[test]
fn ssrf_guard_sees_through_address_spellings() {
    for (bad, why) in [
        ("http://[::ffff:127.0.0.1]:8000", "loopback"),
        ("http://[::ffff:7f00:1]:8000", "loopback"),
        ("http://[::127.0.0.1]:8000", "loopback"),
        ("http://[64:ff9b::7f00:1]:8000", "loopback"),
        ("http://[2002:7f00:1::]:8000", "loopback"),
        ("http://[2001:0:4136:e378:8000:63bf:5601:5601]/latest", "metadata"),
        ("http://0.0.0.0:8000", "unspecified"),
        ("http://[::]:8000", "unspecified"),
        ("http://0:8000", "unspecified"),
        ("http://2130706433:8000", "loopback"),
        ("http://0177.0.0.1:8000", "loopback"),
        ("http://127.1:8000", "loopback"),
        ("http://0x7f.0.0.1:8000", "loopback"),
        ("http://0x7f000001/", "loopback"),
        ("http://127.0.0.1.:8000", "loopback"),
        ("http://127%2E0.0.1:8000", "loopback"),
        ("http://localhost.:8000", "loopback"),
        ("http://LOCALHOST:8000", "loopback"),
        ("http://api.localhost:8000", "loopback"),
        ("http://METADATA.GOOGLE.INTERNAL./computeMetadata/v1", "metadata"),
        ("http://metadata/computeMetadata/v1", "metadata"),
        ("http://169.254.169.254/latest", "metadata"),
        ("http://[fd00:ec2::254]/latest", "metadata"),
        ("http://[::ffff:169.254.169.254]/latest", "metadata"),
        ("http://[::ffff:a9fe:a9fe]/latest", "metadata"),
        ("http://2852039166/latest", "metadata"),
        ("http://[fe80::1]:8000", "link-local"),
    ] {
        let err = ssrf_check(bad, false).expect_err(bad);
        assert!(err.contains(why), "{bad}: {err}");
    }
    // The URL parser refuses zone IDs outright; either way it is not probed.
    assert!(ssrf_check("http://[fe80::1%25eth0]:8000", false).is_err());
    assert!(ssrf_check("http://[fe80::1%25eth0]:8000", true).is_err());
    for ok in ["http://10.0.0.5:8000", "http://192.168.1.9", "http://[fd12::1]:8000", "https://models.example.com"] {
        assert_eq!(ssrf_check(ok, false), Ok(()), "{ok}");
    }
    // The loopback exception covers every loopback spelling, nothing else.
    for ok in ["http://[::ffff:127.0.0.1]:1", "http://2130706433:1", "http://127.1:1", "http://localhost.:1"] {
        assert_eq!(ssrf_check(ok, true), Ok(()), "{ok}");
    }
    for bad in ["http://0.0.0.0:1", "http://[::]:1", "http://[fd00:ec2::254]", "http://metadata.google.internal"] {
        assert!(ssrf_check(bad, true).is_err(), "{bad}");
    }
}

#[test]
fn ssrf_guard_refuses_user_info_query_and_fragment() {
    for bad in [
        "http://user:secret@vllm:8000",
        "http://user@vllm:8000",
        "http://:secret@vllm:8000",
        "http://vllm:8000/v1?x=1",
        "http://vllm:8000/?",
        "http://vllm:8000/#frag",
        "http://vllm:8000#",
    ] {
        assert!(ssrf_check(bad, false).is_err(), "{bad}");
        // normalize_vllm_url appends /v1; still refused.
        assert!(ssrf_check(&config::normalize_vllm_url(bad), false).is_err(), "{bad}");
    }
    let err = ssrf_check("http://user:s3cr3t@vllm:8000/v1", false).unwrap_err();
    assert!(!err.contains("s3cr3t") && !err.contains("user:"), "credentials must not be echoed: {err}");
    assert!(err.contains("credentials"), "{err}");
    let err = ssrf_check("http://vllm:8000/v1?api_key=s3cr3t", false).unwrap_err();
    assert!(!err.contains("s3cr3t") && err.contains("query"), "the query must not be echoed: {err}");
}

#[tokio::test]
async fn resolver_refusals_are_reported_not_hidden_as_connect_errors() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let client =
        reqwest::Client::builder().no_proxy().dns_resolver(netguard::GuardedResolver::new(false)).build().unwrap();
    // Refused at lookup: nothing is dialled.
    let url = "http://localhost:9/v1/models";
    let e = client.get(url).send().await.expect_err("refused");
    let msg = describe(url, &e);
    assert!(msg.contains("loopback") && msg.contains("never probed"), "{msg}");
}

fn report(name: &str) -> Report {
    Report { name: name.into(), url: String::new(), served: Err(String::new()), warnings: vec![] }
}

#[test]
fn probe_cache_is_bounded_and_drops_expired_entries() {
    let ttl = Duration::from_secs(300);
    let mut cache = HashMap::new();
    for i in 0..CACHE_CAPACITY + 100 {
        cache_insert(&mut cache, format!("k{i}"), report("r"), ttl, CACHE_CAPACITY);
    }
    assert_eq!(cache.len(), CACHE_CAPACITY);
    assert!(cache.contains_key(&format!("k{}", CACHE_CAPACITY + 99)), "the newest entry is kept");

    let mut cache = HashMap::new();
    for key in ["a", "b", "c"] {
        cache_insert(&mut cache, key.into(), report(key), ttl, 3);
        std::thread::sleep(Duration::from_millis(2));
    }
    cache_insert(&mut cache, "b".into(), report("b2"), ttl, 3);
    assert_eq!(cache.len(), 3, "replacing a key evicts nothing");
    cache_insert(&mut cache, "d".into(), report("d"), ttl, 3);
    let mut keys: Vec<_> = cache.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["b", "c", "d"], "the oldest entry goes first");

    cache_insert(&mut cache, "e".into(), report("e"), Duration::ZERO, 3);
    assert_eq!(cache.keys().collect::<Vec<_>>(), ["e"], "expired entries are dropped");
}

#[test]
fn absurd_max_model_len_is_clamped() {
    let s = parse_models(
        br#"{"data":[{"id":"huge","max_model_len":9223372036854775807},{"id":"neg","max_model_len":-4},{"id":"zero","max_model_len":0},{"id":"big","max_model_len":1e300},{"id":"u","max_model_len":18446744073709551615}]}"#,
    )
    .unwrap();
    assert_eq!(s["huge"], config::MAX_MODEL_LEN);
    assert_eq!(s["neg"], 1);
    assert_eq!(s["zero"], 1);
    assert_eq!(s["big"], config::DEFAULT_CONTEXT_LIMIT * 10 / 8, "not an integer: the default");
    assert_eq!(s["u"], config::DEFAULT_CONTEXT_LIMIT * 10 / 8, "beyond i64: the default");
    assert_eq!(context_warnings("q", &s).len(), 4, "all but huge are below {MIN_CONTEXT}");
    let served = BTreeMap::from([("q".to_string(), s)]);
    let spec = spec(json!({"vllm": [{"name": "q", "url": "http://q"}]}));
    assert!(config::generate(&spec, &served).is_some());
}

#[test]
fn models_parse_and_garbage_is_an_error() {
    let s = parse_models(
        br#"{"object":"list","data":[{"id":"a","max_model_len":8192},{"id":"b","max_model_len":131072},{"nope":1}]}"#,
    )
    .unwrap();
    assert_eq!(s, Served::from([("a".to_string(), 8192), ("b".to_string(), 131072)]));
    assert!(parse_models(b"<html>").is_err());
    assert!(parse_models(b"{}").is_err());
}

#[test]
fn small_context_and_tool_calling_warnings_say_what_to_change() {
    let w = context_warnings("q", &Served::from([("a".to_string(), 8192), ("b".to_string(), 32768)]));
    assert_eq!(w.len(), 1);
    assert!(w[0].contains("--max-model-len 32768 --kv-cache-dtype fp8"));
    assert!(tool_calling_disabled(
        r#"{"error":"\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set"}"#
    ));
    assert!(!tool_calling_disabled("model not found"));
}

fn spec(v: Value) -> TinycodeInstanceSpec {
    serde_json::from_value(v).unwrap()
}

#[test]
fn conditions_follow_probe_results() {
    let s = spec(
        json!({"vllm": [{"name": "a", "url": "http://a"}, {"name": "b", "url": "http://b", "models": {"m": {}}}]}),
    );
    let ok = Report {
        name: "a".into(),
        url: "http://a/v1".into(),
        served: Ok(Served::from([("x".into(), 32768)])),
        warnings: vec![],
    };
    let down = Report {
        name: "b".into(),
        url: "http://b/v1".into(),
        served: Err("GET http://b/v1/models timed out".into()),
        warnings: vec![],
    };
    let c = conditions(&s, &[ok.clone(), down.clone()], &[]);
    assert_eq!((c[0].type_, c[0].status), (VLLM_CONFIG_READY, true), "b has user-listed models");
    assert_eq!((c[1].type_, c[1].status), (VLLM_WARNING, true));
    assert!(c[1].message.contains("timed out"));
    let down_a = Report { name: "a".into(), served: Err("connection failed".into()), ..ok.clone() };
    let c = conditions(&s, &[down_a, down], &[]);
    assert_eq!((c[0].status, c[0].reason.as_str()), (false, "ProvidersUnavailable"));
    assert!(c[0].message.contains("a (connection failed)"));
    let c = conditions(&spec(json!({"vllm": [{"name": "a", "url": "http://a"}]})), &[ok], &[]);
    assert_eq!((c[1].status, c[1].reason.as_str()), (false, "NoWarnings"));
    assert!(conditions(&TinycodeInstanceSpec::default(), &[], &[]).is_empty());
}

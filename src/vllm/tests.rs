//! Tests of the vLLM probe, its parsing and the conditions it feeds.

use super::*;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

const VLLM_CONFIG_READY: &str = "VllmConfigReady";
const VLLM_WARNING: &str = "VllmWarning";

/// A finding under the name of the condition the reconcile makes of it.
struct Named {
    type_: &'static str,
    status: bool,
    reason: String,
    message: String,
}

fn conditions_with_skipped(spec: &TinycodeInstanceSpec, p: &[Report], d: &[Report], skipped: usize) -> Vec<Named> {
    let s = summarize(spec, p, d, skipped);
    let named = |type_, f: Finding| Named { type_, status: f.holds, reason: f.reason.into(), message: f.message };
    s.config_ready
        .map(|f| named(VLLM_CONFIG_READY, f))
        .into_iter()
        .chain(s.warning.map(|f| named(VLLM_WARNING, f)))
        .collect()
}

fn conditions(spec: &TinycodeInstanceSpec, p: &[Report], d: &[Report]) -> Vec<Named> {
    conditions_with_skipped(spec, p, d, 0)
}

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
    let client = reqwest::Client::builder()
        .no_proxy()
        .dns_resolver(netguard::GuardedResolver::new(false, Duration::from_secs(5)))
        .build()
        .unwrap();
    // Refused at lookup: nothing is dialled.
    let url = "http://localhost:9/v1/models";
    let e = client.get(url).send().await.expect_err("refused");
    let msg = describe(url, &e);
    assert!(msg.contains("loopback") && msg.contains("never probed"), "{msg}");
}

fn report(name: &str) -> Report {
    Report::new(name, "")
}

#[test]
fn probe_cache_is_bounded_and_drops_expired_entries() {
    let ttl = Duration::from_secs(300);
    let mut cache = HashMap::new();
    for i in 0..CACHE_CAPACITY + 100 {
        cache_insert(&mut cache, format!("k{i}"), report("r"), ttl, CACHE_CAPACITY, CACHE_MAX_BYTES);
    }
    assert_eq!(cache.len(), CACHE_CAPACITY);
    assert!(cache.contains_key(&format!("k{}", CACHE_CAPACITY + 99)), "the newest entry is kept");

    let mut cache = HashMap::new();
    for key in ["a", "b", "c"] {
        cache_insert(&mut cache, key.into(), report(key), ttl, 3, usize::MAX);
        std::thread::sleep(Duration::from_millis(2));
    }
    cache_insert(&mut cache, "b".into(), report("b2"), ttl, 3, usize::MAX);
    assert_eq!(cache.len(), 3, "replacing a key evicts nothing");
    cache_insert(&mut cache, "d".into(), report("d"), ttl, 3, usize::MAX);
    let mut keys: Vec<_> = cache.keys().cloned().collect();
    keys.sort();
    assert_eq!(keys, ["b", "c", "d"], "the oldest entry goes first");

    cache_insert(&mut cache, "e".into(), report("e"), Duration::ZERO, 3, usize::MAX);
    assert_eq!(cache.keys().collect::<Vec<_>>(), ["e"], "expired entries are dropped");
}

#[test]
fn absurd_max_model_len_is_clamped() {
    let s = parse_models(
        br#"{"data":[{"id":"huge","max_model_len":9223372036854775807},{"id":"neg","max_model_len":-4},{"id":"zero","max_model_len":0},{"id":"big","max_model_len":1e300},{"id":"u","max_model_len":18446744073709551615}]}"#,
    )
    .unwrap()
    .served;
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
    assert_eq!(s.served, Served::from([("a".to_string(), 8192), ("b".to_string(), 131072)]));
    assert_eq!((s.not_listed, s.long_ids), (0, 0));
    for garbage in [&b"<html>"[..], b"{}", b"[]", b"\"data\"", br#"{"data":{"id":"a"}}"#, br#"{"data":[]} x"#] {
        assert!(parse_models(garbage).is_err(), "{}", String::from_utf8_lossy(garbage));
    }
    // Other values where an entry, id or length is expected are skipped, as before.
    let s = parse_models(
        br#"{"data":[1,"x",null,[{"id":"nested"}],{"id":7},{"id":{"a":1}},{"id":"ok","max_model_len":"9"},{"max_model_len":1}],"extra":{"data":[]}}"#,
    )
    .unwrap();
    let default = config::DEFAULT_CONTEXT_LIMIT * 10 / 8;
    assert_eq!(s.served, Served::from([("ok".to_string(), default)]));
    // The last of repeated keys wins, as in a JSON object.
    let s = parse_models(br#"{"data":[{"id":"a"}],"data":[{"id":"b","id":"c","max_model_len":5,"max_model_len":7}]}"#)
        .unwrap();
    assert_eq!(s.served, Served::from([("c".to_string(), 7)]));
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
    let ok = Report { served: Ok(Served::from([("x".into(), 32768)])), ..Report::new("a", "http://a/v1") };
    let down = Report { served: Err("GET http://b/v1/models timed out".into()), ..Report::new("b", "http://b/v1") };
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

/// A `/v1/models` body listing `count` models `m00000`, `m00001`, …; the
/// first `small` of them with a context window below [`MIN_CONTEXT`].
fn many_models(count: usize, small: usize) -> Vec<u8> {
    let entries: Vec<String> = (0..count)
        .map(|i| {
            if i < small {
                format!(r#"{{"id":"m{i:05}","max_model_len":8192}}"#)
            } else {
                format!(r#"{{"id":"m{i:05}"}}"#)
            }
        })
        .collect();
    format!(r#"{{"object":"list","data":[{}]}}"#, entries.join(",")).into_bytes()
}

#[test]
fn a_huge_model_list_keeps_the_first_models_and_counts_the_rest() {
    let body = many_models(30_000, 0);
    assert!(body.len() > 400_000, "a large answer: {} bytes", body.len());
    let list = parse_models(&body).unwrap();
    assert_eq!(list.served.len(), MAX_MODELS_PER_PROVIDER);
    assert_eq!(list.not_listed, 30_000 - MAX_MODELS_PER_PROVIDER);
    assert_eq!(list.long_ids, 0);
    let first: Vec<String> = (0..MAX_MODELS_PER_PROVIDER).map(|i| format!("m{i:05}")).collect();
    assert_eq!(list.served.keys().cloned().collect::<Vec<_>>(), first, "the first models in the answer are kept");

    // A repeated id is not a new model: it neither fills the list nor counts as left out.
    let repeated = format!(r#"{{"data":[{}]}}"#, vec![r#"{"id":"same","max_model_len":40000}"#; 500].join(","));
    let list = parse_models(repeated.as_bytes()).unwrap();
    assert_eq!((list.served.len(), list.not_listed), (1, 0));
}

#[test]
fn long_model_ids_are_skipped_and_counted() {
    let at_limit = "a".repeat(MAX_MODEL_ID_LEN);
    let too_long = "b".repeat(MAX_MODEL_ID_LEN + 1);
    // Multi-byte characters: the limit is in bytes.
    let wide = "é".repeat(MAX_MODEL_ID_LEN / 2 + 1);
    let huge = "c".repeat(100_000);
    let body =
        format!(r#"{{"data":[{{"id":"{at_limit}"}},{{"id":"{too_long}"}},{{"id":"{wide}"}},{{"id":"{huge}"}}]}}"#);
    let list = parse_models(body.as_bytes()).unwrap();
    assert_eq!(list.served.keys().collect::<Vec<_>>(), [&at_limit]);
    assert_eq!(list.long_ids, 3);
    // An escaped id is measured once unescaped.
    let escaped = format!(r#"{{"data":[{{"id":"{}"}}]}}"#, "\\u0061".repeat(MAX_MODEL_ID_LEN));
    assert_eq!(parse_models(escaped.as_bytes()).unwrap().served.keys().collect::<Vec<_>>(), [&at_limit]);
}

#[test]
fn bounded_cuts_at_a_char_boundary() {
    assert_eq!(bounded("short", 512), "short");
    let cut = bounded(&"é".repeat(400), 512);
    assert!(cut.len() <= 512 && cut.ends_with('…'), "{} bytes", cut.len());
    let cut = bounded(&"x".repeat(10_000), 512);
    assert_eq!(cut.len(), 512);
    assert!(cut.starts_with("xxx") && cut.ends_with('…'));
}

#[test]
fn joined_messages_are_bounded_and_count_what_was_left_out() {
    let parts: Vec<String> = (0..100).map(|i| format!("{i:03}{}", "w".repeat(97))).collect();
    let joined = join_bounded(&parts, MAX_CONDITION_MESSAGE_LEN);
    assert!(joined.len() <= MAX_CONDITION_MESSAGE_LEN, "{} bytes", joined.len());
    // Every shown part is followed by "; ", the last one by the count.
    let shown = joined.matches("www; ").count();
    assert!(
        joined.ends_with(&format!("... ({} more)", 100 - shown)),
        "{shown} shown: …{}",
        &joined[joined.len() - 40..]
    );
    assert!(shown > 30, "as many parts as fit are shown: {shown}");
    assert_eq!(join_bounded(&parts[..3], MAX_CONDITION_MESSAGE_LEN), parts[..3].join("; "), "all fit");
    // One part longer than the whole budget: nothing of it, only the count.
    assert_eq!(join_bounded(&["x".repeat(5000)], 4096), "... (1 more)");
}

#[test]
fn warnings_per_report_are_capped() {
    let served: Served = (0..MAX_MODELS_PER_PROVIDER).map(|i| (format!("m{i}"), 8192)).collect();
    let warnings = cap_warnings("q", context_warnings("q", &served));
    assert_eq!(warnings.len(), MAX_WARNINGS_PER_REPORT + 1);
    assert_eq!(warnings[MAX_WARNINGS_PER_REPORT], format!("q: {} more warning(s) not shown", 64 - 8));
    let few = cap_warnings("q", vec!["a".into(), "x".repeat(2000)]);
    assert_eq!(few.len(), 2, "no count when nothing was left out");
    assert!(few[1].len() <= MAX_WARNING_LEN);
}

#[test]
fn cut_model_lists_become_a_warning_and_only_kept_models_reach_the_config() {
    let list = parse_models(&many_models(30_000, 0)).unwrap();
    let long_id = format!(r#"{{"data":[{{"id":"{}"}},{{"id":"k"}}]}}"#, "z".repeat(300));
    let short = parse_models(long_id.as_bytes()).unwrap();
    let reports = [
        Report {
            served: Ok(list.served),
            models_not_listed: list.not_listed,
            long_ids_skipped: list.long_ids,
            ..Report::new("q", "http://q/v1")
        },
        Report {
            served: Ok(short.served),
            models_not_listed: short.not_listed,
            long_ids_skipped: short.long_ids,
            ..Report::new("r", "http://r/v1")
        },
    ];
    let s = spec(json!({"vllm": [{"name": "q", "url": "http://q"}, {"name": "r", "url": "http://r"}]}));
    let c = conditions(&s, &reports, &[]);
    assert_eq!((c[0].type_, c[0].status), (VLLM_CONFIG_READY, true));
    assert_eq!((c[1].type_, c[1].status), (VLLM_WARNING, true));
    assert!(
        c[1].message.contains("q: 29936 more models not listed (the operator keeps at most 64 per provider)"),
        "{}",
        c[1].message
    );
    assert!(c[1].message.contains("r: 1 models left out: their ids are longer than 256 bytes"), "{}", c[1].message);
    assert!(!c[1].message.contains("zzzz"), "a long id is not echoed");
    let cfg: Value = serde_json::from_str(&config::generate(&s, &served_by_name(&reports)).unwrap()).unwrap();
    assert_eq!(cfg["providers"]["q"]["models"].as_object().unwrap().len(), MAX_MODELS_PER_PROVIDER);
    assert_eq!(cfg["providers"]["r"]["models"].as_object().unwrap().keys().collect::<Vec<_>>(), ["k"]);
}

#[test]
fn condition_messages_are_bounded_however_much_tenants_send() {
    let long = "é".repeat(3000);
    let names: Vec<String> = (0..20).map(|i| format!("p{i}")).collect();
    let providers: Vec<Report> = names
        .iter()
        .map(|n| Report {
            served: Err(format!("GET http://{long}/v1/models: {long}")),
            warnings: vec![long.clone(); MAX_WARNINGS_PER_REPORT + 1],
            ..Report::new(n, "")
        })
        .collect();
    let discovered: Vec<Report> = (0..MAX_DISCOVERED_PER_INSTANCE)
        .map(|i| Report { served: Err(long.clone()), ..Report::new(&format!("ns/s{i}"), "") })
        .collect();
    let vllm: Vec<Value> = names.iter().map(|n| json!({"name": n, "url": "http://x"})).collect();
    let c = conditions_with_skipped(&spec(json!({ "vllm": vllm })), &providers, &discovered, 7);
    assert_eq!((c[0].type_, c[0].status), (VLLM_CONFIG_READY, false));
    assert_eq!((c[1].type_, c[1].status), (VLLM_WARNING, true));
    for d in &c {
        assert!(d.message.len() <= MAX_CONDITION_MESSAGE_LEN, "{}: {} bytes", d.type_, d.message.len());
        assert!(d.message.contains("more)"), "{}: says what was left out", d.type_);
    }
    assert!(c[0].message.contains("p0 ("), "{}", &c[0].message[..100]);
    assert!(c[1].message.starts_with("7 more discovered Service(s) not probed"), "{}", &c[1].message[..100]);
}

#[test]
fn discovery_probes_the_first_services_by_namespace_and_name() {
    let mut candidates: Vec<(String, String)> =
        (0..40).rev().map(|i| (format!("ns{}/svc{i:02}", i % 3), format!("http://svc{i:02}:8000"))).collect();
    candidates.push(candidates[0].clone());
    let (kept, skipped) = first_discovered(candidates.clone());
    assert_eq!((kept.len(), skipped), (MAX_DISCOVERED_PER_INSTANCE, 40 - MAX_DISCOVERED_PER_INSTANCE));
    let mut names: Vec<String> = candidates.iter().map(|c| c.0.clone()).collect();
    names.sort();
    names.dedup();
    assert_eq!(kept.iter().map(|c| c.0.clone()).collect::<Vec<_>>(), names[..MAX_DISCOVERED_PER_INSTANCE]);
    candidates.reverse();
    assert_eq!(first_discovered(candidates).0, kept, "the same choice whatever the listing order");
    assert_eq!(first_discovered(vec![("a/b".into(), "u".into())]), (vec![("a/b".into(), "u".into())], 0));

    let c = conditions_with_skipped(&TinycodeInstanceSpec::default(), &[], &[], 24);
    assert_eq!((c[0].type_, c[0].status), (VLLM_WARNING, true));
    assert!(c[0].message.contains("24 more discovered Service(s) not probed"), "{}", c[0].message);
}

#[test]
fn probe_cache_content_is_bounded_in_bytes() {
    let ttl = Duration::from_secs(300);
    let big = Report {
        served: Ok((0..MAX_MODELS_PER_PROVIDER).map(|i| (format!("{i:03}{}", "x".repeat(253)), 1)).collect()),
        warnings: vec!["w".repeat(MAX_WARNING_LEN); MAX_WARNINGS_PER_REPORT + 1],
        ..Report::new("q", &"u".repeat(MAX_URL_LEN))
    };
    assert!(big.footprint() > 20_000, "{}", big.footprint());
    let budget = 256 << 10;
    let mut cache = HashMap::new();
    for i in 0..100 {
        cache_insert(&mut cache, format!("k{i}"), big.clone(), ttl, CACHE_CAPACITY, budget);
        let total: usize = cache.iter().map(|(k, (_, r))| k.len() + r.footprint()).sum();
        assert!(total <= budget, "{total} bytes after {i} inserts");
    }
    assert!(cache.contains_key("k99") && !cache.contains_key("k0"), "the oldest go first");
    // A usual report (a few models, short ids) fits CACHE_CAPACITY times.
    let usual = Report {
        served: Ok((0..4).map(|i| (format!("Qwen/Qwen3-Coder-30B-A3B-{i}"), 32768)).collect()),
        warnings: vec!["q: tool calling is not enabled; restart vLLM with --enable-auto-tool-choice".into()],
        ..Report::new("ns/vllm-qwen", "http://vllm-qwen.models.svc.cluster.local:8000/v1")
    };
    assert!((usual.footprint() + 80) * CACHE_CAPACITY <= CACHE_MAX_BYTES, "{}", usual.footprint());
}

/// A loopback stand-in answering every request with `body` (200, JSON) and
/// counting the connections it accepted.
async fn stand_in(body: Vec<u8>) -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let body = Arc::new(body);
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let body = body.clone();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes()).await;
                let _ = stream.write_all(&body).await;
            });
        }
    });
    (url, accepted)
}

/// A loopback server that accepts connections and never answers, counting them.
async fn silent_server() -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(stream);
        }
    });
    (url, accepted)
}

fn loopback_prober(timeout: Duration) -> Prober {
    Prober::new(ProbeSettings { timeout, allow_loopback: true, ..Default::default() })
}

#[tokio::test]
async fn a_server_listing_30000_models_yields_a_bounded_report() {
    let body = many_models(30_000, MAX_MODELS_PER_PROVIDER);
    assert!(body.len() < ProbeSettings::default().max_body);
    let (url, _) = stand_in(body).await;
    let report = loopback_prober(Duration::from_secs(5)).probe("q", &url).await;
    let served = report.served.as_ref().expect("probed");
    assert_eq!(served.len(), MAX_MODELS_PER_PROVIDER);
    assert_eq!(report.models_not_listed, 30_000 - MAX_MODELS_PER_PROVIDER);
    // 64 models below MIN_CONTEXT: 8 warnings and one counting the other 56.
    assert_eq!(report.warnings.len(), MAX_WARNINGS_PER_REPORT + 1, "{:?}", report.warnings);
    assert!(report.warnings.last().unwrap().contains("56 more warning(s)"), "{:?}", report.warnings.last());
    assert!(report.footprint() < 32 << 10, "{} bytes", report.footprint());
}

#[tokio::test]
async fn a_probe_without_a_free_slot_reports_busy_and_is_not_cached() {
    let (url, accepted) = stand_in(many_models(2, 0)).await;
    let prober = loopback_prober(Duration::from_millis(300));
    let all = prober.slots.acquire_many(MAX_CONCURRENT_PROBES as u32).await.unwrap();
    let started = Instant::now();
    let report = prober.probe("q", &url).await;
    assert_eq!(report.served, Err(BUSY.to_string()));
    assert!(started.elapsed() >= Duration::from_millis(250), "gave up before the timeout: {:?}", started.elapsed());
    assert_eq!(accepted.load(Ordering::SeqCst), 0, "nothing is dialled without a slot");
    drop(all);
    let report = prober.probe("q", &url).await;
    assert_eq!(report.served.map(|s| s.len()), Ok(2), "the busy answer was not cached");
    assert_eq!(prober.slots.available_permits(), MAX_CONCURRENT_PROBES, "the slot is given back");
}

#[tokio::test]
async fn probes_in_flight_never_exceed_the_slot_cap() {
    let (url, accepted) = silent_server().await;
    let prober = loopback_prober(Duration::from_secs(2));
    let targets: Vec<(String, String)> =
        (0..MAX_CONCURRENT_PROBES + 8).map(|i| (format!("q{i}"), url.clone())).collect();
    let watch = async {
        let deadline = Instant::now() + Duration::from_millis(1500);
        while accepted.load(Ordering::SeqCst) < MAX_CONCURRENT_PROBES && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // Give any probe beyond the cap time to connect, if it could.
        tokio::time::sleep(Duration::from_millis(300)).await;
        accepted.load(Ordering::SeqCst)
    };
    let (reports, seen) = tokio::join!(prober.probe_all(&targets), watch);
    assert_eq!(seen, MAX_CONCURRENT_PROBES, "connections open at once");
    assert!(reports.iter().all(|r| r.served.is_err()), "a silent server serves nothing");
}

#[tokio::test]
async fn a_host_name_is_probed_through_the_guarded_resolver() {
    // `localhost` resolves without a DNS server (/etc/hosts, RFC 6761).
    let (url, accepted) = stand_in(many_models(1, 0)).await;
    let port = url.rsplit(':').next().unwrap();
    let report = loopback_prober(Duration::from_secs(5)).probe("q", &format!("http://localhost:{port}")).await;
    assert_eq!(report.served.map(|s| s.len()), Ok(1));
    assert!(accepted.load(Ordering::SeqCst) > 0);
    let refused = Prober::new(ProbeSettings::default()).probe("q", &format!("http://localhost.:{port}")).await;
    assert!(refused.served.unwrap_err().contains("loopback"));
}

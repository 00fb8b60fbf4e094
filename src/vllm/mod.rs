//! vLLM providers: probing `GET <url>/v1/models` (short timeout, bounded
//! body, SSRF guard), the context-window and tool-calling checks, and the
//! conditions that report them. A misbehaving server never fails a
//! reconcile: it becomes a warning.

pub mod netguard;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::api::TinycodeInstanceSpec;
use crate::reconcile::conditions::{Desired, VLLM_CONFIG_READY, VLLM_WARNING};
use crate::render::config::{self, Served};

/// Annotation that makes a Service a discovery candidate.
pub const DISCOVER_ANNOTATION: &str = "tinycode.dev/discover";
/// Optional annotation giving a candidate's base URL explicitly.
pub const URL_ANNOTATION: &str = "tinycode.dev/vllm-url";
/// Below this context window tinycode's agent loop runs out of room.
pub const MIN_CONTEXT: i64 = 16384;
/// Most entries the probe cache holds; the oldest goes first when full.
pub const CACHE_CAPACITY: usize = 1024;

/// How probes behave (operator settings).
#[derive(Clone, Debug)]
pub struct ProbeSettings {
    pub timeout: Duration,
    pub max_body: usize,
    /// Allow loopback targets (local stand-ins in tests); off in production.
    pub allow_loopback: bool,
    /// How long a probe result is reused before the server is asked again.
    pub cache_ttl: Duration,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(3),
            max_body: 1 << 20,
            allow_loopback: false,
            cache_ttl: Duration::from_secs(300),
        }
    }
}

/// Refuses URLs that point at the node itself, a link-local neighbour or a
/// cloud metadata service, and URLs carrying user-info, a query or a
/// fragment. Private ranges are allowed: in-cluster model servers live there.
///
/// An IP-literal host (in any spelling the URL parser accepts: `2130706433`,
/// `0177.0.0.1`, `127.1`, `[::ffff:7f00:1]`) is classified here, since the
/// HTTP client dials it without a lookup; a host name is checked against
/// [`netguard::check_host_name`] here and its addresses by the client's
/// [`netguard::GuardedResolver`] at connect time.
pub fn ssrf_check(url: &str, allow_loopback: bool) -> Result<(), String> {
    let parsed = reqwest::Url::parse(url).map_err(|e| format!("{:?} is not a URL: {e}", redact_unparsed(url)))?;
    // Messages end up in status conditions: never echo credentials or a query (API keys live there).
    let mut shown = parsed.clone();
    let _ = shown.set_username("");
    let _ = shown.set_password(None);
    shown.set_query(None);
    shown.set_fragment(None);
    let url = shown.as_str();
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(format!("{url}: credentials (user-info) in the URL are refused; remove them"));
    }
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(format!("{url}: only http and https are probed"));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(format!("{url}: a query or fragment in the URL is refused; give the base URL only"));
    }
    let refused = |reason: netguard::Refusal| format!("{url} is {reason}; it is never probed");
    // The parser has already turned every IPv4 spelling into a dotted quad
    // and wraps IPv6 literals in brackets; anything else is a domain name.
    let host = parsed.host_str().filter(|h| !h.is_empty()).ok_or_else(|| format!("{url} has no host"))?;
    let literal = match host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        Some(v6) => Some(v6.parse::<Ipv6Addr>().map(IpAddr::V6).map_err(|e| format!("{url}: bad IPv6 host: {e}"))?),
        None => host.parse::<Ipv4Addr>().ok().map(IpAddr::V4),
    };
    match literal {
        Some(ip) => netguard::check_ip(ip, allow_loopback).map_err(refused),
        None => netguard::check_host_name(host, allow_loopback).map_err(refused),
    }
}

/// A URL that did not parse, with anything up to an `@` hidden.
fn redact_unparsed(url: &str) -> String {
    match url.rfind('@') {
        Some(at) => format!("…{}", &url[at..]),
        None => url.to_string(),
    }
}

/// `id` → `max_model_len` from a `/v1/models` body.
pub fn parse_models(body: &[u8]) -> Result<Served, String> {
    let v: Value = serde_json::from_slice(body).map_err(|e| format!("the /v1/models answer is not JSON ({e})"))?;
    let data = v.get("data").and_then(Value::as_array).ok_or("the /v1/models answer has no data array")?;
    let mut out = Served::new();
    for m in data {
        let Some(id) = m.get("id").and_then(Value::as_str) else { continue };
        let len = m.get("max_model_len").and_then(Value::as_i64).unwrap_or(config::DEFAULT_CONTEXT_LIMIT * 10 / 8);
        out.insert(id.to_string(), config::clamp_max_model_len(len));
    }
    Ok(out)
}

/// What probing one server found.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub name: String,
    pub url: String,
    pub served: Result<Served, String>,
    pub warnings: Vec<String>,
}

/// Warnings for models whose context window is too small.
pub fn context_warnings(name: &str, served: &Served) -> Vec<String> {
    served
        .iter()
        .filter(|(_, len)| **len < MIN_CONTEXT)
        .map(|(id, len)| {
            format!("{name}: model {id} serves max_model_len {len} (< {MIN_CONTEXT}); restart vLLM with --max-model-len 32768 --kv-cache-dtype fp8")
        })
        .collect()
}

/// Whether a chat-completion error says tool calling is off.
pub fn tool_calling_disabled(error_body: &str) -> bool {
    error_body.contains("enable-auto-tool-choice")
}

/// Probes servers, reusing recent answers.
pub struct Prober {
    client: reqwest::Client,
    settings: ProbeSettings,
    cache: Mutex<HashMap<String, (Instant, Report)>>,
}

impl Prober {
    pub fn new(settings: ProbeSettings) -> Self {
        // reqwest is built without a crypto provider of its own (kube brings ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(settings.timeout)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            // Names are resolved and their addresses checked in one step, so
            // the address checked is the address connected to.
            .dns_resolver(netguard::GuardedResolver::new(settings.allow_loopback))
            .build()
            .expect("HTTP client");
        Self { client, settings, cache: Mutex::default() }
    }

    /// Probes every (name, url) concurrently.
    pub async fn probe_all(&self, targets: &[(String, String)]) -> Vec<Report> {
        futures::future::join_all(targets.iter().map(|(n, u)| self.probe(n, u))).await
    }

    pub async fn probe(&self, name: &str, url: &str) -> Report {
        let base = config::normalize_vllm_url(url);
        let key = format!("{name}\n{base}");
        if let Some((at, report)) = self.cache.lock().expect("lock").get(&key)
            && at.elapsed() < self.settings.cache_ttl
        {
            return report.clone();
        }
        let report = self.probe_uncached(name, &base).await;
        let mut cache = self.cache.lock().expect("lock");
        cache_insert(&mut cache, key, report.clone(), self.settings.cache_ttl, CACHE_CAPACITY);
        report
    }

    async fn probe_uncached(&self, name: &str, base: &str) -> Report {
        let mut report = Report { name: name.into(), url: base.into(), served: Err(String::new()), warnings: vec![] };
        if let Err(e) = ssrf_check(base, self.settings.allow_loopback) {
            report.served = Err(e);
            return report;
        }
        let served = match self.get_bounded(&format!("{base}/models")).await {
            Ok((status, body)) if status.is_success() => parse_models(&body),
            Ok((status, _)) => Err(format!("GET {base}/models answered {status}")),
            Err(e) => Err(e),
        };
        if let Ok(models) = &served {
            report.warnings.extend(context_warnings(name, models));
            if let Some(model) = models.keys().next()
                && let Some(w) = self.tool_check(name, base, model).await
            {
                report.warnings.push(w);
            }
        }
        report.served = served;
        report
    }

    /// A one-token chat completion offering a tool: vLLM without
    /// `--enable-auto-tool-choice` refuses it and says so.
    async fn tool_check(&self, name: &str, base: &str, model: &str) -> Option<String> {
        let body = json!({
            "model": model, "max_tokens": 1,
            "messages": [{"role": "user", "content": "ping"}],
            "tools": [{"type": "function", "function": {"name": "noop", "description": "does nothing",
                       "parameters": {"type": "object", "properties": {}}}}],
            "tool_choice": "auto"
        });
        let response = self.client.post(format!("{base}/chat/completions")).json(&body).send().await.ok()?;
        if response.status().is_success() {
            return None;
        }
        let text = read_bounded(response, self.settings.max_body).await.ok()?;
        tool_calling_disabled(&String::from_utf8_lossy(&text)).then(|| {
            format!("{name}: tool calling is not enabled; restart vLLM with --enable-auto-tool-choice --tool-call-parser <parser for {model}>")
        })
    }

    async fn get_bounded(&self, url: &str) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
        let response = self.client.get(url).send().await.map_err(|e| describe(url, &e))?;
        let status = response.status();
        let body = read_bounded(response, self.settings.max_body).await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok((status, body))
    }
}

/// Stores a probe result: drops expired entries, then the oldest ones while
/// the cache is full, so tenants cannot grow it without bound.
fn cache_insert(
    cache: &mut HashMap<String, (Instant, Report)>,
    key: String,
    report: Report,
    ttl: Duration,
    capacity: usize,
) {
    cache.retain(|_, (at, _)| at.elapsed() < ttl);
    cache.remove(&key);
    while cache.len() >= capacity.max(1) {
        let Some(oldest) = cache.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone()) else { break };
        cache.remove(&oldest);
    }
    cache.insert(key, (Instant::now(), report));
}

async fn read_bounded(response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    let mut stream = response.bytes_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| format!("reading the answer failed: {e}"))?;
        if body.len() + chunk.len() > max {
            return Err(format!("the answer is larger than {max} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn describe(url: &str, e: &reqwest::Error) -> String {
    if let Some(refused) = netguard::find_refusal(e) {
        format!("GET {url}: {refused}")
    } else if e.is_timeout() {
        format!("GET {url} timed out")
    } else if e.is_connect() {
        format!("GET {url}: connection failed")
    } else {
        format!("GET {url}: {e}")
    }
}

/// Probe results of the spec's providers, by name, for [`config::generate`].
pub fn served_by_name(reports: &[Report]) -> BTreeMap<String, Served> {
    reports.iter().filter_map(|r| r.served.as_ref().ok().map(|s| (r.name.clone(), s.clone()))).collect()
}

/// VllmConfigReady (only with spec.vllm) and VllmWarning for the reports of
/// the spec's providers and of discovered Services.
pub fn conditions(spec: &TinycodeInstanceSpec, providers: &[Report], discovered: &[Report]) -> Vec<Desired> {
    let mut out = Vec::new();
    let mut warnings: Vec<String> = Vec::new();
    if let Some(list) = spec.vllm.as_ref().filter(|l| !l.is_empty()) {
        let mut missing = Vec::new();
        for p in list {
            let report = providers.iter().find(|r| r.name == p.name);
            let has_user_models = p.models.as_ref().is_some_and(|m| !m.is_empty());
            match report.map(|r| &r.served) {
                Some(Ok(s)) if !s.is_empty() || has_user_models => {}
                Some(Ok(_)) => missing.push(format!("{} serves no models", p.name)),
                Some(Err(e)) if has_user_models => {
                    warnings.push(format!("{}: not probed ({e}); using the limits in spec.vllm", p.name))
                }
                Some(Err(e)) => missing.push(format!("{} ({e})", p.name)),
                None => missing.push(format!("{} was not probed", p.name)),
            }
        }
        out.push(if missing.is_empty() {
            Desired::new(VLLM_CONFIG_READY, true, "ProvidersConfigured", format!("{} vLLM provider(s) configured", list.len()))
        } else {
            Desired::new(
                VLLM_CONFIG_READY,
                false,
                "ProvidersUnavailable",
                format!(
                    "left out of the config: {}; check the URL and that the server answers GET /v1/models, or list its models with limits in spec.vllm[].models",
                    missing.join("; ")
                ),
            )
        });
    }
    for r in providers.iter().chain(discovered) {
        warnings.extend(r.warnings.iter().cloned());
    }
    for r in discovered {
        if let Err(e) = &r.served {
            warnings.push(format!("discovered Service {}: {e}", r.name));
        }
    }
    if !out.is_empty() || !discovered.is_empty() {
        out.push(if warnings.is_empty() {
            Desired::new(VLLM_WARNING, false, "NoWarnings", "the vLLM servers look well configured")
        } else {
            Desired::new(VLLM_WARNING, true, "ServerMisconfigured", warnings.join("; "))
        });
    }
    out
}

#[cfg(test)]
mod tests {
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
        for ok in [
            "http://10.0.0.5:8000/v1",
            "https://vllm.models.svc:8443",
            "http://192.168.1.9",
            "http://vllm-qwen.vllm:8000",
        ] {
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
        for ok in ["http://10.0.0.5:8000", "http://192.168.1.9", "http://[fd12::1]:8000", "https://models.example.com"]
        {
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
        let s = parse_models(br#"{"object":"list","data":[{"id":"a","max_model_len":8192},{"id":"b","max_model_len":131072},{"nope":1}]}"#).unwrap();
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
}

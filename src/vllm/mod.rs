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

pub use crate::settings::ProbeSettings;

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
#[path = "tests.rs"]
mod tests;

//! vLLM providers: probing `GET <url>/v1/models` (short timeout, bounded
//! body, SSRF guard), the context-window and tool-calling checks, and the
//! conditions that report them. A misbehaving server never fails a
//! reconcile: it becomes a warning.
//!
//! Tenants choose the URLs and run the servers, so everything a probe keeps
//! or reports is bounded (models per provider, id length, warnings per
//! report, message length, cache content) and so is the work: probes in
//! flight across all instances ([`MAX_CONCURRENT_PROBES`]), DNS lookups
//! ([`netguard::DNS_SLOTS`]) and discovered Services per instance.

mod models;
pub(crate) mod netguard;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::json;
use tokio::sync::Semaphore;

pub use models::{MAX_MODEL_ID_LEN, MAX_MODELS_PER_PROVIDER, ModelList, parse_models};

use crate::api::TinycodeInstanceSpec;
use crate::render::config::{self, Served};

/// Annotation that makes a Service a discovery candidate.
pub const DISCOVER_ANNOTATION: &str = "tinycode.dev/discover";
/// Optional annotation giving a candidate's base URL explicitly.
pub const URL_ANNOTATION: &str = "tinycode.dev/vllm-url";
/// Below this context window tinycode's agent loop runs out of room.
pub const MIN_CONTEXT: i64 = 16384;
/// Most entries the probe cache holds; the oldest goes first when full.
pub const CACHE_CAPACITY: usize = 1024;
/// Most bytes the probe cache's content may take (see [`Report::footprint`]);
/// the oldest entries go first past it.
///
/// Without it the cache is still bounded, but loosely: an entry holds a key
/// and a URL of at most ~2.4 KiB each (URLs over [`MAX_URL_LEN`] are never
/// probed), at most 64 models × (256-byte id + ~64 bytes of map and String
/// overhead) ≈ 20 KiB, at most 9 warnings and an error of ≤ 512 bytes each
/// ≈ 5 KiB: ~30 KiB, × 1024 entries ≈ 30 MiB, half the operator's RSS
/// target. A usual entry (a few models, short ids) takes under 2 KiB, so
/// 4 MiB holds 1024 of them; only tenant-inflated entries are evicted early.
pub const CACHE_MAX_BYTES: usize = 4 << 20;
/// Longest provider URL probed, in bytes (the CRD's limit for spec.vllm[].url;
/// a discovery annotation could otherwise carry hundreds of KiB into the cache).
pub const MAX_URL_LEN: usize = 2048;
/// Warnings kept per probe report; one more says how many were left out.
pub const MAX_WARNINGS_PER_REPORT: usize = 8;
/// Longest single warning or error text taken from a probe, in bytes.
pub const MAX_WARNING_LEN: usize = 512;
/// Longest condition message built from probe results, in bytes.
pub const MAX_CONDITION_MESSAGE_LEN: usize = 4096;
/// Probes in flight at once across all instances, so thousands of tenant
/// URLs cannot open thousands of sockets (and read-buffers) at once.
pub const MAX_CONCURRENT_PROBES: usize = 32;
/// Discovered Services probed per instance (the first by namespace/name).
pub const MAX_DISCOVERED_PER_INSTANCE: usize = 16;
/// A probe that found no free slot within the probe timeout.
pub const BUSY: &str = "not probed: the operator is busy probing other servers";

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

/// What probing one server found.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub name: String,
    pub url: String,
    pub served: Result<Served, String>,
    /// At most [`MAX_WARNINGS_PER_REPORT`] + 1, each at most [`MAX_WARNING_LEN`] bytes.
    pub warnings: Vec<String>,
    /// Models the server listed beyond [`MAX_MODELS_PER_PROVIDER`], left out of the config.
    pub models_not_listed: usize,
    /// Models left out because their id is longer than [`MAX_MODEL_ID_LEN`].
    pub long_ids_skipped: usize,
}

impl Report {
    /// A report of a server not (yet) probed.
    pub fn new(name: &str, url: &str) -> Self {
        Report {
            name: name.into(),
            url: url.into(),
            served: Err(String::new()),
            warnings: Vec::new(),
            models_not_listed: 0,
            long_ids_skipped: 0,
        }
    }

    /// Roughly the heap bytes this report holds (for [`CACHE_MAX_BYTES`]):
    /// string lengths plus a fixed overhead per map entry and string.
    pub fn footprint(&self) -> usize {
        const PER_ENTRY: usize = 64;
        let served = match &self.served {
            Ok(models) => models.keys().map(|id| id.len() + PER_ENTRY).sum(),
            Err(e) => e.len(),
        };
        std::mem::size_of::<Self>()
            + self.name.len()
            + self.url.len()
            + served
            + self.warnings.iter().map(|w| w.len() + PER_ENTRY).sum::<usize>()
    }
}

/// `text` cut to at most `max` bytes at a char boundary, ending in "…" when cut.
pub fn bounded(text: &str, max: usize) -> String {
    const ELLIPSIS: &str = "…";
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max.saturating_sub(ELLIPSIS.len());
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{ELLIPSIS}", &text[..end])
}

/// `parts` joined with "; " in at most `max` bytes (`max` ≥ 64): the parts
/// that do not fit are counted in a closing "... (N more)".
pub fn join_bounded(parts: &[String], max: usize) -> String {
    // Room kept for the closing "; ... (N more)" while parts remain.
    const RESERVE: usize = 32;
    let mut out = String::new();
    for (i, part) in parts.iter().enumerate() {
        let sep = if out.is_empty() { 0 } else { 2 };
        let reserve = if i + 1 < parts.len() { RESERVE } else { 0 };
        if out.len() + sep + part.len() + reserve > max {
            let more = format!("... ({} more)", parts.len() - i);
            if !out.is_empty() {
                out.push_str("; ");
            }
            out.push_str(&more);
            return out;
        }
        if sep > 0 {
            out.push_str("; ");
        }
        out.push_str(part);
    }
    out
}

/// At most [`MAX_WARNINGS_PER_REPORT`] warnings of at most
/// [`MAX_WARNING_LEN`] bytes, and one saying how many more there were.
fn cap_warnings(name: &str, warnings: Vec<String>) -> Vec<String> {
    let more = warnings.len().saturating_sub(MAX_WARNINGS_PER_REPORT);
    let mut out: Vec<String> =
        warnings.iter().take(MAX_WARNINGS_PER_REPORT).map(|w| bounded(w, MAX_WARNING_LEN)).collect();
    if more > 0 {
        out.push(bounded(&format!("{name}: {more} more warning(s) not shown"), MAX_WARNING_LEN));
    }
    out
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

/// An HTTP client for addresses a tenant chooses (model servers, an
/// instance's activity report): no redirects, no proxy, `settings.timeout`
/// per request, and names resolved by [`netguard::GuardedResolver`].
pub fn guarded_client(settings: &ProbeSettings) -> reqwest::Client {
    // reqwest is built without a crypto provider of its own (kube brings ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .timeout(settings.timeout)
        .connect_timeout(settings.timeout)
        .redirect(reqwest::redirect::Policy::none())
        .no_proxy()
        // Names are resolved and their addresses checked in one step, so
        // the address checked is the address connected to.
        .dns_resolver(netguard::GuardedResolver::with_nameservers(
            settings.allow_loopback,
            settings.timeout,
            &settings.nameservers,
        ))
        .build()
        .expect("HTTP client")
}

/// Probes servers, reusing recent answers.
pub struct Prober {
    client: reqwest::Client,
    settings: ProbeSettings,
    cache: Mutex<HashMap<String, (Instant, Report)>>,
    /// [`MAX_CONCURRENT_PROBES`] slots; a probe holds one while it talks to its server.
    slots: Semaphore,
}

impl Prober {
    pub fn new(settings: ProbeSettings) -> Self {
        let client = guarded_client(&settings);
        Self { client, settings, cache: Mutex::default(), slots: Semaphore::new(MAX_CONCURRENT_PROBES) }
    }

    /// Probes every (name, url) concurrently.
    pub async fn probe_all(&self, targets: &[(String, String)]) -> Vec<Report> {
        futures::future::join_all(targets.iter().map(|(n, u)| self.probe(n, u))).await
    }

    /// Probes every (name, url, API key) concurrently; a key is sent as a
    /// bearer token (`spec.vllm[].apiKeySecret`) and never logged or reported.
    pub async fn probe_all_with_keys(&self, targets: &[(String, String, Option<String>)]) -> Vec<Report> {
        futures::future::join_all(targets.iter().map(|(n, u, k)| self.probe_with_key(n, u, k.as_deref()))).await
    }

    pub async fn probe(&self, name: &str, url: &str) -> Report {
        self.probe_with_key(name, url, None).await
    }

    pub async fn probe_with_key(&self, name: &str, url: &str, key: Option<&str>) -> Report {
        if url.len() > MAX_URL_LEN {
            // Neither cached nor echoed whole: the text is the tenant's.
            let mut report = Report::new(name, &bounded(url, 256));
            report.served = Err(format!("the URL is longer than {MAX_URL_LEN} bytes; it is never probed"));
            return report;
        }
        let base = config::normalize_vllm_url(url);
        let token = key;
        // Answers to a key are cached under the key's digest: another
        // instance naming the same server without it does not see them.
        let key = match token {
            Some(t) => format!("{name}\n{base}\n{}", crate::render::values::sha256_hex(t.as_bytes())),
            None => format!("{name}\n{base}"),
        };
        if let Some((at, report)) = self.cache.lock().expect("lock").get(&key)
            && at.elapsed() < self.settings.cache_ttl
        {
            return report.clone();
        }
        if let Err(e) = ssrf_check(&base, self.settings.allow_loopback) {
            let mut report = Report::new(name, &base);
            report.served = Err(bounded(&e, MAX_WARNING_LEN));
            return report;
        }
        // Waiting for a slot counts against the probe timeout only, so a
        // crowd of slow servers delays other probes by at most that long.
        let Ok(slot) = tokio::time::timeout(self.settings.timeout, self.slots.acquire()).await else {
            // Not cached: the next reconcile tries again.
            let mut report = Report::new(name, &base);
            report.served = Err(BUSY.to_string());
            return report;
        };
        let report = self.probe_uncached(name, &base, token).await;
        drop(slot);
        let mut cache = self.cache.lock().expect("lock");
        let (ttl, capacity) = (self.settings.cache_ttl, CACHE_CAPACITY);
        cache_insert(&mut cache, key, report.clone(), ttl, capacity, CACHE_MAX_BYTES);
        report
    }

    async fn probe_uncached(&self, name: &str, base: &str, token: Option<&str>) -> Report {
        let mut report = Report::new(name, base);
        let listed = match self.get_bounded(&format!("{base}/models"), token).await {
            Ok((status, body)) if status.is_success() => parse_models(&body),
            Ok((status, _)) => Err(format!("GET {base}/models answered {status}")),
            Err(e) => Err(e),
        };
        let mut warnings = Vec::new();
        if let Ok(list) = &listed {
            // First, so a long list of small-context models cannot push it past the cap.
            if let Some(model) = list.served.keys().next()
                && let Some(w) = self.tool_check(name, base, model, token).await
            {
                warnings.push(w);
            }
            warnings.extend(context_warnings(name, &list.served));
        }
        report.warnings = cap_warnings(name, warnings);
        report.served = match listed {
            Ok(list) => {
                (report.models_not_listed, report.long_ids_skipped) = (list.not_listed, list.long_ids);
                Ok(list.served)
            }
            Err(e) => Err(bounded(&e, MAX_WARNING_LEN)),
        };
        report
    }

    /// A one-token chat completion offering a tool: vLLM without
    /// `--enable-auto-tool-choice` refuses it and says so.
    async fn tool_check(&self, name: &str, base: &str, model: &str, token: Option<&str>) -> Option<String> {
        let body = json!({
            "model": model, "max_tokens": 1,
            "messages": [{"role": "user", "content": "ping"}],
            "tools": [{"type": "function", "function": {"name": "noop", "description": "does nothing",
                       "parameters": {"type": "object", "properties": {}}}}],
            "tool_choice": "auto"
        });
        let mut request = self.client.post(format!("{base}/chat/completions")).json(&body);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.ok()?;
        if response.status().is_success() {
            return None;
        }
        let text = read_bounded(response, self.settings.max_body).await.ok()?;
        tool_calling_disabled(&String::from_utf8_lossy(&text)).then(|| {
            format!("{name}: tool calling is not enabled; restart vLLM with --enable-auto-tool-choice --tool-call-parser <parser for {model}>")
        })
    }

    async fn get_bounded(&self, url: &str, token: Option<&str>) -> Result<(reqwest::StatusCode, Vec<u8>), String> {
        let mut request = self.client.get(url);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        let response = request.send().await.map_err(|e| describe(url, &e))?;
        let status = response.status();
        let body = read_bounded(response, self.settings.max_body).await.map_err(|e| format!("GET {url}: {e}"))?;
        Ok((status, body))
    }
}

// Not moka with a weigher: moka admits entries by frequency (TinyLFU) and
// evicts in the background, so neither "the newest answer is kept" nor the
// byte bound would hold when an insert returns; here both hold at once (the
// tests in tests.rs show it), for a cache of at most 1024 entries.
/// Stores a probe result: drops expired entries, then the oldest ones while
/// the cache holds `capacity` entries or the new one would take its content
/// past `max_bytes`, so tenants cannot grow it without bound.
fn cache_insert(
    cache: &mut HashMap<String, (Instant, Report)>,
    key: String,
    report: Report,
    ttl: Duration,
    capacity: usize,
    max_bytes: usize,
) {
    let size = |k: &String, r: &Report| k.len() + r.footprint();
    cache.retain(|_, (at, _)| at.elapsed() < ttl);
    cache.remove(&key);
    let mut bytes: usize = cache.iter().map(|(k, (_, r))| size(k, r)).sum();
    let new = size(&key, &report);
    while cache.len() >= capacity.max(1) || (!cache.is_empty() && bytes + new > max_bytes) {
        let Some(oldest) = cache.iter().min_by_key(|(_, (at, _))| *at).map(|(k, _)| k.clone()) else { break };
        if let Some((_, r)) = cache.remove(&oldest) {
            bytes -= size(&oldest, &r);
        }
    }
    cache.insert(key, (Instant::now(), report));
}

pub(crate) async fn read_bounded(response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
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

pub(crate) fn describe(url: &str, e: &reqwest::Error) -> String {
    if let Some(refused) = netguard::find_refusal(e) {
        format!("GET {url}: {refused}")
    } else if let Some(failed) = netguard::find_lookup_failure(e) {
        format!("GET {url}: {failed}")
    } else if e.is_timeout() {
        format!("GET {url} timed out")
    } else if e.is_connect() {
        format!("GET {url}: connection failed")
    } else {
        format!("GET {url}: {e}")
    }
}

/// The first [`MAX_DISCOVERED_PER_INSTANCE`] discovery candidates (name,
/// URL) by namespace/name, so every reconcile probes the same ones, and how
/// many were left out.
pub fn first_discovered(mut candidates: Vec<(String, String)>) -> (Vec<(String, String)>, usize) {
    candidates.sort();
    candidates.dedup_by(|a, b| a.0 == b.0);
    let skipped = candidates.len().saturating_sub(MAX_DISCOVERED_PER_INSTANCE);
    candidates.truncate(MAX_DISCOVERED_PER_INSTANCE);
    (candidates, skipped)
}

/// Probe results of the spec's providers, by name, for [`config::generate`].
pub fn served_by_name(reports: &[Report]) -> BTreeMap<String, Served> {
    reports.iter().filter_map(|r| r.served.as_ref().ok().map(|s| (r.name.clone(), s.clone()))).collect()
}

/// One finding of the probes: whether it holds, a reason word and a message
/// (bounded: the texts come from tenants' servers). The reconcile turns
/// findings into conditions; this layer does not know conditions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    pub holds: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Finding {
    fn new(holds: bool, reason: &'static str, message: impl Into<String>) -> Self {
        Self { holds, reason, message: message.into() }
    }
}

/// What the probes of one instance found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Only with `spec.vllm`: whether every provider made it into the config
    /// (the VllmConfigReady condition).
    pub config_ready: Option<Finding>,
    /// Whenever something was probed or left unprobed: whether there is
    /// anything to warn about (the VllmWarning condition).
    pub warning: Option<Finding>,
}

/// The [`Summary`] of the reports of the spec's providers and of discovered
/// Services, also warning that `discovery_skipped` discovered Services were
/// not probed (beyond [`MAX_DISCOVERED_PER_INSTANCE`]). Every part of a
/// message is cut to [`MAX_WARNING_LEN`] bytes and each message to
/// [`MAX_CONDITION_MESSAGE_LEN`]: the texts come from tenants' servers.
pub fn summarize(
    spec: &TinycodeInstanceSpec,
    providers: &[Report],
    discovered: &[Report],
    discovery_skipped: usize,
) -> Summary {
    let mut summary = Summary::default();
    let mut warnings: Vec<String> = Vec::new();
    if discovery_skipped > 0 {
        warnings.push(format!(
            "{discovery_skipped} more discovered Service(s) not probed (the operator probes at most \
             {MAX_DISCOVERED_PER_INSTANCE} per instance, the first by namespace/name)"
        ));
    }
    if let Some(list) = spec.vllm.as_ref().filter(|l| !l.is_empty()) {
        let mut missing = Vec::new();
        for p in list {
            let report = providers.iter().find(|r| r.name == p.name);
            let has_user_models = p.models.as_ref().is_some_and(|m| !m.is_empty());
            match report.map(|r| &r.served) {
                Some(Ok(s)) if !s.is_empty() || has_user_models => {}
                Some(Ok(_)) => missing.push(format!("{} serves no models", p.name)),
                Some(Err(e)) if has_user_models => warnings.push(bounded(
                    &format!("{}: not probed ({e}); using the limits in spec.vllm", p.name),
                    MAX_WARNING_LEN,
                )),
                Some(Err(e)) => missing.push(bounded(&format!("{} ({e})", p.name), MAX_WARNING_LEN)),
                None => missing.push(format!("{} was not probed", p.name)),
            }
        }
        summary.config_ready = Some(if missing.is_empty() {
            Finding::new(true, "ProvidersConfigured", format!("{} vLLM provider(s) configured", list.len()))
        } else {
            Finding::new(
                false,
                "ProvidersUnavailable",
                format!(
                    "left out of the config: {}; check the URL and that the server answers GET /v1/models, or list its models with limits in spec.vllm[].models",
                    // Room for the fixed text around the list.
                    join_bounded(&missing, MAX_CONDITION_MESSAGE_LEN - 160)
                ),
            )
        });
    }
    for r in providers.iter().chain(discovered) {
        if r.models_not_listed > 0 {
            warnings.push(format!(
                "{}: {} more models not listed (the operator keeps at most {MAX_MODELS_PER_PROVIDER} per provider)",
                r.name, r.models_not_listed
            ));
        }
        if r.long_ids_skipped > 0 {
            warnings.push(format!(
                "{}: {} models left out: their ids are longer than {MAX_MODEL_ID_LEN} bytes",
                r.name, r.long_ids_skipped
            ));
        }
        warnings.extend(r.warnings.iter().take(MAX_WARNINGS_PER_REPORT + 1).cloned());
    }
    for r in discovered {
        if let Err(e) = &r.served {
            warnings.push(format!("discovered Service {}: {e}", r.name));
        }
    }
    if summary.config_ready.is_some() || !discovered.is_empty() || discovery_skipped > 0 {
        summary.warning = Some(if warnings.is_empty() {
            Finding::new(false, "NoWarnings", "the vLLM servers look well configured")
        } else {
            let warnings: Vec<String> = warnings.iter().map(|w| bounded(w, MAX_WARNING_LEN)).collect();
            Finding::new(true, "ServerMisconfigured", join_bounded(&warnings, MAX_CONDITION_MESSAGE_LEN))
        });
    }
    summary
}

#[cfg(test)]
mod tests;

//! The model-key proxy (`tinycode-operator model-keys`): a container beside
//! the agent in the tinycode pod that holds the model providers' API keys,
//! so the agent can use them but never read them. It listens on the pod's
//! loopback; the generated config points each keyed provider at
//! `http://127.0.0.1:<port>/<provider>/v1`, and a request there goes to that
//! provider's own URL with `Authorization: Bearer <key>` added. Routing is
//! by the path alone (the Host header and an absolute URI are ignored), no
//! redirect is followed, and nothing else ever receives a key: the agent's
//! container mounts no key, and this process is not dumpable, so the agent
//! cannot read its environment or memory either.
//!
//! Answers stream unbuffered (server-sent events pass chunk by chunk); a
//! request body is held whole before it is sent (32 MiB at most, 128 MiB of
//! them at once). Each answer's token usage, as the provider reports it, is
//! counted per provider on a metrics port that serves nothing else.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use futures::Stream;
use tokio::net::TcpListener;

mod metrics;
pub mod usage;

pub use metrics::{Labels, Metrics};
use usage::Scanner;

/// Largest request body passed on (a prompt with its whole context).
pub const MAX_REQUEST_BYTES: usize = 32 << 20;
/// Largest response passed on; past it the answer is cut off.
pub const MAX_RESPONSE_BYTES: u64 = 256 << 20;
/// Time to connect to a provider.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest a provider may stay silent while answering (a slow model's first token).
const READ_TIMEOUT: Duration = Duration::from_secs(600);

/// Headers of the agent's request that never reach a provider: credentials
/// of its own (the proxy's key replaces them), and what describes the hop
/// to the proxy rather than the request.
const DROPPED: [HeaderName; 5] =
    [header::AUTHORIZATION, header::HOST, header::COOKIE, header::CONTENT_LENGTH, HeaderName::from_static("x-api-key")];

/// One provider: its name (the first path segment) and base URL (ending in `/v1`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provider {
    pub name: String,
    pub base: String,
}

impl std::str::FromStr for Provider {
    type Err = String;

    /// `NAME=URL`, URL the provider's base (`/v1` is added when missing).
    fn from_str(s: &str) -> Result<Self, String> {
        let (name, url) = s.split_once('=').ok_or_else(|| format!("--provider {s:?}: expected NAME=URL"))?;
        let valid_name = !name.is_empty()
            && name.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-');
        if !valid_name {
            return Err(format!("--provider {s:?}: the name must be lowercase letters, digits and '-'"));
        }
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--provider {s:?}: the URL must be http:// or https://"));
        }
        let base = crate::render::config::normalize_vllm_url(url);
        let parsed = reqwest::Url::parse(&base).map_err(|e| format!("--provider {s:?}: {e}"))?;
        if parsed.host().is_none() || !parsed.username().is_empty() || parsed.password().is_some() {
            return Err(format!("--provider {s:?}: the URL needs a host and no credentials"));
        }
        Ok(Provider { name: name.to_string(), base })
    }
}

impl Provider {
    /// Whether the proxy may send a key to this provider's host: never to
    /// the pod's own loopback (where the agent could listen for it), a
    /// link-local neighbour or a metadata service, unless `allow_loopback`
    /// (loopback only; for tests and the bench).
    fn reachable(&self, allow_loopback: bool) -> Result<(), String> {
        use crate::vllm::netguard::{check_host_name, check_ip};
        let url = reqwest::Url::parse(&self.base).map_err(|e| e.to_string())?;
        let host = url.host_str().ok_or_else(|| format!("{}: no host", self.name))?;
        // The URL parser writes IP literals in one spelling (IPv6 in brackets).
        let refused = match host.trim_start_matches('[').trim_end_matches(']').parse::<std::net::IpAddr>() {
            Ok(ip) => check_ip(ip, allow_loopback).err(),
            Err(_) => check_host_name(host, allow_loopback).err(),
        };
        match refused {
            Some(r) => Err(format!("provider {}: {} is refused ({r})", self.name, self.base)),
            None => Ok(()),
        }
    }
}

#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Where `/metrics` is served (nothing else is); None: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// Directory holding one file per provider, named after it: its key.
    pub keys_dir: PathBuf,
    pub providers: Vec<Provider>,
    /// Namespace, instance and class on every metric.
    pub labels: Labels,
    /// Providers on loopback allowed (tests and the bench only).
    pub allow_loopback: bool,
    /// The instance's egress proxy, where its class limits egress: every
    /// provider is reached through it (None: directly).
    pub egress_proxy: Option<String>,
}

/// What a request handler needs.
pub struct Proxy {
    providers: BTreeMap<String, String>,
    /// Providers the proxy never sends a key to, with the reason (a request
    /// for one is answered 502 with it; the others go on working).
    refused: BTreeMap<String, String>,
    keys_dir: PathBuf,
    http: reqwest::Client,
    allow_loopback: bool,
    metrics: Arc<Metrics>,
    /// Request bodies held at once, in MiB (each holds at least one): the
    /// container's memory limit is not for one agent's parallel uploads to reach.
    held: Arc<tokio::sync::Semaphore>,
}

/// MiB of request bodies held at once (four bodies of the largest size).
const HELD_MIB: usize = 4 * (MAX_REQUEST_BYTES >> 20);

impl Proxy {
    /// The same proxy, reaching every provider through `egress` (an HTTP
    /// proxy: CONNECT for https, absolute form for http), which checks the
    /// provider's host against the class's list.
    pub fn through(mut self, egress: &str) -> Result<Self, String> {
        let proxy = reqwest::Proxy::all(egress).map_err(|e| format!("--egress-proxy {egress:?}: {e}"))?;
        self.http = Self::client(self.allow_loopback, Some(proxy))?;
        Ok(self)
    }

    /// The HTTP client to the providers: straight to them, or through `via`.
    fn client(allow_loopback: bool, via: Option<reqwest::Proxy>) -> Result<reqwest::Client, String> {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let builder = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            // A redirect could carry the key to a host of the answer's choosing.
            .redirect(reqwest::redirect::Policy::none())
            // A name that resolves to loopback, link-local or metadata
            // addresses gets no key either (checked on the address dialled;
            // through an egress proxy, that proxy checks the provider's).
            .dns_resolver(crate::vllm::netguard::GuardedResolver::with_nameservers(
                allow_loopback,
                CONNECT_TIMEOUT,
                &[],
            ));
        // Never a proxy of the environment: only the one the chart names.
        let builder = match via {
            Some(proxy) => builder.proxy(proxy),
            None => builder.no_proxy(),
        };
        builder.build().map_err(|e| format!("cannot build the HTTP client: {e}"))
    }

    pub fn new(providers: &[Provider], keys_dir: PathBuf, metrics: Arc<Metrics>, allow_loopback: bool) -> Self {
        let http = Self::client(allow_loopback, None).expect("HTTP client");
        let (mut refused, mut allowed) = (BTreeMap::new(), BTreeMap::new());
        for p in providers {
            match p.reachable(allow_loopback) {
                Ok(()) => allowed.insert(p.name.clone(), p.base.clone()),
                Err(e) => refused.insert(p.name.clone(), e),
            };
        }
        let held = Arc::new(tokio::sync::Semaphore::new(HELD_MIB));
        Proxy { providers: allowed, refused, keys_dir, http, allow_loopback, metrics, held }
    }

    /// Why a provider gets no key, if it is one of the refused.
    pub fn refusal(&self, provider: &str) -> Option<&str> {
        self.refused.get(provider).map(String::as_str)
    }

    /// The provider's key, read from its file for each request (a rotated
    /// Secret reaches the mounted file within a minute; no restart needed).
    fn key(&self, provider: &str) -> Result<HeaderValue, String> {
        let path = self.keys_dir.join(provider);
        let key = std::fs::read_to_string(&path).map_err(|e| format!("no key for {provider} ({e})"))?;
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("the key for {provider} is empty"));
        }
        HeaderValue::from_str(&format!("Bearer {key}"))
            .map(|mut v| {
                v.set_sensitive(true);
                v
            })
            .map_err(|_| format!("the key for {provider} is not a valid header value"))
    }
}

/// The loopback listener's routes: every path goes through [`forward`].
pub fn router(proxy: Arc<Proxy>) -> Router {
    Router::new().fallback(forward).with_state(proxy)
}

/// The metrics listener's one route.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(|State(m): State<Arc<Metrics>>| async move {
                ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], m.encode())
            }),
        )
        .with_state(metrics)
}

/// `/<provider>/v1/<rest>` → (provider, `<base>/<rest>?<query>`), only
/// where the URL stays under the provider's base: no segment that is, or
/// decodes to, `.` or `..`, no encoded `/` or `\`, and the URL as the
/// client will send it (dot segments removed) still under the base.
pub fn route(providers: &BTreeMap<String, String>, path_and_query: &str) -> Option<(String, String)> {
    let (path, query) = match path_and_query.split_once('?') {
        Some((p, q)) => (p, Some(q)),
        None => (path_and_query, None),
    };
    let (name, rest) = path.strip_prefix('/')?.split_once('/').unwrap_or((path.strip_prefix('/')?, ""));
    let base = providers.get(name)?;
    let rest = rest.strip_prefix("v1")?;
    if !(rest.is_empty() || rest.starts_with('/')) {
        return None;
    }
    let lower = rest.to_ascii_lowercase();
    if rest.contains('\\') || lower.contains("%2f") || lower.contains("%5c") {
        return None;
    }
    let dots = |segment: &str| matches!(segment.to_ascii_lowercase().replace("%2e", ".").as_str(), "." | "..");
    if rest.split('/').any(dots) {
        return None;
    }
    let mut url = format!("{base}{rest}");
    if let Some(q) = query {
        url.push('?');
        url.push_str(q);
    }
    let (sent, base) = (reqwest::Url::parse(&url).ok()?, reqwest::Url::parse(base).ok()?);
    let under = sent.path() == base.path() || sent.path().starts_with(&format!("{}/", base.path()));
    (sent.origin() == base.origin() && under).then(|| (name.to_string(), url))
}

/// Methods passed on: what OpenAI-compatible APIs use. TRACE (which echoes
/// the request, key and all), CONNECT and the rest are refused.
fn method_allowed(m: &axum::http::Method) -> bool {
    use axum::http::Method;
    [Method::GET, Method::HEAD, Method::POST, Method::DELETE].contains(m)
}

fn refuse(status: StatusCode, message: String) -> Response {
    let body = serde_json::json!({"error": {"message": message, "type": "tinycode_model_keys"}});
    (status, axum::Json(body)).into_response()
}

async fn forward(State(proxy): State<Arc<Proxy>>, req: Request) -> Response {
    let path = req.uri().path_and_query().map(|p| p.as_str().to_string()).unwrap_or_default();
    let first = path.trim_start_matches('/').split(['/', '?']).next().unwrap_or_default();
    if let Some(why) = proxy.refusal(first) {
        proxy.metrics.request(first, "refused");
        return refuse(StatusCode::BAD_GATEWAY, why.to_string());
    }
    let Some((provider, url)) = route(&proxy.providers, &path) else {
        let known: Vec<&str> = proxy.providers.keys().map(String::as_str).collect();
        let message = format!("no provider at {path:?}; this proxy serves /<provider>/v1/... for {}", known.join(", "));
        return refuse(StatusCode::NOT_FOUND, message);
    };
    if !method_allowed(req.method()) {
        proxy.metrics.request(&provider, "method");
        return refuse(StatusCode::METHOD_NOT_ALLOWED, format!("{} is not passed on", req.method()));
    }
    let key = match proxy.key(&provider) {
        Ok(key) => key,
        Err(e) => {
            proxy.metrics.request(&provider, "no-key");
            return refuse(StatusCode::BAD_GATEWAY, e);
        }
    };
    let (parts, body) = req.into_parts();
    let declared = parts.headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
    // What the body may hold, reserved until it has been sent on.
    let mib = declared.map_or(MAX_REQUEST_BYTES >> 20, |n| n.div_ceil(1 << 20)).clamp(1, MAX_REQUEST_BYTES >> 20);
    let _held = proxy.held.clone().acquire_many_owned(mib as u32).await.expect("the semaphore is never closed");
    let body = match declared.filter(|n| *n > MAX_REQUEST_BYTES) {
        Some(_) => Err(()),
        None => axum::body::to_bytes(body, MAX_REQUEST_BYTES).await.map_err(drop),
    };
    let body = match body {
        Ok(b) => b,
        Err(_) => {
            proxy.metrics.request(&provider, "too-large");
            let message = format!("the request body is over {} MiB", MAX_REQUEST_BYTES >> 20);
            return refuse(StatusCode::PAYLOAD_TOO_LARGE, message);
        }
    };
    let mut headers = parts.headers;
    crate::gate::proxy::strip_hop_by_hop(&mut headers);
    for h in &DROPPED {
        headers.remove(h);
    }
    headers.insert(header::AUTHORIZATION, key);
    // Plain answers, so their usage can be read (compression would hide it).
    headers.insert(header::ACCEPT_ENCODING, HeaderValue::from_static("identity"));
    let sent = proxy.http.request(parts.method, &url).headers(headers).body(body).send().await;
    let upstream = match sent {
        Ok(r) => r,
        Err(e) => {
            proxy.metrics.request(&provider, "unreachable");
            // reqwest's error names the URL (the provider's, never the key).
            return refuse(StatusCode::BAD_GATEWAY, format!("{provider}: {}", e.without_url()));
        }
    };
    proxy.metrics.request(&provider, upstream.status().as_str());
    answer(upstream, proxy.metrics.clone(), provider)
}

/// The provider's answer, streamed on as it comes and read for its usage.
fn answer(upstream: reqwest::Response, metrics: Arc<Metrics>, provider: String) -> Response {
    let mut headers: HeaderMap = upstream.headers().clone();
    crate::gate::proxy::strip_hop_by_hop(&mut headers);
    // The body is re-framed (and may be cut at the bound).
    headers.remove(header::CONTENT_LENGTH);
    let text = |h: &HeaderName| headers.get(h).and_then(|v| v.to_str().ok()).map(str::to_string);
    let scanner =
        Scanner::new(&text(&header::CONTENT_TYPE).unwrap_or_default(), text(&header::CONTENT_ENCODING).as_deref());
    let status = upstream.status();
    let body =
        Metered { inner: Box::pin(upstream.bytes_stream()), scanner: Some(scanner), passed: 0, metrics, provider };
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = status;
    *response.headers_mut() = headers;
    response
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

/// A response body on its way: bounded, and its usage counted when it ends
/// (or when the agent hangs up first: what was read so far counts).
struct Metered {
    inner: ByteStream,
    scanner: Option<Scanner>,
    passed: u64,
    metrics: Arc<Metrics>,
    provider: String,
}

impl Metered {
    fn settle(&mut self) {
        if let Some(usage) = self.scanner.take().and_then(Scanner::finish) {
            self.metrics.tokens(&self.provider, usage);
        }
    }
}

impl Stream for Metered {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(chunk))) => {
                this.passed += chunk.len() as u64;
                if this.passed > MAX_RESPONSE_BYTES {
                    this.settle();
                    let e = format!("{}: the answer is over {} MiB", this.provider, MAX_RESPONSE_BYTES >> 20);
                    return Poll::Ready(Some(Err(std::io::Error::other(e))));
                }
                if let Some(s) = this.scanner.as_mut() {
                    s.feed(&chunk);
                }
                Poll::Ready(Some(Ok(chunk)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.settle();
                Poll::Ready(Some(Err(std::io::Error::other(e.without_url()))))
            }
            Poll::Ready(None) => {
                this.settle();
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for Metered {
    fn drop(&mut self) {
        self.settle();
    }
}

/// Runs the proxy until the process ends; an error when it cannot start.
pub async fn run(settings: Settings) -> Result<(), String> {
    if settings.providers.is_empty() {
        return Err("no --provider given: nothing to proxy".into());
    }
    // Also done first thing in main (src/main.rs); here for callers that
    // come another way. It keeps a process of the same user that shares the
    // PID namespace out of this one's memory and files (ptrace access needs a
    // dumpable process); CAP_SYS_PTRACE (the shell tier) overrides it.
    nix::sys::prctl::set_dumpable(false).map_err(|e| format!("cannot make the process non-dumpable: {e}"))?;
    let metrics = Arc::new(Metrics::new(settings.labels.clone()));
    let proxy = Proxy::new(&settings.providers, settings.keys_dir.clone(), metrics.clone(), settings.allow_loopback);
    let proxy = match &settings.egress_proxy {
        Some(url) => proxy.through(url)?,
        None => proxy,
    };
    let proxy = Arc::new(proxy);
    for (name, why) in &proxy.refused {
        tracing::warn!(provider = %name, reason = %why, "model-keys: this provider gets no key");
    }
    let listener =
        TcpListener::bind(settings.listen).await.map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    if let Some(addr) = settings.metrics_listen {
        let l = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(async move { axum::serve(l, metrics_router(metrics)).await });
    }
    let names: Vec<&str> = settings.providers.iter().map(|p| p.name.as_str()).collect();
    tracing::info!(listen = %settings.listen, providers = %names.join(","), "model-keys: serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    // Small writes go out at once: a streamed answer is many small events,
    // and Nagle's algorithm would hold each behind the last one's ACK.
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::select! {
        served = axum::serve(listener, router(proxy)) => served.map_err(|e| e.to_string())?,
        _ = term.recv() => tracing::info!("SIGTERM: model-keys stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: model-keys stopping"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;

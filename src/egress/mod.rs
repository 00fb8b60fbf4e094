//! The egress proxy (`tinycode-operator egress-proxy`): the one way out of
//! an instance whose class sets `egress`. It runs in its own pod (a pod's
//! containers share one network, so a proxy beside the agent could be
//! bypassed); the instance's NetworkPolicy lets the agent's pod reach DNS
//! and this proxy alone, and the agent's `HTTPS_PROXY`/`HTTP_PROXY` point
//! here. A tool that ignores them has no route at all.
//!
//! It speaks HTTP CONNECT (tunnels, for TLS and anything else) and plain
//! HTTP in absolute form. Each target is checked against the allow-list
//! ([`policy`]) by name, looked up once as a fully qualified name (no search
//! list: the name checked is the name asked), and checked again by every
//! address and alias of the answer; the proxy then connects to those
//! addresses and no others, so an answer that changes between check and
//! connect (DNS rebinding) changes nothing. A refusal is a 403 whose text
//! names the host and why, a JSON log line, and a count by reason on the
//! metrics port.

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, Response, StatusCode, Uri, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};

mod metrics;
pub mod policy;
mod report;

pub use metrics::{Labels, Metrics};
use policy::{Policy, PolicyFile, Refusal};

use crate::ops::http_server::{Limits, accept, http1_builder};
use crate::vllm::netguard::GuardedResolver;

/// Largest allow-list file read.
const MAX_POLICY_BYTES: u64 = 1 << 20;
/// Bound on one lookup, the wait for a DNS slot included.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(5);
/// Time to connect to one address of the target.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Client connections at once. A tunnel leaves its connection's slot once
/// open (hyper hands the upgraded stream over), so tunnels have their own.
const MAX_CONNECTIONS: usize = 512;
/// Tunnels open at once.
const MAX_TUNNELS: usize = 256;
/// A tunnel through which nothing passed for this long is closed.
const TUNNEL_IDLE: Duration = Duration::from_secs(300);
/// Longest a plain request waits for the answer's head (a model's first token).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);
/// Addresses of one answer tried in turn.
const MAX_ADDRESSES: usize = 4;

#[derive(Debug, Clone)]
pub struct Settings {
    pub listen: SocketAddr,
    /// Where `/metrics` is served (nothing else is); None: not served.
    pub metrics_listen: Option<SocketAddr>,
    /// The allow-list (JSON, [`PolicyFile`]).
    pub policy: PathBuf,
    pub labels: Labels,
    /// Name servers to ask instead of the system's (tests).
    pub nameservers: Vec<SocketAddr>,
    /// The relay's endpoint that names refusals on the instance, and the
    /// file of the instance's start credential (None: refusals are only
    /// logged and counted).
    pub refused: Option<(String, PathBuf)>,
    /// Loopback targets pass the guard (the bench).
    pub allow_loopback: bool,
}

/// What each request needs.
pub struct Egress {
    policy: Policy,
    resolver: GuardedResolver,
    metrics: Arc<Metrics>,
    reporter: Option<Arc<report::Reporter>>,
    tunnels: Arc<tokio::sync::Semaphore>,
}

type Answer = Response<Body>;

impl Egress {
    pub fn new(policy: Policy, nameservers: &[SocketAddr], metrics: Arc<Metrics>) -> Self {
        let resolver = GuardedResolver::with_nameservers(false, LOOKUP_TIMEOUT, nameservers);
        Egress {
            policy,
            resolver,
            metrics,
            reporter: None,
            tunnels: Arc::new(tokio::sync::Semaphore::new(MAX_TUNNELS)),
        }
    }

    /// Refusals are told to the relay at `url` with the credential in `credential_file`.
    pub fn with_reporter(mut self, url: &str, credential_file: &std::path::Path) -> Result<Self, String> {
        self.reporter = Some(Arc::new(report::Reporter::new(url, credential_file)?));
        Ok(self)
    }

    /// The addresses `host`:`port` may be reached at, or why not.
    pub async fn decide(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, Refusal> {
        let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            self.policy.check_literal(ip, port)?;
            return Ok(vec![SocketAddr::new(ip, port)]);
        }
        let name = self.policy.qualify(host);
        if !policy::valid_name(&name) {
            return Err(Refusal::BadRequest(format!("{host:?} is not a host name")));
        }
        self.policy.check_name(&name, port)?;
        let (ips, aliases) =
            self.resolver.resolve_with_aliases(&format!("{name}.")).await.map_err(|e| Refusal::Lookup(e.reason))?;
        self.policy.check_answer(&name, port, &aliases, &ips)?;
        Ok(ips.into_iter().map(|ip| SocketAddr::new(ip, port)).collect())
    }

    async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Result<Answer, std::convert::Infallible> {
        let answer = if req.method() == Method::CONNECT {
            self.tunnel(req).await
        } else if req.uri().scheme().is_some() {
            self.forward(req).await
        } else if req.uri().path() == "/healthz" {
            text(StatusCode::OK, "ok\n".into())
        } else {
            text(
                StatusCode::BAD_REQUEST,
                "this is the instance's egress proxy: send requests through it (HTTPS_PROXY, HTTP_PROXY)\n".into(),
            )
        };
        Ok(answer)
    }

    /// CONNECT host:port: checked, connected, then answered 200 and joined.
    async fn tunnel(&self, req: Request<Incoming>) -> Answer {
        let Some((host, port)) = req.uri().authority().and_then(|a| Some((a.host().to_string(), a.port_u16()?))) else {
            return self.refused("?", 0, &Refusal::BadRequest("CONNECT needs host:port".into()));
        };
        let target = match self.decide(&host, port).await {
            Ok(addrs) => addrs,
            Err(r) => return self.refused(&host, port, &r),
        };
        let Ok(slot) = self.tunnels.clone().try_acquire_owned() else {
            self.metrics.refused("too_many_tunnels");
            return text(StatusCode::SERVICE_UNAVAILABLE, format!("{MAX_TUNNELS} tunnels are open already\n"));
        };
        let upstream = match connect(&target).await {
            Ok(s) => s,
            Err(e) => return self.unreachable(&host, port, &e),
        };
        self.metrics.allowed("connect");
        tokio::spawn(async move {
            match hyper::upgrade::on(req).await {
                Ok(upgraded) => pump(TokioIo::new(upgraded), upstream, TUNNEL_IDLE).await,
                Err(e) => tracing::debug!(error = %e, "egress: the client left before the tunnel opened"),
            }
            drop(slot);
        });
        Response::new(Body::empty())
    }

    /// A plain HTTP request in absolute form, passed on in origin form.
    async fn forward(&self, req: Request<Incoming>) -> Answer {
        let (host, port) = match target_of(&req) {
            Ok(t) => t,
            Err(r) => return self.refused(req.uri().host().unwrap_or("?"), 0, &r),
        };
        let target = match self.decide(&host, port).await {
            Ok(addrs) => addrs,
            Err(r) => return self.refused(&host, port, &r),
        };
        let upstream = match connect(&target).await {
            Ok(s) => s,
            Err(e) => return self.unreachable(&host, port, &e),
        };
        let (mut sender, conn) = match hyper::client::conn::http1::handshake(TokioIo::new(upstream)).await {
            Ok(pair) => pair,
            Err(e) => return self.unreachable(&host, port, &e.to_string()),
        };
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let req = origin_form(req, &host, port);
        self.metrics.allowed("http");
        match tokio::time::timeout(ANSWER_TIMEOUT, sender.send_request(req)).await {
            Ok(Ok(resp)) => resp.map(Body::new),
            Ok(Err(e)) => self.unreachable(&host, port, &e.to_string()),
            Err(_) => self.unreachable(&host, port, &format!("no answer within {ANSWER_TIMEOUT:?}")),
        }
    }

    fn refused(&self, host: &str, port: u16, why: &Refusal) -> Answer {
        self.metrics.refused(why.reason());
        if let Some(reporter) = &self.reporter {
            reporter.note(host, port, why.reason());
        }
        tracing::info!(target: "egress", host = %host, port, reason = why.reason(), detail = %why, "egress refused");
        let status = match why {
            Refusal::BadRequest(_) => StatusCode::BAD_REQUEST,
            Refusal::Lookup(_) => StatusCode::BAD_GATEWAY,
            _ => StatusCode::FORBIDDEN,
        };
        let l = self.metrics.labels();
        text(
            status,
            format!(
                "egress to {host}:{port} refused for {}/{}: {why}.\nThe instance's TinycodeClass ({}) lists where \
                 its agents may connect (spec.egress); ask a cluster-admin to add the host there.\n",
                l.namespace,
                l.instance,
                if l.class.is_empty() { "none" } else { &l.class },
            ),
        )
    }

    fn unreachable(&self, host: &str, port: u16, why: &str) -> Answer {
        self.metrics.refused("unreachable");
        tracing::info!(target: "egress", host = %host, port, reason = "unreachable", detail = %why, "egress failed");
        text(StatusCode::BAD_GATEWAY, format!("egress to {host}:{port} is allowed, but it does not answer: {why}\n"))
    }
}

/// The host and port of an absolute-form request, refusing one whose Host
/// headers (two of them, or one naming another host) disagree with it: a
/// server behind would route on the header the proxy never checked.
fn target_of<B>(req: &Request<B>) -> Result<(String, u16), Refusal> {
    let uri = req.uri();
    if uri.scheme_str() != Some("http") {
        return Err(Refusal::BadRequest("only http:// is passed in absolute form; https goes by CONNECT".into()));
    }
    let authority = uri.authority().ok_or_else(|| Refusal::BadRequest("no host".into()))?;
    if authority.as_str().contains('@') {
        return Err(Refusal::BadRequest("credentials in the URL".into()));
    }
    let port = authority.port_u16().unwrap_or(80);
    let hosts: Vec<&HeaderValue> = req.headers().get_all(header::HOST).iter().collect();
    if hosts.len() > 1 {
        return Err(Refusal::BadRequest("two Host headers".into()));
    }
    if let Some(h) = hosts.first() {
        let same = h.to_str().is_ok_and(|h| {
            let (name, p) = split_host_port(h);
            policy::normalize(name) == policy::normalize(authority.host()) && p.unwrap_or(80) == port
        });
        if !same {
            return Err(Refusal::BadRequest("the Host header names another host than the request".into()));
        }
    }
    Ok((authority.host().to_string(), port))
}

fn split_host_port(s: &str) -> (&str, Option<u16>) {
    match s.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(':') && !p.contains(']') => (h, p.parse().ok().or(Some(0))),
        _ => (s, None),
    }
}

/// The request as the origin server expects it: origin form, its own Host,
/// no proxy headers.
fn origin_form(req: Request<Incoming>, host: &str, port: u16) -> Request<Incoming> {
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    parts.uri = path.parse::<Uri>().unwrap_or_else(|_| Uri::from_static("/"));
    // Hop-by-hop headers (RFC 9110 7.6.1), and those the client's
    // Connection header names, are the proxy's, not the server's.
    let named: Vec<String> = parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|h| h.trim().to_ascii_lowercase()))
        .collect();
    for h in ["proxy-authorization", "proxy-connection", "connection", "keep-alive", "te", "trailer", "upgrade"] {
        parts.headers.remove(h);
    }
    for h in named.iter().filter(|h| !h.is_empty() && *h != "host") {
        parts.headers.remove(h.as_str());
    }
    let value = if port == 80 { host.to_string() } else { format!("{host}:{port}") };
    if let Ok(v) = HeaderValue::from_str(&value) {
        parts.headers.insert(header::HOST, v);
    }
    Request::from_parts(parts, body)
}

/// Copies both ways until both sides end, or nothing passes for `idle`.
async fn pump<A, B>(a: A, b: B, idle: Duration)
where
    A: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use std::sync::atomic::AtomicU64;
    let started = tokio::time::Instant::now();
    let last = AtomicU64::new(0);
    let (mut ar, mut aw) = tokio::io::split(a);
    let (mut br, mut bw) = tokio::io::split(b);
    let watch = async {
        loop {
            tokio::time::sleep(idle / 10).await;
            let quiet = started.elapsed().as_secs().saturating_sub(last.load(std::sync::atomic::Ordering::Relaxed));
            if Duration::from_secs(quiet) >= idle {
                break;
            }
        }
    };
    tokio::select! {
        _ = async { tokio::join!(one_way(&mut ar, &mut bw, &last, started), one_way(&mut br, &mut aw, &last, started)) } => {}
        () = watch => tracing::debug!("egress: a tunnel idle for {idle:?} closed"),
    }
}

/// Copies `r` to `w` until `r` ends, noting in `last` (seconds since
/// `started`) when bytes last passed.
async fn one_way<R, W>(r: &mut R, w: &mut W, last: &std::sync::atomic::AtomicU64, started: tokio::time::Instant)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 << 10];
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        last.store(started.elapsed().as_secs(), std::sync::atomic::Ordering::Relaxed);
        if w.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    let _ = w.shutdown().await;
}

/// Connects to the first address that answers (of the first few).
async fn connect(addrs: &[SocketAddr]) -> Result<TcpStream, String> {
    let mut last = String::from("no address");
    for addr in addrs.iter().take(MAX_ADDRESSES) {
        match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Ok(Err(e)) => last = format!("{addr}: {e}"),
            Err(_) => last = format!("{addr}: no answer within {CONNECT_TIMEOUT:?}"),
        }
    }
    Err(last)
}

fn text(status: StatusCode, body: String) -> Answer {
    let mut resp = Response::new(Body::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    if status != StatusCode::OK {
        // A refused client is not kept: its next request would be refused too.
        resp.headers_mut().insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    resp
}

/// Reads and parses the allow-list.
pub fn load_policy(path: &std::path::Path) -> Result<Policy, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut raw = Vec::new();
    file.take(MAX_POLICY_BYTES + 1).read_to_end(&mut raw).map_err(|e| format!("{}: {e}", path.display()))?;
    if raw.len() as u64 > MAX_POLICY_BYTES {
        return Err(format!("{}: larger than {MAX_POLICY_BYTES} bytes", path.display()));
    }
    let parsed: PolicyFile = serde_json::from_slice(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
    Policy::new(&parsed).map_err(|e| format!("{}: {e}", path.display()))
}

/// Serves `egress` on `listener`, forever.
pub async fn serve(listener: TcpListener, egress: Arc<Egress>) {
    let limits =
        Limits { max_connections: MAX_CONNECTIONS, max_connections_per_peer: MAX_CONNECTIONS, ..Limits::default() };
    let builder = http1_builder(&limits);
    accept(listener, limits, move |io| {
        let egress = egress.clone();
        builder.serve_connection(io, service_fn(move |req| egress.clone().handle(req))).with_upgrades()
    })
    .await
}

pub async fn run(settings: Settings) -> Result<(), String> {
    let mut policy = load_policy(&settings.policy)?;
    if settings.allow_loopback {
        policy = policy.with_loopback();
    }
    let metrics = Arc::new(Metrics::new(settings.labels.clone()));
    let mut egress = Egress::new(policy, &settings.nameservers, metrics.clone());
    if let Some((url, credential)) = &settings.refused {
        egress = egress.with_reporter(url, credential)?;
    }
    let egress = Arc::new(egress);
    let listener =
        TcpListener::bind(settings.listen).await.map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    if let Some(addr) = settings.metrics_listen {
        let l = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(async move { axum::serve(l, metrics::router(metrics)).await });
    }
    tracing::info!(listen = %settings.listen, "egress-proxy: serving");
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    tokio::select! {
        () = serve(listener, egress) => {}
        _ = term.recv() => tracing::info!("SIGTERM: egress-proxy stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: egress-proxy stopping"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;

//! `tinycode-operator gate`: the authorization gate in a sign-in instance's
//! front pod, between the sign-in proxy and the tinycode server:
//!
//! ```text
//! front (public port) → oauth2-proxy / oauth-proxy (127.0.0.1:4182) → gate (127.0.0.1:4181) → agent Service → tinycode server (4096)
//! ```
//!
//! The front is this same process (`--front-listen`, `front.rs`): it passes
//! every request to the proxy and back, and only turns the proxy's own
//! errors into text for clients that are not browsers.
//!
//! The front stays up while tinycode is stopped, so the gate can tell an
//! allowed user why it does not answer (`--agent`).
//!
//! In password mode (`--mode=password`) there is no proxy: the gate is the
//! front's public port, and whoever presents the instance's password (HTTP
//! Basic, any user name; [`proxy::Password::admits`]) passes. Anyone else gets
//! 401 with a Basic challenge and a page naming the Secret that holds it
//! (`--password-secret`); no review is made. The rows below about identities
//! and reviews are the sign-in modes'.
//!
//! The proxy in front authenticates the user; the gate asks the apiserver
//! whether that user may `use` this TinycodeInstance (verb `use` on
//! `tinycodeinstances.tinycode.dev`, the instance's name, its namespace), so
//! who may open an instance is plain RBAC: a RoleBinding in the namespace.
//!
//! | request                                              | answer                        |
//! |------------------------------------------------------|-------------------------------|
//! | `GET /tinycode-gate/healthz`                         | 200 `ok` (no sign-in needed)  |
//! | no user (oidc) or no access token (openshift)        | 401                           |
//! | an identity header over 8 KiB                        | 431                           |
//! | a malformed one (65+ groups, a group over 256 bytes) | 400                           |
//! | a token the apiserver does not accept (openshift)    | 401                           |
//! | a POST, PUT, PATCH, DELETE or upgrade from another site | 403                         |
//! | a user or group under `system:` (oidc)               | 403                           |
//! | a user not allowed `use`                             | 403, naming the user and the command that grants it |
//! | the review failed or took over 5 s                   | 503 (fail closed)             |
//! | an allowed user                                      | the tinycode server's answer  |
//! | an allowed user, no connection to the server         | 503: starting (the page reloads), or stopped and how to start it (`--agent`); idle-stopped with `--start-url`: started (`wake.rs`) |
//!
//! In password mode a caller with the password who finds the server down
//! gets the same pages, and starts an idle-stopped instance the same way.
//!
//! Refused requests never reach the server. Decisions (allowed and
//! refused) are cached for `--cache-seconds` (at most 60, so a revoked
//! RoleBinding takes effect within a minute) by the SHA-256 of the user and
//! groups or of the token, never the token; a failed review is not cached.
//! Allowed requests lose the caller's Authorization and
//! X-Forwarded-Access-Token headers and the proxy's cookies (its session),
//! and carry the server's password instead (`--password-file`), so the user
//! never needs it. State-changing requests and upgrades another site sends
//! in the user's name are refused (403) before any review (`browser.rs`);
//! so are user and group names under `system:` (oidc). A browser gets each
//! refusal as a small HTML page (`pages.rs`), any other client as text.
//! Each decision made, and each start a user's request causes, is one JSON
//! line on standard output (`audit.rs`; sign-in modes only).

pub mod activity;
pub mod audit;
pub mod browser;
pub mod front;
pub mod identity;
pub mod pages;
pub mod proxy;
pub mod review;
pub mod used;
pub mod wake;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::TcpListener;

pub use identity::{Mode, Prefixes, Refusal, Subject};
pub use proxy::{Password, Upstream};
pub use review::{ApiAccess, KubeReviewer, Reviewer, Target};

pub use crate::render::signin::AgentState;

use crate::ops::decisions::{DecisionCache, Decisions};
use crate::ops::http_server::{self, Limits};

/// Answered by the gate itself, without sign-in, for the kubelet's probes.
pub const HEALTH_PATH: &str = "/tinycode-gate/healthz";
/// Decisions remembered at once.
pub const MAX_CACHED: usize = 4096;
/// The longest `--cache-seconds`: a revoked RoleBinding must take effect within a minute.
pub const MAX_CACHE_SECONDS: u64 = 60;

/// What the gate's listeners allow. Behind the sign-in proxy its only
/// client is the proxy in the same pod (on loopback), which holds a
/// connection per open WebSocket or event stream; a kept-alive connection
/// may idle longer than Go's default 90 s, so the proxy closes idle
/// connections first. On the front's public port (password mode's
/// listener, the sign-in modes' `--front-listen`) the clients are the
/// router or ingress controller, every connection from its few addresses,
/// so a per-peer cap would only cap the router; 1024 connections (open UIs
/// and their streams) per instance is far above one team's use.
pub const LIMITS: Limits = Limits {
    header_read_timeout: Duration::from_secs(120),
    // Unused by the gate: streams and WebSockets last as long as they last.
    request_timeout: Duration::from_secs(0),
    max_connections: 1024,
    max_connections_per_peer: 1024,
};

/// Who may pass: a signed-in user allowed `use` (decisions cached), or, in
/// password mode, whoever has the password.
pub struct Gate {
    mode: Mode,
    check: Check,
    /// Sign-in modes: a line for each decision made (`audit.rs`).
    audit: Option<Arc<audit::Audit>>,
}

enum Check {
    Review { prefixes: Prefixes, reviewer: Arc<dyn Reviewer>, decisions: Decisions },
    Password(Password),
}

/// What the gate does with a request.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Let through; the user the proxy named (none in password mode).
    Pass(Option<Subject>),
    /// Refused; the subject when the headers named one.
    Refuse(Refusal, Option<Subject>),
}

impl Gate {
    /// Decisions are kept for `ttl`, allowed and refused alike.
    pub fn new(mode: Mode, prefixes: Prefixes, reviewer: Arc<dyn Reviewer>, ttl: Duration) -> Self {
        let decisions = Decisions::new(DecisionCache::new(MAX_CACHED, ttl, ttl));
        Gate { mode, check: Check::Review { prefixes, reviewer, decisions }, audit: None }
    }

    /// Password mode: whoever presents `password` passes.
    pub fn password(password: Password) -> Self {
        Gate { mode: Mode::Password, check: Check::Password(password), audit: None }
    }

    /// Checks a request's headers, from the cache when it can.
    pub async fn check(&self, headers: &HeaderMap) -> Verdict {
        let (prefixes, reviewer, decisions) = match &self.check {
            Check::Review { prefixes, reviewer, decisions } => (prefixes, reviewer, decisions),
            Check::Password(password) if password.admits(headers) => return Verdict::Pass(None),
            Check::Password(_) => return Verdict::Refuse(Refusal::NoPassword, None),
        };
        let subject = match identity::subject(self.mode, headers, prefixes) {
            Ok(subject) => subject,
            Err(refusal) => return Verdict::Refuse(refusal, None),
        };
        let review = || async {
            let decided = reviewer.review(&subject).await;
            if let (Ok(decision), Some(audit)) = (&decided, &self.audit) {
                audit.access(&subject, *decision);
            }
            decided
        };
        let decision = match decisions.decide(subject.key(), review).await {
            Ok(decision) => decision,
            Err(e) => {
                tracing::warn!(user = subject.display_name(), error = %e, "gate: cannot review the user's access");
                return Verdict::Refuse(Refusal::Unavailable, Some(subject));
            }
        };
        match identity::outcome(decision) {
            Ok(()) => Verdict::Pass(Some(subject)),
            Err(refusal) => Verdict::Refuse(refusal, Some(subject)),
        }
    }
}

/// The gate and where it sends what it lets through.
pub struct GateService {
    gate: Gate,
    upstream: Upstream,
    target: Target,
    /// Requests let through count as activity (idle stop).
    activity: Arc<activity::Tracker>,
    /// The sign-in proxy's cookie, kept from the server.
    proxy_cookie: String,
    /// What to tell an allowed user while the server does not answer.
    agent: AgentState,
    /// Asks the operator to start the instance when it is idle-stopped.
    waker: Option<wake::Waker>,
    /// Password mode: the Secret holding the password, named on the prompt's page.
    password_secret: Option<String>,
    /// Sign-in modes: tells the relay who uses the instance (`status.lastUsedBy`).
    reporter: Option<Arc<used::Reporter>>,
}

impl GateService {
    pub fn new(
        gate: Gate,
        upstream: Upstream,
        target: Target,
        agent: AgentState,
        activity: Arc<activity::Tracker>,
    ) -> Self {
        let proxy_cookie = crate::render::signin::cookie_name(&target.namespace, &target.instance);
        GateService {
            gate,
            upstream,
            target,
            activity,
            proxy_cookie,
            agent,
            waker: None,
            password_secret: None,
            reporter: None,
        }
    }

    /// Password mode: the prompt's page names the Secret holding the password.
    pub fn with_password_secret(mut self, secret: Option<String>) -> Self {
        self.password_secret = secret;
        self
    }

    /// An idle-stopped instance is started when an allowed user opens it.
    pub fn with_waker(mut self, waker: wake::Waker) -> Self {
        self.waker = Some(waker);
        self
    }

    /// Sign-in modes: each allowed user is named to the relay (`used.rs`).
    pub fn with_reporter(mut self, reporter: Arc<used::Reporter>) -> Self {
        self.reporter = Some(reporter);
        self
    }

    /// Sign-in modes: who used the instance, as lines of `audit` (its
    /// decisions, and the starts its users' requests cause).
    pub fn with_audit(mut self, audit: Arc<audit::Audit>) -> Self {
        self.gate.audit = Some(audit);
        self
    }

    /// What an allowed user (`subject`; None in password mode) is told while
    /// the server does not answer: an idle-stopped instance is asked to start
    /// first.
    async fn agent_now(&self, subject: Option<&Subject>) -> AgentState {
        let (AgentState::Idle, Some(waker)) = (self.agent, &self.waker) else { return self.agent };
        match waker.wake().await {
            Some((state, asked)) => {
                if let (true, Some(audit), Some(subject)) = (asked, &self.gate.audit, subject) {
                    audit.start(subject, state);
                }
                state
            }
            None => AgentState::Idle,
        }
    }

    /// The answer to one request; in the sign-in modes marked as the
    /// gate's, so the front in front of the proxy knows it from the proxy's
    /// own ([`front::MARK`]).
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        let mut resp = self.answer(req).await;
        if self.gate.mode != Mode::Password {
            resp.headers_mut().insert(front::MARK, front::mark_value());
        }
        resp
    }

    async fn answer(&self, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() == HEALTH_PATH {
            return match *req.method() {
                Method::GET | Method::HEAD => proxy::text(StatusCode::OK, "ok"),
                _ => proxy::text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n"),
            };
        }
        if let Some(why) = browser::cross_site(req.method(), req.headers()) {
            tracing::debug!(why, "gate: refused a cross-site request");
            let (namespace, instance) = (&self.target.namespace, &self.target.instance);
            return pages::refusal(req.headers(), Refusal::CrossSite, None, namespace, instance);
        }
        match self.gate.check(req.headers()).await {
            Verdict::Pass(subject) => {
                tracing::debug!(user = subject.as_ref().map_or("(password)", Subject::display_name), "gate: allowed");
                self.activity.touch();
                if let (Some(reporter), Some(Subject::User { name, .. } | Subject::Token { name: Some(name), .. })) =
                    (&self.reporter, &subject)
                {
                    reporter.note(name);
                }
                let mut req = req;
                browser::strip_proxy_cookies(req.headers_mut(), &self.proxy_cookie);
                let html = pages::wants_html(req.headers());
                let response = self.upstream.forward(req).await;
                // A long answer (a stream) ends later than it started.
                self.activity.touch();
                let (namespace, instance) = (&self.target.namespace, &self.target.instance);
                match response {
                    Ok(response) => response,
                    Err(_) => pages::agent_down(html, self.agent_now(subject.as_ref()).await, namespace, instance),
                }
            }
            Verdict::Refuse(refusal, subject) => {
                let user = subject.as_ref().map_or("", Subject::display_name);
                tracing::debug!(user, ?refusal, "gate: refused");
                let (namespace, instance) = (&self.target.namespace, &self.target.instance);
                if refusal == Refusal::NoPassword {
                    return pages::password_prompt(req.headers(), namespace, instance, self.password_secret.as_deref());
                }
                pages::refusal(req.headers(), refusal, subject.as_ref(), namespace, instance)
            }
        }
    }
}

/// Serves `service` on `listener`, forever: HTTP/1 with upgrades.
pub async fn serve(listener: TcpListener, service: Arc<GateService>) {
    let builder = http_server::http1_builder(&LIMITS);
    http_server::accept(listener, LIMITS, move |io| {
        let service = service.clone();
        let handler = service_fn(move |req| {
            let service = service.clone();
            async move { Ok::<_, Infallible>(service.handle(req).await) }
        });
        builder.serve_connection(io, handler).with_upgrades()
    })
    .await
}

/// The gate's settings (`tinycode-operator gate`).
#[derive(Clone, Debug)]
pub struct Settings {
    pub listen: SocketAddr,
    /// `http://host:port` of the tinycode server.
    pub upstream: String,
    /// Whether the server runs (else why not), for the page shown while it does not answer.
    pub agent: AgentState,
    pub target: Target,
    pub mode: Mode,
    pub prefixes: Prefixes,
    pub cache_ttl: Duration,
    /// oidc: the operator relay's review endpoint for this instance.
    pub review_url: Option<String>,
    /// oidc: the instance's relay credential.
    pub relay_credential_file: PathBuf,
    /// The operator relay's start endpoint for this instance (None: an
    /// idle-stopped instance is not started by its users' requests).
    pub start_url: Option<String>,
    /// Sign-in modes: the relay's endpoint that records who used the
    /// instance (None: not recorded), with the start credential.
    pub used_url: Option<String>,
    /// The instance's start credential, presented at `start_url`.
    pub start_credential_file: PathBuf,
    pub ca_file: PathBuf,
    /// `None`: from KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
    pub api_server: Option<String>,
    /// `None`: the server gets no password.
    pub password_file: Option<PathBuf>,
    /// Password mode: the Secret holding the password (named on the prompt's page).
    pub password_secret: Option<String>,
    /// Where the activity report is served (`None`: it is not).
    pub activity_listen: Option<SocketAddr>,
    /// The image's own activity report, joined into the gate's.
    pub activity_report: Option<String>,
    /// Sign-in modes: the front's public port (`front.rs`), and the sign-in
    /// proxy's `http://host:port` it passes everything to.
    pub front: Option<(SocketAddr, String)>,
    /// Sign-in modes: where the audit counters are served (`/metrics` only).
    pub metrics_listen: Option<SocketAddr>,
}

/// The service's password page, audit lines and the relay's routes (start,
/// who used it), as `settings` ask.
fn with_relay(service: GateService, settings: &Settings) -> Result<(GateService, Option<Arc<audit::Audit>>), String> {
    let mut service = service.with_password_secret(settings.password_secret.clone());
    let mut counted = None;
    if settings.mode != Mode::Password {
        let audit = Arc::new(audit::Audit::stdout(settings.target.clone()));
        service = service.with_audit(audit.clone());
        counted = Some(audit);
    }
    if let Some(url) = &settings.start_url {
        service = service.with_waker(wake::Waker::new(url, &settings.start_credential_file)?);
    }
    match (&settings.used_url, settings.mode) {
        (None, _) => {}
        (Some(_), Mode::Password) => {
            return Err("--used-url is for the sign-in modes: password mode names nobody".into());
        }
        (Some(url), _) => {
            service = service.with_reporter(Arc::new(used::Reporter::new(url, &settings.start_credential_file)?));
        }
    }
    Ok((service, counted))
}

/// The front's listener and service, when `settings` ask for one (the sign-in modes).
async fn bind_front(settings: &Settings) -> Result<Option<(TcpListener, Arc<front::Front>)>, String> {
    match (&settings.front, settings.mode) {
        (None, _) => Ok(None),
        (Some(_), Mode::Password) => {
            Err("--front-listen is for the sign-in modes: in password mode --listen is the front".into())
        }
        (Some((addr, proxy_url)), _) => {
            let front = Arc::new(front::Front::new(
                proxy_url,
                &settings.target.namespace,
                &settings.target.instance,
                settings.mode,
            )?);
            let listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
            Ok(Some((listener, front)))
        }
    }
}

/// Builds the gate from `settings` and serves until SIGTERM or SIGINT; an
/// error says what could not be set up.
pub async fn run(settings: Settings) -> Result<(), String> {
    if settings.target.namespace.is_empty() || settings.target.instance.is_empty() {
        return Err("--namespace and --instance must name the instance".into());
    }
    if settings.cache_ttl > Duration::from_secs(MAX_CACHE_SECONDS) {
        return Err(format!("--cache-seconds must be at most {MAX_CACHE_SECONDS}"));
    }
    let password = Password::new(settings.password_file.clone());
    // oidc asks the operator's relay; openshift asks the apiserver with the
    // user's own token (the gate sends none of its own); password mode asks
    // nobody.
    let (gate, server) = match settings.mode {
        Mode::Oidc => {
            let url = settings.review_url.clone().ok_or("--review-url is required in oidc mode")?;
            let reviewer = Arc::new(review::RelayReviewer::new(&url, &settings.relay_credential_file)?);
            (Gate::new(settings.mode, settings.prefixes.clone(), reviewer, settings.cache_ttl), url)
        }
        Mode::Openshift => {
            let server = match &settings.api_server {
                Some(server) => server.clone(),
                None => review::in_cluster_server()?,
            };
            let client =
                review::kube_client(&ApiAccess { server: &server, ca_file: &settings.ca_file, token_file: None })?;
            let reviewer = Arc::new(KubeReviewer::new(client, settings.target.clone()));
            (Gate::new(settings.mode, settings.prefixes.clone(), reviewer, settings.cache_ttl), server)
        }
        Mode::Password => {
            if settings.password_file.is_none() {
                return Err("--password-file is required in password mode".into());
            }
            (Gate::password(password.clone()), "(none: password mode)".to_string())
        }
    };
    let upstream = Upstream::new(&settings.upstream, password)?;
    let tracker = Arc::new(activity::Tracker::new(settings.activity_report.clone()));
    let (service, audit) = with_relay(
        GateService::new(gate, upstream, settings.target.clone(), settings.agent, tracker.clone()),
        &settings,
    )?;
    let service = Arc::new(service);
    if let (Some(addr), Some(audit)) = (settings.metrics_listen, audit) {
        let l = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(async move { axum::serve(l, audit::metrics_router(audit)).await });
    }
    let listener =
        TcpListener::bind(settings.listen).await.map_err(|e| format!("cannot listen on {}: {e}", settings.listen))?;
    let front = bind_front(&settings).await?;
    if let Some((listener, front)) = front {
        tokio::spawn(front::serve(listener, front));
    }
    if let Some(addr) = settings.activity_listen {
        let activity_listener = TcpListener::bind(addr).await.map_err(|e| format!("cannot listen on {addr}: {e}"))?;
        tokio::spawn(activity::serve(activity_listener, tracker));
    }
    tracing::info!(
        listen = %settings.listen,
        upstream = %settings.upstream,
        agent = settings.agent.as_str(),
        mode = ?settings.mode,
        namespace = %settings.target.namespace,
        instance = %settings.target.instance,
        reviews = %server,
        "gate: serving"
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    tokio::select! {
        _ = serve(listener, service) => {}
        _ = term.recv() => tracing::info!("SIGTERM: gate stopping"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: gate stopping"),
    }
    Ok(())
}

#[cfg(test)]
mod tests;

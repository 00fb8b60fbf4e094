//! The cluster-admin's OpenID Connect provider, as the operator uses it: its
//! endpoints (read from the discovery document), its client secret (a file
//! only this process reads) and the relay through which instance pods
//! redeem sign-in codes without ever holding that secret.
//!
//! The relay (`POST /oidc/token/<namespace>/<name>`) takes what an
//! instance's oauth2-proxy sends to a token endpoint, checks the instance's
//! credential ([`signin::relay_credential`]), that the instance exists in
//! auth.mode oidc and (for a code) that the redirect URI is the instance's
//! own callback, then forwards the request to the provider with the real
//! client secret and returns the provider's answer unchanged. Nothing of the
//! request or answer is logged.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;
use futures::StreamExt;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use super::start::Starter;
pub use super::start::{Instances, RelayTarget, bearer};
use crate::api::{AuthMode, TinycodeInstance};
use crate::render::signin::{self, OidcEndpoints};
use crate::settings::OidcSettings;

/// How long the discovery document is trusted before it is read again.
const DISCOVERY_TTL: Duration = Duration::from_secs(3600);
/// A failed discovery is retried no sooner than this.
const DISCOVERY_RETRY: Duration = Duration::from_secs(10);
/// Longest discovery document, token request and token answer accepted.
const MAX_DOCUMENT: usize = 256 * 1024;
const MAX_REQUEST: usize = 64 * 1024;
const MAX_ANSWER: usize = 1024 * 1024;
/// Longest client secret file read.
const MAX_SECRET: u64 = 4096;
/// Time the provider has to answer.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a refresh token's instance is remembered: longer than the
/// proxies' sessions (`--cookie-expire`, 12 h), after which none is refreshed.
pub const REFRESH_TTL: Duration = Duration::from_secs(13 * 3600);
/// Refresh tokens remembered at once (about 100 bytes each).
pub const MAX_REFRESHES: usize = 100_000;
/// At most one log line of refusals this often.
const REFUSAL_LOG_EVERY: Duration = Duration::from_secs(10);
/// Redemptions in flight at once for one namespace's instances (a sign-in
/// is one; a namespace's users rarely sign in in the same second).
pub const NAMESPACE_REDEMPTIONS: usize = 4;
/// Access reviews in flight at once for one namespace's gates (each gate
/// keeps its answers for a while, so few are asked).
pub const NAMESPACE_REVIEWS: usize = 8;
/// The relay's listener: connections at once, and from one peer (a pod's
/// oauth2-proxy holds one at a time). A client gets 5 s for a request head
/// and 10 s for the whole request (body included) before it is cut off.
pub const RELAY_LIMITS: crate::ops::http_server::Limits = crate::ops::http_server::Limits {
    header_read_timeout: Duration::from_secs(5),
    request_timeout: Duration::from_secs(15),
    max_connections: 1024,
    max_connections_per_peer: 4,
};

/// The provider and what the operator knows of it.
pub struct Provider {
    settings: OidcSettings,
    http: reqwest::Client,
    discovered: Mutex<Option<(Instant, Result<OidcEndpoints, String>)>>,
}

impl Provider {
    pub fn new(settings: OidcSettings) -> Arc<Self> {
        // reqwest is built without a crypto provider of its own (kube brings ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(PROVIDER_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .expect("HTTP client");
        Arc::new(Provider { settings, http, discovered: Mutex::new(None) })
    }

    pub fn settings(&self) -> &OidcSettings {
        &self.settings
    }

    /// The provider's endpoints: read once an hour, a failure retried after
    /// ten seconds (instances wait with a clear reason meanwhile).
    pub async fn endpoints(&self) -> Result<OidcEndpoints, String> {
        if let Some((at, result)) = self.discovered.lock().expect("discovery lock").as_ref() {
            let ttl = if result.is_ok() { DISCOVERY_TTL } else { DISCOVERY_RETRY };
            if at.elapsed() < ttl {
                return result.clone();
            }
        }
        let result = self.discover().await;
        if let Err(e) = &result {
            tracing::warn!(issuer = %self.settings.issuer_url, error = %e, "OIDC discovery failed");
        }
        *self.discovered.lock().expect("discovery lock") = Some((Instant::now(), result.clone()));
        result
    }

    async fn discover(&self) -> Result<OidcEndpoints, String> {
        let url = format!("{}/.well-known/openid-configuration", self.settings.issuer_url);
        let response = self.http.get(&url).send().await.map_err(|e| format!("GET {url}: {e}"))?;
        let status = response.status();
        let body = read_bounded(response, MAX_DOCUMENT).await.map_err(|e| format!("GET {url}: {e}"))?;
        if !status.is_success() {
            return Err(format!("GET {url}: HTTP {status}"));
        }
        let found: OidcEndpoints =
            serde_json::from_slice(&body).map_err(|e| format!("{url} is not an OpenID discovery document: {e}"))?;
        parse_discovery(&self.settings.issuer_url, found)
    }

    /// The client secret, read from its file every time (a rotated Secret
    /// takes effect without a restart).
    pub fn client_secret(&self) -> Result<Vec<u8>, String> {
        read_secret(&self.settings.client_secret_file)
    }

    /// The relay credential of one instance.
    pub fn relay_credential(&self, namespace: &str, name: &str) -> Result<String, String> {
        Ok(signin::relay_credential(&self.client_secret()?, namespace, name))
    }
}

/// The discovery document, checked: its issuer is the one configured (as
/// OpenID Connect Discovery requires) and every endpoint is http(s).
pub fn parse_discovery(issuer: &str, found: OidcEndpoints) -> Result<OidcEndpoints, String> {
    if found.issuer.trim_end_matches('/') != issuer.trim_end_matches('/') {
        return Err(format!(
            "the discovery document names issuer {:?}, not the configured {issuer:?} (--oidc-issuer-url)",
            found.issuer
        ));
    }
    for (what, url) in
        [("authorization_endpoint", &found.authorization), ("token_endpoint", &found.token), ("jwks_uri", &found.jwks)]
    {
        if !(url.starts_with("https://") || url.starts_with("http://")) {
            return Err(format!("the discovery document's {what} {url:?} is not an http(s) URL"));
        }
    }
    Ok(found)
}

fn read_secret(path: &PathBuf) -> Result<Vec<u8>, String> {
    use std::io::Read;
    let file = std::fs::File::open(path).map_err(|e| {
        format!("cannot read the OIDC client secret from {} (--oidc-client-secret-file): {e}", path.display())
    })?;
    let mut bytes = Vec::new();
    file.take(MAX_SECRET + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read the OIDC client secret from {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_SECRET {
        return Err(format!("the OIDC client secret in {} is longer than {MAX_SECRET} bytes", path.display()));
    }
    while bytes.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        bytes.pop();
    }
    if bytes.is_empty() {
        return Err(format!("the OIDC client secret file {} is empty", path.display()));
    }
    Ok(bytes)
}

async fn read_bounded(mut response: reqwest::Response, max: usize) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| e.to_string())? {
        if out.len() + chunk.len() > max {
            return Err(format!("answer longer than {max} bytes"));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// Instances from a watch of their own, cut down to what the relay reads
/// (auth mode, status.url): a redemption costs the apiserver nothing, so a
/// loop of requests, even with a valid credential, cannot load it. The relay
/// serves on every replica, before and without the lease, so it keeps this
/// cache apart from the controller's.
pub struct CachedInstances {
    store: Store<TinycodeInstance>,
}

impl CachedInstances {
    /// Starts the watch in the background (instances in `scope` only).
    pub fn start(client: &kube::Client, scope: &crate::watch_scope::WatchScope) -> Self {
        let (store, writer) = reflector::store();
        let events = watcher(scope.api::<TinycodeInstance>(client), watcher::Config::default())
            .default_backoff()
            .modify(trim_instance);
        tokio::spawn(reflector::reflector(writer, events).for_each(|_| futures::future::ready(())));
        CachedInstances { store }
    }

    /// Waits (at most `wait`) for the first list, so a relay that just
    /// started refuses no instance that exists.
    async fn ready(&self, wait: Duration) {
        let _ = tokio::time::timeout(wait, self.store.wait_until_ready()).await;
    }
}

/// An instance down to what the relay reads: the auth mode, status.url, and
/// what says whether it runs (spec.stopped, the idle decision, the start
/// annotation).
fn trim_instance(inst: &mut TinycodeInstance) {
    let (mode, stopped) = (inst.spec.auth.mode, inst.spec.stopped);
    let status = inst.status.take().unwrap_or_default();
    let idle = status.idle.map(|i| crate::api::IdleStatus {
        stopped: i.stopped,
        last_handled_start_at: i.last_handled_start_at,
        ..Default::default()
    });
    inst.spec = Default::default();
    inst.spec.auth.mode = mode;
    inst.spec.stopped = stopped;
    inst.status = (status.url.is_some() || idle.is_some()).then_some(crate::api::TinycodeInstanceStatus {
        url: status.url,
        idle,
        ..Default::default()
    });
    let start = inst.metadata.annotations.take().and_then(|mut a| a.remove_entry(crate::api::START_REQUEST_ANNOTATION));
    inst.metadata = kube::api::ObjectMeta {
        name: inst.metadata.name.take(),
        namespace: inst.metadata.namespace.take(),
        resource_version: inst.metadata.resource_version.take(),
        deletion_timestamp: inst.metadata.deletion_timestamp.take(),
        annotations: start.map(|(k, v)| [(k, v)].into()),
        ..Default::default()
    };
}

impl Instances for CachedInstances {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>> {
        Box::pin(async move {
            self.ready(Duration::from_secs(5)).await;
            let inst = self.store.get(&ObjectRef::new(name).within(namespace))?;
            if inst.metadata.deletion_timestamp.is_some() {
                return None;
            }
            Some(RelayTarget {
                mode: inst.spec.auth.mode,
                url: inst.status.as_ref().and_then(|s| s.url.clone()),
                agent: super::start::agent_of(&inst),
            })
        })
    }
}

/// At most [`NAMESPACE_REDEMPTIONS`] redemptions at once per namespace,
/// counted once the credential proved the namespace: a tenant's flood of its
/// own instance's requests waits on the provider for itself alone, and the
/// others' sign-ins go on.
#[derive(Default)]
struct NamespaceSlots {
    open: Mutex<std::collections::HashMap<String, usize>>,
}

/// One namespace's redemption in flight; dropping it gives the slot back.
struct NamespaceSlot {
    slots: Arc<NamespaceSlots>,
    namespace: String,
}

impl NamespaceSlots {
    fn try_acquire(self: &Arc<Self>, namespace: &str, max: usize) -> Option<NamespaceSlot> {
        let mut open = self.open.lock().expect("namespace slots lock");
        let count = open.entry(namespace.to_string()).or_insert(0);
        if *count >= max {
            if *count == 0 {
                open.remove(namespace);
            }
            return None;
        }
        *count += 1;
        Some(NamespaceSlot { slots: self.clone(), namespace: namespace.to_string() })
    }
}

impl Drop for NamespaceSlot {
    fn drop(&mut self) {
        let mut open = self.slots.open.lock().expect("namespace slots lock");
        if let Some(count) = open.get_mut(&self.namespace) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.namespace);
            }
        }
    }
}

/// Why the relay refuses a request (the answer says so; nothing is forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Not a form of an OAuth token request.
    Malformed,
    /// Another client id, or a credential that is not this instance's.
    BadCredential,
    /// No such instance in auth.mode oidc (or outside the watched namespaces).
    UnknownInstance,
    /// The redirect URI is not the instance's own callback.
    ForeignRedirect,
    /// A refresh token the relay did not hand to this instance.
    ForeignRefresh,
    /// The operator cannot read its client secret or reach the provider.
    Unavailable,
    /// The namespace has [`NAMESPACE_REDEMPTIONS`] redemptions in flight.
    Busy,
}

impl Refusal {
    fn answer(self) -> Response {
        // RFC 6749 §5.2 error codes, so oauth2-proxy reports them as such.
        let (status, error) = match self {
            Refusal::Malformed => (StatusCode::BAD_REQUEST, "invalid_request"),
            Refusal::BadCredential | Refusal::UnknownInstance => (StatusCode::UNAUTHORIZED, "invalid_client"),
            Refusal::ForeignRedirect | Refusal::ForeignRefresh => (StatusCode::BAD_REQUEST, "invalid_grant"),
            Refusal::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
            Refusal::Busy => (StatusCode::TOO_MANY_REQUESTS, "temporarily_unavailable"),
        };
        // A refused client keeps no connection (and with it no slot) open.
        let headers = [(header::CONTENT_TYPE, "application/json"), (header::CONNECTION, "close")];
        (status, headers, format!("{{\"error\":\"{error}\"}}")).into_response()
    }
}

/// The grant a token request asks for, holding only the fields the relay
/// forwards: the form sent to the provider is rebuilt from these, never
/// copied from the request, so nothing unchecked rides along with the real
/// client secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grant {
    /// A sign-in: the code, the callback it was issued for, and the PKCE verifier.
    Code { code: String, redirect_uri: String, code_verifier: Option<String> },
    /// A session kept alive.
    Refresh { refresh_token: String, scope: Option<String> },
}

impl Grant {
    /// The form for the provider's token endpoint, with the real client.
    pub fn form(&self, client_id: &str, client_secret: &[u8]) -> String {
        let mut form = form_urlencoded::Serializer::new(String::new());
        match self {
            Grant::Code { code, redirect_uri, code_verifier } => {
                form.append_pair("grant_type", "authorization_code");
                form.append_pair("code", code);
                form.append_pair("redirect_uri", redirect_uri);
                if let Some(verifier) = code_verifier {
                    form.append_pair("code_verifier", verifier);
                }
            }
            Grant::Refresh { refresh_token, scope } => {
                form.append_pair("grant_type", "refresh_token");
                form.append_pair("refresh_token", refresh_token);
                if let Some(scope) = scope {
                    form.append_pair("scope", scope);
                }
            }
        }
        form.append_pair("client_id", client_id);
        form.append_pair("client_secret", &String::from_utf8_lossy(client_secret));
        form.finish()
    }
}

/// A token request as the relay reads it.
#[derive(Debug, PartialEq, Eq)]
pub struct TokenRequest {
    pub grant: Grant,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

/// Reads the form and the client's credentials (client_secret_post, or
/// client_secret_basic from the Authorization header, not both). A field
/// given twice is refused: providers differ in which copy they act on, so
/// the relay would check one value and the provider use another.
pub fn token_request(headers: &HeaderMap, body: &[u8]) -> Result<TokenRequest, Refusal> {
    let mut fields = std::collections::BTreeMap::new();
    for (k, v) in form_urlencoded::parse(body) {
        if fields.insert(k.into_owned(), v.into_owned()).is_some() {
            return Err(Refusal::Malformed);
        }
    }
    let mut take = |k: &str| fields.remove(k);
    let (mut client_id, mut client_secret) = (take("client_id"), take("client_secret"));
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        if client_id.is_some() || client_secret.is_some() || headers.get_all(header::AUTHORIZATION).iter().count() > 1 {
            return Err(Refusal::Malformed);
        }
        let basic = auth.to_str().ok().and_then(|a| a.strip_prefix("Basic ")).ok_or(Refusal::Malformed)?;
        let decoded = base64::engine::general_purpose::STANDARD.decode(basic.trim()).map_err(|_| Refusal::Malformed)?;
        let decoded = String::from_utf8(decoded).map_err(|_| Refusal::Malformed)?;
        let (id, secret) = decoded.split_once(':').ok_or(Refusal::Malformed)?;
        // RFC 6749 §2.3.1: both are form-urlencoded inside the Basic header.
        let unescape =
            |s: &str| form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
        client_id = unescape(id);
        client_secret = unescape(secret);
    }
    let grant = match take("grant_type").as_deref() {
        Some("authorization_code") => Grant::Code {
            code: take("code").ok_or(Refusal::Malformed)?,
            redirect_uri: take("redirect_uri").ok_or(Refusal::Malformed)?,
            code_verifier: take("code_verifier"),
        },
        Some("refresh_token") => {
            Grant::Refresh { refresh_token: take("refresh_token").ok_or(Refusal::Malformed)?, scope: take("scope") }
        }
        _ => return Err(Refusal::Malformed),
    };
    Ok(TokenRequest { grant, client_id, client_secret })
}

/// Whether the request carries `namespace/name`'s own credential (pure, and
/// the first check: a made-up credential costs no lookup).
pub fn check_credential(
    req: &TokenRequest,
    client_id: &str,
    client_secret: &[u8],
    namespace: &str,
    name: &str,
) -> Result<(), Refusal> {
    if req.client_id.as_deref() != Some(client_id) {
        return Err(Refusal::BadCredential);
    }
    let presented = req.client_secret.as_deref().unwrap_or("");
    if !signin::relay_credential_matches(client_secret, namespace, name, presented) {
        return Err(Refusal::BadCredential);
    }
    Ok(())
}

/// Whether the grant may be redeemed for the instance (pure): it exists in
/// auth.mode oidc; a code comes back to its own callback; a refresh token is
/// one the relay handed to this same instance (`issued_to`, what the relay
/// recorded for that token).
pub fn check_grant(
    req: &TokenRequest,
    target: Option<&RelayTarget>,
    issued_to: Option<&InstanceKey>,
    namespace: &str,
    name: &str,
) -> Result<(), Refusal> {
    let Some(target) = target.filter(|t| t.mode == AuthMode::Oidc) else {
        return Err(Refusal::UnknownInstance);
    };
    match &req.grant {
        Grant::Code { redirect_uri, .. } => {
            let base = target.url.as_deref().and_then(url_base).ok_or(Refusal::UnknownInstance)?;
            let expected = format!("{base}{}", signin::CALLBACK_PATH);
            if *redirect_uri != expected {
                return Err(Refusal::ForeignRedirect);
            }
            Ok(())
        }
        Grant::Refresh { .. } => match issued_to {
            Some(key) if key.0 == namespace && key.1 == name => Ok(()),
            _ => Err(Refusal::ForeignRefresh),
        },
    }
}

/// An instance, as (namespace, name).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceKey(pub String, pub String);

/// Which instance each refresh token went to: the relay records every
/// refresh token in the provider's answers (by its SHA-256, never the
/// token) and redeems one only for the instance it went to. Kept in memory
/// for a session's longest life; after an operator restart (or on another
/// replica) a refresh is refused and the user signs in again.
pub struct Refreshes {
    issued: Mutex<std::collections::HashMap<[u8; 32], (InstanceKey, Instant)>>,
    ttl: Duration,
    max: usize,
}

impl Refreshes {
    pub fn new(ttl: Duration, max: usize) -> Self {
        Refreshes { issued: Mutex::new(std::collections::HashMap::new()), ttl, max }
    }

    fn key(token: &str) -> [u8; 32] {
        use sha2::Digest;
        sha2::Sha256::digest(token.as_bytes()).into()
    }

    /// The instance `token` was handed to, if the relay handed it out.
    pub fn issued_to(&self, token: &str) -> Option<InstanceKey> {
        let issued = self.issued.lock().expect("refresh lock");
        issued.get(&Self::key(token)).filter(|(_, at)| at.elapsed() < self.ttl).map(|(k, _)| k.clone())
    }

    /// Records that `token` went to `instance`; the oldest record goes when full.
    pub fn record(&self, token: &str, instance: InstanceKey) {
        let mut issued = self.issued.lock().expect("refresh lock");
        if issued.len() >= self.max {
            let ttl = self.ttl;
            issued.retain(|_, (_, at)| at.elapsed() < ttl);
            if issued.len() >= self.max
                && let Some(oldest) = issued.iter().min_by_key(|(_, (_, at))| *at).map(|(k, _)| *k)
            {
                issued.remove(&oldest);
            }
        }
        issued.insert(Self::key(token), (instance, Instant::now()));
    }
}

/// The refresh token in a provider's token answer, if any.
fn refresh_token_of(answer: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(answer).ok()?;
    v.get("refresh_token")?.as_str().filter(|t| !t.is_empty()).map(str::to_string)
}

/// Logs refusals at most once per [`REFUSAL_LOG_EVERY`], with how many
/// went unlogged: a loop of made-up credentials cannot fill the log.
struct RefusalLog {
    last: Mutex<(Option<Instant>, u64)>,
}

impl RefusalLog {
    fn note(&self, namespace: &str, name: &str, refusal: Refusal) {
        let mut last = self.last.lock().expect("refusal log lock");
        if last.0.is_some_and(|at| at.elapsed() < REFUSAL_LOG_EVERY) {
            last.1 += 1;
            return;
        }
        let unlogged = std::mem::take(&mut last.1);
        last.0 = Some(Instant::now());
        drop(last);
        tracing::info!(namespace, name, ?refusal, unlogged, "OIDC relay refused a token request");
    }
}

/// Scheme and host (and port, if any) of an http(s) URL: `https://host`.
fn url_base(url: &str) -> Option<String> {
    let (scheme, rest) = url.split_once("://")?;
    if scheme != "https" && scheme != "http" {
        return None;
    }
    let host = rest.split(['/', '?', '#']).next()?;
    (!host.is_empty() && !host.contains('@')).then(|| format!("{scheme}://{host}"))
}

/// Asks the apiserver whether a signed-in user may `use` one instance.
pub trait AccessReviews: Send + Sync {
    fn may_use<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        user: &'a str,
        groups: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<bool, String>>;
}

/// SubjectAccessReviews made with the operator's own rights: the instances'
/// gates ask through the relay, about their own instance only, so no tenant
/// namespace holds the right to review anyone's access anywhere.
pub struct KubeAccessReviews {
    pub client: kube::Client,
}

impl AccessReviews for KubeAccessReviews {
    fn may_use<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        user: &'a str,
        groups: &'a [String],
    ) -> futures::future::BoxFuture<'a, Result<bool, String>> {
        use k8s_openapi::api::authorization::v1::{ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec};
        Box::pin(async move {
            let review = SubjectAccessReview {
                spec: SubjectAccessReviewSpec {
                    user: Some(user.to_string()),
                    groups: Some(groups.to_vec()),
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(signin::ACCESS_GROUP.into()),
                        resource: Some(signin::ACCESS_RESOURCE.into()),
                        verb: Some(signin::ACCESS_VERB.into()),
                        namespace: Some(namespace.into()),
                        name: Some(name.into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                ..Default::default()
            };
            let reviewed = crate::watch_scope::cluster_api::<SubjectAccessReview>(&self.client)
                .create(&kube::api::PostParams::default(), &review)
                .await
                .map_err(|e| format!("SubjectAccessReview: {e}"))?;
            let status = reviewed.status.unwrap_or_default();
            Ok(status.allowed && status.denied != Some(true))
        })
    }
}

/// What a gate asks the relay: may this signed-in user use my instance?
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReviewRequest {
    pub user: String,
    #[serde(default)]
    pub groups: Vec<String>,
}

/// The relay's answer to a gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReviewAnswer {
    pub allowed: bool,
}

/// Names only the cluster gives: never asked about for an identity provider's user.
const RESERVED_PREFIX: &str = "system:";
/// Most groups one review may name.
const MAX_GROUPS: usize = 256;
/// Longest user or group name.
const MAX_NAME: usize = 1024;

/// The review a gate asked for, checked: bounded, and no name the cluster
/// reserves (an identity provider's group `system:masters` is no cluster
/// admin). None: refused as malformed; Some(None): not allowed, unasked.
pub fn checked_review(body: &[u8]) -> Option<Option<ReviewRequest>> {
    let req: ReviewRequest = serde_json::from_slice(body).ok()?;
    let too_long = |n: &String| n.len() > MAX_NAME;
    if req.user.is_empty() || too_long(&req.user) || req.groups.len() > MAX_GROUPS || req.groups.iter().any(too_long) {
        return None;
    }
    let reserved = req.user.starts_with(RESERVED_PREFIX) || req.groups.iter().any(|g| g.starts_with(RESERVED_PREFIX));
    Some((!reserved).then_some(req))
}

/// The relay's state.
#[derive(Clone)]
pub struct Relay {
    provider: Arc<Provider>,
    instances: Arc<dyn Instances>,
    reviews: Arc<dyn AccessReviews>,
    refreshes: Arc<Refreshes>,
    refusals: Arc<RefusalLog>,
    namespaces: Arc<NamespaceSlots>,
    reviewing: Arc<NamespaceSlots>,
    /// Starts instances (None: the relay starts nothing).
    starts: Option<Arc<Starter>>,
}

impl Relay {
    pub fn new(provider: Arc<Provider>, instances: Arc<dyn Instances>, reviews: Arc<dyn AccessReviews>) -> Self {
        Relay {
            provider,
            instances,
            reviews,
            refreshes: Arc::new(Refreshes::new(REFRESH_TTL, MAX_REFRESHES)),
            refusals: Arc::new(RefusalLog { last: Mutex::new((None, 0)) }),
            namespaces: Arc::default(),
            reviewing: Arc::default(),
            starts: None,
        }
    }

    /// The relay also starts idle-stopped instances their gates ask it to
    /// (`/oidc/start`, for oidc gates rendered before `/start`).
    pub fn with_starts(mut self, starter: Arc<Starter>) -> Self {
        self.starts = Some(starter);
        self
    }
}

/// The relay's routes.
pub fn relay_router(relay: Relay) -> Router {
    Router::new()
        .route("/oidc/token/{namespace}/{name}", post(redeem))
        .route("/oidc/review/{namespace}/{name}", post(review))
        .route("/oidc/start/{namespace}/{name}", post(start))
        .with_state(relay)
}

/// A gate rendered before `/start` asks to start its own idle-stopped
/// instance (see [`super::start`]) with its relay credential: only that one
/// is started, once.
async fn start(
    State(relay): State<Relay>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let Ok(secret) = relay.provider.client_secret() else {
        tracing::warn!("OIDC relay: the client secret cannot be read");
        return Refusal::Unavailable.answer();
    };
    if !signin::relay_credential_matches(&secret, &namespace, &name, bearer(&headers)) {
        relay.refusals.note(&namespace, &name, Refusal::BadCredential);
        return Refusal::BadCredential.answer();
    }
    let Some(starter) = relay.starts.clone() else { return Refusal::Unavailable.answer() };
    super::start::answer(starter.start(&namespace, &name, |mode| mode == AuthMode::Oidc).await)
}

/// A gate's question about its own instance: the credential in
/// `Authorization: Bearer` proves which instance asks (the path must name
/// it), and the review is made for that instance only.
async fn review(
    State(relay): State<Relay>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_REQUEST {
        return Refusal::Malformed.answer();
    }
    let presented = bearer(&headers);
    let Ok(secret) = relay.provider.client_secret() else {
        tracing::warn!("OIDC relay: the client secret cannot be read");
        return Refusal::Unavailable.answer();
    };
    // The credential first: a made-up one costs an HMAC and nothing else.
    if !signin::relay_credential_matches(&secret, &namespace, &name, presented) {
        relay.refusals.note(&namespace, &name, Refusal::BadCredential);
        return Refusal::BadCredential.answer();
    }
    let Some(asked) = checked_review(&body) else {
        return Refusal::Malformed.answer();
    };
    let target = relay.instances.get(&namespace, &name).await;
    if !target.is_some_and(|t| t.mode == AuthMode::Oidc) {
        relay.refusals.note(&namespace, &name, Refusal::UnknownInstance);
        return Refusal::UnknownInstance.answer();
    }
    let allowed = match asked {
        None => false,
        Some(req) => {
            let Some(_slot) = relay.reviewing.try_acquire(&namespace, NAMESPACE_REVIEWS) else {
                relay.refusals.note(&namespace, &name, Refusal::Busy);
                return Refusal::Busy.answer();
            };
            match relay.reviews.may_use(&namespace, &name, &req.user, &req.groups).await {
                Ok(allowed) => allowed,
                Err(e) => {
                    tracing::warn!(namespace, name, error = %e, "OIDC relay: an access review failed");
                    return Refusal::Unavailable.answer();
                }
            }
        }
    };
    let mut response = axum::Json(ReviewAnswer { allowed }).into_response();
    response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

async fn redeem(
    State(relay): State<Relay>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if body.len() > MAX_REQUEST {
        return Refusal::Malformed.answer();
    }
    let req = match token_request(&headers, &body) {
        Ok(r) => r,
        Err(refusal) => return refusal.answer(),
    };
    let Ok(secret) = relay.provider.client_secret() else {
        tracing::warn!("OIDC relay: the client secret cannot be read");
        return Refusal::Unavailable.answer();
    };
    let client_id = &relay.provider.settings.client_id;
    let verdict = match check_credential(&req, client_id, &secret, &namespace, &name) {
        Ok(()) => {
            let target = relay.instances.get(&namespace, &name).await;
            let issued_to = match &req.grant {
                Grant::Refresh { refresh_token, .. } => relay.refreshes.issued_to(refresh_token),
                Grant::Code { .. } => None,
            };
            check_grant(&req, target.as_ref(), issued_to.as_ref(), &namespace, &name)
        }
        Err(refusal) => Err(refusal),
    };
    if let Err(refusal) = verdict {
        relay.refusals.note(&namespace, &name, refusal);
        return refusal.answer();
    }
    // The credential proved the namespace: its share of the provider's time.
    let Some(_slot) = relay.namespaces.try_acquire(&namespace, NAMESPACE_REDEMPTIONS) else {
        relay.refusals.note(&namespace, &name, Refusal::Busy);
        return Refusal::Busy.answer();
    };
    let Ok(endpoints) = relay.provider.endpoints().await else {
        return Refusal::Unavailable.answer();
    };
    let form = req.grant.form(client_id, &secret);
    let answer = relay
        .provider
        .http
        .post(&endpoints.token)
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .header(header::ACCEPT, "application/json")
        .body(form)
        .send()
        .await;
    let Ok(answer) = answer else {
        tracing::warn!(namespace, name, "OIDC relay: the provider's token endpoint did not answer");
        return Refusal::Unavailable.answer();
    };
    let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type =
        answer.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_owned);
    let Ok(bytes) = read_bounded(answer, MAX_ANSWER).await else {
        return Refusal::Unavailable.answer();
    };
    tracing::debug!(namespace, name, %status, "OIDC relay forwarded a token request");
    if status.is_success()
        && let Some(token) = refresh_token_of(&bytes)
    {
        relay.refreshes.record(&token, InstanceKey(namespace.clone(), name.clone()));
    }
    let mut response = (status, bytes).into_response();
    let headers = response.headers_mut();
    if let Some(ct) = content_type.and_then(|c| HeaderValue::from_str(&c).ok()) {
        headers.insert(header::CONTENT_TYPE, ct);
    }
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(url: &str) -> RelayTarget {
        RelayTarget { mode: AuthMode::Oidc, url: Some(url.into()), agent: Default::default() }
    }

    fn form(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut f = form_urlencoded::Serializer::new(String::new());
        for (k, v) in pairs {
            f.append_pair(k, v);
        }
        f.finish().into_bytes()
    }

    #[test]
    fn credentials_come_from_the_form_or_basic_auth() {
        let body = form(&[
            ("grant_type", "refresh_token"),
            ("refresh_token", "r"),
            ("client_id", "tc"),
            ("client_secret", "s e"),
        ]);
        let req = token_request(&HeaderMap::new(), &body).unwrap();
        assert_eq!((req.client_id.as_deref(), req.client_secret.as_deref()), (Some("tc"), Some("s e")));
        let mut headers = HeaderMap::new();
        let basic = base64::engine::general_purpose::STANDARD.encode("tc:a%2Bb");
        headers.insert(header::AUTHORIZATION, format!("Basic {basic}").parse().unwrap());
        let refresh = form(&[("grant_type", "refresh_token"), ("refresh_token", "r")]);
        let req = token_request(&headers, &refresh).unwrap();
        assert_eq!((req.client_id.as_deref(), req.client_secret.as_deref()), (Some("tc"), Some("a+b")));
        assert_eq!(token_request(&HeaderMap::new(), b"code=x"), Err(Refusal::Malformed));
        // Both ways at once is one too many.
        let both = form(&[("grant_type", "refresh_token"), ("refresh_token", "r"), ("client_secret", "x")]);
        assert_eq!(token_request(&headers, &both), Err(Refusal::Malformed));
    }

    #[test]
    fn a_repeated_field_is_refused_and_only_checked_fields_are_forwarded() {
        for attack in [
            "grant_type=refresh_token&refresh_token=r&grant_type=client_credentials",
            "grant_type=authorization_code&code=c&redirect_uri=https%3A%2F%2Fdev%2Foauth2%2Fcallback&redirect_uri=https%3A%2F%2Fevil%2Fcb",
            "grant_type=refresh_token&refresh_token=r&client_id=tc&client_id=other",
            "grant_type=refresh_token&refresh_token=r&refresh_token=s",
        ] {
            assert_eq!(token_request(&HeaderMap::new(), attack.as_bytes()), Err(Refusal::Malformed), "{attack}");
        }
        for grant in ["client_credentials", "password", "urn:ietf:params:oauth:grant-type:token-exchange"] {
            let body = form(&[("grant_type", grant), ("client_id", "tc"), ("client_secret", "x")]);
            assert_eq!(token_request(&HeaderMap::new(), &body), Err(Refusal::Malformed), "{grant}");
        }
        let body = form(&[
            ("grant_type", "authorization_code"),
            ("code", "c 1"),
            ("redirect_uri", "https://dev/oauth2/callback"),
            ("code_verifier", "v"),
            ("audience", "https://kubernetes.default.svc"),
            ("requested_token_type", "urn:x"),
        ]);
        let req = token_request(&HeaderMap::new(), &body).unwrap();
        let sent: Vec<(String, String)> = form_urlencoded::parse(req.grant.form("tc", b"real").as_bytes())
            .map(|(k, v)| (k.into(), v.into()))
            .collect();
        let expected = [
            ("grant_type", "authorization_code"),
            ("code", "c 1"),
            ("redirect_uri", "https://dev/oauth2/callback"),
            ("code_verifier", "v"),
            ("client_id", "tc"),
            ("client_secret", "real"),
        ];
        assert_eq!(sent, expected.map(|(k, v)| (k.to_string(), v.to_string())), "nothing unchecked rides along");
    }

    fn code(redirect: &str, secret: &str) -> TokenRequest {
        TokenRequest {
            grant: Grant::Code { code: "c".into(), redirect_uri: redirect.into(), code_verifier: None },
            client_id: Some("tc".into()),
            client_secret: Some(secret.into()),
        }
    }

    #[test]
    fn only_the_instances_credential_and_callback_pass() {
        let cred = signin::relay_credential(b"real", "team1", "dev");
        let t = target("https://dev.apps.example.com");
        let ok = code("https://dev.apps.example.com/oauth2/callback", &cred);
        assert_eq!(check_credential(&ok, "tc", b"real", "team1", "dev"), Ok(()));
        assert_eq!(check_grant(&ok, Some(&t), None, "team1", "dev"), Ok(()));
        assert_eq!(check_credential(&ok, "other", b"real", "team1", "dev"), Err(Refusal::BadCredential));
        assert_eq!(check_credential(&ok, "tc", b"real", "team1", "prod"), Err(Refusal::BadCredential));
        assert_eq!(check_credential(&ok, "tc", b"rotated", "team1", "dev"), Err(Refusal::BadCredential));
        assert_eq!(check_grant(&ok, None, None, "team1", "dev"), Err(Refusal::UnknownInstance));
        let password = RelayTarget { mode: AuthMode::Password, ..t.clone() };
        assert_eq!(check_grant(&ok, Some(&password), None, "team1", "dev"), Err(Refusal::UnknownInstance));
        let foreign = code("https://evil.example.com/oauth2/callback", &cred);
        assert_eq!(check_grant(&foreign, Some(&t), None, "team1", "dev"), Err(Refusal::ForeignRedirect));
        let plain = code("http://dev.apps.example.com/oauth2/callback", &cred);
        assert_eq!(check_grant(&plain, Some(&t), None, "team1", "dev"), Err(Refusal::ForeignRedirect));
        let no_url = RelayTarget { url: None, ..t.clone() };
        assert_eq!(check_grant(&ok, Some(&no_url), None, "team1", "dev"), Err(Refusal::UnknownInstance));
    }

    #[test]
    fn a_refresh_token_is_redeemed_only_for_the_instance_it_went_to() {
        let refreshes = Refreshes::new(Duration::from_secs(60), 2);
        let refresh = |token: &str| TokenRequest {
            grant: Grant::Refresh { refresh_token: token.into(), scope: None },
            client_id: Some("tc".into()),
            client_secret: Some(signin::relay_credential(b"real", "team-b", "dev")),
        };
        let t = target("https://dev.apps.example.com");
        refreshes.record("rt-a", InstanceKey("team-a".into(), "dev".into()));
        refreshes.record("rt-b", InstanceKey("team-b".into(), "dev".into()));
        // team-b's own credential is valid; team-a's token is not team-b's to redeem.
        let issued = refreshes.issued_to("rt-a");
        assert_eq!(
            check_grant(&refresh("rt-a"), Some(&t), issued.as_ref(), "team-b", "dev"),
            Err(Refusal::ForeignRefresh)
        );
        let issued = refreshes.issued_to("rt-b");
        assert_eq!(check_grant(&refresh("rt-b"), Some(&t), issued.as_ref(), "team-b", "dev"), Ok(()));
        // One the relay never handed out (or forgot) is nobody's.
        assert_eq!(check_grant(&refresh("made-up"), Some(&t), None, "team-b", "dev"), Err(Refusal::ForeignRefresh));
        // Bounded: the oldest record goes first.
        refreshes.record("rt-c", InstanceKey("team-c".into(), "dev".into()));
        assert_eq!(refreshes.issued_to("rt-a"), None);
        assert!(refreshes.issued_to("rt-b").is_some() && refreshes.issued_to("rt-c").is_some());
        let expired = Refreshes::new(Duration::ZERO, 2);
        expired.record("rt", InstanceKey("team-a".into(), "dev".into()));
        assert_eq!(expired.issued_to("rt"), None);
        assert_eq!(refresh_token_of(br#"{"access_token":"a","refresh_token":"r2"}"#).as_deref(), Some("r2"));
        assert_eq!(refresh_token_of(br#"{"access_token":"a"}"#), None);
    }

    #[test]
    fn discovery_must_name_the_configured_issuer() {
        let found = OidcEndpoints {
            issuer: "https://idp.example.com/".into(),
            authorization: "https://idp.example.com/auth".into(),
            token: "https://idp.example.com/token".into(),
            jwks: "https://idp.example.com/keys".into(),
        };
        assert!(parse_discovery("https://idp.example.com", found.clone()).is_ok());
        assert!(parse_discovery("https://other.example.com", found.clone()).is_err());
        let bad = OidcEndpoints { token: "file:///etc/passwd".into(), ..found };
        assert!(parse_discovery("https://idp.example.com", bad).is_err());
    }

    #[test]
    fn the_secret_file_is_trimmed_bounded_and_required() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        std::fs::write(&path, "abc\n").unwrap();
        assert_eq!(read_secret(&path).unwrap(), b"abc");
        std::fs::write(&path, "\n").unwrap();
        assert!(read_secret(&path).is_err());
        std::fs::write(&path, vec![b'a'; 5000]).unwrap();
        assert!(read_secret(&path).is_err());
        assert!(read_secret(&dir.path().join("missing")).is_err());
    }

    /// Reviews nobody expects in a test of redemptions.
    struct NoReviews;

    impl AccessReviews for NoReviews {
        fn may_use<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a str,
            _: &'a [String],
        ) -> futures::future::BoxFuture<'a, Result<bool, String>> {
            Box::pin(async { Err("not in this test".to_string()) })
        }
    }

    /// Two tenants' instances, as the relay's cache would hold them.
    struct TwoTenants;

    impl Instances for TwoTenants {
        fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>> {
            let found = (name == "dev" && ["team-a", "team-b"].contains(&namespace))
                .then(|| target(&format!("https://{namespace}.apps.test")));
            Box::pin(async move { found })
        }
    }

    /// A provider stand-in on loopback: its token endpoint answers team-a's
    /// codes after a while (a slow provider is what a flood makes of it) and
    /// counts how many requests it holds at once.
    async fn slow_provider() -> (String, Arc<Mutex<(usize, usize)>>) {
        use axum::routing::get;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let issuer = format!("http://{}", listener.local_addr().unwrap());
        let in_flight: Arc<Mutex<(usize, usize)>> = Arc::default();
        let doc = serde_json::json!({
            "issuer": issuer, "authorization_endpoint": format!("{issuer}/auth"),
            "token_endpoint": format!("{issuer}/token"), "jwks_uri": format!("{issuer}/keys"),
        });
        let counted = in_flight.clone();
        let app = Router::new()
            .route("/.well-known/openid-configuration", get(move || async move { axum::Json(doc) }))
            .route(
                "/token",
                post(move |body: Bytes| {
                    let counted = counted.clone();
                    async move {
                        let slow = String::from_utf8_lossy(&body).contains("code=slow");
                        if slow {
                            let mut c = counted.lock().unwrap();
                            c.0 += 1;
                            c.1 = c.1.max(c.0);
                        }
                        if slow {
                            tokio::time::sleep(Duration::from_millis(1500)).await;
                            counted.lock().unwrap().0 -= 1;
                        }
                        axum::Json(serde_json::json!({"access_token": "t", "token_type": "Bearer"}))
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
        (issuer, in_flight)
    }

    /// A code redemption for `<ns>/dev` sent from source address `from`: the status.
    async fn redeem_from(relay: std::net::SocketAddr, from: [u8; 4], ns: &str, code: &str, secret: &[u8]) -> u16 {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind((std::net::Ipv4Addr::from(from), 0).into()).unwrap();
        let Ok(mut stream) = socket.connect(relay).await else { return 0 };
        let body = String::from_utf8(form(&[
            ("grant_type", "authorization_code"),
            ("code", code),
            ("redirect_uri", &format!("https://{ns}.apps.test{}", signin::CALLBACK_PATH)),
            ("client_id", "tc"),
            ("client_secret", &signin::relay_credential(secret, ns, "dev")),
        ]))
        .unwrap();
        let request = format!(
            "POST /oidc/token/{ns}/dev HTTP/1.1\r\nhost: relay\r\ncontent-type: application/x-www-form-urlencoded\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        );
        if stream.write_all(request.as_bytes()).await.is_err() {
            return 0;
        }
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer).await;
        answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0)
    }

    #[tokio::test]
    async fn one_tenant_flooding_the_relay_leaves_the_others_sign_ins() {
        use tokio::io::AsyncWriteExt;
        let (issuer, in_flight) = slow_provider().await;
        let dir = tempfile::tempdir().unwrap();
        let secret = b"the-real-client-secret".to_vec();
        std::fs::write(dir.path().join("secret"), &secret).unwrap();
        let provider = Provider::new(OidcSettings {
            issuer_url: issuer,
            client_id: "tc".into(),
            client_secret_file: dir.path().join("secret"),
            scopes: String::new(),
            username_claim: crate::settings::UsernameClaim::Email,
            username_prefix: String::new(),
            groups_claim: String::new(),
            groups_prefix: String::new(),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let relay = listener.local_addr().unwrap();
        let router = relay_router(Relay::new(provider, Arc::new(TwoTenants), Arc::new(NoReviews)));
        tokio::spawn(crate::ops::http_server::serve(listener, router, RELAY_LIMITS));

        // team-a: slow-loris connections from one of its pods, at its peer cap...
        let mut held = Vec::new();
        for _ in 0..RELAY_LIMITS.max_connections_per_peer {
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(([127, 0, 0, 2], 0).into()).unwrap();
            let mut stream = socket.connect(relay).await.unwrap();
            stream.write_all(b"POST /oidc/token/team-a/dev HTTP/1.1\r\nhost: r").await.unwrap();
            held.push(stream);
        }
        // ...and 24 valid redemptions at once from six more of its pods.
        let flood: Vec<_> = (0..24u8)
            .map(|i| {
                let secret = secret.clone();
                tokio::spawn(async move { redeem_from(relay, [127, 0, 0, 3 + i % 6], "team-a", "slow", &secret).await })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // Meanwhile team-b signs in.
        let b = redeem_from(relay, [127, 0, 0, 20], "team-b", "fast", &secret).await;
        assert_eq!(b, 200, "another tenant's sign-in goes through the flood");
        let mut statuses = Vec::new();
        for f in flood {
            statuses.push(f.await.unwrap());
        }
        let served = statuses.iter().filter(|s| **s == 200).count();
        let busy = statuses.iter().filter(|s| **s == 429).count();
        assert_eq!(served + busy, statuses.len(), "{statuses:?}");
        assert!(busy >= 24 - NAMESPACE_REDEMPTIONS * 2, "the flood was not held back: {statuses:?}");
        let most = in_flight.lock().unwrap().1;
        assert!(most <= NAMESPACE_REDEMPTIONS, "the provider held {most} of team-a's requests at once");
        // A fifth connection from the slow-loris pod is closed at once.
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(([127, 0, 0, 2], 0).into()).unwrap();
        let mut extra = socket.connect(relay).await.unwrap();
        let mut buf = [0u8; 1];
        use tokio::io::AsyncReadExt;
        let closed = tokio::time::timeout(Duration::from_secs(2), extra.read(&mut buf)).await;
        assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "a connection beyond the peer's cap stays open: {closed:?}");
        drop(held);
    }

    #[test]
    fn the_relay_cache_keeps_only_what_it_reads() {
        let mut inst: TinycodeInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
            "metadata": {"name": "dev", "namespace": "team", "labels": {"a": "b"}, "annotations": {"big": "x"}},
            "spec": {"auth": {"mode": "oidc"}, "git": {"url": "https://example.test/r.git"}},
            "status": {"url": "https://dev.apps.test", "phase": "Running"},
        }))
        .unwrap();
        trim_instance(&mut inst);
        assert_eq!(inst.spec.auth.mode, AuthMode::Oidc);
        assert!(inst.spec.git.is_none() && inst.metadata.labels.is_none() && inst.metadata.annotations.is_none());
        let st = inst.status.unwrap();
        assert_eq!((st.url.as_deref(), st.phase), (Some("https://dev.apps.test"), None));
    }

    #[test]
    fn the_relay_cache_keeps_what_says_whether_it_runs() {
        let mut inst: TinycodeInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
            "metadata": {"name": "dev", "namespace": "team",
                "annotations": {"big": "x", crate::api::START_REQUEST_ANNOTATION: "200"}},
            "spec": {"auth": {"mode": "oidc"}, "stopped": false},
            "status": {"idle": {"timeout": "1h", "stopped": true, "lastHandledStartAt": "100", "message": "long"}},
        }))
        .unwrap();
        trim_instance(&mut inst);
        let annotations = inst.metadata.annotations.clone().unwrap();
        assert_eq!(annotations.keys().collect::<Vec<_>>(), [crate::api::START_REQUEST_ANNOTATION]);
        let idle = inst.status.as_ref().unwrap().idle.clone().unwrap();
        assert!(idle.message.is_empty() && idle.timeout.is_empty(), "{idle:?}");
        assert_eq!(super::super::start::agent_of(&inst), super::super::start::Agent::Idle { start_pending: true });
    }

    /// Instances for the start tests: team-a/dev (oidc) and team-a/pw
    /// (password) are idle-stopped, team-a/held is stopped by its spec.
    struct IdleTenant;

    impl Instances for IdleTenant {
        fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>> {
            use super::super::start::Agent;
            let idle = Agent::Idle { start_pending: false };
            let found = match (namespace, name) {
                ("team-a", "dev") => Some((AuthMode::Oidc, idle)),
                ("team-a", "pw") => Some((AuthMode::Password, idle)),
                ("team-a", "held") => Some((AuthMode::Oidc, Agent::Stopped)),
                _ => None,
            };
            let found = found.map(|(mode, agent)| RelayTarget { agent, mode, ..target("https://team-a.apps.test") });
            Box::pin(async move { found })
        }
    }

    /// Starts recorded, after a pause (the apiserver's write takes a while).
    #[derive(Default)]
    struct CountedStarts(Mutex<Vec<(String, String)>>);

    impl super::super::start::Starts for CountedStarts {
        fn request_start<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<(), String>> {
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(50)).await;
                self.0.lock().unwrap().push((namespace.into(), name.into()));
                Ok(())
            })
        }
    }

    /// A gate's request starts its own idle-stopped instance, once however
    /// many ask at once, on the relay's old oidc route (relay credential) and
    /// its every-mode route (start credential) alike; never another
    /// instance, never one its spec stops; the oidc route starts no
    /// instance of another mode.
    #[tokio::test]
    async fn fifty_requests_start_an_idle_instance_once() {
        let dir = tempfile::tempdir().unwrap();
        let secret = b"the-real-client-secret".to_vec();
        std::fs::write(dir.path().join("secret"), &secret).unwrap();
        let provider = Provider::new(OidcSettings {
            issuer_url: "http://127.0.0.1:9".into(),
            client_id: "tc".into(),
            client_secret_file: dir.path().join("secret"),
            scopes: String::new(),
            username_claim: crate::settings::UsernameClaim::Email,
            username_prefix: String::new(),
            groups_prefix: String::new(),
            groups_claim: String::new(),
        });
        let key: Arc<[u8]> = Arc::from(&b"the operator's digest key"[..]);
        let starts = Arc::new(CountedStarts::default());
        let starter = Arc::new(Starter::new(Arc::new(IdleTenant), starts.clone()));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let relay = Relay::new(provider, Arc::new(IdleTenant), Arc::new(NoReviews)).with_starts(starter.clone());
        let router = super::super::start::start_router(key.clone(), starter).merge(relay_router(relay));
        tokio::spawn(crate::ops::http_server::serve(listener, router, RELAY_LIMITS));
        let ask = |path: String, credential: String, peer: u8| async move {
            // One client per request, each from its own address: fifty
            // connections, past what one peer may hold at once.
            let client = reqwest::Client::builder().local_address(std::net::IpAddr::from([127, 0, 0, peer])).build();
            let answer =
                client.unwrap().post(format!("http://{addr}{path}")).bearer_auth(credential).send().await.unwrap();
            let status = answer.status().as_u16();
            (status, answer.json::<serde_json::Value>().await.unwrap_or_default())
        };
        let a = signin::relay_credential(&secret, "team-a", "dev");
        let started = signin::start_credential(&key, "team-a", "dev");
        // The wrong credential, another instance's, or one kind for the
        // other route starts nothing.
        assert_eq!(ask("/oidc/start/team-a/dev".into(), "trc1.00".into(), 1).await.0, 401);
        let b = signin::relay_credential(&secret, "team-b", "dev");
        assert_eq!(ask("/oidc/start/team-a/dev".into(), b, 1).await.0, 401);
        assert_eq!(ask("/oidc/start/team-a/dev".into(), started.clone(), 1).await.0, 401);
        assert_eq!(ask("/start/team-a/dev".into(), a.clone(), 1).await.0, 401);
        let other = signin::start_credential(&key, "team-b", "dev");
        assert_eq!(ask("/start/team-a/dev".into(), other, 1).await.0, 401);
        assert!(starts.0.lock().unwrap().is_empty());

        let flood: Vec<_> = (0..50u8)
            .map(|i| {
                let (path, credential) = if i % 2 == 0 {
                    ("/oidc/start/team-a/dev", a.clone())
                } else {
                    ("/start/team-a/dev", started.clone())
                };
                tokio::spawn(ask(path.into(), credential, 10 + i))
            })
            .collect();
        for answer in flood {
            let (status, body) = answer.await.unwrap();
            assert_eq!((status, body["state"].as_str()), (200, Some("starting")));
        }
        assert_eq!(starts.0.lock().unwrap().clone(), vec![("team-a".to_string(), "dev".to_string())], "started once");

        // Stopped by its spec: the user's own choice, never started here.
        let held = signin::start_credential(&key, "team-a", "held");
        let (status, body) = ask("/start/team-a/held".into(), held, 1).await;
        assert_eq!((status, body["state"].as_str()), (200, Some("stopped")));
        assert_eq!(starts.0.lock().unwrap().len(), 1);

        // A password instance: started on the every-mode route only.
        let pw = signin::relay_credential(&secret, "team-a", "pw");
        assert_eq!(ask("/oidc/start/team-a/pw".into(), pw, 1).await.0, 401);
        let pw = signin::start_credential(&key, "team-a", "pw");
        let (status, body) = ask("/start/team-a/pw".into(), pw, 1).await;
        assert_eq!((status, body["state"].as_str()), (200, Some("starting")));
        assert_eq!(starts.0.lock().unwrap().last().cloned(), Some(("team-a".to_string(), "pw".to_string())));
    }

    /// Reviews that record what was asked and allow everyone asked about.
    /// One question asked: namespace, instance, user, groups.
    type Asked = (String, String, String, Vec<String>);

    #[derive(Default)]
    struct Recorded(Mutex<Vec<Asked>>);

    impl AccessReviews for Recorded {
        fn may_use<'a>(
            &'a self,
            namespace: &'a str,
            name: &'a str,
            user: &'a str,
            groups: &'a [String],
        ) -> futures::future::BoxFuture<'a, Result<bool, String>> {
            self.0.lock().unwrap().push((namespace.into(), name.into(), user.into(), groups.to_vec()));
            Box::pin(async { Ok(true) })
        }
    }

    #[tokio::test]
    async fn a_gate_asks_about_its_own_instance_only() {
        let dir = tempfile::tempdir().unwrap();
        let secret = b"the-real-client-secret".to_vec();
        std::fs::write(dir.path().join("secret"), &secret).unwrap();
        let provider = Provider::new(OidcSettings {
            issuer_url: "http://127.0.0.1:9".into(),
            client_id: "tc".into(),
            client_secret_file: dir.path().join("secret"),
            scopes: String::new(),
            username_claim: crate::settings::UsernameClaim::Email,
            username_prefix: String::new(),
            groups_prefix: String::new(),
            groups_claim: String::new(),
        });
        let recorded = Arc::new(Recorded::default());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = relay_router(Relay::new(provider, Arc::new(TwoTenants), recorded.clone()));
        tokio::spawn(crate::ops::http_server::serve(listener, router, RELAY_LIMITS));
        let http = reqwest::Client::new();
        let ask = |path: &str, credential: String, body: serde_json::Value| {
            let request = http.post(format!("http://{addr}{path}")).bearer_auth(credential).json(&body);
            async move {
                let answer = request.send().await.unwrap();
                let status = answer.status().as_u16();
                (status, answer.json::<serde_json::Value>().await.unwrap_or_default())
            }
        };
        let a = signin::relay_credential(&secret, "team-a", "dev");
        let user = serde_json::json!({"user": "oidc:alice", "groups": ["oidc:dev"]});
        let (status, answer) = ask("/oidc/review/team-a/dev", a.clone(), user.clone()).await;
        assert_eq!((status, answer["allowed"].as_bool()), (200, Some(true)));
        assert_eq!(
            recorded.0.lock().unwrap().clone(),
            vec![("team-a".into(), "dev".into(), "oidc:alice".into(), vec!["oidc:dev".to_string()])]
        );
        // team-a's credential asks nothing about team-b's instance.
        assert_eq!(ask("/oidc/review/team-b/dev", a.clone(), user.clone()).await.0, 401);
        assert_eq!(ask("/oidc/review/team-a/dev", "trc1.00".into(), user.clone()).await.0, 401);
        // An instance the relay does not know (or not in oidc mode): refused.
        let ghost = signin::relay_credential(&secret, "team-a", "ghost");
        assert_eq!(ask("/oidc/review/team-a/ghost", ghost, user).await.0, 401);
        // A name only the cluster gives is never asked about: not allowed.
        let masters = serde_json::json!({"user": "oidc:mallory", "groups": ["system:masters"]});
        let (status, answer) = ask("/oidc/review/team-a/dev", a.clone(), masters).await;
        assert_eq!((status, answer["allowed"].as_bool()), (200, Some(false)));
        let admin = serde_json::json!({"user": "system:admin"});
        assert_eq!(ask("/oidc/review/team-a/dev", a.clone(), admin).await.1["allowed"], false);
        // Fields the relay does not know, or no user: malformed.
        let extra = serde_json::json!({"user": "oidc:alice", "uid": "0"});
        assert_eq!(ask("/oidc/review/team-a/dev", a.clone(), extra).await.0, 400);
        assert_eq!(ask("/oidc/review/team-a/dev", a, serde_json::json!({"user": ""})).await.0, 400);
        assert_eq!(recorded.0.lock().unwrap().len(), 1, "only the first question reached the apiserver");
    }
}

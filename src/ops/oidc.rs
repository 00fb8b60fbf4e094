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
use kube::Api;

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

/// What the relay needs to know of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayTarget {
    pub mode: AuthMode,
    /// The instance's URL (status.url), whose host the callback must use.
    pub url: Option<String>,
}

/// Looks instances up for the relay.
pub trait Instances: Send + Sync {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>>;
}

/// Instances read from the API (one GET per redemption: sign-ins and refreshes are rare).
pub struct KubeInstances {
    pub client: kube::Client,
    pub scope: crate::watch_scope::WatchScope,
}

impl Instances for KubeInstances {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>> {
        Box::pin(async move {
            if !self.scope.covers(namespace) {
                return None;
            }
            let api: Api<TinycodeInstance> = Api::namespaced(self.client.clone(), namespace);
            let inst = api.get_opt(name).await.ok()??;
            Some(RelayTarget { mode: inst.spec.auth.mode, url: inst.status.and_then(|s| s.url) })
        })
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
}

impl Refusal {
    fn answer(self) -> Response {
        // RFC 6749 §5.2 error codes, so oauth2-proxy reports them as such.
        let (status, error) = match self {
            Refusal::Malformed => (StatusCode::BAD_REQUEST, "invalid_request"),
            Refusal::BadCredential | Refusal::UnknownInstance => (StatusCode::UNAUTHORIZED, "invalid_client"),
            Refusal::ForeignRedirect | Refusal::ForeignRefresh => (StatusCode::BAD_REQUEST, "invalid_grant"),
            Refusal::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
        };
        (status, [(header::CONTENT_TYPE, "application/json")], format!("{{\"error\":\"{error}\"}}")).into_response()
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

/// The relay's state.
#[derive(Clone)]
pub struct Relay {
    provider: Arc<Provider>,
    instances: Arc<dyn Instances>,
    refreshes: Arc<Refreshes>,
    refusals: Arc<RefusalLog>,
}

impl Relay {
    pub fn new(provider: Arc<Provider>, instances: Arc<dyn Instances>) -> Self {
        Relay {
            provider,
            instances,
            refreshes: Arc::new(Refreshes::new(REFRESH_TTL, MAX_REFRESHES)),
            refusals: Arc::new(RefusalLog { last: Mutex::new((None, 0)) }),
        }
    }
}

/// The relay's routes.
pub fn relay_router(relay: Relay) -> Router {
    Router::new().route("/oidc/token/{namespace}/{name}", post(redeem)).with_state(relay)
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
        RelayTarget { mode: AuthMode::Oidc, url: Some(url.into()) }
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
}

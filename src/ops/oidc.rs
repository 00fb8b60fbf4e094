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
    /// The operator cannot read its client secret or reach the provider.
    Unavailable,
}

impl Refusal {
    fn answer(self) -> Response {
        // RFC 6749 §5.2 error codes, so oauth2-proxy reports them as such.
        let (status, error) = match self {
            Refusal::Malformed => (StatusCode::BAD_REQUEST, "invalid_request"),
            Refusal::BadCredential | Refusal::UnknownInstance => (StatusCode::UNAUTHORIZED, "invalid_client"),
            Refusal::ForeignRedirect => (StatusCode::BAD_REQUEST, "invalid_grant"),
            Refusal::Unavailable => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
        };
        (status, [(header::CONTENT_TYPE, "application/json")], format!("{{\"error\":\"{error}\"}}")).into_response()
    }
}

/// The parts of a token request the relay checks and rewrites.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct TokenRequest {
    /// Every field, in order, the client's credentials taken out.
    pub fields: Vec<(String, String)>,
    pub client_id: Option<String>,
    pub client_secret: Option<String>,
}

/// Reads the form and the client's credentials (client_secret_post, or
/// client_secret_basic from the Authorization header).
pub fn token_request(headers: &HeaderMap, body: &[u8]) -> Result<TokenRequest, Refusal> {
    let mut req = TokenRequest::default();
    for (k, v) in form_urlencoded::parse(body) {
        match k.as_ref() {
            "client_id" => req.client_id = Some(v.into_owned()),
            "client_secret" => req.client_secret = Some(v.into_owned()),
            _ => req.fields.push((k.into_owned(), v.into_owned())),
        }
    }
    if let Some(auth) = headers.get(header::AUTHORIZATION) {
        let basic = auth.to_str().ok().and_then(|a| a.strip_prefix("Basic ")).ok_or(Refusal::Malformed)?;
        let decoded = base64::engine::general_purpose::STANDARD.decode(basic.trim()).map_err(|_| Refusal::Malformed)?;
        let decoded = String::from_utf8(decoded).map_err(|_| Refusal::Malformed)?;
        let (id, secret) = decoded.split_once(':').ok_or(Refusal::Malformed)?;
        // RFC 6749 §2.3.1: both are form-urlencoded inside the Basic header.
        let unescape =
            |s: &str| form_urlencoded::parse(format!("x={s}").as_bytes()).next().map(|(_, v)| v.into_owned());
        req.client_id = unescape(id);
        req.client_secret = unescape(secret);
    }
    if !req.fields.iter().any(|(k, _)| k == "grant_type") {
        return Err(Refusal::Malformed);
    }
    Ok(req)
}

/// Whether the request may be forwarded for `namespace/name` (pure).
pub fn check(
    req: &TokenRequest,
    client_id: &str,
    client_secret: &[u8],
    namespace: &str,
    name: &str,
    target: Option<&RelayTarget>,
) -> Result<(), Refusal> {
    if req.client_id.as_deref() != Some(client_id) {
        return Err(Refusal::BadCredential);
    }
    let presented = req.client_secret.as_deref().unwrap_or("");
    if !signin::relay_credential_matches(client_secret, namespace, name, presented) {
        return Err(Refusal::BadCredential);
    }
    let Some(target) = target.filter(|t| t.mode == AuthMode::Oidc) else {
        return Err(Refusal::UnknownInstance);
    };
    let field = |k: &str| req.fields.iter().find(|(key, _)| key == k).map(|(_, v)| v.as_str());
    match field("grant_type") {
        Some("authorization_code") => {
            let redirect = field("redirect_uri").ok_or(Refusal::Malformed)?;
            let base = target.url.as_deref().and_then(url_base).ok_or(Refusal::UnknownInstance)?;
            let expected = format!("{base}{}", signin::CALLBACK_PATH);
            if redirect != expected {
                return Err(Refusal::ForeignRedirect);
            }
            Ok(())
        }
        Some("refresh_token") => Ok(()),
        _ => Err(Refusal::Malformed),
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
    pub provider: Arc<Provider>,
    pub instances: Arc<dyn Instances>,
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
    let target = relay.instances.get(&namespace, &name).await;
    if let Err(refusal) = check(&req, &relay.provider.settings.client_id, &secret, &namespace, &name, target.as_ref()) {
        tracing::info!(namespace, name, ?refusal, "OIDC relay refused a token request");
        return refusal.answer();
    }
    let Ok(endpoints) = relay.provider.endpoints().await else {
        return Refusal::Unavailable.answer();
    };
    let form = {
        let mut form = form_urlencoded::Serializer::new(String::new());
        for (k, v) in &req.fields {
            form.append_pair(k, v);
        }
        form.append_pair("client_id", &relay.provider.settings.client_id);
        form.append_pair("client_secret", &String::from_utf8_lossy(&secret));
        form.finish()
    };
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
        let body = form(&[("grant_type", "authorization_code"), ("client_id", "tc"), ("client_secret", "s e")]);
        let req = token_request(&HeaderMap::new(), &body).unwrap();
        assert_eq!((req.client_id.as_deref(), req.client_secret.as_deref()), (Some("tc"), Some("s e")));
        assert!(!req.fields.iter().any(|(k, _)| k.starts_with("client_")));
        let mut headers = HeaderMap::new();
        let basic = base64::engine::general_purpose::STANDARD.encode("tc:a%2Bb");
        headers.insert(header::AUTHORIZATION, format!("Basic {basic}").parse().unwrap());
        let req = token_request(&headers, &form(&[("grant_type", "refresh_token")])).unwrap();
        assert_eq!((req.client_id.as_deref(), req.client_secret.as_deref()), (Some("tc"), Some("a+b")));
        assert_eq!(token_request(&HeaderMap::new(), b"code=x"), Err(Refusal::Malformed));
    }

    #[test]
    fn only_the_instances_credential_and_callback_pass() {
        let cred = signin::relay_credential(b"real", "team1", "dev");
        let code = |redirect: &str, secret: &str| TokenRequest {
            fields: vec![
                ("grant_type".into(), "authorization_code".into()),
                ("code".into(), "c".into()),
                ("redirect_uri".into(), redirect.into()),
            ],
            client_id: Some("tc".into()),
            client_secret: Some(secret.into()),
        };
        let t = target("https://dev.apps.example.com");
        let ok = code("https://dev.apps.example.com/oauth2/callback", &cred);
        assert_eq!(check(&ok, "tc", b"real", "team1", "dev", Some(&t)), Ok(()));
        assert_eq!(check(&ok, "other", b"real", "team1", "dev", Some(&t)), Err(Refusal::BadCredential));
        assert_eq!(check(&ok, "tc", b"real", "team1", "prod", Some(&t)), Err(Refusal::BadCredential));
        assert_eq!(check(&ok, "tc", b"rotated", "team1", "dev", Some(&t)), Err(Refusal::BadCredential));
        assert_eq!(check(&ok, "tc", b"real", "team1", "dev", None), Err(Refusal::UnknownInstance));
        let password = RelayTarget { mode: AuthMode::Password, ..t.clone() };
        assert_eq!(check(&ok, "tc", b"real", "team1", "dev", Some(&password)), Err(Refusal::UnknownInstance));
        let foreign = code("https://evil.example.com/oauth2/callback", &cred);
        assert_eq!(check(&foreign, "tc", b"real", "team1", "dev", Some(&t)), Err(Refusal::ForeignRedirect));
        let plain = code("http://dev.apps.example.com/oauth2/callback", &cred);
        assert_eq!(check(&plain, "tc", b"real", "team1", "dev", Some(&t)), Err(Refusal::ForeignRedirect));
        let no_url = RelayTarget { url: None, ..t.clone() };
        assert_eq!(check(&ok, "tc", b"real", "team1", "dev", Some(&no_url)), Err(Refusal::UnknownInstance));
        let refresh = TokenRequest {
            fields: vec![("grant_type".into(), "refresh_token".into()), ("refresh_token".into(), "r".into())],
            client_id: Some("tc".into()),
            client_secret: Some(cred.clone()),
        };
        assert_eq!(check(&refresh, "tc", b"real", "team1", "dev", Some(&t)), Ok(()));
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

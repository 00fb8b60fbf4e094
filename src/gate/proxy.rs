//! Passing an allowed request on to the tinycode server: bodies streamed
//! both ways (server-sent events are never buffered), hop-by-hop headers
//! dropped, the caller's credentials replaced by the server's password, and
//! protocol upgrades (WebSocket) joined end to end.

use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::uri::{Authority, PathAndQuery, Scheme};
use axum::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri, Version, header};
use base64::Engine;
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};

use super::identity::ACCESS_TOKEN_HEADER;

/// The user the tinycode server's Basic authentication expects.
pub const SERVER_USER: &str = "tinycode";
/// How long a password read from its file is used before the file is read again.
pub const PASSWORD_REREAD: Duration = Duration::from_secs(60);
/// Time to connect to the tinycode server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

pub use crate::ops::http_server::strip_hop_by_hop;

/// The protocol a message asks to switch to: its Upgrade header, when its
/// Connection header has the `upgrade` option.
pub fn upgrade_protocol(headers: &HeaderMap) -> Option<HeaderValue> {
    let asks = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|option| option.trim().eq_ignore_ascii_case("upgrade"));
    asks.then(|| headers.get(header::UPGRADE).cloned()).flatten()
}

/// Puts back the two headers an upgrade travels in, after the hop-by-hop ones went.
fn keep_upgrade(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    headers.insert(header::UPGRADE, protocol);
}

/// The caller's credentials never reach the server: its own Authorization
/// and its OpenShift token go; the server's password (when there is one)
/// comes instead.
pub fn replace_credentials(headers: &mut HeaderMap, password: Option<HeaderValue>) {
    headers.remove(header::AUTHORIZATION);
    headers.remove(ACCESS_TOKEN_HEADER);
    if let Some(password) = password {
        headers.insert(header::AUTHORIZATION, password);
    }
}

/// `Basic base64("tinycode:" + password)`, marked sensitive.
pub fn basic_auth(password: &[u8]) -> HeaderValue {
    let mut credentials = format!("{SERVER_USER}:").into_bytes();
    credentials.extend_from_slice(password);
    let encoded = base64::engine::general_purpose::STANDARD.encode(credentials);
    let mut value = HeaderValue::try_from(format!("Basic {encoded}")).expect("base64 is a valid header value");
    value.set_sensitive(true);
    value
}

/// The tinycode server's password, from a file that may be absent (no
/// password: no Authorization header) and may change (a rotated Secret).
/// Clones share what was read.
#[derive(Clone)]
pub struct Password {
    path: Option<PathBuf>,
    /// The header made from the file and when the file was read.
    read: Arc<Mutex<Option<Read>>>,
}

/// A password file's header (None: no file) and when the file was read.
type Read = (Option<HeaderValue>, Instant);

impl Password {
    pub fn new(path: Option<PathBuf>) -> Self {
        Password { path, read: Arc::new(Mutex::new(None)) }
    }

    /// Whether the caller's Basic credentials carry the server's password
    /// (password mode: the gate asks for it in tinycode's place). Any user
    /// name is accepted, as tinycode accepts any. No password file: nobody
    /// passes. The two headers are compared as digests, so the time taken
    /// says nothing of how much of a guess was right.
    pub fn admits(&self, headers: &HeaderMap) -> bool {
        use sha2::{Digest, Sha256};
        let Some(expected) = self.header() else { return false };
        let mut values = headers.get_all(header::AUTHORIZATION).iter();
        let (Some(value), None) = (values.next(), values.next()) else { return false };
        let Some(encoded) = value.to_str().ok().and_then(|v| v.strip_prefix("Basic ")) else { return false };
        let Ok(decoded) = base64::engine::general_purpose::STANDARD.decode(encoded.trim()) else { return false };
        let Some(colon) = decoded.iter().position(|b| *b == b':') else { return false };
        let presented = basic_auth(&decoded[colon + 1..]);
        Sha256::digest(presented.as_bytes()) == Sha256::digest(expected.as_bytes())
    }

    /// The Authorization header for the server, the file read again when
    /// the last read is older than [`PASSWORD_REREAD`]. The password is used
    /// as the file holds it, byte for byte (as the server reads it from the
    /// same Secret key).
    pub fn header(&self) -> Option<HeaderValue> {
        let path = self.path.as_ref()?;
        let mut read = self.read.lock().expect("lock");
        if let Some((header, at)) = &*read
            && at.elapsed() < PASSWORD_REREAD
        {
            return header.clone();
        }
        let header = match std::fs::read(path) {
            Ok(password) => Some(basic_auth(&password)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "gate: cannot read the server password file");
                // Keep what was read before rather than drop the password.
                read.as_ref().and_then(|(header, _)| header.clone())
            }
        };
        *read = Some((header.clone(), Instant::now()));
        header
    }
}

/// Where allowed requests go.
pub struct Upstream {
    scheme: Scheme,
    authority: Authority,
    client: Client<HttpConnector, Body>,
    password: Password,
    /// False for the front's hop to the sign-in proxy, which needs the
    /// caller's cookies and credentials as they came.
    replace_credentials: bool,
    /// What is behind it, in messages: "the tinycode server" or "the sign-in proxy".
    what: &'static str,
}

impl Upstream {
    /// `url` is `http://host:port` (no path: requests keep theirs).
    pub fn new(url: &str, password: Password) -> Result<Self, String> {
        Self::build(url, password, "--upstream", "the tinycode server")
    }

    fn build(url: &str, password: Password, flag: &str, what: &'static str) -> Result<Self, String> {
        let uri: Uri = url.parse().map_err(|e| format!("{flag} {url:?}: {e}"))?;
        let (Some(scheme), Some(authority)) = (uri.scheme(), uri.authority()) else {
            return Err(format!("{flag} {url:?} must be an http://host:port URL"));
        };
        if *scheme != Scheme::HTTP || !matches!(uri.path(), "" | "/") || uri.query().is_some() {
            return Err(format!("{flag} {url:?} must be an http://host:port URL without a path"));
        }
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(CONNECT_TIMEOUT));
        connector.set_nodelay(true);
        let client = Client::builder(TokioExecutor::new()).build(connector);
        Ok(Upstream {
            scheme: scheme.clone(),
            authority: authority.clone(),
            client,
            password,
            replace_credentials: true,
            what,
        })
    }

    /// `url` (`--signin-upstream`) as [`Upstream::new`], passed every header
    /// but the hop-by-hop ones as it came (the front's hop to the sign-in
    /// proxy); `what` names it in messages.
    pub fn pass_through(url: &str, what: &'static str) -> Result<Self, String> {
        let upstream = Self::build(url, Password::new(None), "--signin-upstream", what)?;
        Ok(Upstream { replace_credentials: false, ..upstream })
    }

    /// The server's URI for a request's.
    fn uri(&self, uri: &Uri) -> Uri {
        let path = uri.path_and_query().cloned().unwrap_or_else(|| PathAndQuery::from_static("/"));
        Uri::builder()
            .scheme(self.scheme.clone())
            .authority(self.authority.clone())
            .path_and_query(path)
            .build()
            .expect("scheme, authority and path make a URI")
    }

    /// Sends `req` to the server and answers with its response; a WebSocket
    /// (or any other) upgrade the server accepts is joined to the caller's.
    /// `Err` when no connection to the server could be made (it is stopped
    /// or not started yet): the caller says so in its own words.
    pub async fn forward(&self, mut req: Request<Incoming>) -> Result<Response<Body>, NotAnswering> {
        let protocol = upgrade_protocol(req.headers());
        let caller_upgrade = protocol.is_some().then(|| hyper::upgrade::on(&mut req));
        let (mut parts, body) = req.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        if let Some(protocol) = protocol {
            keep_upgrade(&mut parts.headers, protocol);
        }
        if self.replace_credentials {
            replace_credentials(&mut parts.headers, self.password.header());
        }
        parts.uri = self.uri(&parts.uri);
        parts.version = Version::HTTP_11;
        let mut resp = match self.client.request(Request::from_parts(parts, Body::new(body))).await {
            Ok(resp) => resp,
            Err(e) if e.is_connect() => {
                tracing::debug!(error = %e, upstream = self.what, "gate: no connection");
                return Err(NotAnswering);
            }
            Err(e) => {
                tracing::warn!(error = %e, upstream = self.what, "gate: no answer");
                return Ok(text(StatusCode::BAD_GATEWAY, format!("Bad gateway: {} did not answer\n", self.what)));
            }
        };
        if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
            let Some(caller_upgrade) = caller_upgrade else {
                tracing::warn!(upstream = self.what, "gate: a protocol switch nobody asked for");
                return Ok(text(StatusCode::BAD_GATEWAY, "Bad gateway: unexpected protocol switch\n"));
            };
            let server_upgrade = hyper::upgrade::on(&mut resp);
            tokio::spawn(join_upgrades(caller_upgrade, server_upgrade));
            let protocol = resp.headers().get(header::UPGRADE).cloned();
            let (mut parts, _) = resp.into_parts();
            strip_hop_by_hop(&mut parts.headers);
            if let Some(protocol) = protocol {
                keep_upgrade(&mut parts.headers, protocol);
            }
            return Ok(Response::from_parts(parts, Body::empty()));
        }
        let (mut parts, body) = resp.into_parts();
        strip_hop_by_hop(&mut parts.headers);
        Ok(Response::from_parts(parts, Body::new(body)))
    }
}

/// No connection to the tinycode server could be made.
#[derive(Debug, PartialEq, Eq)]
pub struct NotAnswering;

/// Copies bytes both ways between the caller's and the server's upgraded
/// connections until either closes.
async fn join_upgrades(caller: hyper::upgrade::OnUpgrade, server: hyper::upgrade::OnUpgrade) {
    let (caller, server) = match futures::future::try_join(caller, server).await {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(error = %e, "gate: an upgrade did not complete");
            return;
        }
    };
    let (mut caller, mut server) = (TokioIo::new(caller), TokioIo::new(server));
    match tokio::io::copy_bidirectional(&mut caller, &mut server).await {
        Ok((up, down)) => tracing::debug!(up, down, "gate: upgraded connection closed"),
        Err(e) => tracing::debug!(error = %e, "gate: upgraded connection ended with an error"),
    }
}

/// A short plain-text answer.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.into()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    resp
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use axum::http::HeaderName;

    /// Headers from (name, value) pairs, repeats kept.
    pub(in crate::gate) fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(HeaderName::from_bytes(k.as_bytes()).unwrap(), HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn names(h: &HeaderMap) -> Vec<&str> {
        let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
        names.sort();
        names
    }

    #[test]
    fn hop_by_hop_headers_and_those_connection_names_are_dropped() {
        let mut h = headers(&[
            ("connection", "keep-alive, X-Custom-Hop"),
            ("connection", "close"),
            ("keep-alive", "timeout=5"),
            ("proxy-connection", "keep-alive"),
            ("proxy-authorization", "Basic eA=="),
            ("proxy-authenticate", "Basic"),
            ("te", "trailers"),
            ("trailer", "x-checksum"),
            ("transfer-encoding", "chunked"),
            ("upgrade", "websocket"),
            ("x-custom-hop", "1"),
            ("content-type", "text/event-stream"),
            ("cache-control", "no-cache"),
            ("x-forwarded-user", "alice"),
        ]);
        strip_hop_by_hop(&mut h);
        assert_eq!(names(&h), ["cache-control", "content-type", "x-forwarded-user"]);
    }

    #[test]
    fn an_upgrade_is_asked_by_connection_upgrade_and_an_upgrade_header() {
        let ws = headers(&[("connection", "keep-alive, Upgrade"), ("upgrade", "websocket")]);
        assert_eq!(upgrade_protocol(&ws), Some(HeaderValue::from_static("websocket")));
        assert_eq!(upgrade_protocol(&headers(&[("upgrade", "websocket")])), None, "no Connection: upgrade");
        assert_eq!(upgrade_protocol(&headers(&[("connection", "upgrade")])), None, "no protocol");
        let mut h = ws.clone();
        strip_hop_by_hop(&mut h);
        keep_upgrade(&mut h, upgrade_protocol(&ws).unwrap());
        assert_eq!(names(&h), ["connection", "upgrade"]);
        assert_eq!(h[header::CONNECTION], "upgrade");
    }

    #[test]
    fn the_callers_credentials_are_replaced_by_the_servers_password() {
        let mut h = headers(&[
            ("authorization", "Bearer users-id-token"),
            ("x-forwarded-access-token", "sha256~secret"),
            ("x-forwarded-user", "alice"),
        ]);
        replace_credentials(&mut h, Some(basic_auth(b"s3cret")));
        assert_eq!(names(&h), ["authorization", "x-forwarded-user"]);
        // base64("tinycode:s3cret")
        assert_eq!(h[header::AUTHORIZATION], "Basic dGlueWNvZGU6czNjcmV0");
        assert!(h[header::AUTHORIZATION].is_sensitive());

        let mut h = headers(&[("authorization", "Basic dXNlcjpwYXNz"), ("x-forwarded-access-token", "t")]);
        replace_credentials(&mut h, None);
        assert!(h.is_empty(), "without a password no Authorization at all: {h:?}");
    }

    #[test]
    fn the_password_is_read_from_its_file_as_is_and_may_be_absent() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        let password = Password::new(Some(file.clone()));
        assert_eq!(password.header(), None, "no file, no password");
        std::fs::write(&file, "pw\n").unwrap();
        assert_eq!(password.header(), None, "read again only after {PASSWORD_REREAD:?}");
        let fresh = Password::new(Some(file.clone()));
        assert_eq!(fresh.header(), Some(basic_auth(b"pw\n")), "the bytes as they are");
        assert_eq!(Password::new(None).header(), None);
    }

    #[test]
    fn only_one_basic_header_with_the_password_is_admitted() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("password");
        let basic = |creds: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(creds));
        let good = basic("me:s3:cret");
        let password = Password::new(Some(file.clone()));
        assert!(!password.admits(&headers(&[("authorization", &good)])), "no password file: nobody");
        std::fs::write(&file, "s3:cret").unwrap();
        let password = Password::new(Some(file));
        assert!(password.admits(&headers(&[("authorization", &good)])), "the password after the first colon");
        assert!(password.admits(&headers(&[("authorization", &basic(":s3:cret"))])), "an empty user name");
        for refused in [
            vec![],
            vec![("authorization", basic("me:s3:cre"))],
            vec![("authorization", basic("s3:cret"))],
            vec![("authorization", basic("me:s3:cret\n"))],
            vec![("authorization", good.replace("Basic", "Bearer"))],
            vec![("authorization", "Basic !!".to_string())],
            vec![("authorization", good.clone()), ("authorization", good.clone())],
        ] {
            let pairs: Vec<(&str, &str)> = refused.iter().map(|(k, v)| (*k, v.as_str())).collect();
            assert!(!password.admits(&headers(&pairs)), "{refused:?}");
        }
    }

    #[test]
    fn the_upstream_is_an_http_url_without_a_path() {
        for good in ["http://127.0.0.1:4096", "http://127.0.0.1:4096/", "http://localhost:8080"] {
            assert!(Upstream::new(good, Password::new(None)).is_ok(), "{good}");
        }
        for bad in ["https://127.0.0.1:4096", "http://127.0.0.1:4096/api", "127.0.0.1:4096", "/x", "http://h/?q"] {
            assert!(Upstream::new(bad, Password::new(None)).is_err(), "{bad}");
        }
        let up = Upstream::new("http://127.0.0.1:4096", Password::new(None)).unwrap();
        assert_eq!(up.uri(&"/session/1?x=y".parse().unwrap()), "http://127.0.0.1:4096/session/1?x=y");
    }
}

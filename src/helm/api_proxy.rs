//! The apiserver as helm reaches it: a plain-HTTP listener on loopback in the
//! operator's process that forwards each request over the operator's own
//! client (its kept TLS connections and its credentials).
//!
//! Every helm run used to open a TLS connection of its own and fetch the API
//! discovery documents again (helm invalidates its discovery cache on every
//! run). A run's handshake cost helm about 15% of its CPU and the
//! apiserver a share of its own; the discovery documents change only when an
//! API group does. Here helm speaks plain HTTP over loopback, the operator's
//! pooled connections carry its requests, and `/api`, `/apis` and `/version`
//! (asked twice a run) are answered from a copy at most [`DISCOVERY_TTL`]
//! old. The copy of `/apis` lists only the API groups the chart's templates
//! name ([`chart_api_groups`]): helm
//! writes a cache file for, and decodes, every group it is told of, and the
//! chart renders objects of three (measured: docs/benchmarks.md, "helm
//! through the operator's loopback listener"). A template naming a new group widens the list
//! by itself; `tests/chart.rs` checks that every object the chart renders
//! is of a group the list holds.
//!
//! The listener holds the operator's power, so a request's path must begin
//! with a token random to this process, which only helm's environment holds
//! (`HELM_KUBEAPISERVER`, readable by the operator's own user only), as the
//! path of the server URL. (A path, not a bearer token: client-go sends no
//! credentials over plain HTTP.) helm's messages are cleared of it
//! ([`ApiProxy::redact`]) before they reach a status or a log. Nothing else
//! of the request is changed but the hop-by-hop headers, `Authorization`
//! (the operator's own is added) and `Accept-Encoding` (compressing over
//! loopback is wasted work).

use std::collections::{BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, Method, Request, Response, StatusCode, header};
use tokio::net::TcpListener;

use crate::ops::http_server::{Limits, serve};

/// How old a discovery document may be when it is served again. helm reads
/// it for its capabilities and to map kinds to resources; an API group added
/// to the cluster is seen at most this much later.
pub const DISCOVERY_TTL: Duration = Duration::from_secs(30);
/// Largest request body forwarded (a release record is at most 1 MiB as a
/// Secret; a manifest object is far smaller).
const MAX_REQUEST_BYTES: usize = 16 << 20;
/// Bound on one request's answer head; helm's own timeout ends the run first.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);
/// Connections at once: a few per running helm process.
const MAX_CONNECTIONS: usize = 512;
/// Paths whose answers are kept for [`DISCOVERY_TTL`] (GET, no query but a
/// timeout): the discovery documents, and the server's version, which helm
/// asks for twice in every run (once for its capabilities, once to check the
/// cluster is reachable) and which changes only when the apiserver does.
const DISCOVERY_PATHS: [&str; 3] = ["/api", "/apis", "/version"];

/// A discovery answer as the apiserver gave it.
#[derive(Clone)]
struct Kept {
    at: Instant,
    status: StatusCode,
    content_type: Option<HeaderValue>,
    body: Bytes,
}

struct Shared {
    client: kube::Client,
    /// `/<token>`, the prefix every path must have; compared in constant time.
    prefix: Vec<u8>,
    /// Discovery answers by path and Accept header.
    kept: Mutex<HashMap<(String, String), Kept>>,
    /// The API groups `/apis` lists (all when None).
    groups: Option<BTreeSet<String>>,
}

/// The running listener: where it is and the kubeconfig that reaches it.
#[derive(Clone)]
pub struct ApiProxy {
    addr: SocketAddr,
    token: Arc<str>,
}

impl ApiProxy {
    /// Listens on an ephemeral loopback port and serves until the process
    /// ends; `/apis` lists only `groups` (all when None).
    pub async fn start(client: kube::Client, groups: Option<BTreeSet<String>>) -> std::io::Result<Self> {
        let token: Arc<str> = crate::render::secret::random_password(40).map_err(std::io::Error::other)?.into();
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let shared = Arc::new(Shared {
            client,
            prefix: format!("/{token}").into_bytes(),
            kept: Mutex::new(HashMap::new()),
            groups,
        });
        let router = Router::new().fallback(forward).with_state(shared);
        let limits = Limits {
            // Also the idle time of a kept-alive connection between two of helm's requests.
            header_read_timeout: Duration::from_secs(30),
            request_timeout: ANSWER_TIMEOUT,
            max_connections: MAX_CONNECTIONS,
            // Every client is on loopback.
            max_connections_per_peer: MAX_CONNECTIONS,
        };
        tokio::spawn(serve(listener, router, limits));
        Ok(Self { addr, token })
    }

    /// The listener's URL, its token included (what helm is given as
    /// `HELM_KUBEAPISERVER`, its `--kube-apiserver`).
    pub fn server(&self) -> String {
        format!("http://{}/{}", self.addr, self.token)
    }

    /// A kubeconfig (JSON, which is YAML) for this listener and its token.
    pub fn kubeconfig(&self) -> String {
        serde_json::json!({
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "operator", "cluster": {"server": self.server()}}],
            "users": [{"name": "operator", "user": {}}],
            "contexts": [{"name": "operator", "context": {"cluster": "operator", "user": "operator"}}],
            "current-context": "operator",
        })
        .to_string()
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `text` (a message of helm's, which may quote a URL) without the token.
    pub fn redact(&self, text: &str) -> String {
        text.replace(&*self.token, "<redacted>")
    }
}

/// The path of `path` after the prefix, when it begins with the prefix
/// followed by `/` (or nothing).
fn behind<'a>(path: &'a str, prefix: &[u8]) -> Option<&'a str> {
    let bytes = path.as_bytes();
    let head = bytes.get(..prefix.len())?;
    if !same(head, prefix) {
        return None;
    }
    // A path is ASCII; `get` rather than an index all the same.
    let rest = path.get(prefix.len()..)?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

/// Compares without stopping at the first difference.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

fn answer(status: StatusCode, text: &'static str) -> Response<Body> {
    let mut response = Response::new(Body::from(text));
    *response.status_mut() = status;
    response
}

async fn forward(State(shared): State<Arc<Shared>>, request: Request<Body>) -> Response<Body> {
    let (mut parts, body) = request.into_parts();
    let Some(rest) = behind(parts.uri.path(), &shared.prefix) else {
        return answer(StatusCode::NOT_FOUND, "not found\n");
    };
    let rest = if rest.is_empty() { "/" } else { rest };
    let path = match parts.uri.query() {
        Some(query) => format!("{rest}?{query}"),
        None => rest.to_string(),
    };
    let Ok(path) = axum::http::uri::PathAndQuery::try_from(path) else {
        return answer(StatusCode::BAD_REQUEST, "bad path\n");
    };
    let discovery = (parts.method == Method::GET
        && path.query().is_none_or(only_a_timeout)
        && DISCOVERY_PATHS.contains(&path.path()))
    .then(|| (path.path().to_string(), accept_of(&parts.headers)));
    if let Some(key) = &discovery
        && let Some(kept) = shared.kept.lock().expect("lock").get(key).filter(|k| k.at.elapsed() < DISCOVERY_TTL)
    {
        return replay(kept.clone());
    }
    let body = match axum::body::to_bytes(body, MAX_REQUEST_BYTES).await {
        Ok(body) => body,
        Err(_) => return answer(StatusCode::PAYLOAD_TOO_LARGE, "request body too large\n"),
    };
    crate::ops::http_server::strip_hop_by_hop(&mut parts.headers);
    for name in [header::AUTHORIZATION, header::HOST, header::ACCEPT_ENCODING, header::CONTENT_LENGTH] {
        parts.headers.remove(name);
    }
    parts.uri = path.into();
    let upstream = Request::from_parts(parts, kube::client::Body::from(body));
    let response = match shared.client.send(upstream).await {
        Ok(response) => response,
        Err(e) => {
            tracing::debug!(error = %e, "a request of helm's did not reach the apiserver");
            return answer(StatusCode::BAD_GATEWAY, "the apiserver could not be reached\n");
        }
    };
    let (mut parts, body) = response.into_parts();
    crate::ops::http_server::strip_hop_by_hop(&mut parts.headers);
    match discovery {
        Some(key) if parts.status == StatusCode::OK => {
            let Ok(body) = http_body_util_collect(body).await else {
                return answer(StatusCode::BAD_GATEWAY, "the apiserver's answer broke off\n");
            };
            let body = match &shared.groups {
                Some(groups) if key.0 == "/apis" => only_groups(body, groups),
                _ => body,
            };
            let kept = Kept {
                at: Instant::now(),
                status: parts.status,
                content_type: parts.headers.get(header::CONTENT_TYPE).cloned(),
                body,
            };
            shared.kept.lock().expect("lock").insert(key, kept.clone());
            replay(kept)
        }
        _ => Response::from_parts(parts, Body::new(body)),
    }
}

/// The API groups (`apps`, `rbac.authorization.k8s.io`, ...; the core group
/// has no name and is always listed) that the `apiVersion:` lines of the
/// chart's templates name.
pub fn chart_api_groups(chart: &std::path::Path) -> std::io::Result<BTreeSet<String>> {
    let line = regex::Regex::new(r#"(?m)^[\s-]*apiVersion:\s*["']?([a-z0-9.-]+)/[a-z0-9]+["']?\s*$"#)
        .expect("a valid pattern");
    let mut groups = BTreeSet::new();
    for entry in std::fs::read_dir(chart.join("templates"))? {
        let path = entry?.path();
        if path.is_file() {
            let text = std::fs::read_to_string(&path)?;
            groups.extend(line.captures_iter(&text).map(|c| c[1].to_string()));
        }
    }
    Ok(groups)
}

/// A discovery list of `/apis` (aggregated or not) with only `groups` in
/// it; anything else as it came.
fn only_groups(body: Bytes, groups: &BTreeSet<String>) -> Bytes {
    let Ok(mut list) = serde_json::from_slice::<serde_json::Value>(&body) else {
        return body;
    };
    let (field, name): (&str, &[&str]) = match list["kind"].as_str() {
        Some("APIGroupDiscoveryList") => ("items", &["metadata", "name"]),
        Some("APIGroupList") => ("groups", &["name"]),
        _ => return body,
    };
    let Some(items) = list.get_mut(field).and_then(serde_json::Value::as_array_mut) else {
        return body;
    };
    items.retain(|item| {
        let group = name.iter().try_fold(item, |v, key| v.get(key)).and_then(serde_json::Value::as_str);
        group.is_some_and(|g| groups.contains(g))
    });
    serde_json::to_vec(&list).map(Bytes::from).unwrap_or(body)
}

/// Whether a query asks nothing but a time limit (client-go adds
/// `timeout=32s` to its discovery requests).
fn only_a_timeout(query: &str) -> bool {
    form_urlencoded::parse(query.as_bytes()).all(|(key, _)| key == "timeout")
}

/// The Accept header as a cache key (the apiserver answers aggregated or
/// plain discovery by it).
fn accept_of(headers: &HeaderMap) -> String {
    headers.get_all(header::ACCEPT).iter().map(|v| String::from_utf8_lossy(v.as_bytes())).collect::<Vec<_>>().join(",")
}

fn replay(kept: Kept) -> Response<Body> {
    let mut response = Response::new(Body::from(kept.body));
    *response.status_mut() = kept.status;
    if let Some(content_type) = kept.content_type {
        response.headers_mut().insert(header::CONTENT_TYPE, content_type);
    }
    response
}

/// The whole of a discovery answer (tens of KiB).
async fn http_body_util_collect(body: kube::client::Body) -> Result<Bytes, axum::Error> {
    axum::body::to_bytes(Body::new(body), MAX_REQUEST_BYTES).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// What the stand-in apiserver saw of one request.
    #[derive(Debug, Clone)]
    struct Seen {
        method: Method,
        path: String,
        authorization: Option<String>,
        body: Bytes,
    }

    /// An apiserver stand-in on loopback: records every request, answers
    /// `/api` with a counter in the body and anything else with its path.
    async fn apiserver() -> (SocketAddr, Arc<Mutex<Vec<Seen>>>) {
        let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
        let count = Arc::new(AtomicUsize::new(0));
        let log = seen.clone();
        let app = Router::new().fallback(move |request: Request<Body>| {
            let (log, count) = (log.clone(), count.clone());
            async move {
                let (parts, body) = request.into_parts();
                let body = axum::body::to_bytes(body, 1 << 20).await.unwrap();
                let authorization = parts.headers.get(header::AUTHORIZATION).map(|v| v.to_str().unwrap().to_string());
                let path = parts.uri.path_and_query().unwrap().to_string();
                log.lock().unwrap().push(Seen { method: parts.method, path: path.clone(), authorization, body });
                let n = count.fetch_add(1, Ordering::SeqCst);
                let mut response = Response::new(Body::from(format!("{path} #{n}")));
                response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                response
            }
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, seen)
    }

    async fn proxy_to(addr: SocketAddr) -> (ApiProxy, String) {
        let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        config.auth_info.token = Some("the-operators-token".to_string().into());
        let groups = BTreeSet::from(["apps".to_string()]);
        let proxy = ApiProxy::start(kube::Client::try_from(config).unwrap(), Some(groups)).await.unwrap();
        let kubeconfig: serde_json::Value = serde_json::from_str(&proxy.kubeconfig()).unwrap();
        let server = kubeconfig["clusters"][0]["cluster"]["server"].as_str().unwrap().to_string();
        assert!(kubeconfig["users"][0]["user"].as_object().unwrap().is_empty(), "no credentials in helm's kubeconfig");
        (proxy, server)
    }

    async fn send(method: &str, url: &str, body: &'static str) -> (u16, String) {
        let response = reqwest::Client::new()
            .request(method.parse().unwrap(), url)
            .header("authorization", "Bearer helms-own")
            .body(body)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    }

    #[tokio::test]
    async fn requests_without_the_token_reach_nothing() {
        let (addr, seen) = apiserver().await;
        let (proxy, server) = proxy_to(addr).await;
        let bare = format!("http://{}", proxy.addr());
        for url in [
            format!("{bare}/api/v1/secrets"),
            format!("{bare}/"),
            format!("{server}x/api/v1/secrets"),
            format!("{}/api/v1/secrets", &server[..server.len() - 1]),
        ] {
            let (status, _) = send("GET", &url, "").await;
            assert_eq!(status, 404, "{url}");
        }
        assert!(seen.lock().unwrap().is_empty(), "the apiserver saw {:?}", seen.lock().unwrap());
    }

    #[tokio::test]
    async fn requests_reach_the_apiserver_as_the_operator() {
        let (addr, seen) = apiserver().await;
        let (_proxy, server) = proxy_to(addr).await;
        let (status, text) =
            send("POST", &format!("{server}/api/v1/namespaces/a/secrets?fieldManager=helm"), "{\"kind\":\"Secret\"}")
                .await;
        assert_eq!((status, text.as_str()), (200, "/api/v1/namespaces/a/secrets?fieldManager=helm #0"));
        let seen = seen.lock().unwrap().clone();
        assert_eq!(seen.len(), 1);
        assert_eq!(seen[0].method, Method::POST);
        assert_eq!(seen[0].path, "/api/v1/namespaces/a/secrets?fieldManager=helm", "the token is no part of the path");
        assert_eq!(seen[0].authorization.as_deref(), Some("Bearer the-operators-token"), "helm's own is replaced");
        assert_eq!(&seen[0].body[..], b"{\"kind\":\"Secret\"}");
    }

    #[tokio::test]
    async fn discovery_is_answered_from_a_copy_and_nothing_else_is() {
        let (addr, seen) = apiserver().await;
        let (_proxy, server) = proxy_to(addr).await;
        let first = send("GET", &format!("{server}/api?timeout=32s"), "").await;
        let again = send("GET", &format!("{server}/api?timeout=32s"), "").await;
        assert_eq!(first, (200, "/api?timeout=32s #0".to_string()));
        assert_eq!(again, first, "the kept copy");
        let other = send("GET", &format!("{server}/api?labelSelector=x"), "").await;
        assert_eq!(other, (200, "/api?labelSelector=x #1".to_string()), "a query other than a timeout is asked anew");
        let version = send("GET", &format!("{server}/version"), "").await;
        let version_again = send("GET", &format!("{server}/version?timeout=32s"), "").await;
        assert_eq!(version, (200, "/version #2".to_string()));
        assert_eq!(version_again, version, "the server's version is kept too, whatever the timeout");
        let secrets = send("GET", &format!("{server}/api/v1/secrets"), "").await;
        let secrets_again = send("GET", &format!("{server}/api/v1/secrets"), "").await;
        assert_ne!(secrets, secrets_again, "objects are never kept");
        assert_eq!(seen.lock().unwrap().len(), 5);
    }

    #[test]
    fn apis_lists_only_the_charts_groups() {
        let groups = BTreeSet::from(["apps".to_string(), "rbac.authorization.k8s.io".to_string()]);
        let aggregated = serde_json::json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2",
            "items": [{"metadata": {"name": "apps"}, "versions": [{"version": "v1"}]},
                      {"metadata": {"name": "batch"}, "versions": [{"version": "v1"}]},
                      {"metadata": {}},
                      {"metadata": {"name": "rbac.authorization.k8s.io"}}]});
        let kept = only_groups(Bytes::from(aggregated.to_string()), &groups);
        let kept: serde_json::Value = serde_json::from_slice(&kept).unwrap();
        let names: Vec<&str> =
            kept["items"].as_array().unwrap().iter().map(|i| i["metadata"]["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["apps", "rbac.authorization.k8s.io"]);
        assert_eq!(kept["items"][0]["versions"][0]["version"], "v1", "a kept group keeps all it said");
        let plain = serde_json::json!({"kind": "APIGroupList", "groups": [{"name": "batch"}, {"name": "apps"}]});
        let kept: serde_json::Value =
            serde_json::from_slice(&only_groups(Bytes::from(plain.to_string()), &groups)).unwrap();
        assert_eq!(kept["groups"], serde_json::json!([{"name": "apps"}]));
        for other in [&b"not json"[..], br#"{"kind":"Status","code":500}"#] {
            assert_eq!(only_groups(Bytes::from_static(other), &groups), Bytes::from_static(other));
        }
    }

    #[test]
    fn the_groups_are_read_from_the_templates() {
        let chart = tempfile::tempdir().unwrap();
        std::fs::create_dir(chart.path().join("templates")).unwrap();
        std::fs::write(
            chart.path().join("templates/a.yaml"),
            "apiVersion: apps/v1\nkind: Deployment\n---\napiVersion: v1\nkind: Service\nspec:\n  x:\n    - apiVersion: \"tinycode.dev/v1alpha1\"\n",
        )
        .unwrap();
        std::fs::write(
            chart.path().join("templates/_h.tpl"),
            "{{- define \"x\" }}\napiVersion: networking.k8s.io/v1\n{{- end }}\n",
        )
        .unwrap();
        let groups = chart_api_groups(chart.path()).unwrap();
        assert_eq!(groups, BTreeSet::from(["apps", "networking.k8s.io", "tinycode.dev"].map(String::from)));
    }

    #[tokio::test]
    async fn helms_messages_lose_the_token() {
        let (addr, _) = apiserver().await;
        let (proxy, server) = proxy_to(addr).await;
        let message = format!("Get \"{server}/api\": dial tcp: connection refused");
        let redacted = proxy.redact(&message);
        assert!(!redacted.contains(&*proxy.token), "{redacted}");
        assert_eq!(redacted, format!("Get \"http://{}/<redacted>/api\": dial tcp: connection refused", proxy.addr()));
    }
}

//! The proxy against stand-in providers on loopback: who gets the key,
//! what streams, what is bounded and counted.

use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use tokio::sync::Notify;

use super::*;

/// What a stand-in saw: (path, Authorization) of each request.
type Seen = Arc<Mutex<Vec<(String, String)>>>;

#[derive(Clone)]
struct Standin {
    seen: Seen,
    /// The provider sends the rest of a stream once this is notified.
    go_on: Arc<Notify>,
    /// Where /v1/redirect sends the client.
    elsewhere: String,
}

async fn record(s: &Standin, path: &str, headers: &HeaderMap) {
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    s.seen.lock().unwrap().push((path.to_string(), auth));
}

async fn provider(State(s): State<Standin>, req: axum::extract::Request) -> axum::response::Response {
    let path = req.uri().path().to_string();
    record(&s, &path, req.headers()).await;
    match path.as_str() {
        "/v1/models" => axum::Json(serde_json::json!({"data": [{"id": "m"}]})).into_response(),
        "/v1/redirect" => (StatusCode::FOUND, [("location", s.elsewhere.clone())]).into_response(),
        "/v1/chat/completions" => {
            let go_on = s.go_on.clone();
            let chunks = futures::stream::unfold(0, move |n| {
                let go_on = go_on.clone();
                async move {
                    let chunk = match n {
                        0 => "data: {\"choices\":[{\"delta\":{\"content\":\"hel\"}}]}\n\n",
                        1 => {
                            go_on.notified().await;
                            "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7}}\n\n"
                        }
                        2 => "data: [DONE]\n\n",
                        _ => return None,
                    };
                    Some((Ok::<_, std::io::Error>(Bytes::from(chunk)), n + 1))
                }
            });
            ([("content-type", "text/event-stream")], Body::from_stream(chunks)).into_response()
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn serve(router: Router) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

struct World {
    proxy: SocketAddr,
    provider: Standin,
    elsewhere: Seen,
    keys: tempfile::TempDir,
    metrics: Arc<Metrics>,
}

async fn world() -> World {
    let elsewhere = Standin { seen: Seen::default(), go_on: Arc::default(), elsewhere: String::new() };
    let elsewhere_addr = serve(Router::new().fallback(provider).with_state(elsewhere.clone())).await;
    let standin = Standin {
        seen: Seen::default(),
        go_on: Arc::default(),
        elsewhere: format!("http://{elsewhere_addr}/v1/models"),
    };
    let provider_addr = serve(Router::new().fallback(provider).with_state(standin.clone())).await;
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("keyed"), "sk-first\n").unwrap();
    let labels = Labels { namespace: "team".into(), instance: "dev".into(), class: "gpu".into() };
    let metrics = Arc::new(Metrics::new(labels));
    let providers: Vec<Provider> = vec![format!("keyed=http://{provider_addr}").parse().unwrap()];
    let proxy = Arc::new(Proxy::new(&providers, keys.path().to_path_buf(), metrics.clone(), true));
    let addr = serve(router(proxy)).await;
    World { proxy: addr, provider: standin, elsewhere: elsewhere.seen, keys, metrics }
}

fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).no_proxy().build().unwrap()
}

#[test]
fn providers_parse_and_routes_stay_under_v1() {
    let p: Provider = "a-1=http://vllm.models.svc:8000/".parse().unwrap();
    assert_eq!(p, Provider { name: "a-1".into(), base: "http://vllm.models.svc:8000/v1".into() });
    for bad in ["=http://x", "A=http://x", "a", "a=ftp://x", "-a=http://x", "a/b=http://x"] {
        assert!(bad.parse::<Provider>().is_err(), "{bad}");
    }
    let providers = BTreeMap::from([("a".to_string(), "http://h/v1".to_string())]);
    let r = |p: &str| route(&providers, p).map(|(_, url)| url);
    assert_eq!(r("/a/v1/chat/completions?x=1").as_deref(), Some("http://h/v1/chat/completions?x=1"));
    assert_eq!(r("/a/v1").as_deref(), Some("http://h/v1"));
    assert_eq!(r("/a/v1/").as_deref(), Some("http://h/v1/"));
    for none in ["/a", "/a/", "/a/v2/models", "/a/v1x", "/b/v1/models", "/", "", "http://h/v1/models"] {
        assert_eq!(r(none), None, "{none}");
    }
    // Nothing leaves the base: dot segments in any spelling, encoded
    // separators, a backslash.
    let providers = BTreeMap::from([("a".to_string(), "http://h/gateway/v1".to_string())]);
    let r = |p: &str| route(&providers, p).map(|(_, url)| url);
    assert_eq!(r("/a/v1/models").as_deref(), Some("http://h/gateway/v1/models"));
    for escape in [
        "/a/v1/../../admin/keys",
        "/a/v1/..",
        "/a/v1/%2e%2e/%2E%2E/admin",
        "/a/v1/.%2e/x",
        "/a/v1/x/./y",
        "/a/v1/x%2f..%2f..%2fadmin",
        "/a/v1/x%5c..",
        "/a/v1/x\\..\\..",
        "/a/v1//evil.example/x",
    ] {
        let routed = r(escape);
        assert!(
            routed.as_deref().is_none_or(|u| u.starts_with("http://h/gateway/v1/") && !u.contains("..")),
            "{escape} -> {routed:?}"
        );
    }
    assert_eq!(r("/a/v1/../../admin/keys"), None);
    assert_eq!(r("/a/v1/%2e%2e/%2E%2E/admin"), None);
}

/// Keys go nowhere the agent could listen or a cloud keeps credentials:
/// such a provider is refused (502, saying why), the others still served.
#[tokio::test]
async fn providers_on_loopback_link_local_or_metadata_get_no_key() {
    let refused = |url: &str| {
        let p: Provider = format!("p={url}").parse().unwrap();
        Proxy::new(&[p], PathBuf::new(), Arc::new(Metrics::new(Labels::default())), false).refusal("p").is_some()
    };
    for url in [
        "http://127.0.0.1:8000",
        "http://localhost:8000",
        "http://[::1]:8000",
        "http://169.254.169.254",
        "http://x.localhost",
    ] {
        assert!(refused(url), "{url}");
    }
    for url in ["http://vllm.models.svc:8000", "https://openrouter.ai/api", "http://10.1.2.3:8000"] {
        assert!(!refused(url), "{url}");
    }
    assert!("p=http://user:pw@h".parse::<Provider>().is_err(), "credentials in the URL");

    // Served without the loopback exception: the loopback stand-in gets nothing.
    let w = world().await;
    let keys = w.keys.path().to_path_buf();
    let p: Provider = format!("keyed={}", w.provider.elsewhere.replace("/v1/models", "")).parse().unwrap();
    let proxy = serve(router(Arc::new(Proxy::new(&[p], keys, w.metrics.clone(), false)))).await;
    let r = client().get(format!("http://{proxy}/keyed/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert!(r.text().await.unwrap().contains("refused"));
    assert!(w.elsewhere.lock().unwrap().is_empty());
}

/// The agent's own Authorization and Host go; the key is added for the
/// provider's URL only: an unknown provider, a path outside /v1, another
/// Host and a redirect to elsewhere send nothing there.
#[tokio::test]
async fn the_key_reaches_its_provider_and_nothing_else() {
    let w = world().await;
    let c = client();
    let base = format!("http://{}", w.proxy);
    let r = c
        .get(format!("{base}/keyed/v1/models"))
        .header("authorization", "Bearer agent-made-up")
        .header("host", "elsewhere.example")
        .header("x-api-key", "agent")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.json::<serde_json::Value>().await.unwrap()["data"][0]["id"], "m");
    assert_eq!(w.provider.seen.lock().unwrap().clone(), vec![("/v1/models".to_string(), "Bearer sk-first".into())]);

    let r = c.get(format!("{base}/keyed/v1/redirect")).send().await.unwrap();
    assert_eq!(r.status(), 302, "the redirect goes back to the agent, unfollowed");
    for path in ["/other/v1/models", "/keyed/v2/models", "/keyed"] {
        let r = c.get(format!("{base}{path}")).send().await.unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    assert!(w.elsewhere.lock().unwrap().is_empty(), "elsewhere was asked: {:?}", w.elsewhere.lock().unwrap());
    assert_eq!(w.provider.seen.lock().unwrap().len(), 2, "only models and the redirect reached the provider");

    // TRACE would echo the key back; it is not passed on.
    let r = c.request(reqwest::Method::TRACE, format!("{base}/keyed/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 405);
    assert_eq!(w.provider.seen.lock().unwrap().len(), 2, "the TRACE reached the provider");

    // A rotated key is used at once; a missing one is said, never guessed.
    std::fs::write(w.keys.path().join("keyed"), "sk-second").unwrap();
    c.get(format!("{base}/keyed/v1/models")).send().await.unwrap();
    assert_eq!(w.provider.seen.lock().unwrap().last().unwrap().1, "Bearer sk-second");
    std::fs::remove_file(w.keys.path().join("keyed")).unwrap();
    let r = c.get(format!("{base}/keyed/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    assert!(r.text().await.unwrap().contains("no key for keyed"));
    assert_eq!(w.provider.seen.lock().unwrap().len(), 3);
}

/// An event stream's first chunk reaches the agent while the provider
/// still holds the rest; its usage is counted once it ends.
#[tokio::test]
async fn answers_stream_as_they_come_and_their_usage_is_counted() {
    let w = world().await;
    let mut r = client()
        .post(format!("http://{}/keyed/v1/chat/completions", w.proxy))
        .body(r#"{"stream":true}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), r.chunk()).await.expect("first chunk in time");
    assert!(String::from_utf8_lossy(&first.unwrap().unwrap()).contains("hel"));
    assert!(!w.metrics.encode().contains("kind=\"prompt\""), "no usage counted before the end");
    w.provider.go_on.notify_one();
    let mut rest = Vec::new();
    while let Some(chunk) = r.chunk().await.unwrap() {
        rest.extend_from_slice(&chunk);
    }
    assert!(String::from_utf8_lossy(&rest).ends_with("data: [DONE]\n\n"));
    let text = w.metrics.encode();
    let series = |kind: &str, n: u64| {
        format!(
            "tinycode_model_tokens_total{{namespace=\"team\",instance=\"dev\",class=\"gpu\",provider=\"keyed\",kind=\"{kind}\"}} {n}"
        )
    };
    assert!(text.contains(&series("prompt", 5)) && text.contains(&series("completion", 7)), "{text}");
    assert!(text.contains("provider=\"keyed\",code=\"200\"} 1"), "{text}");
}

#[tokio::test]
async fn an_oversized_request_is_refused_before_the_provider() {
    let w = world().await;
    let body = vec![b'x'; MAX_REQUEST_BYTES + 1];
    let sent = client().post(format!("http://{}/keyed/v1/chat/completions", w.proxy)).body(body).send().await;
    // The proxy may answer before the client finished sending, which then
    // sees the connection close instead of the answer.
    if let Ok(r) = sent {
        assert_eq!(r.status(), 413);
    }
    assert!(w.provider.seen.lock().unwrap().is_empty());
    assert!(w.metrics.encode().contains("code=\"too-large\"} 1"));
}

/// A hosted OpenAI-compatible API under a path of its own (OpenRouter's
/// `https://openrouter.ai/api/v1`, OpenAI's `https://api.openai.com/v1`) is a
/// provider like a vLLM server: `/NAME/v1/...` goes under its base, path
/// prefix kept, with its key, and the agent's own key never reaches it.
#[tokio::test]
async fn a_hosted_api_under_a_path_prefix_gets_its_key_there() {
    let seen: Seen = Seen::default();
    let recorded = seen.clone();
    let hosted = Router::new().fallback(move |req: axum::extract::Request| {
        let seen = recorded.clone();
        async move {
            let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
            seen.lock().unwrap().push((req.uri().path().to_string(), auth.to_string()));
            axum::Json(serde_json::json!({"data": [{"id": "openai/gpt-4o"}]}))
        }
    });
    let addr = serve(hosted).await;
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("openrouter"), "sk-or-v1-hosted\n").unwrap();
    let provider: Provider = format!("openrouter=http://{addr}/api/v1").parse().unwrap();
    let metrics = Arc::new(Metrics::new(Labels::default()));
    let proxy = serve(router(Arc::new(Proxy::new(&[provider], keys.path().to_path_buf(), metrics, true)))).await;
    let r = client()
        .get(format!("http://{proxy}/openrouter/v1/models"))
        .bearer_auth("the agent's own")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("/api/v1/models".to_string(), "Bearer sk-or-v1-hosted".to_string())],
        "under the base's path, with the proxy's key alone"
    );
}

/// Where the class limits egress, providers are reached through the
/// instance's egress proxy (`--egress-proxy`), which gets the request for
/// the provider's own URL; the proxy of the environment is never used.
#[tokio::test]
async fn through_an_egress_proxy_the_request_names_the_provider() {
    let seen: Seen = Seen::default();
    let recorded = seen.clone();
    // A stand-in HTTP proxy: records the absolute-form target and the key.
    let egress = Router::new().fallback(move |req: axum::extract::Request| {
        let seen = recorded.clone();
        async move {
            let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default();
            seen.lock().unwrap().push((req.uri().to_string(), auth.to_string()));
            axum::Json(serde_json::json!({"data": []}))
        }
    });
    let egress = serve(egress).await;
    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("hosted"), "sk-hosted\n").unwrap();
    // Nothing listens there: only the egress proxy could answer.
    let provider: Provider = "hosted=http://models.example.test:8000".parse().unwrap();
    let metrics = Arc::new(Metrics::new(Labels::default()));
    let proxy = Proxy::new(&[provider], keys.path().to_path_buf(), metrics, false)
        .through(&format!("http://{egress}"))
        .unwrap();
    let proxy = serve(router(Arc::new(proxy))).await;
    let r = client().get(format!("http://{proxy}/hosted/v1/models")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        seen.lock().unwrap().clone(),
        vec![("http://models.example.test:8000/v1/models".to_string(), "Bearer sk-hosted".to_string())]
    );
    assert!(Proxy::new(&[], PathBuf::new(), Arc::new(Metrics::new(Labels::default())), false).through("::").is_err());
}

//! What the model-key proxy costs (`make bench-model-keys`): the latency it
//! adds to a model request and the memory it holds, measured on loopback
//! against a stand-in provider in this process. The proxy is the real
//! binary (`tinycode-operator model-keys`, a release build), started as the
//! chart starts it.
//!
//! Each round sends the same requests straight to the stand-in and through
//! the proxy, interleaved so that a noisy moment hits both; a JSON answer
//! (1 KiB with usage) and a stream (20 events) each. Reported: per round the
//! median and 99th percentile of each path, then the median over the rounds
//! and their spread (min..max), and the proxy's resident memory when idle
//! and at its peak.
//!
//! Usage: cargo run --release --example model_keys_bench -- [BINARY] [REQUESTS] [ROUNDS]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::IntoResponse;

const KEY: &str = "sk-bench";

async fn provider(req: axum::extract::Request) -> axum::response::Response {
    let auth = req.headers().get("authorization").and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
    if auth != format!("Bearer {KEY}") && req.headers().get("x-direct").is_none() {
        return (axum::http::StatusCode::UNAUTHORIZED, "no key").into_response();
    }
    match req.uri().path() {
        "/v1/chat/completions" => {
            let content = "x".repeat(900);
            axum::Json(serde_json::json!({
                "choices": [{"message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 200}
            }))
            .into_response()
        }
        "/v1/stream" => {
            let events = (0..20).map(|i| {
                let usage = if i == 19 { ",\"usage\":{\"prompt_tokens\":100,\"completion_tokens\":20}" } else { "" };
                Ok::<_, std::io::Error>(Bytes::from(format!(
                    "data: {{\"choices\":[{{\"delta\":{{\"content\":\"token{i}\"}}}}]{usage}}}\n\n"
                )))
            });
            ([("content-type", "text/event-stream")], Body::from_stream(futures::stream::iter(events))).into_response()
        }
        _ => axum::http::StatusCode::NOT_FOUND.into_response(),
    }
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// VmRSS and VmHWM of a process, in MiB.
fn memory(pid: u32) -> (f64, f64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |field: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.split_whitespace().next()?.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

async fn send(client: &reqwest::Client, url: &str, direct: bool) -> Duration {
    let started = Instant::now();
    let mut req = client.post(url).body(r#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#);
    if direct {
        req = req.header("x-direct", "1");
    }
    let r = req.send().await.expect("request");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.bytes().await.expect("body");
    started.elapsed()
}

fn main() {
    tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(bench());
}

async fn bench() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args: Vec<String> = std::env::args().collect();
    let binary = args.get(1).cloned().unwrap_or("target/release/tinycode-operator".into());
    let requests: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(2000);
    let rounds: usize = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(5);

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let upstream: SocketAddr = listener.local_addr().unwrap();
    // TCP_NODELAY, as the proxy's listener: else the direct path's streamed
    // events wait on delayed ACKs (40 ms) and the comparison is of Nagle's.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, Router::new().fallback(provider)).await });

    let keys = tempfile::tempdir().unwrap();
    std::fs::write(keys.path().join("bench"), KEY).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut proxy = Command::new(&binary)
        .args(["model-keys", "--allow-loopback-providers", &format!("--listen=127.0.0.1:{port}")])
        .arg(format!("--provider=bench=http://{upstream}"))
        .arg(format!("--keys-dir={}", keys.path().display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e} (build it: cargo build --release)"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the proxy did not listen within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (idle_rss, _) = memory(proxy.id());

    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let direct = |path: &str| format!("http://{upstream}/v1/{path}");
    let proxied = |path: &str| format!("http://127.0.0.1:{port}/bench/v1/{path}");
    for path in ["chat/completions", "stream"] {
        for _ in 0..100 {
            send(&client, &direct(path), true).await;
            send(&client, &proxied(path), false).await;
        }
    }
    println!("| answer | path | p50 ms (median of rounds, min..max) | p99 ms (median of rounds, min..max) |");
    println!("|---|---|---|---|");
    for (label, path) in [("JSON, 1 KiB", "chat/completions"), ("stream, 20 events", "stream")] {
        let mut stats: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            let (mut d, mut p) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
            for _ in 0..requests {
                d.push(send(&client, &direct(path), true).await);
                p.push(send(&client, &proxied(path), false).await);
            }
            for (i, mut v) in [d, p].into_iter().enumerate() {
                v.sort();
                stats[i].push((percentile(&v, 0.5), percentile(&v, 0.99)));
            }
        }
        for (i, name) in ["direct", "through the proxy"].iter().enumerate() {
            let summary = |pick: fn(&(Duration, Duration)) -> Duration| {
                let mut v: Vec<Duration> = stats[i].iter().map(pick).collect();
                v.sort();
                format!("{:.3} ({:.3}..{:.3})", ms(v[v.len() / 2]), ms(v[0]), ms(v[v.len() - 1]))
            };
            println!("| {label} | {name} | {} | {} |", summary(|s| s.0), summary(|s| s.1));
        }
    }
    let (rss, hwm) = memory(proxy.id());
    println!();
    println!(
        "proxy memory: {idle_rss:.1} MiB idle, {rss:.1} MiB after {rounds} x {requests} x 2 requests per path, peak {hwm:.1} MiB"
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
}

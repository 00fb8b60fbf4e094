//! What the egress proxy costs (`make bench-egress`): a model request or a
//! download through the instance's egress proxy rather than straight to the
//! host. Measured on loopback against the real proxy (`tinycode-operator
//! egress-proxy`, a release build, with an allow-list naming the stand-in
//! host), interleaved with the direct path so a noisy moment hits both:
//!
//! - plain HTTP, a 1 KiB JSON answer, the client keeping its connection to
//!   the proxy (the proxy looks the name up and connects anew per request);
//! - a tunnel (CONNECT, as every https request makes), one request per new
//!   connection, against one new connection straight to the host.
//!
//! Reported: per round the median and 99th percentile of each path, then the
//! median over the rounds and their spread (min..max), and the proxy's
//! resident memory idle and after.
//!
//! Usage: cargo run --release --example egress_bench -- [BINARY] [REQUESTS] [ROUNDS]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::response::IntoResponse;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

async fn host(_: axum::extract::Request) -> axum::response::Response {
    ([("content-type", "application/json")], format!("{{\"data\":\"{}\"}}", "x".repeat(1010))).into_response()
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

async fn get(client: &reqwest::Client, url: &str) -> Duration {
    let started = Instant::now();
    let r = client.get(url).send().await.expect("request");
    assert!(r.status().is_success(), "{url}: {}", r.status());
    r.bytes().await.expect("body");
    started.elapsed()
}

/// One request on a new connection, through a CONNECT tunnel when `proxy` is set.
async fn once(target: &str, proxy: Option<SocketAddr>, upstream: SocketAddr) -> Duration {
    let started = Instant::now();
    let mut s = TcpStream::connect(proxy.unwrap_or(upstream)).await.expect("connect");
    s.set_nodelay(true).unwrap();
    if proxy.is_some() {
        s.write_all(format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n").as_bytes()).await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(s.read(&mut b).await.unwrap(), 1, "the proxy closed the tunnel");
            head.push(b[0]);
        }
        assert!(head.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&head));
    }
    s.write_all(format!("GET /v1/models HTTP/1.1\r\nHost: {target}\r\nConnection: close\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(out.starts_with(b"HTTP/1.1 200"), "{}", String::from_utf8_lossy(&out[..out.len().min(200)]));
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
    tokio::spawn(async move { axum::serve(listener, Router::new().fallback(host)).await });
    // The stand-in host by a name /etc/hosts gives (loopback, let past the guard for the bench alone).
    let target = format!("localhost:{}", upstream.port());

    let files = tempfile::tempdir().unwrap();
    let policy = files.path().join("policy.json");
    let list = serde_json::json!({"hosts": [{"host": "localhost", "ports": [upstream.port()]}]});
    std::fs::write(&policy, list.to_string()).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let proxy_addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut proxy = Command::new(&binary)
        .args(["egress-proxy", "--allow-loopback-targets", "--namespace=bench", "--instance=bench"])
        .arg(format!("--listen={proxy_addr}"))
        .arg(format!("--policy={}", policy.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e} (build it: cargo build --release)"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(proxy_addr).is_err() {
        assert!(Instant::now() < deadline, "the proxy did not listen within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (idle_rss, _) = memory(proxy.id());

    let direct = reqwest::Client::builder().no_proxy().tcp_nodelay(true).build().unwrap();
    let proxied = reqwest::Client::builder()
        .proxy(reqwest::Proxy::http(format!("http://{proxy_addr}")).unwrap())
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let url = format!("http://{target}/v1/models");
    for _ in 0..100 {
        get(&direct, &url).await;
        get(&proxied, &url).await;
        once(&target, None, upstream).await;
        once(&target, Some(proxy_addr), upstream).await;
    }
    println!("| request | path | p50 ms (median of rounds, min..max) | p99 ms (median of rounds, min..max) |");
    println!("|---|---|---|---|");
    for kind in ["plain HTTP, kept-alive client", "new connection (CONNECT through the proxy)"] {
        let mut stats: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            let (mut d, mut p) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
            for _ in 0..requests {
                if kind.starts_with("plain") {
                    d.push(get(&direct, &url).await);
                    p.push(get(&proxied, &url).await);
                } else {
                    d.push(once(&target, None, upstream).await);
                    p.push(once(&target, Some(proxy_addr), upstream).await);
                }
            }
            for (i, mut v) in [d, p].into_iter().enumerate() {
                v.sort();
                stats[i].push((percentile(&v, 0.5), percentile(&v, 0.99)));
            }
        }
        for (i, name) in ["straight to the host", "through the egress proxy"].iter().enumerate() {
            let summary = |pick: fn(&(Duration, Duration)) -> Duration| {
                let mut v: Vec<Duration> = stats[i].iter().map(pick).collect();
                v.sort();
                format!("{:.3} ({:.3}..{:.3})", ms(v[v.len() / 2]), ms(v[0]), ms(v[v.len() - 1]))
            };
            println!("| {kind} | {name} | {} | {} |", summary(|s| s.0), summary(|s| s.1));
        }
    }
    let (rss, hwm) = memory(proxy.id());
    println!();
    println!("egress proxy memory: {idle_rss:.1} MiB idle, {rss:.1} MiB after the runs, peak {hwm:.1} MiB");
    let _ = proxy.kill();
    let _ = proxy.wait();
}

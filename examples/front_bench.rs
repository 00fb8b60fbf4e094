//! What the sign-in front's extra hop costs (`make bench-front`): in the
//! sign-in modes every request passes the gate's front (`--front-listen`)
//! before the sign-in proxy. Measured on loopback: the same GET straight to a
//! stand-in proxy in this process and through the real front (`tinycode-operator
//! gate`, a release build, started as the chart starts it, with the stand-in
//! as its `--signin-upstream`), interleaved so a noisy moment hits both; a
//! 1 KiB answer and a stream of 20 events. Reported: per round the median and
//! 99th percentile of each path, then the median over the rounds and their
//! spread (min..max), and the gate's resident memory.
//!
//! Usage: cargo run --release --example front_bench -- [BINARY] [REQUESTS] [ROUNDS]

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes};
use axum::response::IntoResponse;

async fn proxy(req: axum::extract::Request) -> axum::response::Response {
    match req.uri().path() {
        "/page" => ([("content-type", "text/html")], "x".repeat(1024)).into_response(),
        "/stream" => {
            let events = (0..20).map(|i| Ok::<_, std::io::Error>(Bytes::from(format!("data: event {i}\n\n"))));
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

async fn send(client: &reqwest::Client, url: &str) -> Duration {
    let started = Instant::now();
    let r = client.get(url).header("accept", "text/html").send().await.expect("request");
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
    // TCP_NODELAY, as the gate's listeners: else streamed events wait on
    // delayed ACKs and the comparison is of Nagle's.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp: &mut tokio::net::TcpStream| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::spawn(async move { axum::serve(listener, Router::new().fallback(proxy)).await });

    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let (port, inner) = (free(), free());
    let files = tempfile::tempdir().unwrap();
    let mut gate = Command::new(&binary)
        .args(["gate", "--mode=oidc", "--namespace=bench", "--instance=bench"])
        .arg(format!("--listen=127.0.0.1:{inner}"))
        .arg(format!("--front-listen=127.0.0.1:{port}"))
        .arg(format!("--signin-upstream=http://{upstream}"))
        // Never asked: every request goes to the stand-in proxy, which answers itself.
        .arg(format!("--review-url=http://127.0.0.1:{inner}/unused"))
        .arg(format!("--relay-credential-file={}", files.path().join("relay").display()))
        .arg(format!("--ca-file={}", files.path().join("ca").display()))
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap_or_else(|e| panic!("start {binary}: {e} (build it: cargo build --release)"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "the front did not listen within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (idle_rss, _) = memory(gate.id());

    let client = reqwest::Client::builder().no_proxy().tcp_nodelay(true).build().unwrap();
    let direct = |path: &str| format!("http://{upstream}/{path}");
    let fronted = |path: &str| format!("http://127.0.0.1:{port}/{path}");
    for path in ["page", "stream"] {
        for _ in 0..100 {
            send(&client, &direct(path)).await;
            send(&client, &fronted(path)).await;
        }
    }
    println!("| answer | path | p50 ms (median of rounds, min..max) | p99 ms (median of rounds, min..max) |");
    println!("|---|---|---|---|");
    for (label, path) in [("page, 1 KiB", "page"), ("stream, 20 events", "stream")] {
        let mut stats: [Vec<(Duration, Duration)>; 2] = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            let (mut d, mut p) = (Vec::with_capacity(requests), Vec::with_capacity(requests));
            for _ in 0..requests {
                d.push(send(&client, &direct(path)).await);
                p.push(send(&client, &fronted(path)).await);
            }
            for (i, mut v) in [d, p].into_iter().enumerate() {
                v.sort();
                stats[i].push((percentile(&v, 0.5), percentile(&v, 0.99)));
            }
        }
        for (i, name) in ["straight to the proxy", "through the front"].iter().enumerate() {
            let summary = |pick: fn(&(Duration, Duration)) -> Duration| {
                let mut v: Vec<Duration> = stats[i].iter().map(pick).collect();
                v.sort();
                format!("{:.3} ({:.3}..{:.3})", ms(v[v.len() / 2]), ms(v[0]), ms(v[v.len() - 1]))
            };
            println!("| {label} | {name} | {} | {} |", summary(|s| s.0), summary(|s| s.1));
        }
    }
    let (rss, hwm) = memory(gate.id());
    println!();
    println!(
        "gate memory: {idle_rss:.1} MiB idle, {rss:.1} MiB after {rounds} x {requests} x 2 requests per path, peak {hwm:.1} MiB"
    );
    let _ = gate.kill();
    let _ = gate.wait();
}

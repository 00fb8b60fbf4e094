//! The gate end to end on loopback: a fake reviewer, a stand-in tinycode
//! server, and requests written by hand.

use std::collections::HashSet;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Bytes;
use axum::http::{HeaderMap, header};
use futures::future::BoxFuture;
use hyper::server::conn::http1;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::*;
use crate::ops::decisions::Decision;

/// Generous bound for anything that should happen "soon" on a busy machine.
const PATIENCE: Duration = Duration::from_secs(10);

/// Allows the users and tokens it is given, forbids the rest; counts the
/// reviews asked; fails every review while `down`.
struct Fake {
    allowed: HashSet<&'static str>,
    calls: AtomicUsize,
    down: bool,
}

impl Fake {
    fn new(allowed: &[&'static str]) -> Arc<Self> {
        Arc::new(Fake { allowed: allowed.iter().copied().collect(), calls: AtomicUsize::new(0), down: false })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl Reviewer for Fake {
    fn review<'a>(&'a self, subject: &'a Subject) -> BoxFuture<'a, Result<Decision, String>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let who = match subject {
            Subject::User { name, .. } => name.as_str(),
            Subject::Token { token, .. } => token.as_str(),
        };
        let answer = if self.down {
            Err("apiserver unreachable".to_string())
        } else if self.allowed.contains(who) {
            Ok(Decision::Allowed)
        } else {
            Ok(Decision::Forbidden)
        };
        Box::pin(async move { answer })
    }
}

/// What the stand-in server was sent.
#[derive(Default)]
struct Seen {
    requests: Mutex<Vec<(String, HeaderMap)>>,
}

impl Seen {
    fn count(&self) -> usize {
        self.requests.lock().unwrap().len()
    }

    fn last(&self) -> (String, HeaderMap) {
        self.requests.lock().unwrap().last().cloned().expect("the server saw a request")
    }
}

/// A stand-in tinycode server on 127.0.0.1: `/ws` upgrades to an echo,
/// `/events` streams one event per message sent on `events`, anything
/// else answers `hello from tinycode`.
async fn stand_in(events: mpsc::Receiver<Bytes>) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let events = Arc::new(Mutex::new(Some(events)));
    let record = seen.clone();
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (record, events) = (record.clone(), events.clone());
            let service = service_fn(move |mut req: Request<Incoming>| {
                record.requests.lock().unwrap().push((req.uri().path().to_string(), req.headers().clone()));
                let events = events.clone();
                async move {
                    let resp = match req.uri().path() {
                        "/ws" => {
                            let upgrade = hyper::upgrade::on(&mut req);
                            tokio::spawn(async move {
                                let mut io = TokioIo::new(upgrade.await.unwrap());
                                let mut buf = [0u8; 256];
                                loop {
                                    match io.read(&mut buf).await {
                                        Ok(0) | Err(_) => return,
                                        Ok(n) => io.write_all(&buf[..n]).await.unwrap(),
                                    }
                                }
                            });
                            Response::builder()
                                .status(StatusCode::SWITCHING_PROTOCOLS)
                                .header(header::CONNECTION, "upgrade")
                                .header(header::UPGRADE, "websocket")
                                .body(Body::empty())
                                .unwrap()
                        }
                        "/events" => {
                            let rx = events.lock().unwrap().take().expect("one event stream");
                            let stream = futures::stream::unfold(rx, |mut rx| async move {
                                rx.recv().await.map(|event| (Ok::<_, Infallible>(event), rx))
                            });
                            Response::builder()
                                .header(header::CONTENT_TYPE, "text/event-stream")
                                .body(Body::from_stream(stream))
                                .unwrap()
                        }
                        _ => Response::new(Body::from("hello from tinycode")),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades());
        }
    });
    (addr, seen)
}

/// A gate on 127.0.0.1 in front of `upstream`, whose password is `pw`.
async fn gate(mode: Mode, reviewer: Arc<Fake>, ttl: Duration, upstream: SocketAddr) -> (SocketAddr, tempfile::TempDir) {
    let (addr, dir, _) = gate_tracked(mode, reviewer, ttl, upstream, AgentState::Runs).await;
    (addr, dir)
}

/// [`gate`], with the activity tracker its service updates.
async fn gate_tracked(
    mode: Mode,
    reviewer: Arc<Fake>,
    ttl: Duration,
    upstream: SocketAddr,
    agent: AgentState,
) -> (SocketAddr, tempfile::TempDir, Arc<activity::Tracker>) {
    let dir = tempfile::tempdir().unwrap();
    let password = dir.path().join("password");
    std::fs::write(&password, "pw").unwrap();
    let upstream = Upstream::new(&format!("http://{upstream}"), Password::new(Some(password))).unwrap();
    let target = Target { namespace: "team-a".into(), instance: "ide".into() };
    let gate = Gate::new(mode, Prefixes::default(), reviewer, ttl);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let tracker = Arc::new(activity::Tracker::new(None));
    tokio::spawn(serve(listener, Arc::new(GateService::new(gate, upstream, target, agent, tracker.clone()))));
    (addr, dir, tracker)
}

#[tokio::test]
async fn requests_let_through_count_as_activity_and_refused_ones_do_not() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, _seen) = stand_in(rx).await;
    let fake = Fake::new(&["alice"]);
    let (addr, _dir, tracker) =
        gate_tracked(Mode::Oidc, fake, Duration::from_secs(1), upstream, AgentState::Runs).await;
    let started = tracker.last();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let carol = get(addr, "/", &[("X-Forwarded-User", "carol")]).await;
    assert!(carol.starts_with("HTTP/1.1 403"), "{carol}");
    assert_eq!(tracker.last(), started, "a refused request is nobody using the instance");
    let alice = get(addr, "/", &[("X-Forwarded-User", "alice")]).await;
    assert!(alice.starts_with("HTTP/1.1 200"), "{alice}");
    assert!(tracker.last() > started);

    // The report the operator reads: requests alone (no image report here).
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let report_addr = listener.local_addr().unwrap();
    tokio::spawn(activity::serve(listener, tracker.clone()));
    let report = get(report_addr, activity::PATH, &[]).await;
    let body = report.split("\r\n\r\n").nth(1).unwrap();
    let parsed = crate::activity::report::parse(body.as_bytes(), k8s_openapi::jiff::Timestamp::now()).unwrap();
    assert_eq!(parsed.last_activity, tracker.last());
    assert_eq!(parsed.judged_by, crate::activity::report::JudgedBy::Requests);
    assert!(get(report_addr, "/other", &[]).await.starts_with("HTTP/1.1 404"));
}

/// While nothing listens where the server should be, an allowed user is
/// told it is starting (or stopped, as `--agent` says); a user not allowed
/// still gets the 403, and learns nothing of the server.
#[tokio::test]
async fn an_allowed_user_learns_why_the_server_does_not_answer() {
    let (_held, nowhere) = nothing_listens();
    let browser = [("X-Forwarded-User", "alice"), ("Accept", "text/html")];
    for (agent, says) in [(AgentState::Runs, "is starting"), (AgentState::Stopped, "spec.stopped is true")] {
        let (addr, _dir, _) = gate_tracked(Mode::Oidc, Fake::new(&["alice"]), Duration::ZERO, nowhere, agent).await;
        let page = get(addr, "/", &browser).await;
        assert!(page.starts_with("HTTP/1.1 503"), "{page}");
        assert!(page.contains(says), "{agent:?}: {page}");
        let carol = get(addr, "/", &[("X-Forwarded-User", "carol"), ("Accept", "text/html")]).await;
        assert!(carol.starts_with("HTTP/1.1 403") && !carol.contains(says), "{carol}");
    }
}

/// A stand-in of the operator's relay at `path`: it records the credential
/// of each request to start, and answers "starting" after a pause.
async fn relay_stand_in(path: &'static str) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    use axum::routing::post;
    let asked: Arc<Mutex<Vec<String>>> = Arc::default();
    let seen = asked.clone();
    let relay = axum::Router::new().route(
        path,
        post(move |headers: HeaderMap| {
            let seen = seen.clone();
            async move {
                let credential = headers[header::AUTHORIZATION].to_str().unwrap().to_string();
                seen.lock().unwrap().push(credential);
                tokio::time::sleep(Duration::from_millis(100)).await;
                axum::Json(serde_json::json!({"state": "starting"}))
            }
        }),
    );
    let relay_listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = relay_listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(relay_listener, relay).await.unwrap() });
    (relay_addr, asked)
}

/// The gate in front of nothing (`nowhere`), idle-stopped, waking through
/// the relay at `relay`: its address.
async fn idle_front(gate: Gate, nowhere: SocketAddr, relay: SocketAddr, dir: &std::path::Path) -> SocketAddr {
    idle_front_audited(gate, nowhere, relay, dir, None).await
}

/// [`idle_front`], writing who used it to `audit`.
async fn idle_front_audited(
    gate: Gate,
    nowhere: SocketAddr,
    relay: SocketAddr,
    dir: &std::path::Path,
    audit: Option<Arc<audit::Audit>>,
) -> SocketAddr {
    std::fs::write(dir.join("start-credential"), "tsc1.ide\n").unwrap();
    let upstream = Upstream::new(&format!("http://{nowhere}"), Password::new(None)).unwrap();
    let target = Target { namespace: "team-a".into(), instance: "ide".into() };
    let waker = wake::Waker::new(&format!("http://{relay}/start/team-a/ide"), &dir.join("start-credential")).unwrap();
    let tracker = Arc::new(activity::Tracker::new(None));
    let mut service = GateService::new(gate, upstream, target, AgentState::Idle, tracker).with_waker(waker);
    if let Some(audit) = audit {
        service = service.with_audit(audit);
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, Arc::new(service)));
    addr
}

/// An idle-stopped instance opened by allowed users is started: the relay
/// is asked (with the instance's start credential) once for a burst of
/// requests, and each user is told it is starting; a user not allowed
/// starts nothing.
#[tokio::test]
async fn allowed_users_start_an_idle_instance_and_others_do_not() {
    let (relay_addr, asked) = relay_stand_in("/start/team-a/ide").await;
    let (_held, nowhere) = nothing_listens();
    let dir = tempfile::tempdir().unwrap();
    let gate = Gate::new(Mode::Oidc, Prefixes::default(), Fake::new(&["alice"]), Duration::from_secs(30));
    let addr = idle_front(gate, nowhere, relay_addr, dir.path()).await;

    let carol = get(addr, "/", &[("X-Forwarded-User", "carol"), ("Accept", "text/html")]).await;
    assert!(carol.starts_with("HTTP/1.1 403"), "{carol}");
    assert!(asked.lock().unwrap().is_empty(), "a user not allowed started nothing");

    let burst: Vec<_> = (0..20)
        .map(|_| {
            tokio::spawn(async move { get(addr, "/", &[("X-Forwarded-User", "alice"), ("Accept", "text/html")]).await })
        })
        .collect();
    for page in burst {
        let page = page.await.unwrap();
        assert!(page.starts_with("HTTP/1.1 503") && page.contains("is starting"), "{page}");
    }
    assert_eq!(asked.lock().unwrap().clone(), vec!["Bearer tsc1.ide".to_string()], "asked once, as the instance");
}

/// Who used it: each review is one line (a user's requests within the
/// cache time cost one), naming the user, the groups and the outcome; the
/// start an allowed user's request caused is one more, naming them; a user
/// refused starts nothing and leaves one line.
#[tokio::test]
async fn each_decision_and_each_start_is_one_audit_line() {
    let (relay_addr, _asked) = relay_stand_in("/start/team-a/ide").await;
    let (_held, nowhere) = nothing_listens();
    let dir = tempfile::tempdir().unwrap();
    let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
    let target = Target { namespace: "team-a".into(), instance: "ide".into() };
    let audit = Arc::new(audit::Audit::buffer(target, buffer.clone()));
    let gate = Gate::new(Mode::Oidc, Prefixes::default(), Fake::new(&["alice"]), Duration::from_secs(30));
    let addr = idle_front_audited(gate, nowhere, relay_addr, dir.path(), Some(audit.clone())).await;
    let alice = [("X-Forwarded-User", "alice"), ("X-Forwarded-Groups", "dev,ops"), ("Accept", "text/html")];
    for _ in 0..3 {
        assert!(get(addr, "/", &alice).await.contains("is starting"));
    }
    for _ in 0..2 {
        assert!(get(addr, "/", &[("X-Forwarded-User", "carol")]).await.starts_with("HTTP/1.1 403"));
    }
    let lines = audit::lines(&buffer);
    let summary: Vec<(&str, &str, Vec<String>, &str)> =
        lines.iter().map(|l| (l.event.as_str(), l.user.as_str(), l.groups.clone(), l.outcome.as_str())).collect();
    let groups = vec!["dev".to_string(), "ops".to_string()];
    assert_eq!(
        summary,
        vec![
            ("access", "alice", groups.clone(), "allowed"),
            ("start", "alice", groups, "starting"),
            ("access", "carol", vec![], "forbidden"),
        ]
    );
    for line in &lines {
        assert_eq!(
            (line.audit.as_str(), line.namespace.as_str(), line.instance.as_str()),
            (audit::AUDIT, "team-a", "ide")
        );
        assert!(line.time.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), "{line:?}");
    }
    // The same, counted by event and outcome (no user in any label), on the metrics port.
    let metrics = audit::metrics_router(audit);
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let metrics_addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, metrics).await });
    let scraped = get(metrics_addr, "/metrics", &[]).await;
    for (event, outcome) in [("access", "allowed"), ("start", "starting"), ("access", "forbidden")] {
        let series = format!(
            "tinycode_gate_events_total{{namespace=\"team-a\",instance=\"ide\",event=\"{event}\",outcome=\"{outcome}\"}} 1"
        );
        assert!(scraped.contains(&series), "{series} in {scraped}");
    }
    assert!(!scraped.contains("alice") && !scraped.contains("carol"), "a user in a label: {scraped}");
}

/// openshift: the user's token decides, and is never written; the line
/// names the user the proxy named.
#[tokio::test]
async fn an_audit_line_never_holds_a_token() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, _seen) = stand_in(rx).await;
    let buffer: Arc<Mutex<Vec<u8>>> = Arc::default();
    let target = Target { namespace: "team-a".into(), instance: "ide".into() };
    let gate = Gate::new(Mode::Openshift, Prefixes::default(), Fake::new(&["sha256~secret"]), Duration::from_secs(30));
    let upstream = Upstream::new(&format!("http://{upstream}"), Password::new(None)).unwrap();
    let tracker = Arc::new(activity::Tracker::new(None));
    let service = GateService::new(gate, upstream, target.clone(), AgentState::Runs, tracker)
        .with_audit(Arc::new(audit::Audit::buffer(target, buffer.clone())));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, Arc::new(service)));
    let bob = [("X-Forwarded-Access-Token", "sha256~secret"), ("X-Forwarded-User", "bob")];
    assert!(get(addr, "/", &bob).await.starts_with("HTTP/1.1 200"));
    let written = String::from_utf8(buffer.lock().unwrap().clone()).unwrap();
    assert!(!written.contains("sha256~secret"), "{written}");
    let lines = audit::lines(&buffer);
    assert_eq!(lines.len(), 1, "{written}");
    assert_eq!((lines[0].user.as_str(), lines[0].outcome.as_str()), ("bob", "allowed"));
}

/// Password mode: whoever has the password starts the idle-stopped instance
/// (once for a burst), as the instance; without it, or with a wrong one,
/// the prompt comes back and nothing is started.
#[tokio::test]
async fn the_passwords_holder_starts_an_idle_instance_and_nobody_else_does() {
    use base64::Engine;
    let (relay_addr, asked) = relay_stand_in("/start/team-a/ide").await;
    let (_held, nowhere) = nothing_listens();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("password"), "s3cret").unwrap();
    let gate = Gate::password(Password::new(Some(dir.path().join("password"))));
    let addr = idle_front(gate, nowhere, relay_addr, dir.path()).await;
    let basic = |pw: &str| format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("me:{pw}")));

    let wrong = basic("guess");
    for headers in [vec![("Accept", "text/html")], vec![("Accept", "text/html"), ("Authorization", wrong.as_str())]] {
        let page = get(addr, "/", &headers).await;
        assert!(page.starts_with("HTTP/1.1 401") && !page.contains("is starting"), "{page}");
    }
    assert!(asked.lock().unwrap().is_empty(), "no password, no start");

    let right = basic("s3cret");
    let burst: Vec<_> = (0..20)
        .map(|_| {
            let right = right.clone();
            tokio::spawn(async move { get(addr, "/", &[("Authorization", &right), ("Accept", "text/html")]).await })
        })
        .collect();
    for page in burst {
        let page = page.await.unwrap();
        assert!(page.starts_with("HTTP/1.1 503") && page.contains("is starting"), "{page}");
    }
    assert_eq!(asked.lock().unwrap().clone(), vec!["Bearer tsc1.ide".to_string()], "asked once, as the instance");
}

/// An address where nothing listens, for as long as the socket is held: it
/// is bound (so no other test can take the port) but never listens, so a
/// connection is refused. (A port freed after binding could be taken by a
/// test running alongside.)
fn nothing_listens() -> (tokio::net::TcpSocket, SocketAddr) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = socket.local_addr().unwrap();
    (socket, addr)
}

/// One `GET path` with `headers` and `Connection: close`; the whole raw response.
async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> String {
    request(addr, "GET", path, headers).await
}

/// One bodiless `method path` to host ide.example.com with `headers` and
/// `Connection: close`; the whole raw response.
async fn request(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)]) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: ide.example.com\r\nConnection: close\r\n");
    if method != "GET" {
        req.push_str("Content-Length: 0\r\n");
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes()).await.unwrap();
    let mut resp = Vec::new();
    tokio::time::timeout(PATIENCE, s.read_to_end(&mut resp)).await.expect("no answer").unwrap();
    String::from_utf8_lossy(&resp).into_owned()
}

/// Reads from `s` until `needle` has arrived; all read so far.
async fn read_until(s: &mut TcpStream, needle: &str) -> String {
    let mut got = Vec::new();
    let mut buf = [0u8; 1024];
    while !String::from_utf8_lossy(&got).contains(needle) {
        let n = tokio::time::timeout(PATIENCE, s.read(&mut buf))
            .await
            .unwrap_or_else(|_| panic!("{needle:?} never came; got {:?}", String::from_utf8_lossy(&got)))
            .unwrap();
        assert!(n > 0, "closed before {needle:?}; got {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test]
async fn allowed_users_reach_the_server_with_its_password_and_others_never_do() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let fake = Fake::new(&["alice"]);
    let (addr, _dir) = gate(Mode::Oidc, fake.clone(), Duration::from_secs(1), upstream).await;

    // The probe needs no sign-in and asks nobody.
    let probe = get(addr, HEALTH_PATH, &[]).await;
    assert!(probe.starts_with("HTTP/1.1 200") && probe.ends_with("\r\n\r\nok"), "{probe}");

    // No user: 401 without a review.
    let anonymous = get(addr, "/", &[("Authorization", "Basic dGlueWNvZGU6Z3Vlc3M=")]).await;
    assert!(anonymous.starts_with("HTTP/1.1 401"), "{anonymous}");
    assert_eq!((fake.calls(), seen.count()), (0, 0));

    // Allowed: the server's answer; the server saw its password, not the caller's credentials.
    let alice = [
        ("X-Forwarded-User", "alice"),
        ("X-Forwarded-Groups", "dev,ops"),
        ("X-Forwarded-Access-Token", "sha256~must-not-leak"),
        ("Authorization", "Bearer users-id-token"),
    ];
    let resp = get(addr, "/session?id=1", &alice).await;
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("hello from tinycode"), "{resp}");
    let (path, headers) = seen.last();
    assert_eq!(path, "/session");
    assert_eq!(headers[header::AUTHORIZATION], "Basic dGlueWNvZGU6cHc=", "base64(tinycode:pw)");
    assert!(headers.get("x-forwarded-access-token").is_none(), "{headers:?}");
    assert_eq!(headers["x-forwarded-user"], "alice");
    assert_eq!(headers[header::HOST], "ide.example.com");
    assert_eq!(fake.calls(), 1);

    // Within the time to live: no second review.
    let again = get(addr, "/", &alice).await;
    assert!(again.starts_with("HTTP/1.1 200"), "{again}");
    assert_eq!((fake.calls(), seen.count()), (1, 2));

    // Denied: 403 naming the user; the server saw nothing.
    let mallory = get(addr, "/", &[("X-Forwarded-User", "mallory")]).await;
    assert!(mallory.starts_with("HTTP/1.1 403"), "{mallory}");
    assert!(mallory.contains("mallory") && mallory.contains("RoleBinding"), "{mallory}");
    assert_eq!((fake.calls(), seen.count()), (2, 2));
    let mallory = get(addr, "/", &[("X-Forwarded-User", "mallory")]).await;
    assert!(mallory.starts_with("HTTP/1.1 403"), "{mallory}");
    assert_eq!((fake.calls(), seen.count()), (2, 2), "a refusal is cached too");

    // After the time to live the user is reviewed again.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let later = get(addr, "/", &alice).await;
    assert!(later.starts_with("HTTP/1.1 200"), "{later}");
    assert_eq!((fake.calls(), seen.count()), (3, 3));
}

#[tokio::test]
async fn a_websocket_upgrade_passes_through_and_echoes() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let (addr, _dir) = gate(Mode::Oidc, Fake::new(&["alice"]), Duration::from_secs(30), upstream).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: ide.example.com\r\nX-Forwarded-User: alice\r\n\
          Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_until(&mut s, "\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    assert!(head.to_ascii_lowercase().contains("upgrade: websocket"), "{head}");
    let (_, headers) = seen.last();
    assert_eq!(headers[header::UPGRADE], "websocket");
    assert!(headers.get("sec-websocket-key").is_some());
    for message in ["first frame", "second frame"] {
        s.write_all(message.as_bytes()).await.unwrap();
        let echoed = read_until(&mut s, message).await;
        assert_eq!(echoed, message);
    }
}

#[tokio::test]
async fn denied_upgrades_never_reach_the_server() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let (addr, _dir) = gate(Mode::Oidc, Fake::new(&["alice"]), Duration::from_secs(30), upstream).await;
    let resp = get(addr, "/ws", &[("X-Forwarded-User", "mallory"), ("Upgrade", "websocket")]).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert_eq!(seen.count(), 0);
}

#[tokio::test]
async fn events_stream_through_without_buffering() {
    let (events, rx) = mpsc::channel(4);
    let (upstream, _seen) = stand_in(rx).await;
    let (addr, _dir) = gate(Mode::Oidc, Fake::new(&["alice"]), Duration::from_secs(30), upstream).await;
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(b"GET /events HTTP/1.1\r\nHost: ide.example.com\r\nX-Forwarded-User: alice\r\n\r\n").await.unwrap();
    // Each event arrives while the stream is still open: the next one is
    // sent only after the previous one was read through the gate.
    events.send(Bytes::from_static(b"data: one\n\n")).await.unwrap();
    let first = read_until(&mut s, "data: one").await;
    assert!(first.starts_with("HTTP/1.1 200") && first.contains("text/event-stream"), "{first}");
    events.send(Bytes::from_static(b"data: two\n\n")).await.unwrap();
    read_until(&mut s, "data: two").await;
}

#[tokio::test]
async fn openshift_mode_reviews_the_token_and_never_passes_it_on() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let fake = Fake::new(&["sha256~alices-token"]);
    let (addr, _dir) = gate(Mode::Openshift, fake.clone(), Duration::from_secs(30), upstream).await;
    let user_only = get(addr, "/", &[("X-Forwarded-User", "alice")]).await;
    assert!(user_only.starts_with("HTTP/1.1 401"), "a user without a token: {user_only}");
    let ok =
        get(addr, "/", &[("X-Forwarded-User", "alice"), ("X-Forwarded-Access-Token", "sha256~alices-token")]).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let (_, headers) = seen.last();
    assert!(headers.get("x-forwarded-access-token").is_none(), "{headers:?}");
    assert_eq!(headers[header::AUTHORIZATION], "Basic dGlueWNvZGU6cHc=");
    let denied = get(addr, "/", &[("X-Forwarded-User", "bob"), ("X-Forwarded-Access-Token", "sha256~bobs")]).await;
    assert!(denied.starts_with("HTTP/1.1 403") && denied.contains("bob"), "{denied}");
    assert_eq!((fake.calls(), seen.count()), (2, 1));
}

#[tokio::test]
async fn a_failed_review_is_503_not_cached_and_never_reaches_the_server() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let fake = Arc::new(Fake { allowed: ["alice"].into_iter().collect(), calls: AtomicUsize::new(0), down: true });
    let (addr, _dir) = gate(Mode::Oidc, fake.clone(), Duration::from_secs(30), upstream).await;
    for _ in 0..2 {
        let resp = get(addr, "/", &[("X-Forwarded-User", "alice")]).await;
        assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    }
    assert_eq!((fake.calls(), seen.count()), (2, 0), "asked again each time, never passed on");
}

#[tokio::test]
async fn the_gate_verdicts_follow_headers_and_decisions() {
    let fake = Fake::new(&["oidc:alice"]);
    let prefixes = Prefixes { user: "oidc:".into(), groups: "oidc:".into() };
    let gate = Gate::new(Mode::Oidc, prefixes, fake.clone(), Duration::from_secs(30));
    let mut h = HeaderMap::new();
    assert_eq!(gate.check(&h).await, Verdict::Refuse(Refusal::NoIdentity, None));
    h.insert(identity::USER_HEADER, "alice".parse().unwrap());
    h.insert(identity::GROUPS_HEADER, "dev".parse().unwrap());
    let alice = Subject::User { name: "oidc:alice".into(), groups: vec!["oidc:dev".into()] };
    assert_eq!(gate.check(&h).await, Verdict::Pass(Some(alice)));
    h.insert(identity::USER_HEADER, "bob".parse().unwrap());
    assert!(matches!(gate.check(&h).await, Verdict::Refuse(Refusal::Forbidden, Some(_))));
    assert_eq!(fake.calls(), 2);
}

#[tokio::test]
async fn the_proxys_session_cookie_never_reaches_the_server() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let (addr, _dir) = gate(Mode::Oidc, Fake::new(&["alice"]), Duration::from_secs(30), upstream).await;
    let session = crate::render::signin::cookie_name("team-a", "ide");
    let cookies = format!("{session}=id-token-inside; {session}_1=more; {session}_csrf=c; tinycode=own");
    let resp = get(addr, "/", &[("X-Forwarded-User", "alice"), ("Cookie", &cookies)]).await;
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    let (_, headers) = seen.last();
    let sent: Vec<&str> = headers.get_all(header::COOKIE).iter().map(|v| v.to_str().unwrap()).collect();
    assert_eq!(sent, ["tinycode=own"], "only tinycode's own cookie");
}

#[tokio::test]
async fn another_sites_writes_in_the_users_name_are_refused_before_any_review() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let fake = Fake::new(&["alice"]);
    let (addr, _dir) = gate(Mode::Oidc, fake.clone(), Duration::from_secs(30), upstream).await;
    let alice = ("X-Forwarded-User", "alice");
    // A page on a sibling instance (same site, another origin) posts with alice's session.
    for attack in [
        vec![alice, ("Origin", "https://other.example.com"), ("Sec-Fetch-Site", "same-site")],
        vec![alice, ("Origin", "https://other.example.com")],
    ] {
        let resp = request(addr, "POST", "/session", &attack).await;
        assert!(resp.starts_with("HTTP/1.1 403") && resp.contains("another site"), "{resp}");
    }
    let ws = [alice, ("Origin", "https://other.example.com"), ("Connection", "Upgrade"), ("Upgrade", "websocket")];
    assert!(get(addr, "/ws", &ws).await.starts_with("HTTP/1.1 403"));
    assert_eq!((fake.calls(), seen.count()), (0, 0), "refused before a review, never passed on");
    // Her own page, and clients that are not browsers, still write.
    let own = [alice, ("Origin", "https://ide.example.com"), ("Sec-Fetch-Site", "same-origin")];
    assert!(request(addr, "POST", "/session", &own).await.starts_with("HTTP/1.1 200"));
    assert!(request(addr, "DELETE", "/session/1", &[alice]).await.starts_with("HTTP/1.1 200"));
    assert_eq!(seen.count(), 2);
}

/// A password-mode front: the gate on the public port asks for the
/// instance's password itself (a Basic challenge naming the instance, and a
/// page saying where the password is); a wrong or missing one never reaches
/// tinycode; the right one, under any user name, passes with the server's
/// own credentials; and while tinycode does not answer, only someone with
/// the password learns why.
#[tokio::test]
async fn a_password_front_asks_for_the_password_and_says_why_tinycode_is_down() {
    let (_events, rx) = mpsc::channel(1);
    let (upstream, seen) = stand_in(rx).await;
    let (_held, nowhere) = nothing_listens();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("password");
    std::fs::write(&file, "s3cret").unwrap();
    let front = |to: SocketAddr, agent: AgentState| {
        let password = Password::new(Some(file.clone()));
        let upstream = Upstream::new(&format!("http://{to}"), password.clone()).unwrap();
        let target = Target { namespace: "team-a".into(), instance: "ide".into() };
        let tracker = Arc::new(activity::Tracker::new(None));
        let service = GateService::new(Gate::password(password), upstream, target, agent, tracker.clone())
            .with_password_secret(Some("ide-pw".into()));
        (Arc::new(service), tracker)
    };
    let listen = |service: Arc<GateService>| async move {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, service));
        addr
    };
    let basic = |user: &str, pw: &str| {
        format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}")))
    };
    use base64::Engine;

    let (service, tracker) = front(upstream, AgentState::Runs);
    let addr = listen(service).await;
    let started = tracker.last();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let wrong = basic("tinycode", "guess");
    for headers in [vec![("Accept", "text/html")], vec![("Accept", "text/html"), ("Authorization", wrong.as_str())]] {
        let page = get(addr, "/", &headers).await;
        assert!(page.starts_with("HTTP/1.1 401"), "{page}");
        assert!(page.to_ascii_lowercase().contains("www-authenticate: basic realm=\"tinycode team-a/ide\""), "{page}");
        assert!(page.contains("content-type: text/html"), "{page}");
        assert!(page.contains("kubectl get secret ide-pw -n team-a"), "{page}");
    }
    let text = get(addr, "/", &[]).await;
    assert!(text.starts_with("HTTP/1.1 401") && text.contains("text/plain"), "{text}");
    assert_eq!(seen.count(), 0, "no request without the password reached tinycode");
    assert_eq!(tracker.last(), started, "a refused request is nobody using the instance");

    let right = basic("anyone", "s3cret");
    let ok = get(addr, "/", &[("Authorization", right.as_str())]).await;
    assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("hello from tinycode"), "{ok}");
    let (_, headers) = seen.last();
    assert_eq!(headers[header::AUTHORIZATION], basic("tinycode", "s3cret").as_str(), "the server's own credentials");
    assert!(tracker.last() > started);

    // Stopped: the password first, then the page.
    let (service, _) = front(nowhere, AgentState::Stopped);
    let addr = listen(service).await;
    let page = get(addr, "/", &[("Accept", "text/html"), ("Authorization", right.as_str())]).await;
    assert!(page.starts_with("HTTP/1.1 503") && page.contains("spec.stopped is true"), "{page}");
    let refused = get(addr, "/", &[("Accept", "text/html"), ("Authorization", wrong.as_str())]).await;
    assert!(refused.starts_with("HTTP/1.1 401") && !refused.contains("spec.stopped"), "{refused}");
}

/// A stand-in sign-in proxy on 127.0.0.1: `/oauth2/callback` is its error
/// page (from the chart's template, as Go's html/template fills it in),
/// `/oauth2/big` an error page too long to read, `/ping` its health,
/// `/nosession` its bare 401; anything else goes on to `gate` (the real
/// gate) when there is one, as the user its cookie `proxy_user` names (the
/// proxy's session, in X-Forwarded-User). Records what it was sent.
async fn proxy_stand_in(gate: Option<SocketAddr>) -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let record = seen.clone();
    let template = include_str!("../../helm-charts/tinycode/files/signin-error.html")
        .replace("@INSTANCE@", "ide")
        .replace("@NAMESPACE@", "team-a")
        .replace("{{.Title}}", "Forbidden")
        .replace(
            "{{.Message}}",
            "Login Failed: Unable to find a valid CSRF token &amp; the state &#39;x&#39; &lt;expired&gt;. &#x2014; Please try again.",
        );
    let next = gate.map(|g| Upstream::pass_through(&format!("http://{g}"), "the gate").unwrap()).map(Arc::new);
    tokio::spawn(async move {
        loop {
            let (stream, _) = listener.accept().await.unwrap();
            let (record, template, next) = (record.clone(), template.clone(), next.clone());
            let service = service_fn(move |mut req: Request<Incoming>| {
                record.requests.lock().unwrap().push((req.uri().path().to_string(), req.headers().clone()));
                let session = req
                    .headers()
                    .get(header::COOKIE)
                    .and_then(|c| c.to_str().ok())
                    .and_then(|c| c.split(';').find_map(|p| p.trim().strip_prefix("proxy_user=")))
                    .map(str::to_string);
                if let Some(user) = session {
                    req.headers_mut().insert("x-forwarded-user", user.parse().unwrap());
                }
                let (template, next) = (template.clone(), next.clone());
                async move {
                    let html = |status: u16, body: String| {
                        Response::builder()
                            .status(status)
                            .header(header::CONTENT_TYPE, "text/html; charset=utf-8")
                            .body(Body::from(body))
                            .unwrap()
                    };
                    let resp = match (req.uri().path(), next) {
                        ("/oauth2/callback", _) => {
                            let mut page = html(403, template);
                            page.headers_mut().insert(header::SET_COOKIE, "_csrf=; Max-Age=0".parse().unwrap());
                            page
                        }
                        ("/oauth2/big", _) => html(500, format!("{}{template}", " ".repeat(front::PAGE_LIMIT))),
                        ("/ping", _) => Response::new(Body::from("OK")),
                        ("/nosession", _) => Response::builder().status(401).body(Body::empty()).unwrap(),
                        (_, Some(next)) => next.forward(req).await.unwrap_or_else(|_| html(502, "no gate".into())),
                        (_, None) => html(404, "<p>no such page</p>".into()),
                    };
                    Ok::<_, Infallible>(resp)
                }
            });
            tokio::spawn(http1::Builder::new().serve_connection(TokioIo::new(stream), service).with_upgrades());
        }
    });
    (addr, seen)
}

/// The gate's front on 127.0.0.1 before the sign-in proxy at `proxy`.
async fn front_before(proxy: SocketAddr) -> SocketAddr {
    let front = front::Front::new(&format!("http://{proxy}"), "team-a", "ide", Mode::Oidc).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(front::serve(listener, Arc::new(front)));
    addr
}

const BROWSER: (&str, &str) = ("Accept", "text/html,application/xhtml+xml,*/*;q=0.8");

#[tokio::test]
async fn the_proxys_errors_are_text_for_clients_that_are_not_browsers() {
    let (proxy, _seen) = proxy_stand_in(None).await;
    let addr = front_before(proxy).await;

    // curl: the instance, the proxy's own words unescaped, what to do.
    let resp = get(addr, "/oauth2/callback?state=x&code=y", &[("Accept", "*/*")]).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.to_ascii_lowercase().contains("content-type: text/plain"), "{resp}");
    let body = resp.split_once("\r\n\r\n").unwrap().1;
    assert!(
        body.starts_with(
            "tinycode ide in namespace team-a: the sign-in did not complete: Forbidden: Login Failed: Unable to \
             find a valid CSRF token & the state 'x' <expired>. \u{2014} Please try again. (403).\n"
        ),
        "{body}"
    );
    assert!(body.contains("in a browser") && body.contains("cluster-admin"), "{body}");
    // The proxy's cookies and the answer's freshness are kept.
    let lower = resp.to_ascii_lowercase();
    assert!(lower.contains("set-cookie: _csrf=; max-age=0") && lower.contains("cache-control: no-store"), "{resp}");
    assert!(!body.contains('<') || !body.contains("<html"), "no HTML: {body}");

    // A browser gets the page as the proxy made it.
    let resp = get(addr, "/oauth2/callback", &[BROWSER]).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("<h1 id=\"instance\">ide</h1>"), "{resp}");

    // A bare 401 (no session, asked for JSON) says so; a page too long to
    // read is told by its status; HEAD gets no body.
    let resp = get(addr, "/nosession", &[("Accept", "application/json")]).await;
    assert!(resp.starts_with("HTTP/1.1 401"), "{resp}");
    assert!(resp.contains("tinycode ide in namespace team-a: there is no signed-in session (401)."), "{resp}");
    let resp = get(addr, "/oauth2/big", &[]).await;
    assert!(resp.contains("the sign-in proxy answered 500 Internal Server Error (500)."), "{resp}");
    let resp = request(addr, "HEAD", "/oauth2/callback", &[]).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.ends_with("\r\n\r\n"), "no body: {resp}");

    // Answers under 400 pass unchanged; the front's own health needs no proxy.
    let resp = get(addr, "/ping", &[]).await;
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("OK"), "{resp}");
    let resp = get(addr, HEALTH_PATH, &[]).await;
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("ok"), "{resp}");
}

#[tokio::test]
async fn the_front_passes_everything_on_and_never_rewrites_the_gates_answers() {
    let (_events, rx) = mpsc::channel(1);
    let (tinycode, at_tinycode) = stand_in(rx).await;
    let (gate_addr, _dir) = gate(Mode::Oidc, Fake::new(&["alice"]), Duration::from_secs(30), tinycode).await;
    let (proxy, at_proxy) = proxy_stand_in(Some(gate_addr)).await;
    let addr = front_before(proxy).await;

    // The proxy gets the caller's cookies, credentials and the router's
    // forwarded headers as they came, and none of the identity headers
    // only the proxy may set.
    let sent = [
        ("Cookie", "proxy_user=alice; theme=dark"),
        ("Authorization", "Bearer from-the-client"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Host", "ide.apps.example.com"),
    ];
    let forged = [("X-Forwarded-User", "mallory"), ("X-Forwarded-Email", "root@example.com")];
    let resp = get(addr, "/project", &[&sent[..], &forged[..]].concat()).await;
    assert!(resp.starts_with("HTTP/1.1 200") && resp.ends_with("hello from tinycode"), "{resp}");
    assert!(!resp.to_ascii_lowercase().contains("x-tinycode-gate"), "the mark is taken off: {resp}");
    let (path, headers) = at_proxy.last();
    assert_eq!(path, "/project");
    for (name, value) in sent {
        assert_eq!(headers[name], value, "{name} reached the proxy as sent");
    }
    for (name, _) in forged {
        assert!(headers.get(name).is_none(), "the client's {name} reached the proxy");
    }
    assert_eq!(headers[header::HOST], "ide.example.com");
    assert_eq!(at_tinycode.count(), 1);

    // The gate's refusal to a client that is not a browser is its own text,
    // and a browser's its page: neither is rewritten.
    let resp = get(addr, "/project", &[("Cookie", "proxy_user=mallory")]).await;
    assert!(resp.starts_with("HTTP/1.1 403"), "{resp}");
    assert!(resp.contains("kubectl create rolebinding"), "the gate's words: {resp}");
    assert!(!resp.contains("sign-in did not complete"), "{resp}");
    let resp = get(addr, "/project", &[("Cookie", "proxy_user=mallory"), BROWSER]).await;
    assert!(resp.contains("<code id=\"command\">"), "the gate's page: {resp}");
    assert!(!resp.to_ascii_lowercase().contains("x-tinycode-gate"), "{resp}");

    // A WebSocket goes through front, proxy and gate to tinycode and back.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        b"GET /ws HTTP/1.1\r\nHost: ide.example.com\r\nCookie: proxy_user=alice\r\n\
          Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\
          Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
    )
    .await
    .unwrap();
    let head = read_until(&mut s, "\r\n\r\n").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    s.write_all(b"through three hops").await.unwrap();
    assert_eq!(read_until(&mut s, "through three hops").await, "through three hops");
}

#[tokio::test]
async fn a_front_whose_proxy_is_down_says_so() {
    let (_socket, nowhere) = nothing_listens();
    let addr = front_before(nowhere).await;
    let resp = get(addr, "/", &[]).await;
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("The sign-in of tinycode ide is not answering yet"), "{resp}");
    let resp = get(addr, "/", &[BROWSER]).await;
    assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");
    assert!(resp.contains("<h1 id=\"instance\">ide</h1>") && resp.contains("http-equiv=\"refresh\""), "{resp}");
}

#[test]
fn error_words_come_from_the_template_element_alone() {
    assert_eq!(front::error_words("<p>no element</p>"), None);
    assert_eq!(front::error_words("<meta name=\"tinycode-error\" content=\"\">"), None);
    assert_eq!(
        front::error_words("<meta name=\"tinycode-error\" content=\"A &amp;&#34;b&#34;\n  &bogus; &#xZZ; &\">"),
        Some("A &\"b\" &bogus; &#xZZ; &".into())
    );
    let long = format!("<meta name=\"tinycode-error\" content=\"{}\">", "x".repeat(5000));
    assert_eq!(front::error_words(&long).unwrap().len(), 1024);
}

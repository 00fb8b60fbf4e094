//! The egress proxy against stand-ins on loopback: a DNS server answering
//! the names the tests choose (A records and CNAMEs), a TCP echo server and
//! an HTTP server. Loopback targets pass the guard here alone
//! ([`Policy::with_loopback`]); what is refused is refused by the list.

use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;

use hickory_resolver::proto::op::{Message, MessageType, ResponseCode};
use hickory_resolver::proto::rr::rdata::{A, CNAME};
use hickory_resolver::proto::rr::{Name, RData, Record};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

use super::policy::{CidrRule, HostRule, PolicyFile};
use super::*;

/// What the DNS stand-in answers for a name: an address, or an alias.
#[derive(Clone)]
enum Rr {
    A(Ipv4Addr),
    Cname(&'static str),
    /// One address, then the other, in turn (a rebinding server with no cache time).
    Rebind(Ipv4Addr, Ipv4Addr, Arc<std::sync::atomic::AtomicBool>),
}

/// A DNS server on loopback answering from `zone` (aliases followed within it).
async fn dns(zone: HashMap<&'static str, Rr>) -> SocketAddr {
    let socket = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let addr = socket.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 1500];
        while let Ok((n, peer)) = socket.recv_from(&mut buf).await {
            let Ok(query) = Message::from_vec(&buf[..n]) else { continue };
            let mut answer = Message::new();
            answer.set_id(query.id()).set_message_type(MessageType::Response).set_recursion_available(true);
            answer.add_queries(query.queries().to_vec());
            let Some(q) = query.queries().first() else { continue };
            let mut name = q.name().to_ascii().trim_end_matches('.').to_string();
            let mut found = false;
            for _ in 0..8 {
                let Some(rr) = zone.get(name.as_str()) else { break };
                let owner = Name::from_ascii(format!("{name}.")).unwrap();
                let rebound;
                let rr = match rr {
                    Rr::Rebind(first, second, flip) => {
                        let second_now = flip.fetch_xor(true, std::sync::atomic::Ordering::SeqCst);
                        rebound = Rr::A(if second_now { *second } else { *first });
                        &rebound
                    }
                    other => other,
                };
                match rr {
                    Rr::A(ip) if q.query_type() == hickory_resolver::proto::rr::RecordType::A => {
                        let ttl = if name == "rebind.example.test" { 0 } else { 60 };
                        answer.add_answer(Record::from_rdata(owner, ttl, RData::A(A(*ip))));
                        found = true;
                        break;
                    }
                    Rr::A(_) => {
                        found = true;
                        break;
                    }
                    Rr::Rebind(..) => unreachable!("resolved above"),
                    Rr::Cname(target) => {
                        let to = Name::from_ascii(format!("{target}.")).unwrap();
                        answer.add_answer(Record::from_rdata(owner, 60, RData::CNAME(CNAME(to))));
                        name = target.to_string();
                    }
                }
            }
            if !found {
                answer.set_response_code(ResponseCode::NXDomain);
            }
            let _ = socket.send_to(&answer.to_vec().unwrap(), peer).await;
        }
    });
    addr
}

/// A TCP server sending back what it reads.
async fn echo() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    port
}

/// An HTTP server answering with the request line and Host header it got.
async fn web() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let head = read_head(&mut s).await;
                let line = head.lines().next().unwrap_or_default().to_string();
                let host = head
                    .lines()
                    .filter_map(|l| l.split_once(':'))
                    .filter(|(k, _)| k.eq_ignore_ascii_case("host"))
                    .map(|(_, v)| v.trim().to_string())
                    .collect::<Vec<_>>()
                    .join(",");
                let body = format!("{line}\nhost={host}\n");
                let resp =
                    format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}", body.len());
                let _ = s.write_all(resp.as_bytes()).await;
            });
        }
    });
    port
}

async fn read_head(s: &mut TcpStream) -> String {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b).await.unwrap_or(0) == 0 {
            break;
        }
        head.push(b[0]);
    }
    String::from_utf8_lossy(&head).into_owned()
}

struct Setup {
    proxy: SocketAddr,
    metrics: Arc<Metrics>,
    echo: u16,
    web: u16,
}

async fn setup() -> Setup {
    let (echo, web) = (echo().await, web().await);
    let zone = HashMap::from([
        ("git.example.test", Rr::A(Ipv4Addr::new(127, 0, 0, 1))),
        ("other.example.test", Rr::A(Ipv4Addr::new(127, 0, 0, 1))),
        // An allowed name that is an alias of one that is not (an ExternalName Service).
        ("alias.example.test", Rr::Cname("evil.example.net")),
        ("evil.example.net", Rr::A(Ipv4Addr::new(127, 0, 0, 1))),
        // An allowed public name whose record points into the cluster's range.
        ("inside.example.test", Rr::A(Ipv4Addr::new(127, 0, 0, 70))),
        ("vllm.models.svc.cluster.local", Rr::A(Ipv4Addr::new(127, 0, 0, 70))),
        ("meta.example.test", Rr::A(Ipv4Addr::new(169, 254, 169, 254))),
        // An allowed name whose server answers the allowed address, then the metadata one.
        (
            "rebind.example.test",
            Rr::Rebind(Ipv4Addr::new(127, 0, 0, 1), Ipv4Addr::new(169, 254, 169, 254), Arc::default()),
        ),
    ]);
    let nameserver = dns(zone).await;
    let file = PolicyFile {
        hosts: vec![
            HostRule { host: "git.example.test".into(), ports: vec![echo, web] },
            HostRule { host: "*.example.test".into(), ports: vec![echo] },
            HostRule { host: "*.models.svc.cluster.local".into(), ports: vec![echo] },
        ],
        cidrs: vec![CidrRule { cidr: "127.0.0.8/29".into(), ports: vec![echo] }],
        cluster_cidrs: vec!["127.0.0.64/26".into()],
        cluster_domain: "cluster.local".into(),
    };
    let policy = Policy::new(&file).unwrap().with_loopback();
    let labels = Labels { namespace: "team".into(), instance: "dev".into(), class: "locked".into() };
    let metrics = Arc::new(Metrics::new(labels));
    let egress = Arc::new(Egress::new(policy, &[nameserver], metrics.clone()));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, egress));
    Setup { proxy, metrics, echo, web }
}

/// Sends `head` to the proxy; returns the stream and the answer's status and head.
async fn ask(proxy: SocketAddr, head: &str) -> (TcpStream, u16, String) {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let got = read_head(&mut s).await;
    let status = got.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (s, status, got)
}

async fn body(s: &mut TcpStream) -> String {
    let mut out = String::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), s.read_to_string(&mut out)).await;
    out
}

fn connect_to(target: &str) -> String {
    format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n")
}

#[tokio::test]
async fn an_allowed_host_is_tunnelled_and_others_are_refused_by_name() {
    let t = setup().await;
    let (mut s, status, _) = ask(t.proxy, &connect_to(&format!("git.example.test:{}", t.echo))).await;
    assert_eq!(status, 200);
    s.write_all(b"hello through the tunnel").await.unwrap();
    let mut back = [0u8; 24];
    s.read_exact(&mut back).await.unwrap();
    assert_eq!(&back, b"hello through the tunnel");

    // The same address under a name the list does not hold, and a port it does not.
    let (mut s, status, _) = ask(t.proxy, &connect_to(&format!("git.example.test:{}", t.echo + 1))).await;
    assert_eq!(status, 403);
    let why = body(&mut s).await;
    assert!(why.contains("git.example.test") && why.contains("team/dev") && why.contains("locked"), "{why}");
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("example.test:{}", t.echo))).await;
    assert_eq!(status, 403, "*.example.test is not example.test");
    assert_eq!(t.metrics.refused_count("host_not_allowed"), 2);
}

#[tokio::test]
async fn ip_literals_aliases_and_addresses_inside_the_cluster_are_refused() {
    let t = setup().await;
    // An IP literal is allowed by a CIDR alone: 127.0.0.1 is where git.example.test points.
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("127.0.0.1:{}", t.echo))).await;
    assert_eq!(status, 403);
    assert_eq!(t.metrics.refused_count("address_not_allowed"), 1);
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("[::ffff:127.0.0.1]:{}", t.echo))).await;
    assert_eq!(status, 403, "another spelling of the same address");
    // Inside the CIDR rule: let through (nothing listens on 127.0.0.9, so 502, not 403).
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("127.0.0.9:{}", t.echo))).await;
    assert_eq!(status, 502);
    // An allowed name that is an alias (CNAME) of a name not allowed.
    let (mut s, status, _) = ask(t.proxy, &connect_to(&format!("alias.example.test:{}", t.echo))).await;
    assert_eq!(status, 403);
    assert!(body(&mut s).await.contains("evil.example.net"));
    assert_eq!(t.metrics.refused_count("alias_not_allowed"), 1);
    // A public name pointed at a cluster address; a Service name may resolve there.
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("inside.example.test:{}", t.echo))).await;
    assert_eq!(status, 403);
    assert_eq!(t.metrics.refused_count("cluster_address"), 1);
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("vllm.models.svc.cluster.local:{}", t.echo))).await;
    assert_eq!(status, 502, "allowed; nothing listens on 127.0.0.70");
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("vllm.models.svc:{}", t.echo))).await;
    assert_eq!(status, 502, "a Service's short name is the same Service");
    // A name pointed at the metadata service.
    let (_, status, _) = ask(t.proxy, &connect_to(&format!("meta.example.test:{}", t.echo))).await;
    assert_eq!(status, 403);
    assert_eq!(t.metrics.refused_count("guarded_address"), 1);
}

#[tokio::test]
async fn plain_http_goes_on_in_origin_form_and_a_smuggled_host_is_refused() {
    let t = setup().await;
    let target = format!("git.example.test:{}", t.web);
    let head = format!(
        "GET http://{target}/repo.git/info/refs?x=1 HTTP/1.1\r\nHost: {target}\r\nProxy-Authorization: Basic eA==\r\nConnection: close\r\n\r\n"
    );
    let (mut s, status, _) = ask(t.proxy, &head).await;
    assert_eq!(status, 200);
    let got = body(&mut s).await;
    assert!(got.starts_with("GET /repo.git/info/refs?x=1 HTTP/1.1\n"), "origin form: {got}");
    assert!(got.contains(&format!("host={target}\n")), "{got}");

    // Two Host headers, or one naming another host than the request line.
    let two = format!("GET http://{target}/ HTTP/1.1\r\nHost: {target}\r\nHost: other.example.test\r\n\r\n");
    assert_eq!(ask(t.proxy, &two).await.1, 400);
    let other = format!("GET http://{target}/ HTTP/1.1\r\nHost: other.example.test:{}\r\n\r\n", t.web);
    assert_eq!(ask(t.proxy, &other).await.1, 400);
    // A host not allowed, in absolute form.
    let denied =
        format!("GET http://other.example.test:{}/ HTTP/1.1\r\nHost: other.example.test:{}\r\n\r\n", t.web, t.web);
    assert_eq!(ask(t.proxy, &denied).await.1, 403);
    // https in absolute form, credentials in the URL, and a plain request to the proxy itself.
    let https = format!("GET https://{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n");
    assert_eq!(ask(t.proxy, &https).await.1, 400);
    let creds = format!("GET http://u:p@{target}/ HTTP/1.1\r\nHost: {target}\r\n\r\n");
    assert_eq!(ask(t.proxy, &creds).await.1, 400);
    assert_eq!(ask(t.proxy, "GET /anything HTTP/1.1\r\nHost: x\r\n\r\n").await.1, 400);
    assert_eq!(ask(t.proxy, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.1, 200);
    assert_eq!(t.metrics.refused_count("bad_request"), 4);
    assert!(t.metrics.encode().contains(
        "tinycode_egress_refused_total{namespace=\"team\",instance=\"dev\",class=\"locked\",kind=\"bad_request\"} 4"
    ));
}

/// The relay's events, as published.
#[derive(Default)]
struct Published(std::sync::Mutex<Vec<(String, String, String)>>);

impl crate::signin::egress::RefusalEvents for Published {
    fn publish<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        note: String,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        self.0.lock().unwrap().push((namespace.into(), name.into(), note));
        Box::pin(async { Ok(()) })
    }
}

/// team/dev exists; nothing else does.
struct OneInstance;

impl crate::signin::start::Instances for OneInstance {
    fn get<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Option<crate::signin::start::RelayTarget>> {
        let found = (namespace == "team" && name == "dev").then_some(crate::signin::start::RelayTarget {
            mode: crate::api::AuthMode::Password,
            url: None,
            agent: crate::signin::start::Agent::Runs,
        });
        Box::pin(async move { found })
    }
}

/// A refusal reaches the real relay route with the instance's credential
/// and becomes one event naming the host; a flood of the same becomes no
/// more; the relay refuses another instance's name and a made-up credential.
#[tokio::test]
async fn a_refusal_becomes_an_event_on_the_instance_once() {
    let key: Arc<[u8]> = Arc::from(&b"digest key of the test"[..]);
    let published = Arc::new(Published::default());
    let relay = crate::signin::egress::refused_router(key.clone(), Arc::new(OneInstance), published.clone());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let relay_addr = l.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(l, relay).await });
    let dir = tempfile::tempdir().unwrap();
    let credential = dir.path().join("start-credential");
    std::fs::write(&credential, crate::render::signin::start_credential(&key, "team", "dev")).unwrap();

    let t = setup().await;
    let policy = Policy::new(&PolicyFile::default()).unwrap();
    let url = format!("http://{relay_addr}/egress-refused/team/dev");
    let egress = Egress::new(policy, &[], t.metrics.clone()).with_reporter(&url, &credential).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, Arc::new(egress)));
    for _ in 0..5 {
        assert_eq!(ask(proxy, &connect_to("pypi.org:443")).await.1, 403);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while published.0.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let events = published.0.lock().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    let (ns, name, note) = &events[0];
    assert_eq!((ns.as_str(), name.as_str()), ("team", "dev"));
    assert!(note.contains("pypi.org:443") && note.contains("not in its class's egress list"), "{note}");

    // The relay itself: the credential of another instance, a made-up one, a bad body.
    let http = reqwest::Client::new();
    let body = serde_json::json!({"host": "x.test", "port": 443, "reason": "host_not_allowed"});
    let other = format!("http://{relay_addr}/egress-refused/team/other");
    let own = std::fs::read_to_string(&credential).unwrap();
    let status = |r: reqwest::Response| r.status().as_u16();
    assert_eq!(status(http.post(&other).bearer_auth(&own).json(&body).send().await.unwrap()), 401);
    assert_eq!(status(http.post(&url).bearer_auth("tsc1.made-up").json(&body).send().await.unwrap()), 401);
    let bad = serde_json::json!({"host": "x\ny", "port": 443, "reason": "host_not_allowed"});
    assert_eq!(status(http.post(&url).bearer_auth(&own).json(&bad).send().await.unwrap()), 400);
    assert_eq!(published.0.lock().unwrap().len(), 1, "nothing else was published");
}

/// Tunnels are bounded apart from connections (an open tunnel has left its
/// connection's slot), and one through which nothing passes is closed.
#[tokio::test]
async fn tunnels_are_bounded_and_idle_ones_close() {
    let t = setup().await;
    let zone = HashMap::from([("git.example.test", Rr::A(Ipv4Addr::new(127, 0, 0, 1)))]);
    let nameserver = dns(zone).await;
    let file = PolicyFile {
        hosts: vec![HostRule { host: "git.example.test".into(), ports: vec![t.echo] }],
        ..PolicyFile::default()
    };
    let mut egress = Egress::new(Policy::new(&file).unwrap().with_loopback(), &[nameserver], t.metrics.clone());
    egress.tunnels = Arc::new(tokio::sync::Semaphore::new(1));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, Arc::new(egress)));
    let target = connect_to(&format!("git.example.test:{}", t.echo));
    let (first, status, _) = ask(proxy, &target).await;
    assert_eq!(status, 200);
    assert_eq!(ask(proxy, &target).await.1, 503, "the one tunnel is open");
    assert_eq!(t.metrics.refused_count("too_many_tunnels"), 1);
    drop(first);
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let (_, status, _) = ask(proxy, &target).await;
        if status == 200 {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "the slot did not come back: {status}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Nothing passes: the pump ends by itself; bytes that pass keep it open.
    let (client, _keep) = tokio::io::duplex(64);
    let (server, _keep2) = tokio::io::duplex(64);
    let idle = Duration::from_secs(1);
    let started = std::time::Instant::now();
    tokio::time::timeout(Duration::from_secs(5), pump(client, server, idle)).await.expect("an idle tunnel closes");
    assert!(started.elapsed() >= idle, "{:?}", started.elapsed());
}

/// DNS rebinding: a name whose answers alternate between an allowed address
/// and the metadata one. Each request is decided on the one answer it
/// looked up and connected to that answer's addresses: it tunnels to the
/// allowed host or is refused, never anything between.
#[tokio::test]
async fn a_rebinding_name_reaches_only_the_address_checked() {
    let t = setup().await;
    let target = connect_to(&format!("rebind.example.test:{}", t.echo));
    let (mut tunnelled, mut refused) = (0, 0);
    for _ in 0..6 {
        let (mut s, status, _) = ask(t.proxy, &target).await;
        match status {
            200 => {
                s.write_all(b"ping").await.unwrap();
                let mut back = [0u8; 4];
                s.read_exact(&mut back).await.unwrap();
                assert_eq!(&back, b"ping", "the allowed host answered");
                tunnelled += 1;
            }
            403 => {
                assert!(body(&mut s).await.contains("169.254.169.254"));
                refused += 1;
            }
            other => panic!("status {other}"),
        }
    }
    assert!(tunnelled > 0 && refused > 0, "both answers were seen: {tunnelled} tunnelled, {refused} refused");
    assert_eq!(t.metrics.refused_count("guarded_address"), refused);
}

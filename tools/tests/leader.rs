//! Leader election against the local control plane (hack/local-cluster.sh,
//! started when not running, never stopped): elector A reaches the apiserver
//! through a TCP proxy on 127.0.0.1, elector B directly. A takes the Lease and
//! runs a stand-in for the controller; B stands by. Then the proxy stops
//! forwarding, either stalling every connection (requests hang) or closing
//! them all (requests fail at once). A must drop its work and report the loss
//! strictly before B takes the Lease over, and B must take it over.
//!
//! Timings are short (lease 3 s, renew deadline 2 s, retry 0.5 s), so each
//! case takes a few seconds. Every case uses its own namespace (its own Lease).

#[path = "support/local_cluster.rs"]
mod local_cluster;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use local_cluster::{local_cluster, value_of};
use tinycode_operator::ops::leader::{Elector, LEASE_NAME, Lost, Timings};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

/// How the proxy stops forwarding.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// Connections stay open but nothing passes any more (a hung network).
    Stall,
    /// Every connection is closed, and new ones are closed as soon as accepted.
    Close,
}

/// A TCP proxy on 127.0.0.1 that can be told to stop forwarding.
struct Proxy {
    addr: SocketAddr,
    cut: watch::Sender<Option<Cut>>,
}

impl Proxy {
    async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind the proxy");
        let addr = listener.local_addr().unwrap();
        let (cut, cut_rx) = watch::channel(None);
        tokio::spawn(async move {
            while let Ok((down, _)) = listener.accept().await {
                tokio::spawn(forward(down, upstream, cut_rx.clone()));
            }
        });
        Proxy { addr, cut }
    }

    fn cut(&self, how: Cut) {
        self.cut.send_replace(Some(how));
    }
}

async fn forward(mut down: TcpStream, upstream: SocketAddr, mut cut: watch::Receiver<Option<Cut>>) {
    let stall = |down: TcpStream| async move {
        let _held = down;
        std::future::pending::<()>().await
    };
    let already = *cut.borrow();
    match already {
        Some(Cut::Close) => return,
        Some(Cut::Stall) => return stall(down).await,
        None => {}
    }
    let Ok(mut up) = TcpStream::connect(upstream).await else { return };
    let how = tokio::select! {
        _ = tokio::io::copy_bidirectional(&mut down, &mut up) => return,
        how = cut.wait_for(Option::is_some) => how.map(|h| *h).ok().flatten(),
    };
    if how == Some(Cut::Stall) {
        let _up = up;
        stall(down).await;
    }
}

/// The local control plane, started once for all cases of this binary.
fn kubeconfig() -> &'static std::path::Path {
    static KUBECONFIG: OnceLock<std::path::PathBuf> = OnceLock::new();
    KUBECONFIG.get_or_init(|| value_of(&local_cluster("start"), "export KUBECONFIG="))
}

async fn config() -> Config {
    let kubeconfig = Kubeconfig::read_from(kubeconfig()).expect("read the admin kubeconfig");
    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await.expect("kubeconfig")
}

/// The same admin client, but dialling `proxy` (the certificate is for 127.0.0.1, like the proxy).
async fn client_via(proxy: SocketAddr) -> Client {
    let mut config = config().await;
    config.cluster_url = format!("https://{proxy}").parse().unwrap();
    Client::try_from(config).expect("client")
}

async fn upstream() -> SocketAddr {
    let config = config().await;
    let host = config.cluster_url.host().expect("apiserver host").to_string();
    let port = config.cluster_url.port_u16().unwrap_or(443);
    assert_eq!(host, "127.0.0.1", "the local control plane listens on loopback");
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Runs until dropped; records when it stopped.
async fn work(stopped: Arc<Mutex<Option<Instant>>>) {
    struct Guard(Arc<Mutex<Option<Instant>>>);
    impl Drop for Guard {
        fn drop(&mut self) {
            *self.0.lock().unwrap() = Some(Instant::now());
        }
    }
    let _guard = Guard(stopped);
    loop {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

async fn cut_off_leader_stops_before_the_standby_takes_over(how: Cut) {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let direct = Client::try_from(config().await).expect("client");
    let namespace = format!("leader-{}-{}", if how == Cut::Stall { "stall" } else { "close" }, std::process::id());
    let namespaces: Api<Namespace> = Api::all(direct.clone());
    let ns = Namespace {
        metadata: ObjectMeta { name: Some(namespace.clone()), ..Default::default() },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await.expect("create the test namespace");

    let proxy = Proxy::start(upstream().await).await;
    let timings = Timings::new(Duration::from_secs(3), Duration::from_secs(2), Duration::from_millis(500)).unwrap();
    let a = Arc::new(Elector::new(client_via(proxy.addr).await, &namespace, "replica-a".into(), timings));
    let b = Elector::new(direct.clone(), &namespace, "replica-b".into(), timings);

    let renewed = tokio::time::timeout(Duration::from_secs(10), a.acquire()).await.expect("A takes the free lease");
    let b_task = tokio::spawn(async move {
        b.acquire().await;
        Instant::now()
    });
    let stopped = Arc::new(Mutex::new(None));
    let a_task = {
        let (a, stopped) = (a.clone(), stopped.clone());
        tokio::spawn(async move {
            let result = a.lead(renewed, work(stopped)).await;
            (result, Instant::now())
        })
    };

    // Three lease durations of renewals through the proxy: B keeps standing by.
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert!(!b_task.is_finished(), "B took the lease while A was renewing it");
    assert!(!a_task.is_finished(), "A lost the lease while it could renew it");
    assert!(stopped.lock().unwrap().is_none());

    let cut_at = Instant::now();
    proxy.cut(how);
    let (result, a_lost_at) = tokio::time::timeout(Duration::from_secs(10), a_task).await.expect("A gives up").unwrap();
    assert_eq!(result, Err(Lost::RenewDeadline(timings.renew_deadline)));
    let work_stopped_at = stopped.lock().unwrap().expect("A's work was dropped");
    let b_acquired_at = tokio::time::timeout(Duration::from_secs(15), b_task).await.expect("B takes over").unwrap();

    eprintln!(
        "{how:?}: A stopped its work {} ms and reported the loss {} ms after the cut; B took over {} ms after the cut",
        ms(work_stopped_at - cut_at),
        ms(a_lost_at - cut_at),
        ms(b_acquired_at - cut_at)
    );
    assert!(work_stopped_at <= a_lost_at, "the work stops before the loss is reported");
    assert!(a_lost_at < b_acquired_at, "A still led when B took over");
    assert!(
        a_lost_at - cut_at <= timings.renew_deadline + Duration::from_millis(500),
        "A gave up later than a renew deadline after the cut"
    );
    let leases: Api<Lease> = Api::namespaced(direct.clone(), &namespace);
    let lease = leases.get(LEASE_NAME).await.unwrap();
    assert_eq!(lease.spec.unwrap().holder_identity.as_deref(), Some("replica-b"));

    let _ = namespaces.delete(&namespace, &DeleteParams::default()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_leader_stops_before_the_standby_takes_over() {
    cut_off_leader_stops_before_the_standby_takes_over(Cut::Stall).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_leader_stops_before_the_standby_takes_over() {
    cut_off_leader_stops_before_the_standby_takes_over(Cut::Close).await;
}

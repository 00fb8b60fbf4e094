//! Sign-in (`spec.auth.mode: oidc`) with real parts on loopback: the real
//! oauth2-proxy and the operator's gate, each started with the command line
//! the operator rendered into the instance's Deployment (only addresses and
//! mount paths moved to loopback and a temp dir, as a kubelet would mount
//! them), mockoidc as the provider, the operator's relay adding the client
//! secret and answering the gate's access questions (its
//! SubjectAccessReviews, for the asking instance only, made by the real
//! kube-apiserver), and a stand-in for the tinycode server.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Event, Secret, Service};
use kube::Api;
use kube::api::ListParams;
use serde_json::{Value, json};
use tinycode_operator::api::naming;

use crate::harness::*;
use crate::tenancy::tenant;

/// The client secret only the operator may hold.
const CLIENT_SECRET: &str = "e2e-real-client-secret-7f3a";
const CLIENT_ID: &str = "tinycode-e2e";
/// The gates keep a decision this long in this scenario.
const ACCESS_CACHE_SECONDS: u64 = 4;

/// Processes stopped when dropped.
struct Procs(Vec<Child>);

impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub(crate) fn free_port() -> Result<u16, String> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").ctx("bind")?;
    Ok(l.local_addr().ctx("addr")?.port())
}

/// The sign-in tools hack/local-cluster.sh builds: (oauth2-proxy, mockoidc-server).
fn signin_tools() -> Result<(String, String), String> {
    let out = Command::new("bash")
        .arg(repo_root().join("hack/local-cluster.sh"))
        .arg("signin-tools")
        .stderr(Stdio::inherit())
        .output()
        .ctx("run hack/local-cluster.sh signin-tools")?;
    ensure(out.status.success(), "hack/local-cluster.sh signin-tools failed")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let find = |k: &str| text.lines().find_map(|l| l.strip_prefix(k)).map(str::to_string).ok_or(format!("no {k} line"));
    Ok((find("TINYCODE_OAUTH2_PROXY=")?, find("TINYCODE_MOCKOIDC_SERVER=")?))
}

/// One HTTP/1.0 request on loopback: (status, headers, body).
async fn request(
    port: u16,
    path: &str,
    headers: &[(&str, String)],
) -> Result<(u16, Vec<(String, String)>, String), String> {
    request_with("GET", port, path, headers).await
}

/// One bodiless HTTP/1.0 `method` request on loopback: (status, headers, body).
async fn request_with(
    method: &str,
    port: u16,
    path: &str,
    headers: &[(&str, String)],
) -> Result<(u16, Vec<(String, String)>, String), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect")?;
    let mut head = format!("{method} {path} HTTP/1.0\r\n");
    if method != "GET" {
        head.push_str("Content-Length: 0\r\n");
    }
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.ctx("write")?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut buf)).await.ctx("answer")?.ctx("read")?;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status =
        lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).ok_or("no status")?;
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Ok((status, headers, body.to_string()))
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

/// A browser's cookie jar, reduced to name=value.
#[derive(Default, Clone)]
struct Jar(BTreeMap<String, String>);

impl Jar {
    fn take(&mut self, headers: &[(String, String)]) {
        for (_, v) in headers.iter().filter(|(k, _)| k == "set-cookie") {
            let pair = v.split(';').next().unwrap_or_default();
            if let Some((name, value)) = pair.split_once('=') {
                if value.is_empty() {
                    self.0.remove(name);
                } else {
                    self.0.insert(name.to_string(), value.to_string());
                }
            }
        }
    }
    fn header(&self) -> String {
        self.0.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join("; ")
    }
}

/// The pod's proxy as the router reaches it: the instance's host, https.
struct Front {
    port: u16,
    host: String,
}

impl Front {
    async fn get(&self, path: &str, jar: &Jar) -> Result<(u16, Vec<(String, String)>, String), String> {
        self.send("GET", path, jar, &[]).await
    }

    async fn send(
        &self,
        method: &str,
        path: &str,
        jar: &Jar,
        extra: &[(&'static str, String)],
    ) -> Result<(u16, Vec<(String, String)>, String), String> {
        let mut headers = vec![
            ("Host", self.host.clone()),
            ("X-Forwarded-Host", self.host.clone()),
            ("X-Forwarded-Proto", "https".to_string()),
        ];
        if !jar.0.is_empty() {
            headers.push(("Cookie", jar.header()));
        }
        headers.extend(extra.iter().cloned());
        request_with(method, self.port, path, &headers).await
    }
}

/// Port and path+query of a loopback URL.
fn loopback(url: &str) -> Result<(u16, String), String> {
    let rest = url.strip_prefix("http://127.0.0.1:").ok_or(format!("{url} is not on loopback"))?;
    let (port, path) = rest.split_once('/').unwrap_or((rest, ""));
    Ok((port.parse().ctx("port")?, format!("/{path}")))
}

/// Signs `email` in through the proxy and the provider; the session's jar.
async fn sign_in(front: &Front, admin_url: &str, email: &str) -> Result<Jar, String> {
    let (admin_port, admin_path) = loopback(admin_url)?;
    let body =
        json!({"subject": format!("sub-{email}"), "email": email, "preferred_username": email, "groups": ["e2e-devs"]});
    queue_user(admin_port, &format!("{}/queue-user", admin_path.trim_end_matches('/')), &body.to_string()).await?;
    let mut jar = Jar::default();
    let (status, headers, _) = front.get("/", &jar).await?;
    ensure_eq(status, 302, "a request without a session is sent to the provider")?;
    jar.take(&headers);
    let authorize = header(&headers, "location").ok_or("no Location to the provider")?.to_string();
    let (idp_port, idp_path) = loopback(&authorize)?;
    let (status, headers, body) = request(idp_port, &idp_path, &[]).await?;
    ensure_eq(status, 302, &format!("the provider's authorize answer ({body})"))?;
    let callback = header(&headers, "location").ok_or("no callback Location")?;
    let path = callback
        .strip_prefix(&format!("https://{}", front.host))
        .ok_or(format!("the callback {callback} is not the instance's https host"))?
        .to_string();
    let (status, headers, body) = front.get(&path, &jar).await?;
    ensure_eq(status, 302, &format!("the callback redeems the code through the relay ({body})"))?;
    jar.take(&headers);
    Ok(jar)
}

async fn queue_user(port: u16, path: &str, body: &str) -> TestResult {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect")?;
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.ctx("write")?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.ctx("read")?;
    ensure(buf.starts_with("HTTP/1.0 2") || buf.starts_with("HTTP/1.1 2"), format!("queue user: {buf}"))
}

/// What reached the stand-in tinycode server: (path, Authorization header,
/// Cookie header).
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

async fn standin_tinycode() -> Result<(u16, Seen, tokio::task::JoinHandle<()>), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.ctx("bind stand-in")?;
    let port = listener.local_addr().ctx("addr")?.port();
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let record = record.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let text = String::from_utf8_lossy(&buf).to_string();
                let path = text.split_whitespace().nth(1).unwrap_or_default().to_string();
                let header = |name: &str| {
                    text.lines()
                        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)))
                        .map(|(_, v)| v.trim().to_string())
                        .unwrap_or_default()
                };
                record.lock().unwrap().push((path, header("authorization"), header("cookie")));
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\ntinycode").await;
            });
        }
    });
    Ok((port, seen, task))
}

/// The args of container `name`, mounts and addresses moved as in `moves`.
fn container_args(d: &Deployment, name: &str, moves: &[(&str, String)]) -> Result<Vec<String>, String> {
    let pod = d.spec.template.spec.as_ref().ok_or("no pod spec")?;
    let c = pod.containers.iter().find(|c| c.name == name).ok_or(format!("no container {name}"))?;
    Ok(c.args
        .clone()
        .unwrap_or_default()
        .into_iter()
        .map(|a| moves.iter().fold(a, |a, (from, to)| a.replace(from, to)))
        .collect())
}

fn write_files(dir: &Path, files: &[(&str, &[u8])]) -> TestResult {
    std::fs::create_dir_all(dir).ctx("mkdir")?;
    for (name, content) in files {
        std::fs::write(dir.join(name), content).ctx("write")?;
    }
    Ok(())
}

/// A signed-in user with `use` (the instance's owner, and a teammate given
/// tinycode-instance-user) reaches tinycode; a namespace viewer is refused
/// and nothing reaches tinycode; a removed RoleBinding shuts its user out
/// within the gate's cache time; the client secret is nowhere a tenant can
/// read, and a tenant's relay credential redeems for no other instance.
pub async fn oidc_sign_in_admits_only_users_allowed_use(env: &mut Env) -> TestResult {
    let (oauth2_proxy, mockoidc) = signin_tools()?;
    let mut procs = Procs(Vec::new());
    let mut idp = Command::new(&mockoidc)
        .args(["-client-id", CLIENT_ID, "-client-secret", CLIENT_SECRET])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ctx("start mockoidc-server")?;
    let mut line = String::new();
    BufReader::new(idp.stdout.take().ok_or("stdout")?).read_line(&mut line).ctx("read the ready line")?;
    procs.0.push(idp);
    let ready: Value = serde_json::from_str(&line).ctx("ready line")?;
    let issuer = ready["issuer"].as_str().ok_or("issuer")?.to_string();
    let admin_url = ready["admin_url"].as_str().ok_or("admin_url")?.to_string();

    let secret_file = env.work.path().join("oidc-client-secret");
    std::fs::write(&secret_file, CLIENT_SECRET).ctx("write the client secret")?;
    let relay_port = free_port()?;
    // The gate's activity report, where the operator reads it (idle stop).
    let activity_port = free_port()?;
    env.extra_env = vec![
        ("TINYCODE_ACTIVITY_URL".into(), format!("http://127.0.0.1:{activity_port}/activity")),
        ("TINYCODE_ACTIVITY_CHECK_SECONDS".into(), "1".into()),
        ("TINYCODE_OIDC_ISSUER_URL".into(), issuer.clone()),
        ("TINYCODE_OIDC_CLIENT_ID".into(), CLIENT_ID.into()),
        ("TINYCODE_OIDC_CLIENT_SECRET_FILE".into(), secret_file.display().to_string()),
        ("TINYCODE_OIDC_RELAY_ADDR".into(), format!("127.0.0.1:{relay_port}")),
        ("TINYCODE_OIDC_RELAY_URL".into(), format!("http://127.0.0.1:{relay_port}")),
        ("TINYCODE_ACCESS_CACHE_SECONDS".into(), ACCESS_CACHE_SECONDS.to_string()),
    ];
    env.start_operator()?;
    let result = signed_in(env, &mut procs, &oauth2_proxy, &admin_url, (relay_port, activity_port)).await;
    drop(procs);
    env.extra_env.clear();
    env.start_operator()?;
    // The relay's URL is in every front's arguments: all of them re-render.
    let quiet = env.records_quiet(6).await;
    result?;
    quiet
}

async fn signed_in(
    env: &mut Env,
    procs: &mut Procs,
    oauth2_proxy: &str,
    admin_url: &str,
    (relay_port, activity_port): (u16, u16),
) -> TestResult {
    let admin = env.client().await;
    let alice = tenant(env, "alice@example.com", "signin").await?;
    let ns = alice.ns.clone();
    env.kubectl(&["create", "rolebinding", "carol-view", "--clusterrole=view", "--user=carol@example.com", "-n", &ns])?;
    env.kubectl(&[
        "create",
        "rolebinding",
        "bob-uses",
        "--clusterrole=tinycode-instance-user",
        "--user=bob@example.com",
        "-n",
        &ns,
    ])?;
    // The tenant applies the instance herself.
    apply_instance(&alice.client, &ns, "dev", json!({"auth": {"mode": "oidc"}})).await.ctx("apply as alice")?;
    let release = naming::release_name(&ns, "dev");
    wait_for(&format!("release {release} deployed"), WAIT, || async {
        Ok(env.release(&release)?.filter(|(_, s)| s == "deployed"))
    })
    .await?;
    let inst = run_to_running(&admin, &ns, "dev").await?;
    let status = inst.status.clone().unwrap_or_default();
    let auth = status.auth.clone().ok_or("no status.auth")?;
    ensure_eq(auth.mode.as_str(), "oidc", "status.auth.mode")?;
    let access = auth.access.ok_or("no status.auth.access")?;
    ensure_eq((access.verb.as_str(), access.name.as_str()), ("use", "dev"), "status.auth.access")?;
    // The URL follows the Route's admission, which may be seen a moment
    // after the Deployment's readiness.
    let url = match status.url.clone() {
        Some(url) => url,
        None => {
            wait_for("status.url from the admitted Route", WAIT, || async {
                Ok(get_instance(&admin, &ns, "dev").await?.and_then(|i| i.status?.url))
            })
            .await?
        }
    };
    let host = url.trim_start_matches("https://").to_string();
    ensure(url.starts_with("https://"), format!("status.url {url}"))?;

    // The Service reaches the proxy only.
    let svc = Api::<Service>::namespaced(admin.clone(), &ns).get(&naming::fullname("dev")).await.ctx("service")?;
    let target = svc.spec.and_then(|s| s.ports).and_then(|p| p.first().and_then(|p| p.target_port.clone()));
    ensure_eq(format!("{target:?}"), "Some(String(\"front\"))".to_string(), "Service targetPort")?;

    // Mount what the kubelet would: the sign-in Secret for the proxy; the
    // relay and start credentials, the CA and the password for the gate.
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), &ns);
    let data = |s: &Secret, k: &str| s.data.as_ref().and_then(|d| d.get(k)).map(|v| v.0.clone()).unwrap_or_default();
    let signin_secret = secrets.get(&naming::signin_secret("dev")).await.ctx("sign-in Secret")?;
    let password = secrets.get("e2e-password").await.or(secrets.get(&naming::generated_password("dev")).await);
    let password = data(&password.ctx("password Secret")?, "TINYCODE_SERVER_PASSWORD");
    let kubeconfig = kube::config::Kubeconfig::read_from(&env.admin_kubeconfig).ctx("kubeconfig")?;
    let cluster = kubeconfig.clusters[0].cluster.clone().ok_or("cluster")?;
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(cluster.certificate_authority_data.clone().ok_or("ca data")?)
        .ctx("ca")?;
    let mounts = env.work.path().join("signin-pod");
    let (signin_dir, gate_dir) = (mounts.join("signin"), mounts.join("gate"));
    write_files(
        &signin_dir,
        &[
            ("cookie-secret", &data(&signin_secret, "cookie-secret")),
            ("relay-credential", &data(&signin_secret, "relay-credential")),
        ],
    )?;
    write_files(
        &gate_dir,
        &[
            ("relay-credential", &data(&signin_secret, "relay-credential")),
            ("start-credential", &data(&signin_secret, "start-credential")),
            ("ca.crt", &ca),
            ("password", &password),
        ],
    )?;

    // The proxy's own pages, as the chart's ConfigMap holds them.
    let pages = Api::<ConfigMap>::namespaced(admin.clone(), &ns)
        .get(&naming::signin_pages("dev"))
        .await
        .ctx("sign-in pages ConfigMap")?;
    let error_page = pages.data.and_then(|d| d.get("error.html").cloned()).ok_or("no error.html")?;
    let pages_dir = mounts.join("signin-pages");
    write_files(&pages_dir, &[("error.html", error_page.as_bytes())])?;

    let (tinycode_port, seen, standin) = standin_tinycode().await?;
    let (gate_port, proxy_port, front_port) = (free_port()?, free_port()?, free_port()?);
    let metrics_port = free_port()?;
    // The sign-in front: its own Deployment, reaching tinycode by the agent's Service.
    let deployment =
        Api::<Deployment>::namespaced(admin.clone(), &ns).get(&naming::front("dev")).await.ctx("front deployment")?;
    let agent = format!("http://{}.{ns}.svc", naming::agent_service("dev"));
    let gate_args = container_args(
        &deployment,
        "gate",
        &[
            ("127.0.0.1:4181", format!("127.0.0.1:{gate_port}")),
            // The front (the public port) before the proxy.
            ("0.0.0.0:4180", format!("127.0.0.1:{front_port}")),
            ("127.0.0.1:4182", format!("127.0.0.1:{proxy_port}")),
            (&format!("{agent}:4096"), format!("http://127.0.0.1:{tinycode_port}")),
            ("/var/run/secrets/tinycode/gate", gate_dir.display().to_string()),
            ("0.0.0.0:4097", format!("127.0.0.1:{activity_port}")),
            ("0.0.0.0:4101", format!("127.0.0.1:{metrics_port}")),
            // An image without an activity report (nothing listens there):
            // the gate judges by the requests it lets through alone.
            (&format!("{agent}:4098/activity"), format!("http://127.0.0.1:{}/activity", free_port()?)),
        ],
    )?;
    let proxy_args = container_args(
        &deployment,
        "signin-proxy",
        &[
            ("127.0.0.1:4182", format!("127.0.0.1:{proxy_port}")),
            ("http://127.0.0.1:4181/", format!("http://127.0.0.1:{gate_port}/")),
            ("/etc/tinycode/signin-pages", pages_dir.display().to_string()),
            ("/etc/tinycode/signin", signin_dir.display().to_string()),
        ],
    )?;
    let log = std::fs::File::create(env.work.path().join("signin-pod.log")).ctx("log")?;
    procs.0.push(
        Command::new(operator_bin()?)
            .args(&gate_args)
            .env_clear()
            .stdout(log.try_clone().ctx("log")?)
            .stderr(log.try_clone().ctx("log")?)
            .spawn()
            .ctx("start the gate")?,
    );
    procs.0.push(
        Command::new(oauth2_proxy)
            .args(&proxy_args)
            .env_clear()
            .stdout(log.try_clone().ctx("log")?)
            .stderr(log)
            .spawn()
            .ctx("start oauth2-proxy")?,
    );
    let front = Front { port: front_port, host: host.clone() };
    // Through the front, as the router and the kubelet's probes reach it.
    wait_for("oauth2-proxy /ping", Duration::from_secs(30), || async {
        Ok(request(front_port, "/ping", &[]).await.ok().filter(|(s, _, _)| *s == 200).map(drop))
    })
    .await?;
    let pod_log = || std::fs::read_to_string(env.work.path().join("signin-pod.log")).unwrap_or_default();
    let result = async {
        // No session: sent to the provider, nothing reaches tinycode.
        let (status, headers, _) = front.get("/", &Jar::default()).await?;
        ensure_eq(status, 302, "no session")?;
        let location = header(&headers, "location").unwrap_or_default();
        ensure(
            location.starts_with("http://127.0.0.1:") && location.contains("/authorize"),
            format!("redirected to {location}"),
        )?;
        ensure(
            location.contains(&format!("redirect_uri=https%3A%2F%2F{}", host.replace(':', "%3A"))),
            format!("callback of the instance's host: {location}"),
        )?;
        ensure(seen.lock().unwrap().is_empty(), "a request without a session reached tinycode")?;

        // The proxy's own error (the provider's refusal at the callback):
        // its page, naming the instance, for a browser; the same as text,
        // from the gate's front, for a client that is not one.
        let callback = "/oauth2/callback?error=access_denied&state=x";
        let browser = [("Accept", "text/html,*/*;q=0.8".to_string())];
        let (status, headers, page) = front.send("GET", callback, &Jar::default(), &browser).await?;
        ensure(status >= 400, format!("the refused callback: {status} {page}"))?;
        ensure(header(&headers, "content-type").unwrap_or_default().starts_with("text/html"), "a page")?;
        ensure(page.contains("<h1 id=\"instance\">dev</h1>"), format!("the instance's page: {page}"))?;
        let (text_status, headers, text) = front.send("GET", callback, &Jar::default(), &[]).await?;
        ensure_eq(text_status, status, "the same status as text")?;
        ensure(header(&headers, "content-type").unwrap_or_default().starts_with("text/plain"), "text")?;
        ensure(
            text.starts_with(&format!("tinycode dev in namespace {ns}: the sign-in did not complete: "))
                && text.contains("access_denied")
                && !text.contains('<'),
            format!("the proxy's words as text: {text}"),
        )?;
        ensure(header(&headers, "x-tinycode-gate").is_none(), "the gate's mark stays inside")?;
        ensure(seen.lock().unwrap().is_empty(), "a refused callback reached tinycode")?;

        // The owner (namespace admin, so tinycode-user-role) gets in; the
        // gate presents the password, the user never saw it.
        let alice_jar = sign_in(&front, admin_url, "alice@example.com").await?;
        let (status, _, body) = front.get("/session", &alice_jar).await?;
        ensure_eq((status, body.as_str()), (200, "tinycode"), "alice reaches tinycode")?;
        // Who used it: the gate named alice to the relay, which wrote her
        // into the status (the time it was told).
        let last = wait_for("status.lastUsedBy naming alice", Duration::from_secs(30), || async {
            Ok(get_instance(&admin, &ns, "dev")
                .await?
                .and_then(|i| i.status?.last_used_by)
                .filter(|l| l.user == "alice@example.com"))
        })
        .await?;
        ensure(last.at.parse::<k8s_openapi::jiff::Timestamp>().is_ok(), format!("lastUsedBy.at {}", last.at))?;
        // The gate's audit counters: alice's decision, counted, no user named.
        let scraped = reqwest::Client::builder()
            .no_proxy()
            .build()
            .ctx("client")?
            .get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .send()
            .await
            .ctx("scrape the gate")?
            .text()
            .await
            .ctx("the gate's counters")?;
        let allowed = format!(
            "tinycode_gate_events_total{{namespace=\"{ns}\",instance=\"dev\",event=\"access\",outcome=\"allowed\"}}"
        );
        ensure(scraped.contains(&allowed) && !scraped.contains("alice"), format!("the gate's counters: {scraped}"))?;
        let basic = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD
                .encode(format!("tinycode:{}", String::from_utf8_lossy(&password)))
        );
        ensure(
            seen.lock().unwrap().iter().any(|(p, a, _)| p == "/session" && *a == basic),
            "tinycode got the password from the gate",
        )?;
        // The proxy's session (alice's tokens from the provider) stays with
        // the proxy; tinycode's own cookies pass.
        ensure(alice_jar.0.keys().any(|k| k.starts_with("_tinycode_")), "alice holds the proxy's session cookie")?;
        let mut with_own = alice_jar.clone();
        with_own.0.insert("tinycode-ui".into(), "dark".into());
        let (status, _, _) = front.get("/cookies", &with_own).await?;
        ensure_eq(status, 200, "alice with a cookie of tinycode's")?;
        let cookies = seen.lock().unwrap().iter().rev().find(|(p, _, _)| p == "/cookies").map(|(_, _, c)| c.clone());
        ensure_eq(cookies.as_deref(), Some("tinycode-ui=dark"), "the cookies tinycode got")?;

        // A page on a sibling instance (same site, another origin) writes in
        // alice's name: refused by the gate, nothing reaches tinycode.
        let before = seen.lock().unwrap().len();
        let sibling = [("Origin", format!("https://sibling-{}", host)), ("Sec-Fetch-Site", "same-site".to_string())];
        let (status, _, body) = front.send("POST", "/session/abc/message", &alice_jar, &sibling).await?;
        ensure_eq(status, 403, &format!("a cross-site POST in alice's name: {body}"))?;
        ensure(body.contains("another site"), format!("the refusal says why: {body}"))?;
        ensure_eq(seen.lock().unwrap().len(), before, "requests that reached tinycode from the sibling's page")?;
        let own = [("Origin", format!("https://{host}")), ("Sec-Fetch-Site", "same-origin".to_string())];
        let (status, _, _) = front.send("POST", "/session/abc/message", &alice_jar, &own).await?;
        ensure_eq(status, 200, "alice's own page writes")?;

        // A teammate with tinycode-instance-user gets in.
        let bob_jar = sign_in(&front, admin_url, "bob@example.com").await?;
        let (status, _, _) = front.get("/bob", &bob_jar).await?;
        ensure_eq(status, 200, "bob (tinycode-instance-user) reaches tinycode")?;

        // A namespace viewer signs in but is refused; nothing reaches tinycode.
        let before = seen.lock().unwrap().len();
        let carol_jar = sign_in(&front, admin_url, "carol@example.com").await?;
        let (status, _, body) = front.get("/carol", &carol_jar).await?;
        ensure_eq(status, 403, &format!("carol (view) is refused: {body}"))?;
        ensure_eq(seen.lock().unwrap().len(), before, "requests that reached tinycode while carol was refused")?;

        // Bob's RoleBinding removed: refused within the cache time.
        env.kubectl(&["delete", "rolebinding", "bob-uses", "-n", &ns])?;
        let removed = Instant::now();
        loop {
            let (status, _, _) = front.get("/bob-again", &bob_jar).await?;
            if status == 403 {
                break;
            }
            ensure_eq(status, 200, "bob before the cache expires")?;
            ensure(
                removed.elapsed() < Duration::from_secs(ACCESS_CACHE_SECONDS + 6),
                format!("bob still gets in {:?} after his RoleBinding went", removed.elapsed()),
            )?;
            tokio::time::sleep(Duration::from_millis(500)).await;
        }

        // The start credential (in the namespace's Secret) names a user for
        // its own instance alone, and only a name a person could have.
        let start_credential = String::from_utf8_lossy(&data(&signin_secret, "start-credential")).to_string();
        for (path, user, want) in [
            (format!("/used/{ns}/other"), "mallory", 401),
            (format!("/used/{ns}/dev"), "mallory\nroot", 400),
            (format!("/used/{ns}/dev"), "", 400),
        ] {
            let got = used_post(relay_port, &path, &start_credential, user).await?;
            ensure_eq(got, want, &format!("POST {path} naming {user:?}"))?;
        }
        ensure_eq(used_post(relay_port, &format!("/used/{ns}/dev"), "tsc1.00", "mallory").await?, 401, "a made-up credential")?;

        // Alice's relay credential redeems for no other instance (her own
        // Secret is all a tenant can read).
        let credential = String::from_utf8_lossy(&data(&signin_secret, "relay-credential")).to_string();
        let forged = relay_post(relay_port, &format!("/oidc/token/{ns}/other"), &credential).await?;
        ensure_eq(forged, 401, "alice's credential for another instance")?;
        let own_wrong_secret = relay_post(relay_port, &format!("/oidc/token/{ns}/dev"), CLIENT_SECRET).await?;
        ensure_eq(own_wrong_secret, 401, "the raw client secret is not a credential either")?;
        // With her own credential: a refresh token the relay never handed to
        // this instance is refused (it could be another instance's), and so is
        // any field given twice (the provider might act on the copy the relay
        // did not check).
        let own = format!("/oidc/token/{ns}/dev");
        let unattributed = relay_post(relay_port, &own, &credential).await?;
        ensure_eq(unattributed, 400, "a refresh token the relay did not hand to this instance")?;
        let cred = credential.replace('.', "%2E");
        for twice in [
            format!("grant_type=refresh_token&refresh_token=x&grant_type=client_credentials&client_id={CLIENT_ID}&client_secret={cred}"),
            format!("grant_type=authorization_code&code=c&redirect_uri=https%3A%2F%2F{host}%2Foauth2%2Fcallback&redirect_uri=https%3A%2F%2Fevil.example.com%2Fcb&client_id={CLIENT_ID}&client_secret={cred}"),
        ] {
            ensure_eq(relay_post_form(relay_port, &own, &twice).await?, 400, &format!("a repeated field: {twice}"))?;
        }

        // Access reviews go through the relay, for the asking instance only:
        // the pod's ServiceAccount may not review anyone's access itself;
        // alice's credential asks about no other instance; an identity
        // provider's `system:` group is never asked about.
        let pod_sa = env.client_as(&format!("system:serviceaccount:{ns}:{}", naming::service_account("dev"))).await;
        let review: k8s_openapi::api::authorization::v1::SubjectAccessReview = serde_json::from_value(json!({
            "spec": {"user": "bob@example.com", "resourceAttributes": {"verb": "get", "resource": "secrets", "namespace": "kube-system"}}
        }))
        .ctx("review")?;
        let asked = Api::<k8s_openapi::api::authorization::v1::SubjectAccessReview>::all(pod_sa)
            .create(&Default::default(), &review)
            .await;
        ensure(
            matches!(asked, Err(kube::Error::Api(ref s)) if s.code == 403),
            format!("the instance's ServiceAccount may ask SubjectAccessReviews: {asked:?}"),
        )?;
        let ask = |path: String, credential: String, body: Value| async move {
            relay_json(relay_port, &path, &credential, &body).await
        };
        let bob = json!({"user": "alice@example.com", "groups": []});
        let (status, answer) = ask(format!("/oidc/review/{ns}/dev"), credential.clone(), bob.clone()).await?;
        ensure_eq((status, answer["allowed"].clone()), (200, json!(true)), "the gate's own question")?;
        let (status, _) = ask(format!("/oidc/review/{ns}/other"), credential.clone(), bob.clone()).await?;
        ensure_eq(status, 401, "alice's credential asks about another instance")?;
        let (status, _) = ask(format!("/oidc/review/{ns}/dev"), CLIENT_SECRET.into(), bob).await?;
        ensure_eq(status, 401, "a review without the instance's credential")?;
        let masters = json!({"user": "mallory@example.com", "groups": ["system:masters"]});
        let (status, answer) = ask(format!("/oidc/review/{ns}/dev"), credential.clone(), masters).await?;
        ensure_eq((status, answer["allowed"].clone()), (200, json!(false)), "an IdP group named system:masters")?;

        // Idle stop judged by the requests the gate lets through: alice's
        // requests keep the instance running past its timeout; once they
        // stop, it is stopped (the spec untouched).
        apply_instance(&alice.client, &ns, "dev", json!({"auth": {"mode": "oidc"}, "idle": {"timeout": "8s"}}))
            .await
            .ctx("set an idle timeout")?;
        for _ in 0..7 {
            let (status, _, _) = front.get("/keepalive", &alice_jar).await?;
            ensure_eq(status, 200, "alice while she works")?;
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        let inst = get_instance(&admin, &ns, "dev").await?.ok_or("gone")?;
        let st = inst.status.clone().unwrap_or_default();
        ensure_eq(st.phase.map(|p| p.as_str()), Some("Running"), "phase while alice works (14 s, timeout 8 s)")?;
        ensure_eq(
            st.idle.map(|i| (i.timeout, i.judged_by)),
            Some(("8s".to_string(), "requests".to_string())),
            "status.idle while alice works",
        )?;
        let inst = wait_phase(&admin, &ns, "dev", "Stopped").await?;
        let (_, reason, _) = ready(&inst);
        ensure_eq(reason.as_str(), "Idle", "Ready's reason once nobody uses it")?;
        ensure(!inst.spec.stopped, "the operator wrote spec.stopped")?;
        // The reconcile's status writes since kept lastUsedBy and own none of it.
        let last = inst.status.as_ref().and_then(|s| s.last_used_by.clone());
        ensure(
            last.as_ref().is_some_and(|l| ["alice@example.com", "bob@example.com"].contains(&l.user.as_str())),
            format!("status.lastUsedBy after the reconcile's writes: {last:?}"),
        )?;
        let owners: Vec<String> = inst
            .metadata
            .managed_fields
            .clone()
            .unwrap_or_default()
            .into_iter()
            .filter(|m| m.subresource.as_deref() == Some("status"))
            .filter(|m| m.fields_v1.as_ref().is_some_and(|f| f.0.to_string().contains("f:lastUsedBy")))
            .filter_map(|m| m.manager)
            .collect();
        ensure_eq(owners, vec!["tinycode-operator-last-use".to_string()], "who owns status.lastUsedBy")?;
        Ok::<(), String>(())
    }
    .await
    .map_err(|e| format!("{e}\n\npod log:\n{}", pod_log()));
    standin.abort();
    result?;

    // The client secret is nowhere a tenant (or the logs) can read.
    let inst = get_instance(&admin, &ns, "dev").await?.ok_or("instance")?;
    let mut places = vec![
        ("status", serde_json::to_string(&inst.status).unwrap_or_default()),
        ("Deployment", serde_json::to_string(&deployment).unwrap_or_default()),
        ("operator log", std::fs::read_to_string(env.operator_log()).unwrap_or_default()),
        (
            "helm values",
            env.helm_json(&[
                "get",
                "values",
                &release,
                "-n",
                tinycode_tools::devcluster::OPERATOR_NAMESPACE,
                "-o",
                "json",
            ])?
            .to_string(),
        ),
    ];
    for s in Api::<Secret>::namespaced(admin.clone(), &ns).list(&ListParams::default()).await.ctx("secrets")? {
        let values: Vec<String> =
            s.data.unwrap_or_default().values().map(|v| String::from_utf8_lossy(&v.0).to_string()).collect();
        places.push(("a Secret of the namespace", values.join("\n")));
    }
    for e in Api::<Event>::namespaced(admin.clone(), &ns).list(&ListParams::default()).await.ctx("events")? {
        places.push(("an event", format!("{:?} {:?}", e.message, e.reason)));
    }
    for (place, text) in places {
        ensure(!text.contains(CLIENT_SECRET), format!("the client secret appears in {place}"))?;
    }
    Ok(())
}

/// A review question at the relay with `credential` as bearer: the status and answer.
async fn relay_json(port: u16, path: &str, credential: &str, body: &Value) -> Result<(u16, Value), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect relay")?;
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {credential}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(req.as_bytes()).await.ctx("write")?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.ctx("read")?;
    let status = buf.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(format!("relay answer: {buf}"))?;
    let answer = buf.split("\r\n\r\n").nth(1).and_then(|b| serde_json::from_str(b).ok()).unwrap_or(Value::Null);
    Ok((status, answer))
}

/// A token request at the relay with `credential` as client secret: the status.
async fn relay_post(port: u16, path: &str, credential: &str) -> Result<u16, String> {
    let body = format!(
        "grant_type=refresh_token&refresh_token=x&client_id={CLIENT_ID}&client_secret={}",
        credential.replace('.', "%2E")
    );
    relay_post_form(port, path, &body).await
}

/// A front naming `user` at the relay's `path` with `credential`: the status.
async fn used_post(port: u16, path: &str, credential: &str, user: &str) -> Result<u16, String> {
    let body = json!({ "user": user }).to_string();
    let headers = format!("Authorization: Bearer {credential}\r\nContent-Type: application/json\r\n");
    relay_post_raw(port, path, &headers, &body).await
}

/// A token request at the relay with the form `body`: the status.
async fn relay_post_form(port: u16, path: &str, body: &str) -> Result<u16, String> {
    relay_post_raw(port, path, "Content-Type: application/x-www-form-urlencoded\r\n", body).await
}

/// One POST to the relay, written by hand (`headers`: whole lines): the status.
async fn relay_post_raw(port: u16, path: &str, headers: &str, body: &str) -> Result<u16, String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ctx("connect relay")?;
    let req =
        format!("POST {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n{headers}Content-Length: {}\r\n\r\n{body}", body.len());
    stream.write_all(req.as_bytes()).await.ctx("write")?;
    let mut buf = String::new();
    stream.read_to_string(&mut buf).await.ctx("read")?;
    buf.split_whitespace().nth(1).and_then(|s| s.parse().ok()).ok_or(format!("relay answer: {buf}"))
}

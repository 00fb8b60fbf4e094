//! Health (`/healthz`, `/readyz`) and metrics (`/metrics`) endpoints for the
//! kubelet's probes and Prometheus. The health endpoints answer anyone (the
//! kubelet sends no credentials); `/metrics` passes the
//! [`Gate`](crate::ops::metrics_auth::Gate) of `--metrics-auth rbac` first.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::ops::http_server::{self, Limits};
use crate::ops::metrics::Metrics;
use crate::ops::metrics_auth::{Gate, Verdict};

/// What the probes report.
#[derive(Debug, Default)]
pub struct HealthState {
    /// The controller loop runs (or the process stands by for the lease).
    pub alive: AtomicBool,
    /// This replica holds the leader lease (or leader election is off).
    pub leader: AtomicBool,
    /// The controller's watches have listed everything once.
    pub synced: AtomicBool,
}

/// Readiness as (status, body): not ready until synced; a standby replica
/// is ready and says it is standing by.
pub fn readiness(state: &HealthState) -> (StatusCode, &'static str) {
    if !state.leader.load(Ordering::Relaxed) {
        (StatusCode::OK, "standing by: another replica holds the leader lease\n")
    } else if state.synced.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not ready: watches have not synced yet\n")
    }
}

async fn healthz(State(state): State<Arc<HealthState>>) -> impl IntoResponse {
    if state.alive.load(Ordering::Relaxed) {
        (StatusCode::OK, "ok\n")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "controller loop stopped\n")
    }
}

async fn readyz(State(state): State<Arc<HealthState>>) -> impl IntoResponse {
    readiness(&state)
}

/// What `/metrics` serves and who may read it (no gate: anyone).
#[derive(Clone)]
struct MetricsState {
    metrics: Arc<Metrics>,
    gate: Option<Arc<Gate>>,
}

async fn metrics(State(state): State<MetricsState>, headers: HeaderMap) -> axum::response::Response {
    if let Some(gate) = &state.gate
        && let Verdict::Refuse(status, body) = gate.check(&headers).await
    {
        return if status == StatusCode::UNAUTHORIZED {
            (status, [(header::WWW_AUTHENTICATE, "Bearer")], body).into_response()
        } else {
            (status, body).into_response()
        };
    }
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], state.metrics.encode())
        .into_response()
}

/// The health port's routes: `/healthz` and `/readyz`.
pub fn health_router(state: Arc<HealthState>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(state)
}

/// The metrics port's route: `/metrics`, behind `gate` when there is one.
pub fn metrics_router(m: Arc<Metrics>, gate: Option<Arc<Gate>>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(MetricsState { metrics: m, gate })
}

/// Binds both listeners (so a taken port fails start-up) and serves them in the
/// background within [`Limits::default`] (header-read and request timeouts, a
/// connection cap per listener).
pub async fn serve(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    state: Arc<HealthState>,
    m: Arc<Metrics>,
    gate: Option<Arc<Gate>>,
) -> std::io::Result<()> {
    let health = tokio::net::TcpListener::bind(health_addr).await?;
    let metrics_listener = tokio::net::TcpListener::bind(metrics_addr).await?;
    tokio::spawn(http_server::serve(health, health_router(state), Limits::default()));
    tokio::spawn(http_server::serve(metrics_listener, metrics_router(m, gate), Limits::default()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    #[test]
    fn readiness_waits_for_sync_and_standby_says_so() {
        let s = HealthState::default();
        s.leader.store(true, Ordering::Relaxed);
        assert_eq!(readiness(&s).0, StatusCode::SERVICE_UNAVAILABLE);
        s.synced.store(true, Ordering::Relaxed);
        assert_eq!(readiness(&s).0, StatusCode::OK);
        s.leader.store(false, Ordering::Relaxed);
        let (code, body) = readiness(&s);
        assert_eq!(code, StatusCode::OK);
        assert!(body.contains("standing by"));
    }

    #[tokio::test]
    async fn healthz_answers_200_through_the_limited_server() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let state = Arc::new(HealthState::default());
        state.alive.store(true, Ordering::Relaxed);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(http_server::serve(listener, health_router(state), Limits::default()));

        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut resp = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut resp)).await.unwrap().unwrap();
        let resp = String::from_utf8_lossy(&resp);
        assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
        assert!(resp.ends_with("ok\n"), "{resp}");
    }

    /// Allows the token "reader", forbids "stranger", knows no other.
    struct Tokens;

    impl crate::ops::metrics_auth::Reviewer for Tokens {
        fn review<'a>(
            &'a self,
            token: &'a str,
        ) -> futures::future::BoxFuture<'a, Result<crate::ops::metrics_auth::Decision, String>> {
            use crate::ops::metrics_auth::Decision;
            let d = match token {
                "reader" => Decision::Allowed,
                "stranger" => Decision::Forbidden,
                _ => Decision::Unauthenticated,
            };
            Box::pin(async move { Ok(d) })
        }
    }

    async fn get(addr: SocketAddr, path: &str, auth: Option<&str>) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
        let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.unwrap();
        let mut resp = Vec::new();
        tokio::time::timeout(std::time::Duration::from_secs(5), s.read_to_end(&mut resp)).await.unwrap().unwrap();
        String::from_utf8_lossy(&resp).into_owned()
    }

    #[tokio::test]
    async fn metrics_behind_the_gate_answer_by_token_and_health_stays_open() {
        let m = Arc::new(Metrics::new());
        m.reconciled("success", std::time::Duration::from_millis(1));
        let gate = Arc::new(Gate::new(Arc::new(Tokens)));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(http_server::serve(listener, metrics_router(m.clone(), Some(gate)), Limits::default()));

        let none = get(addr, "/metrics", None).await;
        assert!(none.starts_with("HTTP/1.1 401"), "{none}");
        assert!(none.to_ascii_lowercase().contains("www-authenticate: bearer"), "{none}");
        assert!(!none.contains("tinycode_operator_"), "{none}");
        let basic = get(addr, "/metrics", Some("Basic dXNlcjpwYXNz")).await;
        assert!(basic.starts_with("HTTP/1.1 401"), "{basic}");
        let forged = get(addr, "/metrics", Some("Bearer forged")).await;
        assert!(forged.starts_with("HTTP/1.1 401"), "{forged}");
        let stranger = get(addr, "/metrics", Some("Bearer stranger")).await;
        assert!(stranger.starts_with("HTTP/1.1 403"), "{stranger}");
        assert!(!stranger.contains("tinycode_operator_"), "{stranger}");
        let reader = get(addr, "/metrics", Some("Bearer reader")).await;
        assert!(reader.starts_with("HTTP/1.1 200"), "{reader}");
        assert!(reader.contains("tinycode_operator_reconciles_total{result=\"success\"} 1"), "{reader}");

        // Without a gate (--metrics-auth none) anyone reads them.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let open = listener.local_addr().unwrap();
        tokio::spawn(http_server::serve(listener, metrics_router(m, None), Limits::default()));
        let anyone = get(open, "/metrics", None).await;
        assert!(anyone.starts_with("HTTP/1.1 200") && anyone.contains("tinycode_operator_"), "{anyone}");

        // The probes never need a token.
        let state = Arc::new(HealthState::default());
        state.alive.store(true, Ordering::Relaxed);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let health = listener.local_addr().unwrap();
        tokio::spawn(http_server::serve(listener, health_router(state), Limits::default()));
        let probe = get(health, "/healthz", None).await;
        assert!(probe.starts_with("HTTP/1.1 200"), "{probe}");
    }
}

//! Health (`/healthz`, `/readyz`) and metrics (`/metrics`) endpoints for the
//! kubelet's probes and Prometheus.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::ops::http_server::{self, Limits};
use crate::ops::metrics::Metrics;

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

async fn metrics(State(metrics): State<Arc<Metrics>>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "application/openmetrics-text; version=1.0.0; charset=utf-8")], metrics.encode())
}

/// The health port's routes: `/healthz` and `/readyz`.
pub fn health_router(state: Arc<HealthState>) -> Router {
    Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(state)
}

/// The metrics port's route: `/metrics`.
pub fn metrics_router(m: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(m)
}

/// Binds both listeners (so a taken port fails start-up) and serves them in the
/// background within [`Limits::default`] (header-read and request timeouts, a
/// connection cap per listener).
pub async fn serve(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    state: Arc<HealthState>,
    m: Arc<Metrics>,
) -> std::io::Result<()> {
    let health = tokio::net::TcpListener::bind(health_addr).await?;
    let metrics_listener = tokio::net::TcpListener::bind(metrics_addr).await?;
    tokio::spawn(http_server::serve(health, health_router(state), Limits::default()));
    tokio::spawn(http_server::serve(metrics_listener, metrics_router(m), Limits::default()));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
}

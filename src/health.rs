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

use crate::metrics::Metrics;

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

/// Binds both listeners (so a taken port fails start-up) and serves them in the background.
pub async fn serve(
    health_addr: SocketAddr,
    metrics_addr: SocketAddr,
    state: Arc<HealthState>,
    m: Arc<Metrics>,
) -> std::io::Result<()> {
    let health = tokio::net::TcpListener::bind(health_addr).await?;
    let metrics_listener = tokio::net::TcpListener::bind(metrics_addr).await?;
    let health_app = Router::new().route("/healthz", get(healthz)).route("/readyz", get(readyz)).with_state(state);
    let metrics_app = Router::new().route("/metrics", get(metrics)).with_state(m);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(health, health_app).await {
            tracing::error!(error = %e, "health endpoint stopped");
        }
    });
    tokio::spawn(async move {
        if let Err(e) = axum::serve(metrics_listener, metrics_app).await {
            tracing::error!(error = %e, "metrics endpoint stopped");
        }
    });
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
}

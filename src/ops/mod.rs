//! Running the operator itself: health and metrics endpoints (and who may
//! read the metrics), leader election, and the authorization decisions the
//! metrics and instance gates cache.

pub mod activity;
pub mod decisions;
pub mod digest_key;
pub mod health;
pub mod http_server;
pub mod leader;
pub mod metrics;
pub mod metrics_auth;
pub mod oidc;

//! Running the operator itself: health and metrics endpoints (and who may
//! read the metrics), leader election, and the authorization decisions the
//! metrics and instance gates cache.

pub(crate) mod decisions;
pub mod digest_key;
pub(crate) mod health;
pub(crate) mod http_server;
pub mod leader;
pub mod metrics;
pub(crate) mod metrics_auth;

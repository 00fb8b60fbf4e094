//! Running the operator itself: health and metrics endpoints, leader election.

pub mod health;
pub mod http_server;
pub mod leader;
pub mod memory;
pub mod metrics;

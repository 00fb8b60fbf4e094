//! tinycode-operator: installs and manages tinycode AI coding assistant
//! instances on OpenShift. A `TinycodeInstance` becomes one Helm release of
//! the bundled chart, one Route and one SCC grant; see SPEC.md.
#![deny(warnings)]

pub mod api;
pub mod approval;
pub mod cli;
pub mod cluster_admin;
pub mod config;
pub mod controller;
pub mod digest;
pub mod error;
pub mod health;
pub mod helm;
pub mod http_server;
pub mod ingress;
pub mod leader;
pub mod manifest;
pub mod metrics;
pub mod naming;
pub mod netguard;
pub mod openshift;
pub mod platform;
pub mod prepare;
pub mod rbac;
pub mod release;
pub mod remediation;
pub mod route;
pub mod scc;
pub mod secret;
pub mod settings;
pub mod status;
pub mod validation;
pub mod values;
pub mod vllm;

/// The operator's version (the OLM bundle's CSV version too).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server-side-apply field manager for every object the operator writes itself.
pub const FIELD_MANAGER: &str = "tinycode-operator";

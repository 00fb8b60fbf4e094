//! tinycode-operator: installs and manages tinycode AI coding assistant
//! instances on OpenShift and Kubernetes. A `TinycodeInstance` becomes one
//! Helm release of the bundled chart, a Route or an Ingress, and on OpenShift
//! one SCC grant; see README.md.
//!
//! The layers, lowest first (`hack/layers.py` checks them in `make lint`):
//! api → platform → settings → render → vllm → ops → activity → signin →
//! helm, gate → modelkeys → reconcile → cli. Modules are public only where the binary's
//! own tests or `tools/` use them; the rest is `pub(crate)`.

pub(crate) mod activity;
pub mod api;
pub mod cli;
pub mod egress;
pub(crate) mod gate;
pub mod helm;
pub(crate) mod modelkeys;
pub mod ops;
pub mod platform;
pub mod reconcile;
pub mod render;
pub mod settings;
pub(crate) mod signin;
pub mod vllm;
pub(crate) mod watch_scope;

/// The operator's version (the OLM bundle's CSV version too).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server-side-apply field manager for every object the operator writes itself.
pub const FIELD_MANAGER: &str = "tinycode-operator";

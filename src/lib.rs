//! tinycode-operator: installs and manages tinycode AI coding assistant
//! instances on OpenShift. A `TinycodeInstance` becomes one Helm release of
//! the bundled chart, one Route and one SCC grant; see README.md.

pub mod api;
pub mod cli;
pub mod gate;
pub mod helm;
pub mod ops;
pub mod platform;
pub mod reconcile;
pub mod render;
pub mod settings;
pub mod vllm;
pub mod watch_scope;

/// The operator's version (the OLM bundle's CSV version too).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Server-side-apply field manager for every object the operator writes itself.
pub const FIELD_MANAGER: &str = "tinycode-operator";

//! tinycode-operator: installs and manages tinycode instances on OpenShift.
#![deny(warnings)]
pub mod api;
pub mod helm;
pub mod naming;
pub mod openshift;
pub mod scc;
pub mod settings;
pub mod validation;
pub mod values;

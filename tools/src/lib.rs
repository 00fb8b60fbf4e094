//! Development tooling for tinycode-operator, kept out of the shipped crate
//! (the image builds only `tinycode-operator`): the local control-plane setup
//! behind `tinycode-local` and the end-to-end tests, and the OLM bundle writer
//! (`tinycode-local bundle`), and the chart's lint inputs
//! (`tinycode-local chart-ci-values`).

pub mod bundle;
pub mod chart_ci;
pub mod devcluster;

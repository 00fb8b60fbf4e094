//! Development tooling for tinycode-operator, kept out of the shipped crate
//! (the image builds only `tinycode-operator`): the local control-plane setup
//! behind `tinycode-local` and the end-to-end tests, and the OLM bundle writer
//! (`tinycode-local bundle`).

pub mod bundle;
pub mod devcluster;

//! What the operator renders from a spec, all pure: the chart values, the
//! tinycode config, the Route or Ingress (the names of derived objects are
//! [`crate::api::naming`]: every layer needs them).

pub mod config;
pub mod ingress;
pub mod route;
pub(crate) mod secret;
pub mod signin;
pub mod values;

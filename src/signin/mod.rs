//! Sign-in through the cluster's identity (README.md, "Sign-in"): the part
//! that runs in the operator. [`oidc`] holds the cluster-admin's OpenID
//! Connect provider (its endpoints and client secret) and the relay through
//! which instance pods redeem sign-in codes, ask for access reviews and ask
//! to start their idle-stopped instance ([`start`]).
//!
//! The other parts of sign-in live in the layer that does their kind of work:
//! - what a sign-in pod is given: `render/signin.rs` (the proxy's values, the
//!   relay credential) and the chart's sign-in templates;
//! - the gate in the instance's pod (who may `use` the instance, the password
//!   it presents to tinycode): `gate/`, run as `tinycode-operator gate`;
//! - the authorization decisions the gate and `/metrics` cache:
//!   `ops/decisions.rs`;
//! - the checks on an instance's sign-in spec: `reconcile/stages/validate/`.

pub(crate) mod oidc;
pub(crate) mod start;

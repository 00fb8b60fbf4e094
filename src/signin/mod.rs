//! Sign-in through the cluster's identity (README.md, "Sign-in"): the part
//! that runs in the operator. [`oidc`] holds the cluster-admin's OpenID
//! Connect provider (its endpoints and client secret) and the relay through
//! which oidc instance pods redeem sign-in codes and ask for access reviews;
//! [`start`] the relay's route through which every mode's front asks to
//! start its idle-stopped instance (served with or without a provider);
//! [`used`] the route through which a sign-in front names who last used its
//! instance (`status.lastUsedBy`).
//!
//! The other parts of sign-in live in the layer that does their kind of work:
//! - what a sign-in pod is given: `render/signin.rs` (the proxy's values, the
//!   relay credential) and the chart's sign-in templates;
//! - the gate in the instance's pod (who may `use` the instance, the password
//!   it presents to tinycode): `gate/`, run as `tinycode-operator gate`;
//! - the authorization decisions the gate and `/metrics` cache:
//!   `ops/decisions.rs`;
//! - the checks on an instance's sign-in spec: `reconcile/stages/validate/`.

pub(crate) mod egress;
pub(crate) mod oidc;
pub(crate) mod start;
pub(crate) mod used;

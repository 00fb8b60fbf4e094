//! The stages of the reconcile, in the order [`super`] runs them: observe →
//! validate (with the spec's rules and the class policy, as one verdict in
//! [`admit`]) → plan → execute → status; [`cleanup`] is the delete path.
//! Validate, plan and status are pure; observe reads and execute writes.

pub(crate) mod admit;
pub(crate) mod cleanup;
pub(crate) mod execute;
pub mod observe;
pub(crate) mod plan;
pub(crate) mod status;
pub(crate) mod validate;

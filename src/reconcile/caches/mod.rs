//! What the reconcile keeps between runs, apart from the stages that use it:
//! the reflector stores it reads instead of the apiserver ([`stores`]), what it
//! last wrote while the stores trail it ([`written`]), which watch events wake
//! a reconcile ([`triggers`]) and how often a namespace hears of one failure
//! ([`noise`]).

pub(crate) mod noise;
pub(crate) mod stores;
pub(crate) mod triggers;
pub(crate) mod written;

//! Admission: the one answer a reconcile gets on whether an instance's spec
//! may be applied. The checks run cheapest first: the spec's own rules, then
//! `spec.suspend`, then its class (a spec beyond it costs no Secret reads or
//! probes), then what the cluster approved and holds (observed). The caller
//! reads the [`Verdict`] once and, for anything but [`Verdict::Admitted`],
//! withdraws what the instance held without approval before it returns
//! (README.md, "Security model"): a tenant cannot keep a grant by
//! suspending, breaking the spec or failing another check.

use crate::api::TinycodeInstance;
use crate::reconcile::context::Context;
use crate::reconcile::error::Error;
use crate::reconcile::rules::InvalidSpec;
use crate::reconcile::stages::observe::{self, Observed};
use crate::reconcile::stages::validate::{self, Invalid, ValidInstance};

/// What admission decided.
#[derive(Debug)]
pub enum Verdict {
    /// Nothing of the spec is applied; the refusal names the field or the
    /// approval and the fix.
    Refused(Refusal),
    /// `spec.suspend`: nothing is applied until it is false again.
    Suspended,
    /// Cleared to run: the validated instance and what was observed for it.
    Admitted(Box<(ValidInstance, Observed)>),
}

/// Why a spec is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It breaks its own rules (the CRD's, checked again here for objects
    /// admitted before a CRD upgrade).
    InvalidSpec(InvalidSpec),
    /// Its class, a missing approval or the cluster refuses it.
    Blocked(Invalid),
}

impl Verdict {
    /// Why what the instance holds without approval is withdrawn, or `None`
    /// when it is admitted (then the plan renders what it may hold).
    pub fn withdraws(&self) -> Option<&str> {
        match self {
            Verdict::Refused(Refusal::InvalidSpec(_)) => Some("the spec is invalid"),
            Verdict::Refused(Refusal::Blocked(invalid)) => Some(invalid.reason.as_str()),
            Verdict::Suspended => Some("the instance is suspended"),
            Verdict::Admitted(_) => None,
        }
    }
}

impl From<Refusal> for Error {
    fn from(refusal: Refusal) -> Self {
        match refusal {
            Refusal::InvalidSpec(invalid) => invalid.into(),
            Refusal::Blocked(invalid) => Error::blocked(invalid.reason, invalid.message),
        }
    }
}

/// Decides on `inst`. An error is a failure to observe (transient), not a
/// refusal: nothing is withdrawn for it.
pub async fn admit(ctx: &Context, inst: &TinycodeInstance) -> Result<Verdict, Error> {
    let warnings = match validate::spec_rules(inst, &ctx.settings) {
        Ok(warnings) => warnings,
        Err(invalid) => return Ok(Verdict::Refused(Refusal::InvalidSpec(invalid))),
    };
    if inst.spec.suspend {
        return Ok(Verdict::Suspended);
    }
    let (class, rank) = observe::class_of(ctx, inst);
    if let Err(invalid) = validate::class_policy(&class, rank, &inst.spec, &ctx.settings) {
        return Ok(Verdict::Refused(Refusal::Blocked(invalid)));
    }
    let observed = observe::observe(ctx, inst).await?;
    Ok(match validate::validate(&observed, inst, &ctx.settings, warnings) {
        Ok(valid) => Verdict::Admitted(Box::new((valid, observed))),
        Err(invalid) => Verdict::Refused(Refusal::Blocked(invalid)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reconcile::reason::Blocked;

    #[test]
    fn everything_but_admission_withdraws_and_a_refusal_keeps_its_reason() {
        let blocked = Refusal::Blocked(Invalid { reason: Blocked::ClassNotFound, message: "no class".into() });
        assert_eq!(Verdict::Refused(blocked.clone()).withdraws(), Some("ClassNotFound"));
        assert_eq!(Verdict::Suspended.withdraws(), Some("the instance is suspended"));
        let invalid = Refusal::InvalidSpec(InvalidSpec(vec![]));
        assert_eq!(Verdict::Refused(invalid.clone()).withdraws(), Some("the spec is invalid"));
        assert!(matches!(Error::from(blocked), Error::Blocked { reason: Blocked::ClassNotFound, .. }));
        assert!(matches!(Error::from(invalid), Error::InvalidSpec(_)));
    }
}

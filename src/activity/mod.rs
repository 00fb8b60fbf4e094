//! Activity (CONTAINER.md, "Activity"): when somebody last used an instance
//! and whether its agent is working now. [`report`] is the report's contract
//! and the operator's reader of it.
//!
//! The other parts:
//! - the gate serves the report for images that do not: `gate/activity.rs`;
//! - idle stop decides from it (pure) and reads it on a schedule (the loop):
//!   `reconcile/idle/mod.rs` and `reconcile/idle/watch.rs`.

pub(crate) mod report;

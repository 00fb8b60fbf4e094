//! Rollouts that wait for the agent (README.md, "Rollouts that wait"): a
//! change the user did not make (an operator upgrade that renders the
//! instance otherwise, a class change, a rotated Secret) restarts the pods,
//! and with them an agent in the middle of a task. Such a change waits while
//! the instance's activity report says `busy`, up to a deadline the
//! cluster-admin sets; a change the user made (a new `metadata.generation`),
//! a stopped instance, a repair (an object missing or written by another
//! manager), `tinycode.dev/rollout-now` and a withdrawn approval apply at once.
//!
//! [`window`] (pure) says whether the planned helm run may wait at all;
//! [`settle`] (pure) decides from the agent's answer; [`wait_for_busy`] reads
//! the answer and rewrites the plan. What waits is kept in
//! `status.rendering`, so a restarted operator keeps the same deadline.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::events::EventType;

use crate::activity::report::{self as activity, Activity};
use crate::api::duration::format as format_duration;
use crate::api::{ROLLOUT_NOW_ANNOTATION, RenderingStatus, TinycodeInstance, naming};
use crate::reconcile::Context;
use crate::reconcile::marks::VALUES_HASH_ANNOTATION;
use crate::reconcile::stages::observe::Observed;
use crate::reconcile::stages::plan::{Drift, Held, Plan, ReleaseState};

/// Why a planned helm run applies at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Now {
    /// Helm does not run, or runs to repair or install (not a change of values).
    NotAValuesChange,
    /// The user changed the spec since the running rendering was made.
    UserChange,
    /// The pods are (to be) stopped, or do not run: nothing to interrupt.
    NotRunning,
    /// `tinycode.dev/rollout-now` asks for it.
    Requested,
    /// The cluster-admin lets nothing wait (deadline 0).
    NoDeadline,
    /// The Deployment was written by somebody else since the operator applied it.
    Repair,
}

/// Whether the planned helm run may wait for a busy agent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Window {
    Now(Now),
    /// It may wait until `until`; the rendering that runs is `current`, a
    /// change has waited since `since` (`waited`: an earlier reconcile held it).
    IfBusy {
        current: String,
        since: Timestamp,
        until: Timestamp,
        waited: bool,
    },
}

/// What the reconcile does with the planned helm run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Applied now (`waited_since`: it had waited for the agent).
    Apply { waited_since: Option<Timestamp> },
    /// The agent is busy: the rendering waits.
    Hold(Held),
    /// The agent is still busy at the deadline: applied anyway, and said so.
    Deadline { since: Timestamp },
}

/// The facts [`window`] decides from.
pub struct Facts<'a> {
    /// Why helm would run (None: it does not).
    pub release: Option<&'a ReleaseState>,
    /// The planned values stop the pods.
    pub stopped: bool,
    /// The server Deployment as the cluster holds it.
    pub deployment: Option<&'a Deployment>,
    pub generation: Option<i64>,
    /// status.rendering and status.observedGeneration as last written.
    pub previous: Option<&'a RenderingStatus>,
    pub observed_generation: Option<i64>,
    /// The rollout-now annotation's value.
    pub rollout_now: Option<&'a str>,
    pub deadline: Option<Duration>,
    pub now: Timestamp,
}

/// Whether the planned helm run may wait, and until when (pure).
pub fn window(f: &Facts<'_>) -> Window {
    if !matches!(f.release, Some(ReleaseState::Drifted(Drift::ValuesChanged))) {
        return Window::Now(Now::NotAValuesChange);
    }
    // The generation the running rendering was made for; before this field
    // existed, the last one status was written for (an operator upgrade
    // over instances that never had it is the case this is for).
    let made_for = f.previous.and_then(|r| r.generation).or(f.observed_generation);
    if made_for.is_none() || f.generation > made_for {
        return Window::Now(Now::UserChange);
    }
    let Some(deployment) = f.deployment else { return Window::Now(Now::NotRunning) };
    if f.stopped || deployment.spec.replicas == Some(0) {
        return Window::Now(Now::NotRunning);
    }
    if f.rollout_now.is_some() && f.rollout_now != f.previous.and_then(|r| r.last_handled_rollout_now.as_deref()) {
        return Window::Now(Now::Requested);
    }
    let Some(deadline) = f.deadline else { return Window::Now(Now::NoDeadline) };
    let current = deployment.annotations().get(VALUES_HASH_ANNOTATION).cloned().unwrap_or_default();
    // The Deployment says another rendering runs than the operator last
    // applied: somebody else wrote it (a tenant can, in their namespace). That
    // is a repair, never a wait: else rewriting the mark would restart the
    // wait, and hold a change past any deadline.
    // A Deployment without the mark is not one the operator rendered either.
    if current.is_empty() || f.previous.is_some_and(|r| !r.current.is_empty() && r.current != current) {
        return Window::Now(Now::Repair);
    }
    // The same rendering still runs: the wait began when it was first held.
    let earlier = f
        .previous
        .filter(|r| !r.pending.is_empty() && r.current == current)
        .and_then(|r| r.since.as_deref()?.parse::<Timestamp>().ok())
        .map(|t| t.min(f.now));
    let since = earlier.unwrap_or(f.now);
    let until =
        since.saturating_add(SignedDuration::try_from(deadline).unwrap_or(SignedDuration::MAX)).unwrap_or(since);
    Window::IfBusy { current, since, until, waited: earlier.is_some() }
}

/// What happens to a run that may wait, given the agent's answer (pure).
/// A failed check does not start a wait (the image may serve no report), but
/// does not end one either: an agent found busy is not restarted on a guess.
pub fn settle(window: &Window, answer: &Result<Activity, String>, now: Timestamp, how: &str) -> Settled {
    let Window::IfBusy { current, since, until, waited } = window else {
        return Settled::Apply { waited_since: None };
    };
    let waited_since = waited.then_some(*since);
    let busy = match answer {
        Ok(a) => a.busy == Some(true),
        Err(_) => *waited,
    };
    if !busy {
        return Settled::Apply { waited_since };
    }
    if now >= *until {
        return Settled::Deadline { since: *since };
    }
    // Fixed words: the error's text is the tenant's image's to choose, and a
    // message that changed with it would cost a status write per check.
    let checked = match answer {
        Ok(_) => "its activity report says busy",
        Err(_) => "it was busy, and the last check failed (the operator's log says why)",
    };
    if let Err(e) = answer {
        tracing::info!(error = %e, "a held rollout's activity check failed: it keeps waiting");
    }
    Settled::Hold(Held {
        current: current.clone(),
        since: *since,
        until: *until,
        message: format!(
            "a change the instance did not ask for (an operator upgrade, a class change or a rotated Secret) waits for the agent: {checked}; it applies when the agent is done, or at {until} at the latest; {how}"
        ),
    })
}

/// Holds the plan's helm run while the agent is busy, within the deadline;
/// rewrites `plan` (no helm, status says what waits) and publishes the events.
pub async fn wait_for_busy(
    ctx: &Context,
    inst: &TinycodeInstance,
    observed: &Observed,
    deadline: Option<Duration>,
    plan: &mut Plan,
) {
    let status = inst.status.as_ref();
    let facts = Facts {
        release: plan.helm.as_ref().map(|h| &h.reason),
        stopped: plan.values.stopped,
        deployment: observed.deployment.as_deref(),
        generation: inst.metadata.generation,
        previous: status.and_then(|s| s.rendering.as_ref()),
        observed_generation: status.and_then(|s| s.observed_generation),
        rollout_now: inst.annotations().get(ROLLOUT_NOW_ANNOTATION).map(String::as_str),
        deadline,
        now: Timestamp::now(),
    };
    let window = window(&facts);
    let key = crate::reconcile::instance_key(inst);
    if matches!(window, Window::Now(_)) {
        ctx.metrics.rollout_waits(&key, false);
        return;
    }
    let (ns, name) = (inst.namespace().unwrap_or_default(), inst.name_any());
    let url = activity::url(&ctx.settings.idle.url_template, &naming::fullname(&name), &ns, &name);
    let answer = ctx.activity_reader.read(&url).await;
    let how = format!(
        "{} annotate tinycodeinstance {name} -n {ns} {ROLLOUT_NOW_ANNOTATION}=\"$(date +%s)\" --overwrite applies it now",
        ctx.settings.platform.cli()
    );
    let now = Timestamp::now();
    match settle(&window, &answer, now, &how) {
        Settled::Apply { waited_since: None } => ctx.metrics.rollout_waits(&key, false),
        Settled::Apply { waited_since: Some(since) } => {
            ctx.metrics.rollout_waits(&key, false);
            let note = format!("the agent is no longer busy: the change that waited since {since} is applied");
            ctx.event(inst, EventType::Normal, "RolloutApplied", "Reconcile", note).await;
        }
        Settled::Deadline { since } => {
            ctx.metrics.rollout_waits(&key, false);
            let waited = now.duration_since(since).unsigned_abs();
            let note = format!(
                "the agent is still busy, but the change has waited since {since} ({}), the rollout busy deadline ({}): it is applied now and restarts the agent",
                format_duration(Duration::from_secs(waited.as_secs())),
                deadline.map(format_duration).unwrap_or_default()
            );
            ctx.event(inst, EventType::Warning, "RolloutDeadline", "Reconcile", note).await;
        }
        Settled::Hold(held) => {
            // An approval taken back never waits with the rendering (a
            // discovery RoleBinding elsewhere would outlive it): what is held
            // without approval goes now, and then so does the change.
            match crate::reconcile::revoke::revoke(ctx, inst, "a change waited for the busy agent").await {
                Ok(withdrawn) if withdrawn.is_empty() => {}
                Ok(_) => return ctx.metrics.rollout_waits(&key, false),
                Err(e) => {
                    tracing::warn!(error = %e, "could not check approvals before holding a rollout: applying it now");
                    return ctx.metrics.rollout_waits(&key, false);
                }
            }
            ctx.metrics.rollout_waits(&key, true);
            if facts.previous.is_none_or(|r| r.pending.is_empty()) {
                ctx.event(inst, EventType::Normal, "RolloutWaits", "Reconcile", held.message.clone()).await;
            }
            plan.helm = None;
            plan.revision = latest_deployed(observed);
            plan.held = Some(held);
        }
    }
}

/// The revision that runs while a change waits.
fn latest_deployed(observed: &Observed) -> Option<i64> {
    let done: Vec<_> = observed.release.records.iter().filter(|r| !r.is_pending()).cloned().collect();
    crate::helm::release::latest(&done).map(|r| r.version)
}

/// When to look again at a held instance: at its deadline, or at the next
/// activity check if that is sooner.
pub fn recheck(held: &Held, every: Duration, now: Timestamp) -> Duration {
    let left = held.until.duration_since(now).unsigned_abs();
    if held.until <= now { Duration::from_secs(1) } else { left.min(every).max(Duration::from_secs(1)) }
}

/// status.rendering after this reconcile: what waits, or what now runs.
pub fn status(inst: &TinycodeInstance, plan: &Plan) -> RenderingStatus {
    let prev = inst.status.as_ref().and_then(|s| s.rendering.clone()).unwrap_or_default();
    match &plan.held {
        Some(held) => RenderingStatus {
            current: held.current.clone(),
            pending: plan.values.values_hash.clone(),
            since: Some(held.since.to_string()),
            generation: prev.generation.or(inst.status.as_ref().and_then(|s| s.observed_generation)),
            message: held.message.clone(),
            last_handled_rollout_now: prev.last_handled_rollout_now,
        },
        None => RenderingStatus {
            current: plan.values.values_hash.clone(),
            pending: String::new(),
            since: None,
            generation: inst.metadata.generation,
            message: String::new(),
            last_handled_rollout_now: inst
                .annotations()
                .get(ROLLOUT_NOW_ANNOTATION)
                .cloned()
                .or(prev.last_handled_rollout_now),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::report::JudgedBy;
    use std::collections::BTreeMap;

    const HOUR: Duration = Duration::from_secs(3600);

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn deployment(hash: &str, replicas: i32) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.annotations = Some(BTreeMap::from([(VALUES_HASH_ANNOTATION.to_string(), hash.to_string())]));
        d.spec.replicas = Some(replicas);
        d
    }

    fn rendering(generation: i64, pending: &str, since: Option<&str>) -> RenderingStatus {
        RenderingStatus {
            current: "old".into(),
            pending: pending.into(),
            since: since.map(String::from),
            generation: Some(generation),
            ..Default::default()
        }
    }

    const CHANGED: ReleaseState = ReleaseState::Drifted(Drift::ValuesChanged);

    /// An operator-made change to a running instance whose spec status has seen.
    fn facts<'a>(d: &'a Deployment, previous: Option<&'a RenderingStatus>) -> Facts<'a> {
        Facts {
            release: Some(&CHANGED),
            stopped: false,
            deployment: Some(d),
            generation: Some(3),
            previous,
            observed_generation: Some(3),
            rollout_now: None,
            deadline: Some(HOUR),
            now: ts("2026-12-06T10:00:00Z"),
        }
    }

    fn busy(b: bool) -> Result<Activity, String> {
        Ok(Activity { last_activity: ts("2026-12-06T09:59:00Z"), busy: Some(b), judged_by: JudgedBy::Report })
    }

    #[test]
    fn only_a_change_nobody_asked_for_on_running_pods_may_wait() {
        let d = deployment("old", 1);
        let prev = rendering(3, "", None);
        let first = window(&facts(&d, Some(&prev)));
        let until = ts("2026-12-06T11:00:00Z");
        assert_eq!(
            first,
            Window::IfBusy { current: "old".into(), since: ts("2026-12-06T10:00:00Z"), until, waited: false }
        );
        // Before status.rendering existed, status's observedGeneration stands in.
        assert!(matches!(window(&facts(&d, None)), Window::IfBusy { .. }));

        let missing = ReleaseState::Drifted(Drift::Missing(crate::reconcile::stages::plan::ReleaseObject::Deployment(
            "x".into(),
        )));
        let requested = ReleaseState::Requested { request: "1".into() };
        for release in [None, Some(&missing), Some(&requested), Some(&ReleaseState::Absent)] {
            let f = Facts { release, ..facts(&d, Some(&prev)) };
            assert_eq!(window(&f), Window::Now(Now::NotAValuesChange));
        }
        let user = Facts { generation: Some(4), ..facts(&d, Some(&prev)) };
        assert_eq!(window(&user), Window::Now(Now::UserChange));
        let new = Facts { observed_generation: None, ..facts(&d, None) };
        assert_eq!(window(&new), Window::Now(Now::UserChange));
        let stopping = Facts { stopped: true, ..facts(&d, Some(&prev)) };
        assert_eq!(window(&stopping), Window::Now(Now::NotRunning));
        let zero = deployment("old", 0);
        assert_eq!(window(&facts(&zero, Some(&prev))), Window::Now(Now::NotRunning));
        let asked = Facts { rollout_now: Some("1700000000"), ..facts(&d, Some(&prev)) };
        assert_eq!(window(&asked), Window::Now(Now::Requested));
        // Handled already: the same value asks for nothing more.
        let handled = RenderingStatus { last_handled_rollout_now: Some("1700000000".into()), ..prev.clone() };
        let again = Facts { rollout_now: Some("1700000000"), ..facts(&d, Some(&handled)) };
        assert!(matches!(window(&again), Window::IfBusy { .. }));
        let never = Facts { deadline: None, ..facts(&d, Some(&prev)) };
        assert_eq!(window(&never), Window::Now(Now::NoDeadline));
    }

    #[test]
    fn a_wait_keeps_its_start_while_the_same_rendering_runs() {
        let d = deployment("old", 1);
        let held = rendering(3, "new", Some("2026-12-06T09:30:00Z"));
        let w = window(&facts(&d, Some(&held)));
        assert_eq!(
            w,
            Window::IfBusy {
                current: "old".into(),
                since: ts("2026-12-06T09:30:00Z"),
                until: ts("2026-12-06T10:30:00Z"),
                waited: true
            }
        );
        // Another rendering than the operator applied runs: somebody wrote
        // the Deployment, which is repaired at once (rewriting the mark must
        // not restart the wait).
        let forged = deployment("forged", 1);
        assert_eq!(window(&facts(&forged, Some(&held))), Window::Now(Now::Repair));
        // Before status.rendering existed, the Deployment's mark is taken as it is.
        assert!(matches!(window(&facts(&forged, None)), Window::IfBusy { waited: false, .. }));
        // Without a mark, it is no rendering of the operator's.
        let unmarked = deployment("", 1);
        assert_eq!(window(&facts(&unmarked, None)), Window::Now(Now::Repair));
    }

    #[test]
    fn busy_agents_hold_until_the_deadline_and_failed_checks_start_no_wait() {
        let d = deployment("old", 1);
        let now = ts("2026-12-06T10:00:00Z");
        let fresh = window(&facts(&d, Some(&rendering(3, "", None))));
        assert_eq!(settle(&fresh, &busy(false), now, "x"), Settled::Apply { waited_since: None });
        assert!(
            matches!(settle(&fresh, &busy(true), now, "x"), Settled::Hold(Held { ref current, .. }) if current == "old")
        );
        assert_eq!(settle(&fresh, &Err("refused".into()), now, "x"), Settled::Apply { waited_since: None });

        let since = ts("2026-12-06T09:30:00Z");
        let waiting = window(&facts(&d, Some(&rendering(3, "new", Some("2026-12-06T09:30:00Z")))));
        assert_eq!(settle(&waiting, &busy(false), now, "x"), Settled::Apply { waited_since: Some(since) });
        let failed = |e: &str| match settle(&waiting, &Err(e.into()), now, "x") {
            Settled::Hold(h) => h.message,
            other => panic!("a failed check ended a wait: {other:?}"),
        };
        // The same words whatever the error: status is not rewritten per check.
        assert!(failed("timed out").contains("the last check failed"));
        assert_eq!(failed("timed out"), failed("answered 502"));
        let late = ts("2026-12-06T10:30:00Z");
        assert_eq!(settle(&waiting, &busy(true), late, "x"), Settled::Deadline { since });
        assert_eq!(settle(&Window::Now(Now::UserChange), &busy(true), now, "x"), Settled::Apply { waited_since: None });
    }

    #[test]
    fn held_instances_are_looked_at_again_by_their_deadline() {
        let now = ts("2026-12-06T10:00:00Z");
        let held = |until: &str| Held { current: String::new(), since: now, until: ts(until), message: String::new() };
        assert_eq!(recheck(&held("2026-12-06T10:00:20Z"), Duration::from_secs(60), now), Duration::from_secs(20));
        assert_eq!(recheck(&held("2026-12-06T11:00:00Z"), Duration::from_secs(60), now), Duration::from_secs(60));
        assert_eq!(recheck(&held("2026-12-06T09:00:00Z"), Duration::from_secs(60), now), Duration::from_secs(1));
    }
}

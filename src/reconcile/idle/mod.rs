//! Idle stop (`spec.idle`): an instance nobody uses is stopped as with
//! `spec.stopped`, without writing its spec (GitOps tools own it).
//!
//! Two halves, in two files. [`watch`] (`watch.rs`, the I/O) reads the activity report of every running
//! instance that has a timeout, once per `--activity-check-seconds`, the
//! reads spread evenly over that time and a few in flight at once; it keeps
//! the last answer per instance and wakes an instance's reconcile only when
//! the answer says it is idle. The reconcile then decides ([`decide`], pure, this file)
//! from that answer and the instance's status, which keeps the decision
//! (`status.idle.stopped`), so a restarted operator keeps it stopped. While
//! nothing changes, a check costs one request to the pod and nothing else:
//! no helm run, no write.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;

use crate::api::duration::{format as format_duration, parse as parse_duration};
use crate::api::{IdleStatus, Phase, START_REQUEST_ANNOTATION, TinycodeInstance, TinycodeInstanceSpec};

mod watch;
use crate::activity::report::Activity;
use crate::settings::IdleSettings;
pub use watch::watch;

/// The timeout in force for an instance, and where it comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Timeout {
    /// None: the instance never idles.
    pub timeout: Option<Duration>,
    /// Where it comes from, in words.
    pub origin: &'static str,
}

/// The timeout in force: spec.idle.timeout, else the default; capped at the
/// maximum; off only where the cluster-admin allows it.
pub fn timeout(spec: &TinycodeInstanceSpec, s: &IdleSettings) -> Timeout {
    let asked = spec.idle.as_ref().and_then(|i| i.timeout.as_deref()).and_then(parse_duration);
    let (wanted, origin) = match asked {
        Some(d) if d.is_zero() && s.required => {
            let fallback = s.default_timeout.or(s.max_timeout);
            let origin = if s.from_class {
                "spec.idle.timeout 0 is not allowed by the instance's class (idle.required): the class's default applies"
            } else {
                "spec.idle.timeout 0 is not allowed here (the operator's --idle-stop-required): the operator's default applies"
            };
            (fallback, origin)
        }
        Some(d) if d.is_zero() => (None, "spec.idle.timeout 0: idle stop is off"),
        Some(d) => (Some(d), "spec.idle.timeout"),
        None => match s.default_timeout {
            Some(d) if s.from_class => (Some(d), "the class's default (idle.timeout)"),
            Some(d) => (Some(d), "the operator's default (--idle-timeout)"),
            None => (None, "no spec.idle.timeout and no operator default: idle stop is off"),
        },
    };
    match (wanted, s.max_timeout) {
        (Some(w), Some(max)) if w > max => Timeout {
            timeout: Some(max),
            origin: if s.from_class {
                "capped at the maximum of the class and the operator (idle.maxTimeout, --idle-timeout-max)"
            } else {
                "capped at the operator's maximum (--idle-timeout-max)"
            },
        },
        _ => Timeout { timeout: wanted, origin },
    }
}

/// The last activity check of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observation {
    /// When it was read.
    pub at: Timestamp,
    pub result: Result<Activity, String>,
}

/// What a check says about an instance with a timeout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Used within the timeout.
    Active,
    /// An agent task is running: never idle.
    Busy,
    /// Unused since this time, longer than the timeout.
    Idle { since: Timestamp },
    /// No check answered: never stopped on a guess.
    Unknown(String),
}

impl Verdict {
    pub fn as_str(&self) -> &'static str {
        match self {
            Verdict::Active => "active",
            Verdict::Busy => "busy",
            Verdict::Idle { .. } => "idle",
            Verdict::Unknown(_) => "unknown",
        }
    }
}

/// The verdict of `obs` for `timeout` at `now`; `floor` is the last time the
/// operator itself counts as activity (the last start).
pub fn verdict(obs: Option<&Observation>, timeout: Duration, floor: Option<Timestamp>, now: Timestamp) -> Verdict {
    let Some(obs) = obs else {
        return Verdict::Unknown("not checked yet".into());
    };
    let activity = match &obs.result {
        Ok(a) => a,
        Err(e) => return Verdict::Unknown(e.clone()),
    };
    if activity.busy == Some(true) {
        return Verdict::Busy;
    }
    // The floor is the operator's own word (status), yet never later than now.
    let last = floor.map_or(activity.last_activity, |f| f.min(now).max(activity.last_activity));
    let limit = SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX);
    if now.duration_since(last) >= limit { Verdict::Idle { since: last } } else { Verdict::Active }
}

/// What changes now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// Stopped for idleness; unused since then.
    Stopped { since: Timestamp },
    /// Started again (the start annotation, or the user took over with spec.stopped).
    Started,
}

/// Idle stop, decided for one reconcile.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IdleState {
    /// The workloads are (to be) stopped for idleness.
    pub stopped: bool,
    pub transition: Option<Transition>,
    /// status.idle (None: no timeout and never stopped).
    pub status: Option<IdleStatus>,
    /// status.lastActivityTime.
    pub last_activity_time: Option<String>,
}

/// Decides idle stop (pure): `obs` is the last activity check, `cli` the
/// cluster's CLI (named in the start command).
pub fn decide(
    inst: &TinycodeInstance,
    settings: &IdleSettings,
    obs: Option<&Observation>,
    now: Timestamp,
    cli: &str,
) -> IdleState {
    let status = inst.status.clone().unwrap_or_default();
    let prev = status.idle.clone().unwrap_or_default();
    let t = timeout(&inst.spec, settings);
    let start = inst.annotations().get(START_REQUEST_ANNOTATION).cloned();
    let start_unhandled = start.is_some() && start != prev.last_handled_start_at;
    let handled = start.or(prev.last_handled_start_at.clone());
    let floor: Option<Timestamp> = status.last_activity_time.as_deref().and_then(|t| t.parse().ok());
    let mut state = IdleState { last_activity_time: status.last_activity_time.clone(), ..Default::default() };
    let stamp = |t: Timestamp| Timestamp::from_second(t.as_second()).unwrap_or(t).to_string();
    let (mut judged_by, mut message) = (prev.judged_by.clone(), prev.message.clone());
    if prev.stopped {
        if inst.spec.stopped || t.timeout.is_none() || start_unhandled {
            state.transition = (!inst.spec.stopped).then_some(Transition::Started);
            // Starting counts as activity: the next check starts from here.
            state.last_activity_time = Some(stamp(now));
            message = String::new();
        } else {
            state.stopped = true;
        }
    } else if let (false, Some(limit)) = (inst.spec.stopped, t.timeout) {
        let v = verdict(obs, limit, floor, now);
        let base = format!("stops after {} without activity ({})", format_duration(limit), t.origin);
        let timeout_kept = prev.timeout == format_duration(limit);
        (judged_by, message) = match (&v, obs.map(|o| &o.result)) {
            // Not checked by this process yet (it just started, or the
            // instance just started running): what status says stands, so a
            // restart writes nothing.
            (_, None) if timeout_kept && !prev.message.is_empty() => (judged_by, message),
            (_, None) => (judged_by, base),
            (Verdict::Unknown(why), _) => (
                "unknown".into(),
                format!("{base}; activity unknown, so it is not stopped: {}", crate::reconcile::truncate(why, 300)),
            ),
            (_, Some(Ok(a))) => (a.judged_by.as_str().into(), base),
            (_, Some(Err(_))) => (judged_by, base),
        };
        if let Verdict::Idle { since } = v {
            state.stopped = true;
            state.transition = Some(Transition::Stopped { since });
            state.last_activity_time = Some(stamp(since));
            let name = inst.name_any();
            message = format!(
                "stopped for idleness: no activity since {} ({} timeout, {}); start it again with `{cli} annotate tinycodeinstance/{name} {START_REQUEST_ANNOTATION}=\"$(date +%s)\" --overwrite`",
                stamp(since),
                format_duration(limit),
                t.origin
            );
        }
    } else {
        message = String::new();
    }
    if !state.stopped && t.timeout.is_none() {
        judged_by.clear();
        message = t.origin.to_string();
    }
    let keep = t.timeout.is_some() || state.stopped || status.idle.is_some() || handled.is_some();
    state.status = keep.then(|| IdleStatus {
        timeout: t.timeout.map(format_duration).unwrap_or_else(|| "off".into()),
        stopped: state.stopped,
        judged_by,
        message,
        last_handled_start_at: handled,
        required: settings.required && t.timeout.is_some(),
    });
    state
}

/// Idle stop while the spec is not applied (suspended, or refused for
/// `why`): a required timeout still holds for the pods that run, else a
/// tenant keeps them forever by suspending or breaking the spec. Nothing
/// starts here (no spec is applied): a stop holds until the spec is valid
/// and the instance is started. None: status.idle stays as it is.
pub fn decide_refused(
    inst: &TinycodeInstance,
    settings: &IdleSettings,
    obs: Option<&Observation>,
    now: Timestamp,
    running: bool,
    why: &str,
) -> Option<IdleState> {
    let t = timeout(&inst.spec, settings);
    let limit = t.timeout.filter(|_| settings.required)?;
    let status = inst.status.clone().unwrap_or_default();
    let prev = status.idle.clone().unwrap_or_default();
    let stamp = |t: Timestamp| Timestamp::from_second(t.as_second()).unwrap_or(t).to_string();
    let mut state = IdleState { last_activity_time: status.last_activity_time.clone(), ..Default::default() };
    let base = format!(
        "stops after {} without activity ({}), required whatever the instance's state",
        format_duration(limit),
        t.origin
    );
    let mut idle = IdleStatus {
        timeout: format_duration(limit),
        required: true,
        last_handled_start_at: prev.last_handled_start_at.clone(),
        judged_by: prev.judged_by.clone(),
        message: base.clone(),
        ..Default::default()
    };
    if prev.stopped {
        idle.stopped = true;
        idle.message = prev.message.clone();
        state.stopped = true;
    } else if running {
        let floor: Option<Timestamp> = status.last_activity_time.as_deref().and_then(|t| t.parse().ok());
        match verdict(obs, limit, floor, now) {
            Verdict::Idle { since } => {
                idle.stopped = true;
                state.stopped = true;
                state.transition = Some(Transition::Stopped { since });
                state.last_activity_time = Some(stamp(since));
                idle.message = format!(
                    "stopped for idleness while the spec is not applied ({why}): no activity since {} ({} timeout, {}); it starts again once the spec is applied and the instance is started",
                    stamp(since),
                    format_duration(limit),
                    t.origin
                );
            }
            Verdict::Unknown(e) if obs.is_some() => {
                idle.judged_by = "unknown".into();
                idle.message =
                    format!("{base}; activity unknown, so it is not stopped: {}", crate::reconcile::truncate(&e, 300));
            }
            _ => {
                if let Some(Ok(a)) = obs.map(|o| &o.result) {
                    idle.judged_by = a.judged_by.as_str().into();
                }
            }
        }
    }
    state.status = Some(idle);
    Some(state)
}

/// The last check of every instance being watched.
pub type Observations = Mutex<HashMap<ObjectRef<TinycodeInstance>, Observation>>;

/// Whether `inst` is checked: running, with a timeout, not stopped,
/// suspended or going; where idle stop is required, in any phase but
/// Stopped (suspended, refused or deploying pods may run all the same).
pub fn watched(inst: &TinycodeInstance, settings: &IdleSettings) -> bool {
    let status = inst.status.as_ref();
    let phase = status.and_then(|s| s.phase);
    let idle = status.and_then(|s| s.idle.as_ref());
    let required = settings.required || idle.is_some_and(|i| i.required);
    let checked_phase = if required {
        !matches!(phase, Some(Phase::Stopped) | Some(Phase::Terminating) | None)
    } else {
        !inst.spec.suspend && !inst.spec.stopped && phase == Some(Phase::Running)
    };
    inst.metadata.deletion_timestamp.is_none()
        && checked_phase
        && !idle.is_some_and(|i| i.stopped)
        && in_force(inst, settings).is_some()
}

/// The timeout the last reconcile put in force (status.idle.timeout: it
/// follows the instance's class, which this loop does not read), else the
/// spec's under the operator's settings.
pub fn in_force(inst: &TinycodeInstance, settings: &IdleSettings) -> Option<Duration> {
    match inst.status.as_ref().and_then(|s| s.idle.as_ref()).map(|i| i.timeout.as_str()) {
        Some("off") => None,
        Some(t) if parse_duration(t).is_some() => parse_duration(t).filter(|d| !d.is_zero()),
        _ => timeout(&inst.spec, settings).timeout,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::activity::report::JudgedBy;

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn inst(spec: serde_json::Value, status: serde_json::Value, start: Option<&str>) -> TinycodeInstance {
        let mut i: TinycodeInstance = serde_json::from_value(serde_json::json!({
            "apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
            "metadata": {"name": "dev", "namespace": "team"},
            "spec": spec, "status": status,
        }))
        .unwrap();
        if let Some(v) = start {
            i.metadata.annotations = Some([(START_REQUEST_ANNOTATION.to_string(), v.to_string())].into());
        }
        i
    }

    fn obs(last: &str, busy: Option<bool>) -> Observation {
        Observation {
            at: ts("2026-12-04T12:00:00Z"),
            result: Ok(Activity { last_activity: ts(last), busy, judged_by: JudgedBy::Requests }),
        }
    }

    #[test]
    fn durations_parse_as_the_schema_writes_them() {
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("90m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("2h5s"), Some(Duration::from_secs(7205)));
        for bad in ["", "h", "1", "30m1h", "1h1h", "1d", "-1h", "1.5h", " 1h"] {
            assert_eq!(parse_duration(bad), None, "{bad:?}");
        }
        assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
        assert_eq!(format_duration(Duration::from_secs(7200)), "2h");
        assert_eq!(format_duration(Duration::from_secs(45)), "45s");
        // The schema's pattern and the parser agree.
        let re = regex::Regex::new(crate::api::DURATION_PATTERN).unwrap();
        for s in ["0", "90m", "1h30m", "2h5s", "30m1h", "1d", ""] {
            assert_eq!(re.is_match(s) && !s.is_empty(), parse_duration(s).is_some(), "{s:?}");
        }
    }

    #[test]
    fn the_timeout_in_force_follows_the_cluster_admins_default_maximum_and_rule() {
        let spec = |t: Option<&str>| -> TinycodeInstanceSpec {
            serde_json::from_value(match t {
                Some(t) => serde_json::json!({"idle": {"timeout": t}}),
                None => serde_json::json!({}),
            })
            .unwrap()
        };
        let h = |n: u64| Some(Duration::from_secs(n * 3600));
        let open = IdleSettings::default();
        assert_eq!(timeout(&spec(None), &open).timeout, None);
        assert_eq!(timeout(&spec(Some("2h")), &open).timeout, h(2));
        let admin = IdleSettings { default_timeout: h(8), max_timeout: h(12), ..Default::default() };
        assert_eq!(timeout(&spec(None), &admin).timeout, h(8));
        let capped = timeout(&spec(Some("48h")), &admin);
        assert_eq!(capped.timeout, h(12));
        assert!(capped.origin.contains("--idle-timeout-max"));
        assert_eq!(timeout(&spec(Some("0")), &admin).timeout, None, "off is allowed");
        let required = IdleSettings { required: true, ..admin.clone() };
        assert_eq!(timeout(&spec(Some("0")), &required).timeout, h(8), "off is refused: the default");
        let only_max = IdleSettings { required: true, default_timeout: None, ..admin };
        assert_eq!(timeout(&spec(Some("0")), &only_max).timeout, h(12), "no default: the maximum");
    }

    #[test]
    fn verdicts() {
        let now = ts("2026-12-04T12:00:00Z");
        let hour = Duration::from_secs(3600);
        assert_eq!(verdict(None, hour, None, now), Verdict::Unknown("not checked yet".into()));
        let failed = Observation { at: now, result: Err("connection refused".into()) };
        assert!(matches!(verdict(Some(&failed), hour, None, now), Verdict::Unknown(_)));
        assert_eq!(verdict(Some(&obs("2026-12-04T11:30:00Z", None)), hour, None, now), Verdict::Active);
        assert_eq!(
            verdict(Some(&obs("2026-12-04T10:00:00Z", Some(false))), hour, None, now),
            Verdict::Idle { since: ts("2026-12-04T10:00:00Z") }
        );
        // A busy agent is never idle, however old the last request.
        assert_eq!(verdict(Some(&obs("2026-12-01T10:00:00Z", Some(true))), hour, None, now), Verdict::Busy);
        // A start counts as activity: an old report does not stop it again at once.
        assert_eq!(
            verdict(Some(&obs("2026-12-04T10:00:00Z", None)), hour, Some(ts("2026-12-04T11:59:00Z")), now),
            Verdict::Active
        );
    }

    #[test]
    fn an_idle_instance_is_stopped_without_its_spec_and_started_by_the_annotation() {
        let settings = IdleSettings::default();
        let now = ts("2026-12-04T12:00:00Z");
        let running = serde_json::json!({"phase": "Running"});
        let idle = obs("2026-12-04T10:00:00Z", Some(false));
        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}}), running.clone(), None);
        let d = decide(&i, &settings, Some(&idle), now, "oc");
        assert!(d.stopped);
        assert_eq!(d.transition, Some(Transition::Stopped { since: ts("2026-12-04T10:00:00Z") }));
        assert_eq!(d.last_activity_time.as_deref(), Some("2026-12-04T10:00:00Z"));
        let st = d.status.clone().unwrap();
        assert_eq!((st.timeout.as_str(), st.stopped, st.judged_by.as_str()), ("1h", true, "requests"));
        assert!(
            st.message.contains("oc annotate tinycodeinstance/dev tinycode.dev/start-requested-at="),
            "{}",
            st.message
        );

        // It stays stopped, whatever the checks say, until started.
        let stopped_status =
            serde_json::json!({"phase": "Stopped", "idle": st, "lastActivityTime": "2026-12-04T10:00:00Z"});
        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}}), stopped_status.clone(), None);
        let d = decide(&i, &settings, Some(&obs("2026-12-04T11:59:00Z", None)), now, "oc");
        assert!(d.stopped && d.transition.is_none());

        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}}), stopped_status.clone(), Some("s1"));
        let d = decide(&i, &settings, Some(&idle), now, "oc");
        assert!(!d.stopped);
        assert_eq!(d.transition, Some(Transition::Started));
        assert_eq!(d.status.as_ref().unwrap().last_handled_start_at.as_deref(), Some("s1"));
        assert_eq!(d.last_activity_time.as_deref(), Some("2026-12-04T12:00:00Z"));

        // spec.stopped takes over: the idle stop is forgotten, no Started.
        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}, "stopped": true}), stopped_status, None);
        let d = decide(&i, &settings, Some(&idle), now, "oc");
        assert!(!d.stopped && d.transition.is_none());
    }

    #[test]
    fn busy_unknown_and_untimed_instances_keep_running() {
        let settings = IdleSettings::default();
        let now = ts("2026-12-04T12:00:00Z");
        let running = serde_json::json!({"phase": "Running"});
        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}}), running.clone(), None);
        let busy = decide(&i, &settings, Some(&obs("2026-12-01T00:00:00Z", Some(true))), now, "oc");
        assert!(!busy.stopped && busy.transition.is_none());
        let failed = Observation { at: now, result: Err("connection refused".into()) };
        let unknown = decide(&i, &settings, Some(&failed), now, "oc");
        assert!(!unknown.stopped);
        let st = unknown.status.unwrap();
        assert_eq!(st.judged_by, "unknown");
        assert!(st.message.contains("connection refused"), "{}", st.message);
        // Not checked yet (a restarted operator): status stands as it was.
        let checked =
            serde_json::json!({"phase": "Running", "idle": {"timeout": "1h", "judgedBy": "requests", "message": "m"}});
        let i = inst(serde_json::json!({"idle": {"timeout": "1h"}}), checked.clone(), None);
        let kept: IdleStatus = serde_json::from_value(checked["idle"].clone()).unwrap();
        assert_eq!(decide(&i, &settings, None, now, "oc").status, Some(kept));
        let untimed = inst(serde_json::json!({}), running, None);
        let d = decide(&untimed, &settings, Some(&obs("2026-12-01T00:00:00Z", None)), now, "oc");
        assert!(!d.stopped);
        assert_eq!(d.status, None, "no timeout, never stopped: no status.idle");
    }

    #[test]
    fn only_running_instances_with_a_timeout_are_watched() {
        let settings = IdleSettings::default();
        let running = serde_json::json!({"phase": "Running"});
        assert!(watched(&inst(serde_json::json!({"idle": {"timeout": "1h"}}), running.clone(), None), &settings));
        assert!(!watched(&inst(serde_json::json!({}), running.clone(), None), &settings));
        // A class's timeout is known from status (the loop does not read classes).
        let class_timed = serde_json::json!({"phase": "Running", "idle": {"timeout": "30m"}});
        let i = inst(serde_json::json!({}), class_timed, None);
        assert!(watched(&i, &settings));
        assert_eq!(in_force(&i, &settings), Some(Duration::from_secs(1800)));
        let off = serde_json::json!({"phase": "Running", "idle": {"timeout": "off"}});
        assert!(!watched(&inst(serde_json::json!({"idle": {"timeout": "1h"}}), off, None), &settings));
        assert!(!watched(
            &inst(serde_json::json!({"idle": {"timeout": "1h"}, "stopped": true}), running, None),
            &settings
        ));
        let deploying = serde_json::json!({"phase": "Deploying"});
        assert!(!watched(&inst(serde_json::json!({"idle": {"timeout": "1h"}}), deploying, None), &settings));
        let idle_stopped = serde_json::json!({"phase": "Running", "idle": {"timeout": "1h", "stopped": true}});
        assert!(!watched(&inst(serde_json::json!({"idle": {"timeout": "1h"}}), idle_stopped, None), &settings));
    }

    #[test]
    fn required_idle_stop_holds_while_suspended_or_refused() {
        let now = ts("2026-12-04T12:00:00Z");
        let idle = obs("2026-12-04T10:00:00Z", Some(false));
        let required =
            IdleSettings { required: true, default_timeout: Some(Duration::from_secs(3600)), ..Default::default() };
        let suspended = inst(serde_json::json!({"suspend": true}), serde_json::json!({"phase": "Suspended"}), None);
        // Not required: the operator keeps its hands off a suspended instance.
        let open = IdleSettings { default_timeout: Some(Duration::from_secs(3600)), ..Default::default() };
        assert_eq!(decide_refused(&suspended, &open, Some(&idle), now, true, "suspended"), None);
        // Required and idle: stopped, and status says why while the spec is not applied.
        let d = decide_refused(&suspended, &required, Some(&idle), now, true, "spec.suspend is true").unwrap();
        assert!(d.stopped);
        assert_eq!(d.transition, Some(Transition::Stopped { since: ts("2026-12-04T10:00:00Z") }));
        let st = d.status.unwrap();
        assert!(st.stopped && st.required && st.timeout == "1h");
        assert!(st.message.contains("while the spec is not applied (spec.suspend is true)"), "{}", st.message);
        // Turning idle stop off in the spec changes nothing under the rule.
        let off = inst(
            serde_json::json!({"suspend": true, "idle": {"timeout": "0"}}),
            serde_json::json!({"phase": "Failed"}),
            None,
        );
        assert!(decide_refused(&off, &required, Some(&idle), now, true, "ExceedsPolicy").unwrap().stopped);
        // Active, unknown or not running: not stopped, but watched from now on.
        let active = obs("2026-12-04T11:30:00Z", None);
        let d = decide_refused(&suspended, &required, Some(&active), now, true, "x").unwrap();
        assert!(!d.stopped && d.status.as_ref().unwrap().required);
        let d = decide_refused(&suspended, &required, Some(&idle), now, false, "x").unwrap();
        assert!(!d.stopped && d.transition.is_none(), "nothing runs: nothing to stop");
        // A stop holds: no start while the spec is not applied.
        let stopped = serde_json::json!({"phase": "Failed", "idle": {"timeout": "1h", "stopped": true, "required": true, "message": "m"}});
        let i = inst(serde_json::json!({}), stopped, Some("s1"));
        let d = decide_refused(&i, &required, Some(&active), now, false, "x").unwrap();
        assert!(d.stopped && d.transition.is_none());
        assert_eq!(d.status.unwrap().message, "m");
    }

    #[test]
    fn where_idle_stop_is_required_every_phase_with_pods_is_watched() {
        let open = IdleSettings::default();
        let status = |phase: &str| serde_json::json!({"phase": phase, "idle": {"timeout": "1h", "required": true}});
        for phase in ["Running", "Suspended", "Failed", "Deploying"] {
            assert!(watched(&inst(serde_json::json!({"suspend": true}), status(phase), None), &open), "{phase}");
        }
        assert!(!watched(&inst(serde_json::json!({}), status("Stopped"), None), &open));
        // Not required: a suspended or failed instance is left alone.
        let free = |phase: &str| serde_json::json!({"phase": phase, "idle": {"timeout": "1h"}});
        assert!(!watched(&inst(serde_json::json!({"suspend": true}), free("Suspended"), None), &open));
        assert!(!watched(&inst(serde_json::json!({}), free("Failed"), None), &open));
        // The operator's own rule needs no status.
        let required = IdleSettings { required: true, ..Default::default() };
        assert!(watched(&inst(serde_json::json!({"suspend": true}), free("Suspended"), None), &required));
    }
}

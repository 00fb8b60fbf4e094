//! Prometheus metrics (`tinycode_operator_*`): what a cluster-admin's
//! monitoring needs to see the operator working or failing.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

use crate::api::Phase;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// `success` or the error reason (InvalidSpec, HelmFailed, ...).
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HelmLabels {
    pub action: String,
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PlatformLabels {
    pub platform: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VersionLabels {
    pub version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    pub reason: String,
}

fn duration_histogram() -> Histogram {
    // 10 ms .. ~330 s: past helm's default timeout (120 s) and the longest a
    // reconcile waits, so a run that times out lands in a bucket of its own
    // and not only in +Inf.
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// All metrics, registered once.
pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabels, Counter>,
    reconcile_duration: Histogram,
    helm_invocations: Family<HelmLabels, Counter>,
    helm_duration: Family<ActionLabels, Histogram, fn() -> Histogram>,
    instances: Family<PhaseLabels, Gauge>,
    last_error: Family<ReasonLabels, Gauge>,
    platform: Family<PlatformLabels, Gauge>,
    idle_stops: Counter,
    activity_checks: Family<ResultLabels, Counter>,
    phases: Mutex<HashMap<String, Phase>>,
    rollouts_waiting: Gauge,
    waiting: Mutex<std::collections::HashSet<String>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::with_prefix("tinycode_operator");
        let reconciles = Family::<ResultLabels, Counter>::default();
        registry.register("reconciles", "Reconciles by result (success or the error reason)", reconciles.clone());
        let reconcile_duration = duration_histogram();
        registry.register_with_unit(
            "reconcile_duration",
            "Time one reconcile took",
            Unit::Seconds,
            reconcile_duration.clone(),
        );
        let helm_invocations = Family::<HelmLabels, Counter>::default();
        registry.register("helm_invocations", "Helm runs by action and result", helm_invocations.clone());
        let helm_duration =
            Family::<ActionLabels, Histogram, fn() -> Histogram>::new_with_constructor(duration_histogram);
        registry.register_with_unit("helm_duration", "Time one helm run took", Unit::Seconds, helm_duration.clone());
        let instances = Family::<PhaseLabels, Gauge>::default();
        registry.register("instances", "TinycodeInstances by phase, as last reconciled", instances.clone());
        let last_error = Family::<ReasonLabels, Gauge>::default();
        registry.register_with_unit(
            "last_error_timestamp",
            "Unix time of the last reconcile error, by reason",
            Unit::Seconds,
            last_error.clone(),
        );
        let platform = Family::<PlatformLabels, Gauge>::default();
        registry.register(
            "platform_info",
            "The platform the operator detected (1 for the one in use)",
            platform.clone(),
        );
        let build = Family::<VersionLabels, Gauge>::default();
        registry.register("build_info", "The running operator's version (always 1)", build.clone());
        build.get_or_create(&VersionLabels { version: crate::VERSION.into() }).set(1);
        let idle_stops = Counter::default();
        registry.register("idle_stops", "Instances stopped because nobody used them", idle_stops.clone());
        let activity_checks = Family::<ResultLabels, Counter>::default();
        registry.register(
            "activity_checks",
            "Activity checks of instances with an idle timeout, by result (active, busy, idle, unknown)",
            activity_checks.clone(),
        );
        let rollouts_waiting = Gauge::default();
        registry.register(
            "rollouts_waiting",
            "Instances whose new rendering waits for their busy agent",
            rollouts_waiting.clone(),
        );
        Self {
            rollouts_waiting,
            waiting: Mutex::default(),
            idle_stops,
            activity_checks,
            registry,
            reconciles,
            reconcile_duration,
            helm_invocations,
            helm_duration,
            instances,
            last_error,
            platform,
            phases: Mutex::default(),
        }
    }

    pub fn reconciled(&self, result: &str, took: Duration) {
        self.reconciles.get_or_create(&ResultLabels { result: result.into() }).inc();
        self.reconcile_duration.observe(took.as_secs_f64());
        if result != "success" {
            let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
            self.last_error.get_or_create(&ReasonLabels { reason: result.into() }).set(now as i64);
        }
    }

    pub fn helm(&self, action: &str, ok: bool, took: Duration) {
        let result = if ok { "success" } else { "failure" };
        self.helm_invocations.get_or_create(&HelmLabels { action: action.into(), result: result.into() }).inc();
        self.helm_duration.get_or_create(&ActionLabels { action: action.into() }).observe(took.as_secs_f64());
    }

    /// Records an instance's phase (None once it is gone) and refreshes the per-phase gauge.
    pub fn phase(&self, key: &str, phase: Option<Phase>) {
        let mut phases = self.phases.lock().expect("lock");
        if phases.is_empty() {
            // Every phase is reported (at 0 if none) once the leader reconciles.
            for p in Phase::ALL.iter().copied() {
                self.phase_gauge(p);
            }
        }
        let before = match phase {
            Some(p) => phases.insert(key.to_string(), p),
            None => phases.remove(key),
        };
        // Counted as they move (the gauges change under the same lock), not
        // recounted over every instance on each reconcile: at 5000 instances
        // the recount was 1% of the operator's CPU.
        if before != phase {
            if let Some(p) = before {
                self.phase_gauge(p).dec();
            }
            if let Some(p) = phase {
                self.phase_gauge(p).inc();
            }
        }
    }

    fn phase_gauge(&self, phase: Phase) -> Gauge {
        self.instances.get_or_create(&PhaseLabels { phase: phase.as_str().into() }).clone()
    }

    /// Records whether an instance's new rendering waits for its agent (false
    /// once it is gone).
    pub fn rollout_waits(&self, key: &str, waits: bool) {
        let mut waiting = self.waiting.lock().expect("lock");
        if waits {
            waiting.insert(key.to_string());
        } else {
            waiting.remove(key);
        }
        self.rollouts_waiting.set(waiting.len() as i64);
    }

    /// An instance was stopped for idleness.
    pub fn idle_stop(&self) {
        self.idle_stops.inc();
    }

    /// An activity check answered `result` (active, busy, idle or unknown).
    pub fn activity_check(&self, result: &str) {
        self.activity_checks.get_or_create(&ResultLabels { result: result.into() }).inc();
    }

    /// Records the platform in use (OpenShift or Kubernetes).
    pub fn platform(&self, name: &str) {
        self.platform.clear();
        self.platform.get_or_create(&PlatformLabels { platform: name.into() }).set(1);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding to a String cannot fail");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value(text: &str, series: &str) -> Option<f64> {
        text.lines().find_map(|l| l.strip_prefix(series).and_then(|rest| rest.trim().parse().ok()))
    }

    /// docs/monitoring.md's table lists exactly the metrics /metrics serves.
    #[test]
    fn the_monitoring_guide_lists_every_metric() {
        let m = Metrics::new();
        m.reconciled("success", Duration::from_millis(1));
        m.reconciled("HelmFailed", Duration::from_millis(1));
        m.helm("upgrade", true, Duration::from_millis(1));
        m.phase("ns/a", Some(Phase::Running));
        m.platform("openshift");
        m.idle_stop();
        m.activity_check("idle");
        let text = m.encode();
        let served: std::collections::BTreeSet<String> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .map(|l| {
                let (name, kind) = l.split_once(' ').unwrap();
                match kind {
                    "counter" => format!("{name}_total"),
                    _ => name.to_string(),
                }
            })
            .collect();
        let guide = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/monitoring.md")).unwrap();
        let listed: std::collections::BTreeSet<String> = guide
            .lines()
            .filter_map(|l| l.strip_prefix("| `tinycode_operator_"))
            .filter_map(|l| l.split_once('`'))
            .map(|(name, _)| format!("tinycode_operator_{name}"))
            .collect();
        assert_eq!(served, listed, "docs/monitoring.md's metric table against what /metrics serves");
        assert_eq!(value(&text, &format!("tinycode_operator_build_info{{version=\"{}\"}}", crate::VERSION)), Some(1.0));
        let top = text.lines().filter(|l| l.starts_with("tinycode_operator_helm_duration_seconds_bucket")).count();
        assert!(top >= 17, "buckets past helm's 120 s timeout: {top}");
        assert!(text.contains("le=\"327.68\""), "a bucket past 120 s");
    }

    #[test]
    fn phase_counts_follow_every_move() {
        let m = Metrics::new();
        let count = |m: &Metrics, p: Phase| {
            value(&m.encode(), &format!("tinycode_operator_instances{{phase=\"{}\"}}", p.as_str()))
        };
        // Nothing before the first reconcile (a replica that is not the
        // leader reports no instances), every phase after it.
        assert_eq!(count(&m, Phase::Running), None);
        m.phase("ns/z", Some(Phase::Pending));
        m.phase("ns/z", None);
        for p in Phase::ALL.iter().copied() {
            assert_eq!(count(&m, p), Some(0.0), "{p:?}");
        }
        // Against a recount of a model, through repeats, moves, removals of
        // instances never seen and instances seen again.
        let mut model: HashMap<String, Phase> = HashMap::new();
        let steps: Vec<(&str, Option<Phase>)> = vec![
            ("ns/a", Some(Phase::Pending)),
            ("ns/a", Some(Phase::Pending)),
            ("ns/b", Some(Phase::Deploying)),
            ("ns/a", Some(Phase::Running)),
            ("ns/c", None),
            ("ns/b", Some(Phase::Failed)),
            ("ns/b", None),
            ("ns/b", None),
            ("ns/b", Some(Phase::Running)),
            ("ns/c", Some(Phase::Stopped)),
            ("ns/a", Some(Phase::Terminating)),
            ("ns/a", None),
        ];
        for (key, phase) in steps {
            m.phase(key, phase);
            match phase {
                Some(p) => model.insert(key.to_string(), p),
                None => model.remove(key),
            };
            for p in Phase::ALL.iter().copied() {
                let want = model.values().filter(|x| **x == p).count() as f64;
                assert_eq!(count(&m, p), Some(want), "{p:?} after {key} -> {phase:?}");
            }
        }
    }

    #[test]
    fn counters_and_gauges_follow_conventions() {
        let m = Metrics::new();
        m.reconciled("success", Duration::from_millis(20));
        m.reconciled("success", Duration::from_millis(30));
        m.reconciled("HelmFailed", Duration::from_millis(5));
        m.helm("upgrade", true, Duration::from_millis(400));
        m.phase("ns/a", Some(Phase::Running));
        m.phase("ns/b", Some(Phase::Failed));
        m.phase("ns/b", Some(Phase::Running));
        let text = m.encode();
        assert_eq!(value(&text, "tinycode_operator_reconciles_total{result=\"success\"}"), Some(2.0));
        assert_eq!(value(&text, "tinycode_operator_reconciles_total{result=\"HelmFailed\"}"), Some(1.0));
        assert_eq!(value(&text, "tinycode_operator_reconcile_duration_seconds_count"), Some(3.0));
        assert_eq!(
            value(&text, "tinycode_operator_helm_invocations_total{action=\"upgrade\",result=\"success\"}"),
            Some(1.0)
        );
        assert!(text.contains("tinycode_operator_helm_duration_seconds_bucket{le="));
        assert_eq!(value(&text, "tinycode_operator_instances{phase=\"Running\"}"), Some(2.0));
        assert_eq!(value(&text, "tinycode_operator_instances{phase=\"Failed\"}"), Some(0.0));
        assert!(value(&text, "tinycode_operator_last_error_timestamp_seconds{reason=\"HelmFailed\"}").unwrap() > 1.7e9);
        m.phase("ns/a", None);
        assert_eq!(value(&m.encode(), "tinycode_operator_instances{phase=\"Running\"}"), Some(1.0));
    }
}

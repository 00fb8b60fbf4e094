//! Who used the instance (README, "Who used an instance"): in the sign-in
//! modes the gate writes one JSON line to its standard output for each
//! access decision it makes (a review: at most one per user and group set
//! per `--cache-seconds`, as decisions are cached, so a busy user costs a
//! line per half minute, not one per request) and for each start of the
//! idle-stopped instance it asks the relay for, naming the user who opened
//! it. A line holds the time, the instance, the user and groups as the
//! sign-in proxy named them, and the outcome: never a token, a cookie, a
//! password or anything of a request's content. The platform's log
//! collector ships them with the container's other output; the `audit` field
//! tells them from log lines. Password mode knows no users and writes none.

use std::io::Write;
use std::sync::Arc;
#[cfg(test)]
use std::sync::Mutex;

use k8s_openapi::jiff::Timestamp;
use serde::{Deserialize, Serialize};

use super::identity::Subject;
use super::review::Target;
use crate::ops::decisions::Decision;
use crate::render::signin::AgentState;

/// The `audit` field of every line.
pub const AUDIT: &str = "tinycode.dev/access";

/// One line.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Line {
    pub audit: String,
    /// RFC 3339, to the second.
    pub time: String,
    pub namespace: String,
    pub instance: String,
    /// `access` (a decision was made) or `start` (the user's request started
    /// the idle-stopped instance).
    pub event: String,
    /// As the sign-in proxy named them (openshift: its user header; no groups).
    pub user: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub groups: Vec<String>,
    /// access: `allowed`, `forbidden` or `unauthenticated`; start: what the
    /// relay answered, `starting` or `stopped` (spec.stopped, nothing started).
    pub outcome: String,
}

/// Where the lines go.
enum Sink {
    Stdout,
    /// Tests read the lines back.
    #[cfg(test)]
    Buffer(Arc<Mutex<Vec<u8>>>),
}

pub struct Audit {
    target: Target,
    sink: Sink,
    counts: Counts,
}

/// The same decisions as bounded counters (`tinycode_gate_*`): by event and
/// outcome alone, never by user, so a thousand users make no more series.
pub struct Counts {
    registry: prometheus_client::registry::Registry,
    events: prometheus_client::metrics::family::Family<EventLabels, prometheus_client::metrics::counter::Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct EventLabels {
    namespace: String,
    instance: String,
    /// `access` or `start`.
    event: String,
    /// As the audit line's `outcome`.
    outcome: String,
}

impl Counts {
    fn new() -> Self {
        let mut registry = prometheus_client::registry::Registry::with_prefix("tinycode_gate");
        let events = prometheus_client::metrics::family::Family::default();
        registry.register(
            "events",
            "Access decisions and starts the gate made, by outcome (its audit lines, counted)",
            events.clone(),
        );
        Counts { registry, events }
    }
}

impl Audit {
    /// Lines on standard output.
    pub fn stdout(target: Target) -> Self {
        Audit { target, sink: Sink::Stdout, counts: Counts::new() }
    }

    /// Lines into `buffer` (tests).
    #[cfg(test)]
    pub fn buffer(target: Target, buffer: Arc<Mutex<Vec<u8>>>) -> Self {
        Audit { target, sink: Sink::Buffer(buffer), counts: Counts::new() }
    }

    /// The counters in the text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.counts.registry)
            .expect("encoding to a String cannot fail");
        out
    }

    /// A review of `subject` decided `decision`.
    pub fn access(&self, subject: &Subject, decision: Decision) {
        let outcome = match decision {
            Decision::Allowed => "allowed",
            Decision::Forbidden => "forbidden",
            Decision::Unauthenticated => "unauthenticated",
        };
        self.write("access", subject, outcome);
    }

    /// `subject`'s request asked the relay to start the instance, which answered `state`.
    pub fn start(&self, subject: &Subject, state: AgentState) {
        let outcome = match state {
            AgentState::Stopped => "stopped",
            AgentState::Runs | AgentState::Idle => "starting",
        };
        self.write("start", subject, outcome);
    }

    fn write(&self, event: &str, subject: &Subject, outcome: &str) {
        let labels = EventLabels {
            namespace: self.target.namespace.clone(),
            instance: self.target.instance.clone(),
            event: event.into(),
            outcome: outcome.into(),
        };
        self.counts.events.get_or_create(&labels).inc();
        let (user, groups) = match subject {
            Subject::User { name, groups } => (name.clone(), groups.clone()),
            // The token itself is never written.
            Subject::Token { name, .. } => (name.clone().unwrap_or_else(|| "(unnamed)".into()), Vec::new()),
        };
        let now = Timestamp::now();
        let line = Line {
            audit: AUDIT.into(),
            time: Timestamp::from_second(now.as_second()).unwrap_or(now).to_string(),
            namespace: self.target.namespace.clone(),
            instance: self.target.instance.clone(),
            event: event.into(),
            user,
            groups,
            outcome: outcome.into(),
        };
        let Ok(mut bytes) = serde_json::to_vec(&line) else { return };
        bytes.push(b'\n');
        // One write of the whole line under the lock: lines never interleave
        // with each other or with log lines. A closed output loses the line,
        // never the request.
        match &self.sink {
            Sink::Stdout => {
                let _ = std::io::stdout().lock().write_all(&bytes);
            }
            #[cfg(test)]
            Sink::Buffer(buffer) => buffer.lock().expect("lock").extend_from_slice(&bytes),
        }
    }
}

/// `/metrics` of `audit` and nothing else.
pub fn metrics_router(audit: Arc<Audit>) -> axum::Router {
    axum::Router::new().route("/metrics", axum::routing::get(move || async move { audit.encode() }))
}

/// The lines in `buffer`, parsed (tests).
#[cfg(test)]
pub fn lines(buffer: &Mutex<Vec<u8>>) -> Vec<Line> {
    let bytes = buffer.lock().expect("lock").clone();
    String::from_utf8_lossy(&bytes).lines().map(|l| serde_json::from_str(l).expect("an audit line")).collect()
}

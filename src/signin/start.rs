//! Starting an idle-stopped instance at its user's request. The sign-in
//! front's gate, having let an allowed user in while tinycode does not
//! answer, asks the relay (`POST /oidc/start/<namespace>/<name>`) with the
//! instance's relay credential, never the user's: the relay writes the same
//! annotation a user would (`tinycode.dev/start-requested-at`), with the
//! operator's rights, on that instance alone.
//!
//! Once: an instance whose start is pending (the annotation not handled
//! yet), or that the relay started within [`RESTART_WINDOW`], gets no second
//! annotation, so a flood of requests starts it once. An instance stopped by
//! `spec.stopped` is its user's own choice, and is never started here.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use kube::api::{Patch, PatchParams};

use crate::api::{START_REQUEST_ANNOTATION, TinycodeInstance};

/// How long a start the relay wrote keeps it from writing another for the
/// same instance (the reconcile that handles it takes seconds).
pub const RESTART_WINDOW: Duration = Duration::from_secs(60);
/// Instances remembered at once; older entries are dropped first.
pub const MAX_REMEMBERED: usize = 10_000;
/// The field manager of the relay's writes.
pub const FIELD_MANAGER: &str = "tinycode-operator-start";

/// Whether an instance runs, as the relay's cache shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Agent {
    /// Neither stopped by its spec nor for idleness (it runs or starts).
    #[default]
    Runs,
    /// spec.stopped is true.
    Stopped,
    /// Stopped for idleness; `start_pending`: a start annotation is not handled yet.
    Idle { start_pending: bool },
}

/// What the relay does with a request to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Write the annotation.
    Start,
    /// A start is on its way already: nothing to write.
    Starting,
    /// spec.stopped: nothing to write, and the gate says so.
    Stopped,
    /// It runs (or starts) already.
    Runs,
}

impl Decision {
    /// The state the gate is told (`{"state": ...}`).
    pub fn state(self) -> &'static str {
        match self {
            Decision::Start | Decision::Starting | Decision::Runs => "starting",
            Decision::Stopped => "stopped",
        }
    }
}

/// The answer to a request to start, from what the cache shows and whether
/// the relay started the instance within [`RESTART_WINDOW`] (pure).
pub fn decide(agent: Agent, started_recently: bool) -> Decision {
    match agent {
        Agent::Runs => Decision::Runs,
        Agent::Stopped => Decision::Stopped,
        Agent::Idle { start_pending: true } => Decision::Starting,
        Agent::Idle { start_pending: false } if started_recently => Decision::Starting,
        Agent::Idle { start_pending: false } => Decision::Start,
    }
}

/// The agent of an instance: its spec, the start annotation and the idle
/// decision its status keeps.
pub fn agent_of(inst: &TinycodeInstance) -> Agent {
    if inst.spec.stopped {
        return Agent::Stopped;
    }
    let idle = inst.status.as_ref().and_then(|s| s.idle.as_ref());
    match idle {
        Some(idle) if idle.stopped => {
            let asked = inst.metadata.annotations.as_ref().and_then(|a| a.get(START_REQUEST_ANNOTATION));
            Agent::Idle { start_pending: asked.is_some() && asked != idle.last_handled_start_at.as_ref() }
        }
        _ => Agent::Runs,
    }
}

/// The instances the relay started lately.
#[derive(Default)]
pub struct Recent {
    started: Mutex<HashMap<(String, String), Instant>>,
}

impl Recent {
    /// Whether `namespace/name` was started within [`RESTART_WINDOW`].
    pub fn within_window(&self, namespace: &str, name: &str) -> bool {
        let started = self.started.lock().expect("lock");
        started.get(&(namespace.to_string(), name.to_string())).is_some_and(|at| at.elapsed() < RESTART_WINDOW)
    }

    /// Claims the start of `namespace/name`: true for the first caller in a
    /// window, false for every other (so concurrent requests write once).
    pub fn claim(&self, namespace: &str, name: &str) -> bool {
        let mut started = self.started.lock().expect("lock");
        let key = (namespace.to_string(), name.to_string());
        if started.get(&key).is_some_and(|at| at.elapsed() < RESTART_WINDOW) {
            return false;
        }
        if started.len() >= MAX_REMEMBERED {
            started.retain(|_, at| at.elapsed() < RESTART_WINDOW);
        }
        if started.len() >= MAX_REMEMBERED {
            // Still full of starts within the window: forget the oldest.
            if let Some(oldest) = started.iter().min_by_key(|(_, at)| **at).map(|(k, _)| k.clone()) {
                started.remove(&oldest);
            }
        }
        started.insert(key, Instant::now());
        true
    }

    /// Gives a claim back (the write failed: the next request tries again).
    pub fn release(&self, namespace: &str, name: &str) {
        self.started.lock().expect("lock").remove(&(namespace.to_string(), name.to_string()));
    }
}

/// Writes the start annotation.
pub trait Starts: Send + Sync {
    fn request_start<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>>;
}

/// The annotation written with the operator's own rights (it may patch
/// instances), on the instance the credential proved, to the current time
/// in seconds, as README's `date +%s` command writes it.
pub struct KubeStarts {
    pub client: kube::Client,
}

impl Starts for KubeStarts {
    fn request_start<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let api: kube::Api<TinycodeInstance> = kube::Api::namespaced(self.client.clone(), namespace);
            let now = k8s_openapi::jiff::Timestamp::now().as_second().to_string();
            let patch = serde_json::json!({"metadata": {"annotations": {START_REQUEST_ANNOTATION: now}}});
            let params = PatchParams { field_manager: Some(FIELD_MANAGER.into()), ..Default::default() };
            api.patch(name, &params, &Patch::Merge(&patch)).await.map(drop).map_err(|e| e.to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_idle_stopped_instance_without_a_pending_start_is_started() {
        assert_eq!(decide(Agent::Idle { start_pending: false }, false), Decision::Start);
        assert_eq!(decide(Agent::Idle { start_pending: false }, true), Decision::Starting);
        assert_eq!(decide(Agent::Idle { start_pending: true }, false), Decision::Starting);
        assert_eq!(decide(Agent::Stopped, false), Decision::Stopped);
        assert_eq!(decide(Agent::Runs, false), Decision::Runs);
        assert_eq!(Decision::Stopped.state(), "stopped");
        assert_eq!(Decision::Start.state(), "starting");
    }

    #[test]
    fn the_agent_comes_from_the_spec_the_annotation_and_the_idle_decision() {
        let inst = |spec: serde_json::Value, status: serde_json::Value, start: Option<&str>| {
            let mut meta = serde_json::json!({"name": "dev", "namespace": "team"});
            if let Some(v) = start {
                meta["annotations"] = serde_json::json!({START_REQUEST_ANNOTATION: v});
            }
            let v = serde_json::json!({"apiVersion": "tinycode.dev/v1alpha1", "kind": "TinycodeInstance",
                "metadata": meta, "spec": spec, "status": status});
            serde_json::from_value::<TinycodeInstance>(v).unwrap()
        };
        let idle = serde_json::json!({"idle": {"timeout": "1h", "stopped": true, "lastHandledStartAt": "100"}});
        assert_eq!(agent_of(&inst(serde_json::json!({}), idle.clone(), None)), Agent::Idle { start_pending: false });
        assert_eq!(
            agent_of(&inst(serde_json::json!({}), idle.clone(), Some("100"))),
            Agent::Idle { start_pending: false }
        );
        assert_eq!(
            agent_of(&inst(serde_json::json!({}), idle.clone(), Some("200"))),
            Agent::Idle { start_pending: true }
        );
        assert_eq!(agent_of(&inst(serde_json::json!({"stopped": true}), idle, None)), Agent::Stopped);
        assert_eq!(agent_of(&inst(serde_json::json!({}), serde_json::json!({}), None)), Agent::Runs);
    }

    #[test]
    fn a_start_is_claimed_once_per_window_and_given_back_on_failure() {
        let recent = Recent::default();
        assert!(!recent.within_window("team", "dev"));
        assert!(recent.claim("team", "dev"));
        assert!(!recent.claim("team", "dev"), "a second request in the window");
        assert!(recent.within_window("team", "dev"));
        assert!(recent.claim("team", "other"), "another instance is its own");
        recent.release("team", "dev");
        assert!(recent.claim("team", "dev"), "after a failed write, the next request tries again");
    }
}

//! Starting an idle-stopped instance at its user's request. The front's
//! gate, having let someone in (an allowed user in the sign-in modes, the
//! password's holder in password mode) while tinycode does not answer, asks
//! the relay (`POST /start/<namespace>/<name>`, [`start_router`]) with the
//! instance's start credential ([`signin::start_credential`], keyed with the
//! operator's digest key), never anything of the user's: the relay writes the
//! same annotation a user would (`tinycode.dev/start-requested-at`), with the
//! operator's rights, on that instance alone. The relay serves this route in
//! every mode, with or without an OpenID Connect provider; oidc gates
//! rendered before it asked `POST /oidc/start/...` with their relay
//! credential, which `oidc.rs` still answers through the same [`Starter`].
//!
//! Once: an instance whose start is pending (the annotation not handled
//! yet), or that the relay started within [`RESTART_WINDOW`], gets no second
//! annotation, so a flood of requests starts it once. An instance stopped by
//! `spec.stopped` is its user's own choice, and is never started here.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::api::{Patch, PatchParams};

use crate::api::{AuthMode, START_REQUEST_ANNOTATION, TinycodeInstance};
use crate::render::signin;

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

/// What the relay needs to know of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayTarget {
    pub mode: AuthMode,
    /// The instance's URL (status.url), whose host an oidc callback must use.
    pub url: Option<String>,
    /// Whether it runs, else why not (a request to start it reads this).
    pub agent: Agent,
}

/// Looks instances up for the relay.
pub trait Instances: Send + Sync {
    fn get<'a>(&'a self, namespace: &'a str, name: &'a str) -> futures::future::BoxFuture<'a, Option<RelayTarget>>;
}

/// What a gate is told of its instance after asking to start it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StartAnswer {
    /// "starting" (started now, or on its way already, or running) or
    /// "stopped" (spec.stopped: its user's own choice).
    pub state: String,
}

/// Why a request to start is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartRefusal {
    /// Not the instance's credential, or no such instance (in the route's modes).
    Unknown,
    /// The annotation could not be written.
    Unavailable,
}

/// Starts instances for every route that may (shared, so two routes asked
/// at once still start an instance once).
pub struct Starter {
    instances: Arc<dyn Instances>,
    starts: Arc<dyn Starts>,
    started: Recent,
}

impl Starter {
    pub fn new(instances: Arc<dyn Instances>, starts: Arc<dyn Starts>) -> Self {
        Starter { instances, starts, started: Recent::default() }
    }

    /// Starts `namespace/name` if it is idle-stopped and nobody started it
    /// lately, once however many ask at once; `in_mode` says which auth
    /// modes the asking route serves. The credential was checked already.
    pub async fn start(
        &self,
        namespace: &str,
        name: &str,
        in_mode: impl Fn(AuthMode) -> bool,
    ) -> Result<Decision, StartRefusal> {
        let target = self.instances.get(namespace, name).await.filter(|t| in_mode(t.mode));
        let Some(target) = target else { return Err(StartRefusal::Unknown) };
        let decision = decide(target.agent, self.started.within_window(namespace, name));
        if decision != Decision::Start {
            return Ok(decision);
        }
        if !self.started.claim(namespace, name) {
            // Another request claimed it a moment ago.
            return Ok(Decision::Starting);
        }
        if let Err(e) = self.starts.request_start(namespace, name).await {
            self.started.release(namespace, name);
            tracing::warn!(namespace, name, error = %e, "relay: cannot start an idle-stopped instance");
            return Err(StartRefusal::Unavailable);
        }
        tracing::info!(namespace, name, "relay: started an idle-stopped instance at its front's request");
        Ok(Decision::Start)
    }
}

/// The answer to a request to start: the state as JSON, or the refusal
/// (401 for a credential or instance that is not one, 503 when the write failed).
pub fn answer(result: Result<Decision, StartRefusal>) -> Response {
    let (status, error) = match result {
        Ok(decision) => {
            let mut response = axum::Json(StartAnswer { state: decision.state().into() }).into_response();
            response.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            return response;
        }
        Err(StartRefusal::Unknown) => (StatusCode::UNAUTHORIZED, "invalid_client"),
        Err(StartRefusal::Unavailable) => (StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable"),
    };
    // A refused client keeps no connection (and with it no slot) open.
    let headers = [(header::CONTENT_TYPE, "application/json"), (header::CONNECTION, "close")];
    (status, headers, format!("{{\"error\":\"{error}\"}}")).into_response()
}

/// The credential in `Authorization: Bearer` ("" without one).
pub fn bearer(headers: &HeaderMap) -> &str {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default()
}

#[derive(Clone)]
struct StartRoute {
    /// The operator's digest key, which start credentials are keyed with.
    key: Arc<[u8]>,
    starter: Arc<Starter>,
}

/// `POST /start/<namespace>/<name>`: a front asks to start its own instance
/// (any auth mode) with its start credential.
pub fn start_router(key: Arc<[u8]>, starter: Arc<Starter>) -> Router {
    Router::new().route("/start/{namespace}/{name}", post(start)).with_state(StartRoute { key, starter })
}

async fn start(
    State(route): State<StartRoute>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    // The credential first: a made-up one costs an HMAC and nothing else.
    if !signin::start_credential_matches(&route.key, &namespace, &name, bearer(&headers)) {
        tracing::debug!(namespace, name, "relay: refused a start without the instance's credential");
        return answer(Err(StartRefusal::Unknown));
    }
    answer(route.starter.start(&namespace, &name, |_| true).await)
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

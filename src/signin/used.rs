//! Who last used an instance (`status.lastUsedBy`). A sign-in front's gate,
//! having let a user in, tells the relay (`POST /used/<namespace>/<name>`,
//! body `{"user": "..."}`) with the instance's start credential; the relay
//! writes the user and the time it was told into the status, with the
//! operator's rights, on that instance alone, under its own field manager,
//! so the reconcile's status writes neither take it over nor remove it.
//!
//! What it is worth: the front's word. Whoever can read the namespace's
//! Secrets holds the start credential and can name any user for that one
//! instance (as they can start it); the audit lines of the gate
//! (`gate/audit.rs`) and the platform's log collector are the record to
//! trust. The gate tells the relay at most once per [`SAME_USER_EVERY`]
//! while the user stays the same, and once per [`ANY_USER_EVERY`] in all.
//! The relay holds each operator replica to a little less
//! ([`RELAY_SAME_USER_EVERY`], [`RELAY_ANY_USER_EVERY`]), so a front's
//! reports, which arrive a little early or late, are written, while a
//! flood costs a few writes a minute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use kube::Resource;
use kube::api::{Patch, PatchParams};

use super::start::{Instances, bearer};
use crate::api::TinycodeInstance;
use crate::render::signin;

/// The field manager of the relay's `lastUsedBy` writes.
pub const FIELD_MANAGER: &str = "tinycode-operator-last-use";
/// A gate tells the relay the same user at most this often.
pub const SAME_USER_EVERY: Duration = Duration::from_secs(60);
/// A gate tells the relay at most this often, whoever it let in.
pub const ANY_USER_EVERY: Duration = Duration::from_secs(5);
/// The relay writes an instance's `lastUsedBy` for the same user at most this often.
pub const RELAY_SAME_USER_EVERY: Duration = Duration::from_secs(45);
/// The relay writes an instance's `lastUsedBy` at most this often, whoever is named.
pub const RELAY_ANY_USER_EVERY: Duration = Duration::from_secs(3);
/// The longest user name written; a gate tells no longer one.
pub const MAX_USER_BYTES: usize = 512;
/// The longest request body read.
const MAX_BODY_BYTES: usize = 2048;
/// Instances remembered at once.
const MAX_REMEMBERED: usize = 10_000;

/// What a gate sends.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Used {
    pub user: String,
}

/// Why a user name is not written.
pub fn check_user(user: &str) -> Result<(), &'static str> {
    if user.trim().is_empty() {
        return Err("user is empty");
    }
    if user.len() > MAX_USER_BYTES {
        return Err("user is over 512 bytes");
    }
    if user.chars().any(char::is_control) {
        return Err("user holds a control character");
    }
    Ok(())
}

/// Whether a gate tells the relay of `user` now, given the last it told (pure).
pub fn due(last: Option<(&str, Duration)>, user: &str) -> bool {
    due_within(last, user, SAME_USER_EVERY, ANY_USER_EVERY)
}

/// Whether the relay writes `user` now, given its last write for the instance (pure).
pub fn relay_due(last: Option<(&str, Duration)>, user: &str) -> bool {
    due_within(last, user, RELAY_SAME_USER_EVERY, RELAY_ANY_USER_EVERY)
}

fn due_within(last: Option<(&str, Duration)>, user: &str, same: Duration, any: Duration) -> bool {
    match last {
        None => true,
        Some((_, ago)) if ago < any => false,
        Some((last_user, ago)) => last_user != user || ago >= same,
    }
}

/// The last write per instance.
#[derive(Default)]
struct Written {
    last: Mutex<HashMap<(String, String), (String, Instant)>>,
}

impl Written {
    /// Claims a write of `user` for `namespace/name`, when one is due.
    fn claim(&self, namespace: &str, name: &str, user: &str) -> bool {
        let mut last = self.last.lock().expect("lock");
        let key = (namespace.to_string(), name.to_string());
        if !relay_due(last.get(&key).map(|(u, at)| (u.as_str(), at.elapsed())), user) {
            return false;
        }
        if last.len() >= MAX_REMEMBERED {
            last.retain(|_, (_, at)| at.elapsed() < SAME_USER_EVERY);
        }
        if last.len() >= MAX_REMEMBERED {
            return false;
        }
        last.insert(key, (user.to_string(), Instant::now()));
        true
    }

    /// Gives a claim back (the write failed: the next report tries again).
    fn release(&self, namespace: &str, name: &str) {
        self.last.lock().expect("lock").remove(&(namespace.to_string(), name.to_string()));
    }
}

/// Writes `status.lastUsedBy`.
pub trait UseWrites: Send + Sync {
    fn write<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        user: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>>;
}

/// Server-side apply of the status subresource, as [`FIELD_MANAGER`].
pub struct KubeUseWrites {
    pub client: kube::Client,
}

impl UseWrites for KubeUseWrites {
    fn write<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        user: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let api: kube::Api<TinycodeInstance> = kube::Api::namespaced(self.client.clone(), namespace);
            let at = k8s_openapi::jiff::Timestamp::now()
                .round(k8s_openapi::jiff::Unit::Second)
                .map_err(|e| e.to_string())?;
            let patch = serde_json::json!({
                "apiVersion": TinycodeInstance::api_version(&()),
                "kind": TinycodeInstance::kind(&()),
                "status": {"lastUsedBy": {"user": user, "at": at.to_string()}},
            });
            let params = PatchParams::apply(FIELD_MANAGER).force();
            api.patch_status(name, &params, &Patch::Apply(&patch)).await.map(drop).map_err(|e| e.to_string())
        })
    }
}

#[derive(Clone)]
struct UsedRoute {
    /// The operator's digest key, which start credentials are keyed with.
    key: Arc<[u8]>,
    instances: Arc<dyn Instances>,
    writes: Arc<dyn UseWrites>,
    written: Arc<Written>,
}

/// `POST /used/<namespace>/<name>`: a sign-in front names the user it let in.
pub fn used_router(key: Arc<[u8]>, instances: Arc<dyn Instances>, writes: Arc<dyn UseWrites>) -> Router {
    Router::new()
        .route("/used/{namespace}/{name}", post(used))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(UsedRoute { key, instances, writes, written: Arc::default() })
}

fn refuse(status: StatusCode, error: &str) -> Response {
    let headers = [(axum::http::header::CONTENT_TYPE, "application/json"), (axum::http::header::CONNECTION, "close")];
    (status, headers, serde_json::json!({ "error": error }).to_string()).into_response()
}

async fn used(
    State(route): State<UsedRoute>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // The credential first: a made-up one costs an HMAC and nothing else.
    if !signin::start_credential_matches(&route.key, &namespace, &name, bearer(&headers)) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    let Ok(Used { user }) = serde_json::from_slice::<Used>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not {\"user\": \"...\"}");
    };
    if let Err(why) = check_user(&user) {
        return refuse(StatusCode::BAD_REQUEST, why);
    }
    // Sign-in instances only: password mode names nobody.
    let target = route.instances.get(&namespace, &name).await.filter(|t| t.mode.signs_in());
    if target.is_none() {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    if !route.written.claim(&namespace, &name, &user) {
        return StatusCode::NO_CONTENT.into_response();
    }
    match route.writes.write(&namespace, &name, &user).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => {
            route.written.release(&namespace, &name);
            tracing::warn!(namespace, name, error = %e, "relay: cannot write status.lastUsedBy");
            refuse(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_is_due_for_a_new_user_soon_and_for_the_same_user_rarely() {
        for due in [due, relay_due] {
            assert!(due(None, "alice"));
            assert!(!due(Some(("alice", Duration::from_secs(1))), "bob"), "within the floor, whoever asks");
            assert!(due(Some(("alice", ANY_USER_EVERY)), "bob"), "a new user after the floor");
            assert!(!due(Some(("alice", Duration::from_secs(30))), "alice"), "the same user within the minute");
            assert!(due(Some(("alice", SAME_USER_EVERY)), "alice"));
        }
        // A gate's report that comes a little early (the gate counts from
        // its send, the relay from its receipt) is still written.
        let early = |d: Duration| d - Duration::from_millis(1500);
        assert!(relay_due(Some(("alice", early(SAME_USER_EVERY))), "alice"));
        assert!(relay_due(Some(("alice", early(ANY_USER_EVERY))), "bob"));
    }

    #[test]
    fn user_names_are_bounded_and_printable() {
        assert_eq!(check_user("alice@example.com"), Ok(()));
        assert_eq!(check_user("oidc:ünïcode"), Ok(()));
        assert!(check_user("").is_err());
        assert!(check_user("   ").is_err());
        assert!(check_user("alice\nbob").is_err());
        assert!(check_user(&"a".repeat(MAX_USER_BYTES + 1)).is_err());
        assert_eq!(check_user(&"a".repeat(MAX_USER_BYTES)), Ok(()));
    }

    #[test]
    fn a_flood_for_one_instance_claims_one_write() {
        let written = Written::default();
        assert!(written.claim("team", "dev", "alice"));
        for user in ["alice", "bob", "mallory"] {
            assert!(!written.claim("team", "dev", user));
        }
        assert!(written.claim("team", "other", "mallory"), "another instance is its own");
        written.release("team", "dev");
        assert!(written.claim("team", "dev", "bob"), "after a failed write, the next report is written");
    }
}

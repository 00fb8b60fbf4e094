//! Refused egress, named on the instance: an egress proxy
//! (`crate::egress`) that refused one of its agent's connections tells the
//! relay (`POST /egress-refused/<namespace>/<name>`, body
//! `{"host", "port", "reason"}`) with the instance's start credential, and
//! the relay publishes a Warning event `EgressRefused` on that instance, so
//! a tenant sees in `kubectl describe` why `git clone` or `pip install`
//! failed. The proxy tells each host and port at most once per
//! [`SAME_TARGET_EVERY`] and anything at most once per [`ANY_EVERY`]; the
//! relay holds each instance to a little less ([`RELAY_SAME_TARGET_EVERY`],
//! [`RELAY_ANY_EVERY`]), so a flood from whoever holds the credential costs
//! a few events an hour per host and one every few seconds in all (the
//! event recorder folds repeats into one series besides).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;

use super::start::{Instances, bearer};
use crate::render::signin;

/// A proxy tells the relay of the same host and port at most this often.
pub const SAME_TARGET_EVERY: Duration = Duration::from_secs(600);
/// A proxy tells the relay at most this often, whatever it refused.
pub const ANY_EVERY: Duration = Duration::from_secs(10);
/// The relay names the same host and port of an instance at most this often.
pub const RELAY_SAME_TARGET_EVERY: Duration = Duration::from_secs(540);
/// The relay names a refusal of an instance at most this often.
pub const RELAY_ANY_EVERY: Duration = Duration::from_secs(8);
/// The longest request body read.
const MAX_BODY_BYTES: usize = 1024;
/// Instances remembered at once, and hosts per instance.
const MAX_INSTANCES: usize = 10_000;
const MAX_TARGETS: usize = 256;

/// The reasons a proxy refuses (the `kind` label of its metric), and what
/// each means to the tenant.
pub const REASONS: [(&str, &str); 7] = [
    ("host_not_allowed", "the host and port are not in its class's egress list"),
    ("address_not_allowed", "an IP address is reached only through the class's CIDRs, and none holds it"),
    (
        "alias_not_allowed",
        "the name is an alias (a CNAME or an ExternalName Service) of a host the class does not list",
    ),
    ("guarded_address", "the name or address is never reached (loopback, link-local, metadata)"),
    ("cluster_address", "the name resolves into the cluster, and is not a Service name"),
    ("lookup_failed", "the name does not resolve"),
    ("bad_request", "the request was malformed (two Host headers, or one naming another host)"),
];

/// What a proxy sends.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Refused {
    pub host: String,
    pub port: u16,
    pub reason: String,
}

impl Refused {
    /// Why the relay would not name it: a host of DNS name or IP address
    /// characters (253 bytes at most) and a known reason.
    pub fn check(&self) -> Result<(), &'static str> {
        let host_ok = !self.host.is_empty()
            && self.host.len() <= 253
            && self.host.bytes().all(|b| b.is_ascii_alphanumeric() || b"-._:[]*".contains(&b));
        if !host_ok {
            return Err("host is not a host name or address");
        }
        if !REASONS.iter().any(|(r, _)| *r == self.reason) {
            return Err("reason is not one a proxy gives");
        }
        Ok(())
    }

    fn target(&self) -> String {
        format!("{}:{}", self.host.to_ascii_lowercase(), self.port)
    }

    /// The event's note.
    pub fn note(&self) -> String {
        let why = REASONS.iter().find(|(r, _)| *r == self.reason).map(|(_, w)| *w).unwrap_or_default();
        format!(
            "egress to {}:{} refused by the instance's egress proxy: {why}. Its TinycodeClass lists where its agents may connect (spec.egress); ask a cluster-admin to add the host there",
            self.host, self.port
        )
    }
}

/// An instance, by namespace and name.
type InstanceKey = (String, String);
/// When anything was named for an instance, and when each target was.
type Times = (Instant, HashMap<String, Instant>);

/// The last refusals named, per instance.
#[derive(Default)]
pub struct Named {
    last: Mutex<HashMap<InstanceKey, Times>>,
}

impl Named {
    /// Claims naming `target` for `key`, when due within `same` and `any`.
    pub fn claim(&self, key: InstanceKey, target: String, same: Duration, any: Duration) -> bool {
        let mut last = self.last.lock().expect("lock");
        if let Some((at, targets)) = last.get(&key)
            && (at.elapsed() < any || targets.get(&target).is_some_and(|t| t.elapsed() < same))
        {
            return false;
        }
        if last.len() >= MAX_INSTANCES && !last.contains_key(&key) {
            last.retain(|_, (at, _)| at.elapsed() < same);
            if last.len() >= MAX_INSTANCES {
                return false;
            }
        }
        let (at, targets) = last.entry(key).or_insert_with(|| (Instant::now(), HashMap::new()));
        if targets.len() >= MAX_TARGETS {
            targets.retain(|_, t| t.elapsed() < same);
        }
        *at = Instant::now();
        targets.insert(target, Instant::now());
        true
    }
}

/// Publishes the event.
pub trait RefusalEvents: Send + Sync {
    fn publish<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        note: String,
    ) -> futures::future::BoxFuture<'a, Result<(), String>>;
}

/// Events through kube-rs's recorder (which folds repeats into a series).
pub struct KubeRefusalEvents {
    pub recorder: kube::runtime::events::Recorder,
}

impl RefusalEvents for KubeRefusalEvents {
    fn publish<'a>(
        &'a self,
        namespace: &'a str,
        name: &'a str,
        note: String,
    ) -> futures::future::BoxFuture<'a, Result<(), String>> {
        use kube::Resource;
        use kube::runtime::events::{Event, EventType};
        Box::pin(async move {
            // By name: the relay's cache already said the instance exists.
            let regarding = k8s_openapi::api::core::v1::ObjectReference {
                api_version: Some(crate::api::TinycodeInstance::api_version(&()).into_owned()),
                kind: Some(crate::api::TinycodeInstance::kind(&()).into_owned()),
                namespace: Some(namespace.to_string()),
                name: Some(name.to_string()),
                ..Default::default()
            };
            let event = Event {
                type_: EventType::Warning,
                reason: "EgressRefused".into(),
                note: Some(note),
                action: "Egress".into(),
                secondary: None,
            };
            self.recorder.publish(&event, &regarding).await.map_err(|e| e.to_string())
        })
    }
}

#[derive(Clone)]
struct RefusedRoute {
    key: Arc<[u8]>,
    instances: Arc<dyn Instances>,
    events: Arc<dyn RefusalEvents>,
    named: Arc<Named>,
}

/// `POST /egress-refused/<namespace>/<name>`: an egress proxy names a refusal.
pub fn refused_router(key: Arc<[u8]>, instances: Arc<dyn Instances>, events: Arc<dyn RefusalEvents>) -> Router {
    Router::new()
        .route("/egress-refused/{namespace}/{name}", post(refused))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(RefusedRoute { key, instances, events, named: Arc::default() })
}

fn refuse(status: StatusCode, error: &str) -> Response {
    let headers = [(axum::http::header::CONTENT_TYPE, "application/json"), (axum::http::header::CONNECTION, "close")];
    (status, headers, serde_json::json!({ "error": error }).to_string()).into_response()
}

async fn refused(
    State(route): State<RefusedRoute>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    // The credential first: a made-up one costs an HMAC and nothing else.
    if !signin::start_credential_matches(&route.key, &namespace, &name, bearer(&headers)) {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    let Ok(refused) = serde_json::from_slice::<Refused>(&body) else {
        return refuse(StatusCode::BAD_REQUEST, "the body is not {\"host\", \"port\", \"reason\"}");
    };
    if let Err(why) = refused.check() {
        return refuse(StatusCode::BAD_REQUEST, why);
    }
    if route.instances.get(&namespace, &name).await.is_none() {
        return refuse(StatusCode::UNAUTHORIZED, "invalid_client");
    }
    let key = (namespace.clone(), name.clone());
    if !route.named.claim(key, refused.target(), RELAY_SAME_TARGET_EVERY, RELAY_ANY_EVERY) {
        return StatusCode::NO_CONTENT.into_response();
    }
    match route.events.publish(&namespace, &name, refused.note()).await {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(e) => {
            tracing::warn!(namespace, name, error = %e, "relay: cannot publish an EgressRefused event");
            refuse(StatusCode::SERVICE_UNAVAILABLE, "temporarily_unavailable")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(host: &str, reason: &str) -> Refused {
        Refused { host: host.into(), port: 443, reason: reason.into() }
    }

    #[test]
    fn only_hosts_and_known_reasons_are_named() {
        assert_eq!(refused("git.example.com", "host_not_allowed").check(), Ok(()));
        assert_eq!(refused("[fd00::1]", "address_not_allowed").check(), Ok(()));
        assert!(refused("", "host_not_allowed").check().is_err());
        assert!(refused("a b", "host_not_allowed").check().is_err());
        assert!(refused("evil\nInjected: line", "host_not_allowed").check().is_err());
        assert!(refused(&"a".repeat(254), "host_not_allowed").check().is_err());
        assert!(refused("git.example.com", "whatever").check().is_err());
        let note = refused("pypi.org", "host_not_allowed").note();
        assert!(note.contains("pypi.org:443") && note.contains("spec.egress"), "{note}");
    }

    #[test]
    fn a_flood_names_each_target_once_and_anything_rarely() {
        let named = Named::default();
        let key = || ("team".to_string(), "dev".to_string());
        let (same, any) = (Duration::from_secs(600), Duration::from_millis(50));
        assert!(named.claim(key(), "a:443".into(), same, any));
        assert!(!named.claim(key(), "b:443".into(), same, any), "within the floor, whatever the target");
        std::thread::sleep(any);
        assert!(named.claim(key(), "b:443".into(), same, any), "another target after the floor");
        std::thread::sleep(any);
        assert!(!named.claim(key(), "a:443".into(), same, any), "the same target within its window");
        assert!(named.claim(("team".into(), "other".into()), "a:443".into(), same, any), "another instance is its own");
    }
}

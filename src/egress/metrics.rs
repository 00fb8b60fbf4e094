//! What the egress proxy counts (`tinycode_egress_*`): connections let
//! through by kind, and refusals by reason, labelled with the instance and
//! its class. Labels are bounded: the host a refusal named is in the log
//! line, never a label.

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Who the proxy serves: on every series.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Labels {
    pub namespace: String,
    pub instance: String,
    /// The instance's TinycodeClass ("" without one).
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Series {
    namespace: String,
    instance: String,
    class: String,
    /// `connect` or `http` (allowed); a refusal's reason (refused).
    kind: String,
}

pub struct Metrics {
    labels: Labels,
    registry: Registry,
    allowed: Family<Series, Counter>,
    refused: Family<Series, Counter>,
}

impl Metrics {
    pub fn new(labels: Labels) -> Self {
        let mut registry = Registry::with_prefix("tinycode_egress");
        let allowed = Family::<Series, Counter>::default();
        registry.register("allowed", "Connections and requests let through, by kind", allowed.clone());
        let refused = Family::<Series, Counter>::default();
        registry.register("refused", "Connections and requests refused, by reason", refused.clone());
        Metrics { labels, registry, allowed, refused }
    }

    pub fn labels(&self) -> &Labels {
        &self.labels
    }

    fn series(&self, kind: &str) -> Series {
        let l = &self.labels;
        Series {
            namespace: l.namespace.clone(),
            instance: l.instance.clone(),
            class: l.class.clone(),
            kind: kind.into(),
        }
    }

    pub fn allowed(&self, kind: &str) {
        self.allowed.get_or_create(&self.series(kind)).inc();
    }

    pub fn refused(&self, reason: &str) {
        self.refused.get_or_create(&self.series(reason)).inc();
    }

    /// Refusals so far for `reason`.
    pub fn refused_count(&self, reason: &str) -> u64 {
        self.refused.get_or_create(&self.series(reason)).get()
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding to a String cannot fail");
        out
    }
}

/// `/metrics` and nothing else.
pub fn router(metrics: Arc<Metrics>) -> Router {
    Router::new().route("/metrics", get(move || async move { metrics.encode() }))
}

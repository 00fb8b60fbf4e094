//! What the model-key proxy counts (`tinycode_model_*`), labelled with the
//! instance and its class so a cluster-admin can add up requests and tokens
//! per namespace, class and provider.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::usage::Usage;

/// Who the proxy serves: on every series.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
pub struct Labels {
    pub namespace: String,
    pub instance: String,
    /// The instance's TinycodeClass ("" without one).
    pub class: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    namespace: String,
    instance: String,
    class: String,
    provider: String,
    /// The provider's HTTP status, or why the proxy answered itself
    /// (`no-key`, `too-large`, `unreachable`, `refused`, `method`).
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TokenLabels {
    namespace: String,
    instance: String,
    class: String,
    provider: String,
    /// `prompt` or `completion`.
    kind: String,
}

pub struct Metrics {
    labels: Labels,
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    tokens: Family<TokenLabels, Counter>,
}

impl Metrics {
    pub fn new(labels: Labels) -> Self {
        let mut registry = Registry::with_prefix("tinycode_model");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register("requests", "Model requests passed on, by provider and answer", requests.clone());
        let tokens = Family::<TokenLabels, Counter>::default();
        registry.register("tokens", "Tokens the providers reported used (their usage fields)", tokens.clone());
        Metrics { labels, registry, requests, tokens }
    }

    pub fn request(&self, provider: &str, code: &str) {
        let l = &self.labels;
        let labels = RequestLabels {
            namespace: l.namespace.clone(),
            instance: l.instance.clone(),
            class: l.class.clone(),
            provider: provider.into(),
            code: code.into(),
        };
        self.requests.get_or_create(&labels).inc();
    }

    pub fn tokens(&self, provider: &str, usage: Usage) {
        let l = &self.labels;
        for (kind, n) in [("prompt", usage.prompt), ("completion", usage.completion)] {
            let labels = TokenLabels {
                namespace: l.namespace.clone(),
                instance: l.instance.clone(),
                class: l.class.clone(),
                provider: provider.into(),
                kind: kind.into(),
            };
            self.tokens.get_or_create(&labels).inc_by(n);
        }
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &self.registry).expect("encoding to a String cannot fail");
        out
    }
}

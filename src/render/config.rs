//! The tinycode config generated from the spec (pure): vLLM providers, the
//! default model and, in cluster-admin mode, a read-mostly agent. It reaches
//! the pod as `TINYCODE_CONFIG_CONTENT` through one ConfigMap.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::api::TinycodeInstanceSpec;

/// Limits for a model the user listed that no server reported.
pub const DEFAULT_CONTEXT_LIMIT: i64 = 8192;
pub const DEFAULT_OUTPUT_LIMIT: i64 = 4096;

/// Normalises a vLLM base URL: no trailing `/`, ending in `/v1`.
pub fn normalize_vllm_url(url: &str) -> String {
    let trimmed = url.trim_end_matches('/');
    if trimmed.ends_with("/v1") { trimmed.to_string() } else { format!("{trimmed}/v1") }
}

/// Largest `max_model_len` taken at face value (16Mi tokens); servers are
/// not trusted to report sane numbers.
pub const MAX_MODEL_LEN: i64 = 16_777_216;

/// A server-reported `max_model_len` brought into 1..=[`MAX_MODEL_LEN`], so
/// no later arithmetic can overflow.
pub fn clamp_max_model_len(max_model_len: i64) -> i64 {
    max_model_len.clamp(1, MAX_MODEL_LEN)
}

/// Limits for a model a server serves, from its `max_model_len` (clamped first).
pub fn limits_from_max_len(max_model_len: i64) -> (i64, i64) {
    let max_model_len = clamp_max_model_len(max_model_len);
    let context = max_model_len * 8 / 10;
    let output = (max_model_len * 2 / 10).min(4096);
    (context, output)
}

/// Port of the model-key proxy on the tinycode pod's loopback.
pub const MODEL_KEYS_PORT: u16 = 4099;
/// Port of the model-key proxy's metrics (`/metrics` only).
pub const MODEL_KEYS_METRICS_PORT: u16 = 4100;

/// Where the agent reaches a provider whose server needs an API key (its
/// `apiKeySecret`): the model-key proxy beside it, which adds the key. The
/// agent's container never holds it.
pub fn keyed_url(provider: &str) -> String {
    format!("http://127.0.0.1:{MODEL_KEYS_PORT}/{provider}/v1")
}

/// Models a provider's server reported: id → max_model_len.
pub type Served = BTreeMap<String, i64>;

/// Builds config.json; `served` holds probe results per provider name (empty when offline).
pub fn generate(spec: &TinycodeInstanceSpec, served: &BTreeMap<String, Served>) -> Option<String> {
    let mut root = serde_json::Map::new();
    let mut providers = serde_json::Map::new();
    for p in spec.vllm.iter().flatten() {
        let mut models = BTreeMap::<String, Value>::new();
        for (id, max_len) in served.get(&p.name).into_iter().flatten() {
            let (c, o) = limits_from_max_len(*max_len);
            models.insert(id.clone(), json!({"contextLimit": c, "outputLimit": o}));
        }
        for (id, lim) in p.models.iter().flatten() {
            let user_both = lim.context_limit.is_some() && lim.output_limit.is_some();
            if user_both || !models.contains_key(id) {
                let c = lim.context_limit.unwrap_or(DEFAULT_CONTEXT_LIMIT);
                let o = lim.output_limit.unwrap_or(DEFAULT_OUTPUT_LIMIT);
                models.insert(id.clone(), json!({"contextLimit": c, "outputLimit": o}));
            }
        }
        if models.is_empty() {
            continue;
        }
        let url = if p.api_key_secret.is_some() { keyed_url(&p.name) } else { normalize_vllm_url(&p.url) };
        providers.insert(p.name.clone(), json!({"type": "openai-compatible", "url": url, "models": models}));
    }
    if !providers.is_empty() {
        root.insert("providers".into(), Value::Object(providers));
    }
    if let Some(model) = &spec.model {
        root.insert("model".into(), Value::String(model.clone()));
    }
    if spec.cluster_admin.enabled {
        root.insert("agent".into(), cluster_admin_agent());
    }
    if root.is_empty() {
        return None;
    }
    Some(serde_json::to_string(&Value::Object(root)).expect("config serialises"))
}

/// Agent for cluster-admin mode: reads freely, asks before shell commands, never edits files.
fn cluster_admin_agent() -> Value {
    json!({
        "cluster-admin": {
            "description": "Inspects the cluster with oc; asks before running commands and never edits files",
            "permission": {"read": "allow", "list": "allow", "glob": "allow", "grep": "allow", "bash": "ask", "edit": "deny", "write": "deny"}
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(v: Value) -> TinycodeInstanceSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_keyed_provider_is_reached_through_the_proxy_without_its_key() {
        let s = spec(json!({"vllm": [
            {"name": "keyed", "url": "https://models.example", "models": {"m": {}}, "apiKeySecret": {"name": "k", "key": "v"}},
            {"name": "open", "url": "http://vllm:8000", "models": {"m": {}}}
        ]}));
        let cfg: Value = serde_json::from_str(&generate(&s, &BTreeMap::new()).unwrap()).unwrap();
        assert_eq!(cfg["providers"]["keyed"]["url"], "http://127.0.0.1:4099/keyed/v1");
        assert_eq!(cfg["providers"]["open"]["url"], "http://vllm:8000/v1");
        for p in ["keyed", "open"] {
            assert!(cfg["providers"][p].get("apiKey").is_none(), "{p}: {cfg}");
        }
    }

    #[test]
    fn url_normalisation() {
        assert_eq!(normalize_vllm_url("http://vllm:8000/"), "http://vllm:8000/v1");
        assert_eq!(normalize_vllm_url("http://vllm:8000/v1/"), "http://vllm:8000/v1");
        assert_eq!(normalize_vllm_url("http://vllm:8000"), "http://vllm:8000/v1");
    }

    #[test]
    fn limits_follow_the_80_20_rule_capped_at_4096() {
        assert_eq!(limits_from_max_len(8192), (6553, 1638));
        assert_eq!(limits_from_max_len(131072), (104857, 4096));
    }

    #[test]
    fn absurd_max_model_len_is_clamped_not_overflowed() {
        assert_eq!(clamp_max_model_len(i64::MAX), MAX_MODEL_LEN);
        assert_eq!(clamp_max_model_len(i64::MIN), 1);
        assert_eq!(clamp_max_model_len(-5), 1);
        assert_eq!(clamp_max_model_len(0), 1);
        assert_eq!(clamp_max_model_len(32768), 32768);
        assert_eq!(limits_from_max_len(i64::MAX), (MAX_MODEL_LEN * 8 / 10, 4096));
        assert_eq!(limits_from_max_len(i64::MIN), (0, 0));
        assert_eq!(limits_from_max_len(-1), (0, 0));
        assert_eq!(limits_from_max_len(0), (0, 0));
    }

    #[test]
    fn nothing_to_say_means_no_config() {
        assert_eq!(generate(&TinycodeInstanceSpec::default(), &BTreeMap::new()), None);
        let s = spec(json!({"vllm": [{"name": "a", "url": "http://a"}]}));
        assert_eq!(generate(&s, &BTreeMap::new()), None, "a provider with no models is left out");
    }

    #[test]
    fn providers_models_and_overrides() {
        let s = spec(json!({"model": "qwen", "vllm": [{"name": "a", "url": "http://a:8000/", "models": {
            "qwen": {"contextLimit": 20000, "outputLimit": 1000},
            "only-context": {"contextLimit": 30000},
            "listed": {}
        }}]}));
        let served = BTreeMap::from([(
            "a".to_string(),
            Served::from([
                ("qwen".to_string(), 32768),
                ("only-context".to_string(), 8192),
                ("extra".to_string(), 8192),
            ]),
        )]);
        let c: Value = serde_json::from_str(&generate(&s, &served).unwrap()).unwrap();
        let a = &c["providers"]["a"];
        assert_eq!(a["type"], "openai-compatible");
        assert_eq!(a["url"], "http://a:8000/v1");
        assert_eq!(
            a["models"]["qwen"],
            json!({"contextLimit": 20000, "outputLimit": 1000}),
            "an override with both limits wins"
        );
        assert_eq!(
            a["models"]["only-context"],
            json!({"contextLimit": 6553, "outputLimit": 1638}),
            "a partial override does not beat the probe"
        );
        assert_eq!(a["models"]["extra"], json!({"contextLimit": 6553, "outputLimit": 1638}));
        assert_eq!(a["models"]["listed"], json!({"contextLimit": 8192, "outputLimit": 4096}));
        assert_eq!(c["model"], "qwen");
    }

    #[test]
    fn cluster_admin_agent_denies_edits() {
        let s = spec(json!({"clusterAdmin": {"enabled": true, "kubeconfigSecretName": "kc"}}));
        let c: Value = serde_json::from_str(&generate(&s, &BTreeMap::new()).unwrap()).unwrap();
        let p = &c["agent"]["cluster-admin"]["permission"];
        assert_eq!(
            (p["edit"].as_str(), p["write"].as_str(), p["bash"].as_str(), p["read"].as_str()),
            (Some("deny"), Some("deny"), Some("ask"), Some("allow"))
        );
    }
}

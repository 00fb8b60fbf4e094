//! Cluster-admin mode (pure parts): what is wrong or risky about the
//! kubeconfig an instance mounts. The kubeconfig's content is only inspected
//! here; it never reaches logs, events or status.

use serde_yaml::Value;

/// Warnings about a kubeconfig, or why it cannot be used.
pub fn kubeconfig_warnings(text: &str) -> Result<Vec<String>, String> {
    let doc: Value = serde_yaml::from_str(text).map_err(|_| "the kubeconfig is not valid YAML".to_string())?;
    let contexts = doc.get("contexts").and_then(Value::as_sequence).map(Vec::len).unwrap_or(0);
    if contexts == 0 {
        return Err("the kubeconfig has no contexts".into());
    }
    let mut warnings = Vec::new();
    if contexts > 1 {
        warnings.push(format!(
            "the kubeconfig has {contexts} contexts; the agent uses current-context only, so keep one context to avoid acting on the wrong cluster"
        ));
    }
    let short_lived = doc
        .get("users")
        .and_then(Value::as_sequence)
        .into_iter()
        .flatten()
        .filter_map(|u| u.get("user")?.get("token")?.as_str())
        .any(is_short_lived_token);
    if short_lived {
        warnings.push(
            "the kubeconfig holds a short-lived user token (an OAuth sha256~ token expires within a day); use a long-lived ServiceAccount token instead (a Secret of type kubernetes.io/service-account-token)"
                .into(),
        );
    }
    Ok(warnings)
}

/// OAuth access tokens (`sha256~...`) and other opaque long tokens expire;
/// ServiceAccount tokens are JWTs and contain dots.
pub fn is_short_lived_token(token: &str) -> bool {
    token.starts_with("sha256~") || (token.len() > 100 && !token.contains('.'))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "apiVersion: v1\nkind: Config\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\ncurrent-context: a\nusers:\n- name: u\n  user: {token: eyJhbGciOi.payload.sig}\n";

    #[test]
    fn a_single_context_service_account_kubeconfig_is_fine() {
        assert_eq!(kubeconfig_warnings(ONE).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn several_contexts_and_oauth_tokens_warn() {
        let two = ONE
            .replace("current-context", "- name: b\n  context: {cluster: c, user: u}\ncurrent-context")
            .replace("eyJhbGciOi.payload.sig", "sha256~abc");
        let w = kubeconfig_warnings(&two).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("2 contexts"));
        assert!(w[1].contains("long-lived ServiceAccount token"));
        assert!(!w.iter().any(|x| x.contains("sha256~abc")), "the token itself must never be echoed");
    }

    #[test]
    fn token_shapes() {
        assert!(is_short_lived_token("sha256~x"));
        assert!(is_short_lived_token(&"a".repeat(101)));
        assert!(!is_short_lived_token(&format!("{}.{}", "a".repeat(100), "b")));
        assert!(!is_short_lived_token("short"));
    }

    #[test]
    fn unusable_kubeconfigs_are_errors() {
        assert!(kubeconfig_warnings(": not yaml [").is_err());
        assert!(kubeconfig_warnings("apiVersion: v1\nkind: Config\n").is_err());
    }
}

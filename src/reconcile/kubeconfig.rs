//! Cluster-admin mode (pure parts): what is wrong or risky about the
//! kubeconfig an instance mounts. The kubeconfig's content is only inspected
//! here; it never reaches logs, events or status.
//!
//! The Secret is the tenant's, so its YAML is hostile input: it is parsed
//! into the few typed fields read here, under a size cap and a parser budget
//! that refuses alias expansion beyond a small bound (a few hundred KB of
//! aliases to one large scalar would otherwise expand to gigabytes).

use serde::Deserialize;
use serde::de::IgnoredAny;

/// Largest kubeconfig read (real ones, certificates embedded, are a few KB).
pub const MAX_KUBECONFIG_BYTES: usize = 256 * 1024;
/// Aliases a kubeconfig may use (kubectl writes none).
const MAX_ALIASES: usize = 64;
/// Parser events replayed from aliases, in all.
const MAX_REPLAYED_EVENTS: usize = 10_000;
/// Parser events of the whole document.
const MAX_EVENTS: usize = 100_000;

/// The fields read of a kubeconfig.
#[derive(Deserialize, Default)]
#[serde(default)]
struct Kubeconfig {
    contexts: Vec<IgnoredAny>,
    users: Vec<NamedUser>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct NamedUser {
    user: User,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct User {
    token: Option<String>,
}

/// Why a kubeconfig could not be read (never its content).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unreadable {
    #[error("the kubeconfig is {0} bytes, more than the {MAX_KUBECONFIG_BYTES} the operator reads")]
    TooLarge(usize),
    #[error("the kubeconfig is not UTF-8 text")]
    NotText,
    #[error("the kubeconfig is not valid YAML, or uses more anchors and aliases than a kubeconfig needs")]
    NotYaml,
    #[error("the kubeconfig has no contexts")]
    NoContexts,
}

fn parse(bytes: &[u8]) -> Result<Kubeconfig, Unreadable> {
    if bytes.len() > MAX_KUBECONFIG_BYTES {
        return Err(Unreadable::TooLarge(bytes.len()));
    }
    let text = std::str::from_utf8(bytes).map_err(|_| Unreadable::NotText)?;
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_events: MAX_EVENTS,
            max_aliases: MAX_ALIASES,
            max_anchors: MAX_ALIASES,
            max_documents: 1,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_REPLAYED_EVENTS,
            max_replay_stack_depth: 8,
        },
    };
    serde_saphyr::from_str_with_options(text, options).map_err(|_| Unreadable::NotYaml)
}

/// Warnings about a kubeconfig, or why it cannot be used.
pub fn kubeconfig_warnings(bytes: &[u8]) -> Result<Vec<String>, Unreadable> {
    let doc = parse(bytes)?;
    let contexts = doc.contexts.len();
    if contexts == 0 {
        return Err(Unreadable::NoContexts);
    }
    let mut warnings = Vec::new();
    if contexts > 1 {
        warnings.push(format!(
            "the kubeconfig has {contexts} contexts; the agent uses current-context only, so keep one context to avoid acting on the wrong cluster"
        ));
    }
    if doc.users.iter().filter_map(|u| u.user.token.as_deref()).any(is_short_lived_token) {
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

    const ONE: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://api.example:6443', certificate-authority-data: LS0t}\ncontexts:\n- name: a\n  context: {cluster: c, user: u}\ncurrent-context: a\nusers:\n- name: u\n  user: {token: eyJhbGciOi.payload.sig}\n";

    #[test]
    fn a_single_context_service_account_kubeconfig_is_fine() {
        assert_eq!(kubeconfig_warnings(ONE.as_bytes()).unwrap(), Vec::<String>::new());
    }

    #[test]
    fn several_contexts_and_oauth_tokens_warn() {
        let two = ONE
            .replace("current-context", "- name: b\n  context: {cluster: c, user: u}\ncurrent-context")
            .replace("eyJhbGciOi.payload.sig", "sha256~abc");
        let w = kubeconfig_warnings(two.as_bytes()).unwrap();
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
        assert_eq!(kubeconfig_warnings(b": not yaml ["), Err(Unreadable::NotYaml));
        assert_eq!(kubeconfig_warnings(b"apiVersion: v1\nkind: Config\n"), Err(Unreadable::NoContexts));
        assert_eq!(kubeconfig_warnings(&[0xff, 0xfe]), Err(Unreadable::NotText));
    }

    /// The attack: aliases to one large scalar, a few hundred KB that expand
    /// to gigabytes. Refused quickly, without expanding it.
    #[test]
    fn an_alias_bomb_is_refused_without_expansion() {
        let bomb = alias_bomb(50_000, 5_000);
        assert!(bomb.len() < MAX_KUBECONFIG_BYTES, "{} bytes", bomb.len());
        let started = std::time::Instant::now();
        assert_eq!(kubeconfig_warnings(bomb.as_bytes()), Err(Unreadable::NotYaml));
        assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
        // Nested aliases (each level doubling the last) are refused too.
        let mut nested = String::from("a0: &a0 [x, x]\n");
        for i in 1..40 {
            nested.push_str(&format!("a{i}: &a{i} [*a{}, *a{}]\n", i - 1, i - 1));
        }
        nested.push_str("contexts: *a39\n");
        assert_eq!(kubeconfig_warnings(nested.as_bytes()), Err(Unreadable::NotYaml));
    }

    #[test]
    fn an_oversized_kubeconfig_is_refused_before_parsing() {
        let big = format!("{ONE}# {}\n", "x".repeat(MAX_KUBECONFIG_BYTES));
        assert_eq!(kubeconfig_warnings(big.as_bytes()), Err(Unreadable::TooLarge(big.len())));
    }

    /// `a: &x "<scalar>"` then a list of `*x` `aliases` times, as contexts.
    pub(crate) fn alias_bomb(scalar: usize, aliases: usize) -> String {
        let mut s = format!("a: &x \"{}\"\ncontexts: [", "y".repeat(scalar));
        for i in 0..aliases {
            if i > 0 {
                s.push(',');
            }
            s.push_str("*x");
        }
        s.push_str("]\n");
        s
    }
}

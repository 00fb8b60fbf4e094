//! Sign-in (`spec.auth.mode` openshift and oidc), pure: the proxy's and the
//! gate's command lines, the relay credential, the RBAC check users must pass.
//!
//! The front (a Deployment of its own, which stays up while the agent is
//! stopped): router → the gate's front (port [`PROXY_PORT`], the only port
//! exposed) → proxy ([`SIGNIN_PROXY_LISTEN`], loopback) → gate
//! ([`GATE_LISTEN`], loopback) → the agent's Service → tinycode (4096, open
//! to the front's pods only). The gate's front passes everything to the
//! proxy and back, and tells clients that are not browsers the proxy's
//! errors as text (`gate/front.rs`). The proxy signs the user in; the gate
//! asks the apiserver whether that user may `use` the instance and presents
//! the instance's password to tinycode, so users never see it. While the
//! agent does not answer, the gate tells an allowed user why: starting,
//! stopped by spec.stopped, or stopped for idleness ([`AgentState`]).

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::api::AuthMode;
use crate::settings::{OidcSettings, SigninSettings, UsernameClaim};

/// The front's public port (named `front`), the gate's in every mode: what
/// the Service, the Route or Ingress and the NetworkPolicy point at
/// whenever there is a front.
pub const PROXY_PORT: u16 = 4180;
/// Where the sign-in proxy listens: loopback, behind the gate's front.
pub const SIGNIN_PROXY_LISTEN: &str = "127.0.0.1:4182";
/// Where the gate listens: loopback, so only the proxy in the pod reaches it.
pub const GATE_LISTEN: &str = "127.0.0.1:4181";
/// tinycode's port, behind the agent's Service.
pub const TINYCODE_PORT: u16 = 4096;
/// Where the gate serves the activity report the operator reads (the
/// Service's `activity` port).
pub const ACTIVITY_LISTEN: &str = "0.0.0.0:4097";
/// Where a sign-in front's gate serves its audit counters (the monitoring namespaces reach it).
pub const GATE_METRICS_LISTEN: &str = "0.0.0.0:4101";
/// The image's own activity port in a sign-in instance (TINYCODE_ACTIVITY_PORT
/// 4098, as the gate holds 4097), behind the agent's Service.
pub const IMAGE_ACTIVITY_PORT: u16 = 4098;
/// Where the proxy container mounts the sign-in Secret.
pub const SIGNIN_MOUNT: &str = "/etc/tinycode/signin";
/// Where the proxy container finds its own pages (`error.html`: a failed
/// sign-in, named for the instance, with what to do).
pub const SIGNIN_PAGES_MOUNT: &str = "/etc/tinycode/signin-pages";
/// Key of the sign-in Secret holding the proxy's cookie secret.
pub const COOKIE_SECRET_KEY: &str = "cookie-secret";
/// Key of the sign-in Secret holding the oidc instance's relay credential.
pub const RELAY_CREDENTIAL_KEY: &str = "relay-credential";
/// Key of the front's Secret (the sign-in Secret; in password mode it holds
/// this key alone) holding the instance's start credential.
pub const START_CREDENTIAL_KEY: &str = "start-credential";
/// Where the gate container finds its projected volume (API token, CA, password).
pub const GATE_MOUNT: &str = "/var/run/secrets/tinycode/gate";
/// Path of oauth2-proxy's OAuth callback (OpenShift's oauth-proxy serves `/oauth/callback`).
pub const CALLBACK_PATH: &str = "/oauth2/callback";

/// The RBAC check every signed-in user must pass: verb `use` on
/// `tinycodeinstances/<name>` in the instance's namespace.
pub const ACCESS_VERB: &str = "use";
pub const ACCESS_GROUP: &str = "tinycode.dev";
pub const ACCESS_RESOURCE: &str = "tinycodeinstances";

/// The provider's endpoints, read from its discovery document.
#[derive(Clone, Debug, PartialEq, Eq, serde::Deserialize)]
pub struct OidcEndpoints {
    pub issuer: String,
    #[serde(rename = "authorization_endpoint")]
    pub authorization: String,
    #[serde(rename = "token_endpoint")]
    pub token: String,
    #[serde(rename = "jwks_uri")]
    pub jwks: String,
}

/// The credential an oidc instance's proxy presents to the operator's relay
/// in place of the client secret: an HMAC of the instance's identity keyed
/// with the client secret. The relay recomputes it; a tenant who reads it
/// learns nothing of the client secret, and it is worthless for any other
/// instance. Rotating the client secret rotates every credential (the
/// operator rewrites the Secrets, which rolls the pods).
pub fn relay_credential(client_secret: &[u8], namespace: &str, name: &str) -> String {
    format!("trc1.{}", hex::encode(instance_mac(client_secret, RELAY_LABEL, namespace, name).finalize().into_bytes()))
}

/// Whether `presented` is the credential of `namespace/name` (constant time).
pub fn relay_credential_matches(client_secret: &[u8], namespace: &str, name: &str, presented: &str) -> bool {
    mac_matches(instance_mac(client_secret, RELAY_LABEL, namespace, name), "trc1.", presented)
}

/// The credential a front presents to the relay to start its own
/// idle-stopped instance (every mode, [`START_CREDENTIAL_KEY`] of the front's
/// Secret): an HMAC of the instance's identity keyed with the operator's
/// digest key, which never leaves the operator's namespace. Whoever reads it
/// (a tenant who may read the namespace's Secrets, who may start the
/// instance anyway) can start that one instance, and name anyone in its
/// `status.lastUsedBy` (`signin/used.rs`), and nothing else.
pub fn start_credential(key: &[u8], namespace: &str, name: &str) -> String {
    format!("tsc1.{}", hex::encode(instance_mac(key, START_LABEL, namespace, name).finalize().into_bytes()))
}

/// Whether `presented` is the start credential of `namespace/name` (constant time).
pub fn start_credential_matches(key: &[u8], namespace: &str, name: &str, presented: &str) -> bool {
    mac_matches(instance_mac(key, START_LABEL, namespace, name), "tsc1.", presented)
}

/// Each credential's own label: one is never the other, whatever the keys.
const RELAY_LABEL: &[u8] = b"tinycode relay credential v1\0";
const START_LABEL: &[u8] = b"tinycode start credential v1\0";

fn instance_mac(key: &[u8], label: &[u8], namespace: &str, name: &str) -> Hmac<Sha256> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
    mac.update(label);
    mac.update(namespace.as_bytes());
    mac.update(b"\0");
    mac.update(name.as_bytes());
    mac
}

fn mac_matches(mac: Hmac<Sha256>, prefix: &str, presented: &str) -> bool {
    let Some(hex_part) = presented.strip_prefix(prefix) else { return false };
    let Ok(bytes) = hex::decode(hex_part) else { return false };
    mac.verify_slice(&bytes).is_ok()
}

/// The relay's access-review endpoint for one instance's gate.
pub fn relay_review_url(relay_url: &str, namespace: &str, name: &str) -> String {
    format!("{relay_url}/oidc/review/{namespace}/{name}")
}

/// The relay's start endpoint for one instance's front (every mode).
pub fn relay_start_url(relay_url: &str, namespace: &str, name: &str) -> String {
    format!("{relay_url}/start/{namespace}/{name}")
}

/// The relay's endpoint that records who used one sign-in instance.
pub fn relay_used_url(relay_url: &str, namespace: &str, name: &str) -> String {
    format!("{relay_url}/used/{namespace}/{name}")
}

/// The relay's endpoint that names an instance's refused egress (an event).
pub fn relay_egress_refused_url(relay_url: &str, namespace: &str, name: &str) -> String {
    format!("{relay_url}/egress-refused/{namespace}/{name}")
}

/// The relay's token endpoint for one instance.
pub fn relay_token_url(relay_url: &str, namespace: &str, name: &str) -> String {
    format!("{relay_url}/oidc/token/{namespace}/{name}")
}

/// oauth2-proxy's arguments (auth.mode oidc). Secrets come from files of the
/// mounted sign-in Secret, never from the command line. Discovery is off:
/// the operator read the provider's endpoints and names them, so the token
/// endpoint can be the relay, which adds the client secret on the way.
pub fn oauth2_proxy_args(
    namespace: &str,
    name: &str,
    oidc: &OidcSettings,
    relay_url: &str,
    endpoints: &OidcEndpoints,
) -> Vec<String> {
    let arg = |k: &str, v: &str| format!("--{k}={v}");
    let mut args = vec![
        arg("provider", "oidc"),
        arg("http-address", SIGNIN_PROXY_LISTEN),
        arg("upstream", &format!("http://{GATE_LISTEN}/")),
        arg("oidc-issuer-url", &endpoints.issuer),
        arg("skip-oidc-discovery", "true"),
        arg("login-url", &endpoints.authorization),
        arg("redeem-url", &relay_token_url(relay_url, namespace, name)),
        arg("oidc-jwks-url", &endpoints.jwks),
        arg("client-id", &oidc.client_id),
        arg("client-secret-file", &format!("{SIGNIN_MOUNT}/{RELAY_CREDENTIAL_KEY}")),
        arg("cookie-secret-file", &format!("{SIGNIN_MOUNT}/{COOKIE_SECRET_KEY}")),
        // One cookie per instance: two instances on one parent domain do not
        // overwrite each other's sessions.
        arg("cookie-name", &cookie_name(namespace, name)),
        arg("custom-templates-dir", SIGNIN_PAGES_MOUNT),
        arg("scope", &oidc.scopes),
        arg("oidc-groups-claim", &oidc.groups_claim),
        // Who may enter is RBAC's decision (the gate), not an e-mail domain's.
        arg("email-domain", "*"),
        arg("pass-user-headers", "true"),
        // The router terminates TLS and says so in X-Forwarded-Proto; the
        // callback URL is built from the host the router forwards.
        arg("reverse-proxy", "true"),
        arg("skip-provider-button", "true"),
        arg("code-challenge-method", "S256"),
        // Safe defaults, stated so they do not change under us: Secure and
        // HttpOnly cookies, SameSite lax, a session of at most 12 hours.
        arg("cookie-secure", "true"),
        arg("cookie-httponly", "true"),
        arg("cookie-samesite", "lax"),
        arg("cookie-expire", "12h0m0s"),
        arg("cookie-refresh", "1h0m0s"),
    ];
    // oauth2-proxy's X-Forwarded-User is the `sub` claim, unless it is told
    // to put the e-mail there (then it sends no X-Forwarded-Email).
    if oidc.username_claim == UsernameClaim::Email {
        args.push(arg("prefer-email-to-user", "true"));
    }
    args
}

/// OpenShift oauth-proxy's arguments (auth.mode openshift). It uses the
/// instance's ServiceAccount as OAuth client (the ServiceAccount's redirect
/// annotation names the Route) and checks the same RBAC verb at sign-in; the
/// gate checks it again for every request with the user's own token.
pub fn openshift_proxy_args(namespace: &str, name: &str, service_account: &str) -> Vec<String> {
    let arg = |k: &str, v: &str| format!("--{k}={v}");
    let sar = serde_json::json!({
        "namespace": namespace,
        "group": ACCESS_GROUP,
        "resource": ACCESS_RESOURCE,
        "resourceName": name,
        "verb": ACCESS_VERB,
    });
    vec![
        arg("provider", "openshift"),
        arg("http-address", SIGNIN_PROXY_LISTEN),
        // Plain HTTP behind the router's edge termination.
        arg("https-address", ""),
        arg("upstream", &format!("http://{GATE_LISTEN}/")),
        arg("openshift-service-account", service_account),
        arg("openshift-sar", &sar.to_string()),
        arg("cookie-secret-file", &format!("{SIGNIN_MOUNT}/{COOKIE_SECRET_KEY}")),
        arg("cookie-name", &cookie_name(namespace, name)),
        arg("custom-templates-dir", SIGNIN_PAGES_MOUNT),
        arg("cookie-secure", "true"),
        arg("cookie-expire", "12h0m0s"),
        // The gate asks a SelfSubjectAccessReview with the user's token.
        arg("pass-access-token", "true"),
        arg("pass-user-headers", "true"),
        arg("email-domain", "*"),
        arg("skip-provider-button", "true"),
    ]
}

/// Whether the agent runs, as the front says it to a user it lets in while
/// tinycode does not answer (`tinycode-operator gate --agent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AgentState {
    /// It runs, or is starting: the page says so and refreshes itself.
    Runs,
    /// spec.stopped: the user's own choice; the page says how to start it.
    Stopped,
    /// Stopped for idleness; the page says how to start it.
    Idle,
}

impl AgentState {
    pub fn as_str(self) -> &'static str {
        match self {
            AgentState::Runs => "runs",
            AgentState::Stopped => "stopped",
            AgentState::Idle => "idle",
        }
    }
}

/// The agent's Service as the front reaches it: `http://<service>.<namespace>.svc:<port>`.
pub fn agent_url(namespace: &str, name: &str, port: u16) -> String {
    format!("http://{}.{namespace}.svc:{port}", crate::api::naming::agent_service(name))
}

/// The gate's arguments (`tinycode-operator gate`). In the sign-in modes it
/// listens on loopback behind the proxy, and its front on the public port
/// ([`PROXY_PORT`]) in front of the proxy; in password mode it is the
/// front's public port itself and checks the password
/// (`password_secret` only names the Secret on its pages).
pub fn gate_args(
    mode: AuthMode,
    namespace: &str,
    name: &str,
    agent: AgentState,
    password_secret: &str,
    signin: &SigninSettings,
) -> Vec<String> {
    let arg = |k: &str, v: &str| format!("--{k}={v}");
    let listen = match mode {
        AuthMode::Password => format!("0.0.0.0:{PROXY_PORT}"),
        AuthMode::Openshift | AuthMode::Oidc => GATE_LISTEN.to_string(),
    };
    let mut args = vec![
        "gate".to_string(),
        arg("listen", &listen),
        arg("upstream", &agent_url(namespace, name, TINYCODE_PORT)),
        arg("agent", agent.as_str()),
        arg("mode", mode.as_str()),
        arg("namespace", namespace),
        arg("instance", name),
    ];
    if mode.signs_in() {
        args.push(arg("front-listen", &format!("0.0.0.0:{PROXY_PORT}")));
        args.push(arg("signin-upstream", &format!("http://{SIGNIN_PROXY_LISTEN}")));
        args.push(arg("cache-seconds", &signin.access_cache.as_secs().to_string()));
        args.push(arg("ca-file", &format!("{GATE_MOUNT}/ca.crt")));
    } else {
        args.push(arg("password-secret", password_secret));
    }
    args.extend([
        arg("password-file", &format!("{GATE_MOUNT}/password")),
        arg("activity-listen", ACTIVITY_LISTEN),
        arg("activity-report", &format!("{}/activity", agent_url(namespace, name, IMAGE_ACTIVITY_PORT))),
    ]);
    // The sign-in modes count their audit lines (users named, so decisions made).
    if mode.signs_in() {
        args.push(arg("metrics-listen", GATE_METRICS_LISTEN));
    }
    if let (AuthMode::Oidc, Some(oidc)) = (mode, &signin.oidc) {
        args.push(arg("username-prefix", &oidc.username_prefix));
        args.push(arg("groups-prefix", &oidc.groups_prefix));
        args.push(arg("review-url", &relay_review_url(&signin.relay_url, namespace, name)));
        args.push(arg("relay-credential-file", &format!("{GATE_MOUNT}/{RELAY_CREDENTIAL_KEY}")));
    }
    // An idle-stopped instance is started by whoever the front lets in. Off
    // without the front: a sign-in front then scales to zero with the agent.
    if signin.front {
        args.push(arg("start-url", &relay_start_url(&signin.relay_url, namespace, name)));
        args.push(arg("start-credential-file", &format!("{GATE_MOUNT}/{START_CREDENTIAL_KEY}")));
        // Who used it (status.lastUsedBy): the sign-in modes name users.
        if mode.signs_in() {
            args.push(arg("used-url", &relay_used_url(&signin.relay_url, namespace, name)));
        }
    }
    args
}

/// What status.auth says of who may enter.
pub fn status(mode: AuthMode, namespace: &str, name: &str, password_secret: &str) -> crate::api::AuthStatus {
    match mode {
        AuthMode::Password => crate::api::AuthStatus {
            mode: mode.as_str().into(),
            allowed: format!("whoever has the URL and the password in Secret {password_secret}"),
            access: None,
        },
        AuthMode::Openshift | AuthMode::Oidc => crate::api::AuthStatus {
            mode: mode.as_str().into(),
            allowed: format!(
                "signed-in users allowed verb {ACCESS_VERB} on {ACCESS_RESOURCE}.{ACCESS_GROUP}/{name} in namespace {namespace}"
            ),
            access: Some(crate::api::AccessCheck {
                verb: ACCESS_VERB.into(),
                group: ACCESS_GROUP.into(),
                resource: ACCESS_RESOURCE.into(),
                name: name.into(),
                namespace: namespace.into(),
            }),
        },
    }
}

/// The sign-in proxy's session cookie of an instance (and the prefix of the
/// cookies it derives from it); the gate keeps them all from tinycode.
pub fn cookie_name(namespace: &str, name: &str) -> String {
    format!("_tinycode_{}", short_hash(namespace, name))
}

/// 12 hex digits naming the instance in its cookie (names may be long and
/// hold characters a cookie name should not).
fn short_hash(namespace: &str, name: &str) -> String {
    use sha2::Digest;
    let digest = Sha256::digest(format!("{namespace}/{name}").as_bytes());
    hex::encode(&digest[..6])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn oidc() -> OidcSettings {
        OidcSettings {
            issuer_url: "https://idp.example.com".into(),
            client_id: "tinycode".into(),
            client_secret_file: "/x".into(),
            scopes: "openid email".into(),
            username_claim: UsernameClaim::Email,
            username_prefix: "oidc:".into(),
            groups_claim: "groups".into(),
            groups_prefix: "oidc:".into(),
        }
    }

    const RELAY: &str = "http://relay.ops.svc:8484";

    fn endpoints() -> OidcEndpoints {
        OidcEndpoints {
            issuer: "https://idp.example.com".into(),
            authorization: "https://idp.example.com/auth".into(),
            token: "https://idp.example.com/token".into(),
            jwks: "https://idp.example.com/keys".into(),
        }
    }

    #[test]
    fn relay_credentials_are_per_instance_and_per_secret() {
        let a = relay_credential(b"secret", "team1", "dev");
        assert!(relay_credential_matches(b"secret", "team1", "dev", &a));
        assert!(!relay_credential_matches(b"secret", "team1", "prod", &a));
        assert!(!relay_credential_matches(b"secret", "team1d", "ev", &relay_credential(b"secret", "team1", "dev")));
        assert!(!relay_credential_matches(b"rotated", "team1", "dev", &a));
        assert!(!relay_credential_matches(b"secret", "team1", "dev", "secret"));
        assert!(!relay_credential_matches(b"secret", "team1", "dev", "trc1.zz"));
        assert!(!a.contains("secret"));
    }

    #[test]
    fn oauth2_proxy_never_sees_the_client_secret_and_redeems_at_the_relay() {
        let args = oauth2_proxy_args("team1", "dev", &oidc(), RELAY, &endpoints());
        assert!(args.contains(&"--redeem-url=http://relay.ops.svc:8484/oidc/token/team1/dev".to_string()));
        assert!(args.contains(&"--client-secret-file=/etc/tinycode/signin/relay-credential".to_string()));
        assert!(args.contains(&"--skip-oidc-discovery=true".to_string()));
        assert!(args.contains(&"--upstream=http://127.0.0.1:4181/".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--client-secret=") || a.starts_with("--cookie-secret=")));
        let names: Vec<&str> = args.iter().map(|a| a.split('=').next().unwrap()).collect();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "no flag twice: {names:?}");
    }

    #[test]
    fn the_openshift_proxy_checks_the_use_verb_on_this_instance() {
        let args = openshift_proxy_args("team1", "dev", "dev-tinycode");
        let sar = args.iter().find_map(|a| a.strip_prefix("--openshift-sar=")).unwrap();
        let sar: serde_json::Value = serde_json::from_str(sar).unwrap();
        assert_eq!(sar["verb"], "use");
        assert_eq!(sar["resourceName"], "dev");
        assert_eq!(sar["namespace"], "team1");
        assert_eq!(sar["resource"], "tinycodeinstances");
        assert!(args.contains(&"--openshift-service-account=dev-tinycode".to_string()));
    }

    #[test]
    fn cookies_are_named_per_instance() {
        let a = oauth2_proxy_args("team1", "dev", &oidc(), RELAY, &endpoints());
        let b = oauth2_proxy_args("team2", "dev", &oidc(), RELAY, &endpoints());
        let cookie = |args: &[String]| args.iter().find(|a| a.starts_with("--cookie-name=")).cloned().unwrap();
        assert_ne!(cookie(&a), cookie(&b));
    }

    #[test]
    fn the_gate_gets_the_clusters_prefixes_in_oidc_mode_only() {
        let signin = SigninSettings { oidc: Some(oidc()), ..Default::default() };
        let args = gate_args(AuthMode::Oidc, "team1", "dev", AgentState::Runs, "dev-tinycode-password", &signin);
        assert_eq!(args[0], "gate");
        assert!(args.contains(&"--upstream=http://dev-tinycode-agent.team1.svc:4096".to_string()));
        assert!(args.contains(&"--activity-report=http://dev-tinycode-agent.team1.svc:4098/activity".to_string()));
        assert!(args.contains(&"--username-prefix=oidc:".to_string()));
        assert!(args.contains(&"--cache-seconds=30".to_string()));
        let args = gate_args(AuthMode::Openshift, "team1", "dev", AgentState::Idle, "dev-tinycode-password", &signin);
        assert!(args.contains(&"--agent=idle".to_string()));
        assert!(!args.iter().any(|a| a.starts_with("--username-prefix")));
        assert!(args.contains(&"--mode=openshift".to_string()));
        assert!(args.contains(&format!("--listen={GATE_LISTEN}")));
    }

    #[test]
    fn a_password_front_is_the_gate_alone_on_the_public_port() {
        let signin = SigninSettings { oidc: Some(oidc()), ..Default::default() };
        let args = gate_args(AuthMode::Password, "team1", "dev", AgentState::Stopped, "mine", &signin);
        assert!(args.contains(&"--listen=0.0.0.0:4180".to_string()), "{args:?}");
        assert!(args.contains(&"--mode=password".to_string()));
        assert!(args.contains(&"--agent=stopped".to_string()));
        assert!(args.contains(&"--password-secret=mine".to_string()));
        assert!(args.contains(&format!("--password-file={GATE_MOUNT}/password")));
        // No review: nothing a password instance does not use.
        for absent in ["--review-url", "--relay-credential-file", "--ca-file", "--cache-seconds"] {
            assert!(!args.iter().any(|a| a.starts_with(absent)), "{absent} in {args:?}");
        }
    }

    /// Every mode's front asks the relay to start its idle-stopped instance,
    /// with the start credential; without the front nothing asks.
    #[test]
    fn every_front_may_ask_to_start_its_instance() {
        for mode in [AuthMode::Password, AuthMode::Openshift, AuthMode::Oidc] {
            let signin = SigninSettings { oidc: Some(oidc()), relay_url: RELAY.into(), ..Default::default() };
            let args = gate_args(mode, "team1", "dev", AgentState::Idle, "mine", &signin);
            assert!(args.contains(&format!("--start-url={RELAY}/start/team1/dev")), "{mode:?}: {args:?}");
            assert!(args.contains(&format!("--start-credential-file={GATE_MOUNT}/start-credential")), "{args:?}");
            let off = SigninSettings { front: false, ..signin };
            let args = gate_args(mode, "team1", "dev", AgentState::Idle, "mine", &off);
            assert!(!args.iter().any(|a| a.starts_with("--start")), "{mode:?} without a front: {args:?}");
        }
    }

    #[test]
    fn start_credentials_are_per_instance_and_never_a_relay_credential() {
        let a = start_credential(b"key", "team1", "dev");
        assert!(a.starts_with("tsc1."), "{a}");
        assert!(start_credential_matches(b"key", "team1", "dev", &a));
        assert!(!start_credential_matches(b"key", "team1", "prod", &a));
        assert!(!start_credential_matches(b"key", "team1d", "ev", &start_credential(b"key", "team1", "dev")));
        assert!(!start_credential_matches(b"other", "team1", "dev", &a));
        // The same key and instance: the other credential's MAC is not this one.
        let relay = relay_credential(b"key", "team1", "dev");
        assert!(!start_credential_matches(b"key", "team1", "dev", &relay.replacen("trc1.", "tsc1.", 1)));
        assert!(!relay_credential_matches(b"key", "team1", "dev", &a.replacen("tsc1.", "trc1.", 1)));
    }
}

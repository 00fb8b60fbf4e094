//! Who a request is from, as the sign-in proxy in front of the gate says,
//! and the refusals a request can meet.

use std::fmt;

use axum::http::{HeaderMap, HeaderName, StatusCode};
use sha2::{Digest, Sha256};

use crate::ops::decisions::{CacheKey, Decision, token_key};

/// The user oauth2-proxy (or OpenShift's oauth-proxy) signed in.
pub const USER_HEADER: HeaderName = HeaderName::from_static("x-forwarded-user");
/// The user's groups, comma-joined (oauth2-proxy).
pub const GROUPS_HEADER: HeaderName = HeaderName::from_static("x-forwarded-groups");
/// The user's own OpenShift token (oauth-proxy's `--pass-access-token`).
pub const ACCESS_TOKEN_HEADER: HeaderName = HeaderName::from_static("x-forwarded-access-token");

/// Names only the cluster gives (`system:masters`, `system:serviceaccount:...`).
pub const RESERVED_PREFIX: &str = "system:";

/// Most groups a user may be in (more: 400).
pub const MAX_GROUPS: usize = 64;
/// Longest one group name may be, in bytes (longer: 400).
pub const MAX_GROUP_LEN: usize = 256;
/// Longest one identity header may be, in bytes, all its values together (longer: 431).
pub const MAX_HEADER_LEN: usize = 8 * 1024;

/// How the proxy in front says who the user is (`--mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// oauth2-proxy: X-Forwarded-User and X-Forwarded-Groups, checked with a
    /// SubjectAccessReview made with the gate's own ServiceAccount token.
    Oidc,
    /// OpenShift's oauth-proxy: X-Forwarded-Access-Token, checked with a
    /// SelfSubjectAccessReview made with that token.
    Openshift,
    /// No proxy: the caller's HTTP Basic password, checked against
    /// `--password-file` (the front of a password-mode instance).
    Password,
}

/// Strings put before the user name and each group, so they read as the
/// cluster's OIDC authenticator names them (its username and groups prefixes).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Prefixes {
    pub user: String,
    pub groups: String,
}

/// The caller a review is about.
#[derive(Clone, PartialEq, Eq)]
pub enum Subject {
    /// oidc: a user and their groups, prefixed, the groups sorted without repeats.
    User { name: String, groups: Vec<String> },
    /// openshift: the user's own token; `name` (X-Forwarded-User) only for messages.
    Token { token: String, name: Option<String> },
}

/// Never shows a token.
impl fmt::Debug for Subject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Subject::User { name, groups } => {
                f.debug_struct("User").field("name", name).field("groups", groups).finish()
            }
            Subject::Token { name, .. } => f.debug_struct("Token").field("name", name).finish_non_exhaustive(),
        }
    }
}

impl Subject {
    /// What its decision is cached by: a SHA-256 of the user and groups, or of the token.
    pub fn key(&self) -> CacheKey {
        match self {
            Subject::User { name, groups } => {
                // Each string with its length first, so no two lists hash alike.
                let mut hash = Sha256::new();
                hash.update(b"user\0");
                for s in std::iter::once(name).chain(groups) {
                    hash.update((s.len() as u64).to_be_bytes());
                    hash.update(s.as_bytes());
                }
                hash.finalize().into()
            }
            Subject::Token { token, .. } => token_key(token),
        }
    }

    /// Who to name in messages and logs.
    pub fn display_name(&self) -> &str {
        match self {
            Subject::User { name, .. } => name,
            Subject::Token { name: Some(name), .. } => name,
            Subject::Token { name: None, .. } => "(the signed-in user)",
        }
    }
}

/// Why a request is not passed on; each has its status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No identity from the proxy in front.
    NoIdentity,
    /// An identity header longer than [`MAX_HEADER_LEN`].
    TooLarge,
    /// An identity header that cannot be read: repeated, not text, too many
    /// groups or a group too long.
    Malformed(&'static str),
    /// The apiserver did not accept the user's token.
    Unauthenticated,
    /// The user may not `use` the instance.
    Forbidden,
    /// The review could not be made (the apiserver failed or took too long).
    Unavailable,
    /// A user or group name under `system:`, which only the cluster gives:
    /// an identity provider's name there would be reviewed as the cluster's.
    Reserved,
    /// A state-changing request (or an upgrade) another site made in the
    /// user's name (see `browser::cross_site`).
    CrossSite,
    /// Password mode: no password, or not the instance's.
    NoPassword,
}

impl Refusal {
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::NoIdentity | Refusal::Unauthenticated | Refusal::NoPassword => StatusCode::UNAUTHORIZED,
            Refusal::TooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Refusal::Malformed(_) => StatusCode::BAD_REQUEST,
            Refusal::Forbidden | Refusal::Reserved | Refusal::CrossSite => StatusCode::FORBIDDEN,
            Refusal::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        }
    }
}

/// A decision as the gate acts on it: `Ok` passes the request on.
pub fn outcome(decision: Decision) -> Result<(), Refusal> {
    match decision {
        Decision::Allowed => Ok(()),
        Decision::Unauthenticated => Err(Refusal::Unauthenticated),
        Decision::Forbidden => Err(Refusal::Forbidden),
    }
}

/// The values of header `name` as text, all together at most
/// [`MAX_HEADER_LEN`] bytes, without control characters.
fn values<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Vec<&'h str>, Refusal> {
    let all = headers.get_all(name);
    if all.iter().map(|v| v.len()).sum::<usize>() > MAX_HEADER_LEN {
        return Err(Refusal::TooLarge);
    }
    all.iter()
        .map(|v| {
            std::str::from_utf8(v.as_bytes())
                .ok()
                .filter(|s| !s.chars().any(char::is_control))
                .ok_or(Refusal::Malformed("an identity header that is not UTF-8 text"))
        })
        .collect()
}

/// The one value of header `name`, trimmed; `None` when absent or empty.
fn single<'h>(headers: &'h HeaderMap, name: &HeaderName) -> Result<Option<&'h str>, Refusal> {
    match values(headers, name)?.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(one.trim()).filter(|s| !s.is_empty())),
        _ => Err(Refusal::Malformed("a repeated identity header")),
    }
}

/// The groups of X-Forwarded-Groups (every value, split on commas,
/// trimmed, empty ones dropped), checked against [`MAX_GROUPS`] and
/// [`MAX_GROUP_LEN`].
pub fn groups(headers: &HeaderMap) -> Result<Vec<&str>, Refusal> {
    let mut groups = Vec::new();
    for value in values(headers, &GROUPS_HEADER)? {
        for group in value.split(',').map(str::trim).filter(|g| !g.is_empty()) {
            if group.len() > MAX_GROUP_LEN {
                return Err(Refusal::Malformed("a group name longer than 256 bytes"));
            }
            groups.push(group);
        }
    }
    if groups.len() > MAX_GROUPS {
        return Err(Refusal::Malformed("more than 64 groups"));
    }
    Ok(groups)
}

/// The subject of a request in `mode`.
pub fn subject(mode: Mode, headers: &HeaderMap, prefixes: &Prefixes) -> Result<Subject, Refusal> {
    let user = single(headers, &USER_HEADER)?;
    match mode {
        Mode::Oidc => {
            let user = user.ok_or(Refusal::NoIdentity)?;
            let mut groups: Vec<String> =
                groups(headers)?.into_iter().map(|g| format!("{}{g}", prefixes.groups)).collect();
            groups.sort();
            groups.dedup();
            let name = format!("{}{user}", prefixes.user);
            if std::iter::once(&name).chain(&groups).any(|n| n.starts_with(RESERVED_PREFIX)) {
                return Err(Refusal::Reserved);
            }
            Ok(Subject::User { name, groups })
        }
        Mode::Openshift => {
            let token = single(headers, &ACCESS_TOKEN_HEADER)?.ok_or(Refusal::NoIdentity)?;
            if token.len() > crate::ops::metrics_auth::MAX_TOKEN_LEN || !token.bytes().all(|b| b.is_ascii_graphic()) {
                return Err(Refusal::Malformed("an access token that is not one visible ASCII word"));
            }
            Ok(Subject::Token { token: token.to_string(), name: user.map(str::to_string) })
        }
        // A password names nobody (the gate checks it without a subject).
        Mode::Password => Err(Refusal::NoPassword),
    }
}

/// The ClusterRole that grants `use` on a namespace's instances
/// (config/rbac/user_role.yaml).
pub const INSTANCE_USER_ROLE: &str = "tinycode-instance-user";

/// The command an admin of `namespace` runs to let `user` use its instances.
pub fn grant_command(user: &str, namespace: &str) -> String {
    format!(
        "kubectl create rolebinding {} --clusterrole={INSTANCE_USER_ROLE} --user={} -n {namespace}",
        binding_name(user),
        shell_quote(user)
    )
}

/// `s` as one word for a POSIX shell: single-quoted, its own single quotes
/// closed, escaped and reopened.
fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `s` as one shell word: as it is when it holds only letters, digits and
/// `.`, `_`, `-` (Kubernetes names do), quoted otherwise.
pub fn shell_word(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if plain { s.to_string() } else { shell_quote(s) }
}

/// A RoleBinding name for `user`: `tinycode-use-` and the user's letters and
/// digits in lower case, each run of other characters as one `-`, at most 63
/// characters, never ending in `-`.
fn binding_name(user: &str) -> String {
    let mut word = String::new();
    for c in user.chars() {
        if c.is_ascii_alphanumeric() {
            word.push(c.to_ascii_lowercase());
        } else if !word.is_empty() && !word.ends_with('-') {
            word.push('-');
        }
    }
    let mut name = format!("tinycode-use-{}", word.trim_end_matches('-'));
    name.truncate(63);
    let name = name.trim_end_matches('-');
    if name == "tinycode-use" { "tinycode-use-user".to_string() } else { name.to_string() }
}

/// The text of a refusal for `subject` (when known) at `namespace`/`instance`.
pub fn message(refusal: Refusal, subject: Option<&Subject>, namespace: &str, instance: &str) -> String {
    let who = subject.map_or("(unknown)", Subject::display_name);
    match refusal {
        Refusal::NoIdentity => "Unauthorized: no signed-in user came with the request\n".to_string(),
        Refusal::TooLarge => "an identity header is larger than 8 KiB\n".to_string(),
        Refusal::Malformed(what) => format!("Bad request: {what}\n"),
        Refusal::Unauthenticated => {
            "Unauthorized: the cluster did not accept your sign-in; sign in again\n".to_string()
        }
        Refusal::Forbidden => format!(
            "Forbidden: {who} may not use tinycode instance {instance} in namespace {namespace}.\n\
             An admin of namespace {namespace} can grant it with a RoleBinding there to the ClusterRole \
             {role} (verb \"use\" on \"tinycodeinstances\"), or to a Role allowing \"use\" on this \
             instance only (apiGroup tinycode.dev, resourceNames [{instance}]):\n{command}\n",
            role = INSTANCE_USER_ROLE,
            command = grant_command(who, namespace),
        ),
        Refusal::Unavailable => "Service unavailable: cannot check your access now; try again shortly\n".to_string(),
        Refusal::Reserved => "Forbidden: the identity provider named you or one of your groups under \"system:\", \
             which only the cluster gives; a cluster-admin sets --oidc-username-prefix and --oidc-groups-prefix \
             as the apiserver's OIDC prefixes\n"
            .to_string(),
        Refusal::CrossSite => format!(
            "Forbidden: another site sent this request to tinycode instance {instance} in namespace {namespace} \
             in your name; open the instance at its own URL\n"
        ),
        Refusal::NoPassword => format!(
            "Unauthorized: tinycode instance {instance} in namespace {namespace} asks for its password \
             (any user name)\n"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&HeaderName, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.append((*name).clone(), HeaderValue::from_str(value).unwrap());
        }
        h
    }

    fn user(name: &str, groups: &[&str]) -> Subject {
        Subject::User { name: name.into(), groups: groups.iter().map(|g| g.to_string()).collect() }
    }

    #[test]
    fn oidc_users_and_groups_are_read_trimmed_and_deduplicated() {
        let h = headers(&[(&USER_HEADER, " alice@example.com "), (&GROUPS_HEADER, "dev, ops,,  dev ,")]);
        assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Ok(user("alice@example.com", &["dev", "ops"])));
        // Several X-Forwarded-Groups headers are one list.
        let h = headers(&[(&USER_HEADER, "bob"), (&GROUPS_HEADER, "b"), (&GROUPS_HEADER, "a,c")]);
        assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Ok(user("bob", &["a", "b", "c"])));
        let h = headers(&[(&USER_HEADER, "carol")]);
        assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Ok(user("carol", &[])));
    }

    #[test]
    fn prefixes_are_put_before_the_user_and_each_group() {
        let prefixes = Prefixes { user: "oidc:".into(), groups: "oidc-group:".into() };
        let h = headers(&[(&USER_HEADER, "alice"), (&GROUPS_HEADER, "dev,ops")]);
        assert_eq!(subject(Mode::Oidc, &h, &prefixes), Ok(user("oidc:alice", &["oidc-group:dev", "oidc-group:ops"])));
    }

    #[test]
    fn names_only_the_cluster_gives_are_refused_unless_a_prefix_moves_them() {
        for h in [
            headers(&[(&USER_HEADER, "alice"), (&GROUPS_HEADER, "dev,system:masters")]),
            headers(&[(&USER_HEADER, "system:admin")]),
            headers(&[(&USER_HEADER, "system:serviceaccount:kube-system:default")]),
        ] {
            assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Err(Refusal::Reserved), "{h:?}");
        }
        let h = headers(&[(&USER_HEADER, "system:admin"), (&GROUPS_HEADER, "system:masters")]);
        let prefixes = Prefixes { user: "oidc:".into(), groups: "oidc:".into() };
        assert_eq!(subject(Mode::Oidc, &h, &prefixes), Ok(user("oidc:system:admin", &["oidc:system:masters"])));
        assert_eq!(Refusal::Reserved.status(), StatusCode::FORBIDDEN);
    }

    #[test]
    fn a_missing_or_empty_user_is_no_identity() {
        for h in [headers(&[]), headers(&[(&USER_HEADER, "")]), headers(&[(&USER_HEADER, "   ")])] {
            assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Err(Refusal::NoIdentity), "{h:?}");
        }
        let h = headers(&[(&GROUPS_HEADER, "dev")]);
        assert_eq!(subject(Mode::Oidc, &h, &Prefixes::default()), Err(Refusal::NoIdentity));
        assert_eq!(Refusal::NoIdentity.status(), StatusCode::UNAUTHORIZED);
    }

    #[test]
    fn identity_headers_are_bounded() {
        let p = Prefixes::default();
        let many = (0..=MAX_GROUPS).map(|i| format!("g{i}")).collect::<Vec<_>>().join(",");
        let h = headers(&[(&USER_HEADER, "a"), (&GROUPS_HEADER, &many)]);
        assert!(matches!(subject(Mode::Oidc, &h, &p), Err(Refusal::Malformed(_))));
        let just_enough = (0..MAX_GROUPS).map(|i| format!("g{i}")).collect::<Vec<_>>().join(",");
        let h = headers(&[(&USER_HEADER, "a"), (&GROUPS_HEADER, &just_enough)]);
        assert!(matches!(subject(Mode::Oidc, &h, &p), Ok(Subject::User { groups, .. }) if groups.len() == MAX_GROUPS));

        let long = "g".repeat(MAX_GROUP_LEN + 1);
        let h = headers(&[(&USER_HEADER, "a"), (&GROUPS_HEADER, &long)]);
        assert!(matches!(subject(Mode::Oidc, &h, &p), Err(Refusal::Malformed(_))));
        let h = headers(&[(&USER_HEADER, "a"), (&GROUPS_HEADER, &"g".repeat(MAX_GROUP_LEN))]);
        assert!(subject(Mode::Oidc, &h, &p).is_ok());

        let huge = vec!["g"; MAX_HEADER_LEN / 2 + 1].join(",");
        let h = headers(&[(&USER_HEADER, "a"), (&GROUPS_HEADER, &huge)]);
        assert_eq!(subject(Mode::Oidc, &h, &p), Err(Refusal::TooLarge));
        let h = headers(&[(&USER_HEADER, &"u".repeat(MAX_HEADER_LEN + 1))]);
        assert_eq!(subject(Mode::Oidc, &h, &p), Err(Refusal::TooLarge));
        assert_eq!(Refusal::TooLarge.status(), StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE);

        let h = headers(&[(&USER_HEADER, "a"), (&USER_HEADER, "b")]);
        assert!(matches!(subject(Mode::Oidc, &h, &p), Err(Refusal::Malformed(_))), "two users");
        let mut h = HeaderMap::new();
        h.insert(USER_HEADER, HeaderValue::from_bytes(b"al\xffice").unwrap());
        assert!(matches!(subject(Mode::Oidc, &h, &p), Err(Refusal::Malformed(_))), "not UTF-8");
        let mut h = HeaderMap::new();
        h.insert(USER_HEADER, HeaderValue::from_bytes("zoë".as_bytes()).unwrap());
        assert_eq!(subject(Mode::Oidc, &h, &p), Ok(user("zoë", &[])), "UTF-8 names are names");
        assert_eq!(Refusal::Malformed("x").status(), StatusCode::BAD_REQUEST);
    }

    #[test]
    fn openshift_takes_the_access_token_and_the_user_only_for_messages() {
        let p = Prefixes { user: "ignored:".into(), groups: "ignored:".into() };
        let h = headers(&[(&ACCESS_TOKEN_HEADER, "sha256~abc"), (&USER_HEADER, "alice")]);
        let s = subject(Mode::Openshift, &h, &p).unwrap();
        assert_eq!(s, Subject::Token { token: "sha256~abc".into(), name: Some("alice".into()) });
        assert_eq!(s.display_name(), "alice");
        assert!(!format!("{s:?}").contains("sha256~abc"), "Debug never shows the token: {s:?}");
        assert_eq!(s.key(), token_key("sha256~abc"));

        let h = headers(&[(&USER_HEADER, "alice")]);
        assert_eq!(subject(Mode::Openshift, &h, &p), Err(Refusal::NoIdentity), "a user without a token");
        let h = headers(&[(&ACCESS_TOKEN_HEADER, "two words")]);
        assert!(matches!(subject(Mode::Openshift, &h, &p), Err(Refusal::Malformed(_))));
        // oidc mode ignores a token.
        let h = headers(&[(&ACCESS_TOKEN_HEADER, "sha256~abc")]);
        assert_eq!(subject(Mode::Oidc, &h, &p), Err(Refusal::NoIdentity));
    }

    #[test]
    fn cache_keys_tell_users_and_group_lists_apart() {
        let keys = [
            user("alice", &[]).key(),
            user("alice", &["dev"]).key(),
            user("alice", &["dev", "ops"]).key(),
            user("alice", &["dev,ops"]).key(),
            user("alicedev", &[]).key(),
            user("bob", &["dev"]).key(),
        ];
        for (i, a) in keys.iter().enumerate() {
            for b in &keys[i + 1..] {
                assert_ne!(a, b);
            }
        }
        assert_eq!(user("alice", &["dev"]).key(), user("alice", &["dev"]).key());
    }

    #[test]
    fn decisions_map_to_outcomes_and_statuses() {
        assert_eq!(outcome(Decision::Allowed), Ok(()));
        assert_eq!(outcome(Decision::Forbidden), Err(Refusal::Forbidden));
        assert_eq!(outcome(Decision::Unauthenticated), Err(Refusal::Unauthenticated));
        assert_eq!(Refusal::Forbidden.status(), StatusCode::FORBIDDEN);
        assert_eq!(Refusal::Unauthenticated.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(Refusal::Unavailable.status(), StatusCode::SERVICE_UNAVAILABLE);
    }

    #[test]
    fn a_forbidden_message_names_the_user_and_how_to_grant() {
        let text = message(Refusal::Forbidden, Some(&user("oidc:alice", &[])), "team-a", "ide");
        for part in ["oidc:alice", "team-a", "ide", "RoleBinding", "\"use\"", "tinycodeinstances"] {
            assert!(text.contains(part), "{part} missing from {text}");
        }
    }

    #[test]
    fn binding_names_are_valid_whatever_the_user() {
        assert_eq!(binding_name("Alice@Example.COM"), "tinycode-use-alice-example-com");
        assert_eq!(binding_name("@@@"), "tinycode-use-user");
        let long = binding_name(&"a".repeat(200));
        assert!(long.len() <= 63 && !long.ends_with('-'), "{long}");
    }
}

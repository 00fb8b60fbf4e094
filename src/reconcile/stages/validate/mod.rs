//! Stage 2 (pure): is the instance allowed to run, given what the cluster
//! holds? Decides once what later stages use: the SCC tier, the approved
//! cluster role and discovery namespaces, the Secrets the pods mount. The
//! [`ValidInstance`] also carries the spec as validated and what later
//! stages need of the object's metadata, so nothing after this stage reads
//! the raw object's spec.

use k8s_openapi::ByteString;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

use crate::api::naming;
use crate::api::{AuthMode, TinycodeInstance, TinycodeInstanceSpec};
use crate::platform::scc::SccTier;
use crate::platform::{self, Platform};
use crate::reconcile::conditions::{self, Desired};
use crate::reconcile::discover::approved_discovery;
use crate::reconcile::kubeconfig::kubeconfig_warnings;
use crate::reconcile::reason::Blocked;
use crate::reconcile::stages::observe::{KubeconfigFacts, Observed, SecretFacts};
use crate::reconcile::{approval, class_policy, rules};
use crate::settings::Settings;

use crate::reconcile::marks::PASSWORD_KEY;

/// An instance cleared to run, with everything decided about it.
#[derive(Debug, Clone, PartialEq)]
pub struct ValidInstance {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    /// The spec these decisions were made for.
    pub spec: TinycodeInstanceSpec,
    /// The instance as owner of what the operator creates for it.
    pub owner: OwnerReference,
    /// The reconcile-request annotation, when set.
    pub request: Option<ReconcileRequest>,
    pub tier: SccTier,
    pub cluster_role: Option<String>,
    pub discovery_namespaces: Vec<String>,
    /// The password Secret to create (generated mode, first time): name and password.
    pub generate_password: Option<(String, String)>,
    /// Digests of the Secrets the pods mount, so a rotated Secret rolls them.
    pub mounted: Vec<String>,
    /// Cluster-admin mode: the kubeconfig copy to keep (key, content) and ClusterAdminReady.
    pub kubeconfig_copy: Option<(String, ByteString)>,
    pub cluster_admin_condition: Option<Desired>,
    pub warnings: Vec<String>,
    /// Offline only: what would need a cluster-admin's approval.
    pub pending_approvals: Vec<String>,
    /// The front's Secret (the sign-in modes', or password mode's with a
    /// front) and the provider's endpoints.
    pub signin: Option<Signin>,
    /// Idle stop: whether the workloads stay stopped for idleness, and its status.
    pub idle: crate::reconcile::idle::IdleState,
    /// What the instance's TinycodeClass adds beyond the spec.
    pub from_class: crate::render::values::FromClass,
    /// Longest a change the user did not make waits for a busy agent (None: never).
    pub rollout_busy_deadline: Option<std::time::Duration>,
}

/// What a sign-in instance gets besides its chart values.
#[derive(Debug, Clone, PartialEq)]
pub struct Signin {
    /// The sign-in Secret's name and data as it must be.
    pub secret: String,
    pub data: std::collections::BTreeMap<String, String>,
    /// The Secret must be written (missing, or its relay credential changed).
    pub write: bool,
    /// oidc: the provider's endpoints.
    pub endpoints: Option<crate::render::signin::OidcEndpoints>,
}

/// The reconcile-request annotation ([`conditions::RECONCILE_REQUEST_ANNOTATION`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcileRequest {
    /// Its value, echoed in status once handled.
    pub value: String,
    /// Status says this value was handled already (`lastHandledReconcileAt`).
    pub handled: bool,
}

impl ReconcileRequest {
    /// The request on `inst`, if any, and whether its status shows it handled.
    pub fn of(inst: &TinycodeInstance) -> Option<Self> {
        let value = conditions::reconcile_request(inst)?;
        let handled_value = inst.status.as_ref().and_then(|s| s.last_handled_reconcile_at.as_deref());
        Some(Self { handled: handled_value == Some(value.as_str()), value })
    }

    /// The value, when the request still asks for a run.
    pub fn unhandled(&self) -> Option<&str> {
        (!self.handled).then_some(self.value.as_str())
    }
}

/// The instance as owner of what the operator creates for it.
pub fn owner_reference(inst: &TinycodeInstance) -> OwnerReference {
    OwnerReference {
        api_version: TinycodeInstance::api_version(&()).into_owned(),
        kind: TinycodeInstance::kind(&()).into_owned(),
        name: inst.metadata.name.clone().unwrap_or_default(),
        uid: inst.metadata.uid.clone().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: None,
    }
}

/// Why the instance may not run (what it held without approval is withdrawn
/// by [`crate::reconcile::revoke`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    pub reason: Blocked,
    pub message: String,
}

fn blocked(reason: Blocked, message: impl Into<String>) -> Invalid {
    Invalid { reason, message: message.into() }
}

/// Checks `inst` (whose spec passed [`rules::validate`] with `warnings`) against the cluster.
pub fn validate(
    observed: &Observed,
    inst: &TinycodeInstance,
    settings: &Settings,
    warnings: Vec<String>,
) -> Result<ValidInstance, Invalid> {
    let name = inst.metadata.name.clone().unwrap_or_default();
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let spec = &inst.spec;
    let tier = SccTier::select(spec);
    let applied = class_policy(&observed.class, observed.class_rank, spec, settings)?;
    let mut warnings = warnings;
    warnings.extend(applied.warnings.iter().cloned());
    if observed.offline {
        return offline(observed, inst, tier, settings, warnings, applied);
    }
    let labels = observed.namespace_labels.clone().unwrap_or_default();
    class_permitted(&observed.class, spec, &labels, &ns, settings.platform.cli())?;
    let host_path_writable = spec.storage.host_path.as_ref().is_some_and(|h| !h.read_only);
    namespace_gates(observed, host_path_writable, settings, &ns, tier, &labels)?;
    if let Some(host) = crate::reconcile::hosts::wanted(inst) {
        let me = crate::reconcile::hosts::claim_of(inst, &host);
        crate::reconcile::hosts::check(&host, &me, &observed.host_claims)
            .map_err(|message| blocked(Blocked::HostnameTaken, message))?;
    }
    let cluster_role = approval::cluster_role(
        settings.platform.cli(),
        &ns,
        &spec.cluster_admin,
        &labels,
        &settings.allowed_cluster_roles,
    )
    .map_err(|message| Invalid { reason: Blocked::ClusterRoleNotApproved, message })?;
    let requested: Vec<String> = approval::requested_discovery(spec).cloned().collect();
    let discovery_namespaces = approved_discovery(&ns, spec, &observed.discovery_labelled);
    warnings.extend(discovery_warnings(observed, &requested, &ns, settings));
    let mut mounted = Vec::new();
    let generate_password = password(settings.platform.cli(), observed, inst, &name, &ns, &mut mounted)?;
    let signin = signin(observed, spec, settings, (&ns, &name), &mut mounted)?;
    git_credentials(observed, inst, &ns, &mut mounted, &mut warnings)?;
    secret_references(observed, &applied.spec, &ns, &mut mounted)?;
    let (kubeconfig_copy, cluster_admin_condition) = match &observed.kubeconfig {
        Some(facts) if spec.cluster_admin.enabled => {
            let (copy, condition) = kubeconfig(settings.platform.cli(), facts, inst, &ns, &mut mounted)?;
            (copy, Some(condition))
        }
        _ => (None, None),
    };
    if !settings.platform.routes {
        warnings.extend(crate::render::ingress::warnings(spec));
    }
    Ok(ValidInstance {
        uid: inst.metadata.uid.clone().unwrap_or_default(),
        spec: applied.spec,
        from_class: applied.from_class,
        rollout_busy_deadline: applied.rollout_busy_deadline,
        owner: owner_reference(inst),
        request: ReconcileRequest::of(inst),
        name,
        namespace: ns,
        tier,
        cluster_role,
        discovery_namespaces,
        generate_password,
        mounted,
        kubeconfig_copy,
        cluster_admin_condition,
        warnings,
        pending_approvals: Vec::new(),
        signin,
        idle: crate::reconcile::idle::decide(
            inst,
            &applied.idle,
            observed.activity.as_ref(),
            observed.now,
            settings.platform.cli(),
        ),
    })
}

/// Warnings for discovery namespaces other than the instance's own that are
/// not searched: not labelled, not watched, or not prepared.
fn discovery_warnings(observed: &Observed, requested: &[String], ns: &str, settings: &Settings) -> Vec<String> {
    let mut warnings = Vec::new();
    if !requested.iter().any(|n| n != ns) {
        return warnings;
    }
    let unprepared = &observed.discovery_unprepared;
    // Labelled but unprepared namespaces get their own warning below.
    let mut labelled = observed.discovery_labelled.clone();
    labelled.extend(unprepared.iter().cloned());
    let cli = settings.platform.cli();
    let unlabelled = approval::discovery_namespaces(requested, ns, &labelled).1;
    // Outside the watched namespace a label would change nothing, so
    // asking a cluster-admin for one would mislead.
    let (unwatched, unlabelled): (Vec<String>, Vec<String>) =
        unlabelled.into_iter().partition(|other| !settings.watch_scope.covers(other));
    warnings.extend(unlabelled.iter().map(|other| approval::not_labelled_warning(cli, other)));
    warnings.extend(unwatched.iter().map(|other| {
        format!(
            "discovery namespace {other} is not searched: the operator watches only {} ({})",
            settings.watch_scope,
            crate::watch_scope::FLAG
        )
    }));
    for other in unprepared.iter().filter(|u| requested.iter().any(|r| r == "*" || r == *u)) {
        warnings.push(format!(
            "discovery namespace {other} is skipped: the operator is not prepared there (a cluster-admin prepares it with {})",
            crate::platform::prepare::prepare_commands(cli, other, &settings.operator_namespace, &settings.operator_service_account)
        ));
    }
    warnings
}

/// Without a cluster: no gates, nothing approved (what would need approval
/// is listed instead).
fn offline(
    observed: &Observed,
    inst: &TinycodeInstance,
    tier: SccTier,
    settings: &Settings,
    mut warnings: Vec<String>,
    applied: class_policy::Applied,
) -> Result<ValidInstance, Invalid> {
    let name = inst.metadata.name.clone().unwrap_or_default();
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    let mut mounted = Vec::new();
    let generate_password = password(settings.platform.cli(), observed, inst, &name, &ns, &mut mounted)?;
    let signin = offline_signin(inst, settings)?;
    git_credentials(observed, inst, &ns, &mut mounted, &mut warnings)?;
    Ok(ValidInstance {
        signin,
        idle: crate::reconcile::idle::IdleState::default(),
        uid: inst.metadata.uid.clone().unwrap_or_default(),
        spec: applied.spec,
        from_class: applied.from_class,
        rollout_busy_deadline: applied.rollout_busy_deadline,
        owner: owner_reference(inst),
        request: ReconcileRequest::of(inst),
        pending_approvals: pending_approvals(inst, &ns),
        name,
        namespace: ns,
        tier,
        cluster_role: None,
        discovery_namespaces: Vec::new(),
        generate_password,
        mounted,
        kubeconfig_copy: None,
        cluster_admin_condition: None,
        warnings,
    })
}

/// The instance's class applied to its spec, or why it is beyond it.
pub fn class_policy(
    choice: &class_policy::Choice,
    rank: usize,
    spec: &TinycodeInstanceSpec,
    settings: &Settings,
) -> Result<class_policy::Applied, Invalid> {
    class_policy::apply(choice, spec, settings, rank).map_err(|exceeds| {
        let reason = match choice {
            class_policy::Choice::Missing(_) => Blocked::ClassNotFound,
            _ => Blocked::ExceedsPolicy,
        };
        let message = exceeds.iter().map(|e| format!("{}: {}", e.field, e.message)).collect::<Vec<_>>().join("; ");
        blocked(reason, message)
    })
}

/// Whether the class that applies (named, or the default) is for namespace
/// `ns`: its namespaceSelector matches the namespace's labels. A selector
/// that cannot be read permits nothing.
fn class_permitted(
    choice: &class_policy::Choice,
    spec: &TinycodeInstanceSpec,
    labels: &std::collections::BTreeMap<String, String>,
    ns: &str,
    cli: &str,
) -> Result<(), Invalid> {
    use kube::core::{Selector, SelectorExt};
    let class_policy::Choice::Found { name, spec: class, .. } = choice else { return Ok(()) };
    let Some(selector) = &class.namespace_selector else { return Ok(()) };
    if Selector::try_from(selector.clone()).is_ok_and(|s| s.matches(labels)) {
        return Ok(());
    }
    let how = if spec.class_name.is_some() { "spec.className names" } else { "the default class is" };
    Err(blocked(
        Blocked::ClassNotPermitted,
        format!(
            "{how} TinycodeClass {name}, which is not for namespace {ns} (its namespaceSelector does not match the \
             namespace's labels): name another class in spec.className, or ask a cluster-admin to label the namespace \
             (`{cli} get tinycodeclass {name} -o jsonpath='{{.spec.namespaceSelector}}'` shows what it needs)"
        ),
    ))
}

/// Every Secret the spec names for pulling images, for environment
/// variables and for model servers' API keys exists (a pod naming a missing
/// one would never start).
fn secret_references(
    observed: &Observed,
    spec: &TinycodeInstanceSpec,
    ns: &str,
    mounted: &mut Vec<String>,
) -> Result<(), Invalid> {
    let present = &observed.secrets_present;
    // The environment reads these at start: their digests roll the pods when
    // a key rotates. Model servers' keys are files the model-key proxy
    // re-reads for each request: a rotation needs no new pod.
    let read: std::collections::BTreeSet<&str> = spec.env.iter().map(|e| e.secret_key_ref.name.as_str()).collect();
    mounted.extend(read.iter().filter_map(|n| observed.secret_digests.get(*n).cloned()));
    let mut missing = Vec::new();
    for (i, s) in spec.image_pull_secrets.iter().enumerate() {
        if !present.contains_key(&s.name) {
            missing.push(format!(
                "spec.imagePullSecrets[{i}] (or the class) names Secret {}, which does not exist",
                s.name
            ));
        }
    }
    let mut key = |field: String, r: &crate::api::SecretKeyRef| match present.get(&r.name) {
        None => missing.push(format!("{field} names Secret {}, which does not exist", r.name)),
        Some(keys) if !keys.contains(&r.key) => {
            missing.push(format!("{field} names key {} of Secret {}, which has no such key", r.key, r.name))
        }
        Some(_) => {}
    };
    for (i, e) in spec.env.iter().enumerate() {
        key(format!("spec.env[{i}] ({})", e.name), &e.secret_key_ref);
    }
    for (i, p) in spec.vllm.iter().flatten().enumerate() {
        if let Some(r) = &p.api_key_secret {
            key(format!("spec.vllm[{i}].apiKeySecret ({})", p.name), r);
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(blocked(
        Blocked::SecretReferenceMissing,
        format!("{} in namespace {ns}; create it or fix the reference", missing.join("; ")),
    ))
}

/// Whether the platform and the operator offer the instance's sign-in mode.
fn signin_offered(spec: &TinycodeInstanceSpec, settings: &Settings) -> Result<(), Invalid> {
    match spec.auth.mode {
        AuthMode::Password => Ok(()),
        AuthMode::Openshift if !settings.platform.routes => Err(blocked(
            Blocked::SignInUnsupported,
            "spec.auth.mode openshift signs users in with OpenShift's OAuth server, which this cluster (plain Kubernetes) does not have; use auth.mode oidc (once a cluster-admin configures the operator's OpenID Connect provider) or password",
        )),
        AuthMode::Openshift => Ok(()),
        AuthMode::Oidc if settings.signin.oidc.is_none() => Err(blocked(
            Blocked::SignInNotConfigured,
            "spec.auth.mode oidc needs the operator's OpenID Connect provider, and none is configured; a cluster-admin sets --oidc-issuer-url and --oidc-client-id and the client secret (README, Sign-in); meanwhile use auth.mode password",
        )),
        AuthMode::Oidc => Ok(()),
    }
}

/// The front's Secret as it must be: in the sign-in modes the proxy's cookie
/// secret (kept once drawn) and for oidc the relay credential; with a front,
/// the start credential (password mode's Secret holds that alone). Also the
/// provider's endpoints.
fn signin(
    observed: &Observed,
    spec: &TinycodeInstanceSpec,
    settings: &Settings,
    (ns, name): (&str, &str),
    mounted: &mut Vec<String>,
) -> Result<Option<Signin>, Invalid> {
    use crate::render::signin::{COOKIE_SECRET_KEY, RELAY_CREDENTIAL_KEY, START_CREDENTIAL_KEY};
    signin_offered(spec, settings)?;
    let signs_in = spec.auth.mode.signs_in();
    if !signs_in && !settings.signin.front {
        return Ok(None);
    }
    let facts = observed.signin.clone().unwrap_or_default();
    let unavailable = |e: &String| blocked(Blocked::SignInUnavailable, format!("sign-in cannot be set up: {e}"));
    let endpoints = match &facts.endpoints {
        Some(Ok(e)) => Some(e.clone()),
        Some(Err(e)) => return Err(unavailable(e)),
        None => None,
    };
    let mut data = std::collections::BTreeMap::new();
    if signs_in {
        let cookie = match (&facts.current, &facts.fresh_cookie) {
            (_, Some(fresh)) => fresh.clone(),
            (Some(current), None) => current.get(COOKIE_SECRET_KEY).cloned().unwrap_or_default(),
            (None, None) => return Err(blocked(Blocked::PasswordGenerationFailed, "no cookie secret was drawn")),
        };
        data.insert(COOKIE_SECRET_KEY.to_string(), cookie);
    }
    match &facts.relay_credential {
        Some(Ok(credential)) => {
            data.insert(RELAY_CREDENTIAL_KEY.to_string(), credential.clone());
        }
        Some(Err(e)) => return Err(unavailable(e)),
        None => {}
    }
    if spec.auth.mode == AuthMode::Oidc && (endpoints.is_none() || !data.contains_key(RELAY_CREDENTIAL_KEY)) {
        return Err(blocked(
            Blocked::SignInUnavailable,
            "sign-in cannot be set up: the OpenID Connect provider was not read",
        ));
    }
    if settings.signin.front {
        let credential = crate::render::signin::start_credential(&settings.digest_key.0, ns, name);
        data.insert(START_CREDENTIAL_KEY.to_string(), credential);
    }
    let secret = naming::signin_secret(name);
    mounted.push(crate::reconcile::stages::observe::content_digest(
        &secret,
        data.iter().map(|(k, v)| (k.as_str(), v.as_bytes())),
    ));
    Ok(Some(Signin { write: facts.current.as_ref() != Some(&data), secret, data, endpoints }))
}

/// Without a cluster: the mode is checked, the Secret's content and the
/// provider's endpoints are stand-ins named after what they would be.
fn offline_signin(inst: &TinycodeInstance, settings: &Settings) -> Result<Option<Signin>, Invalid> {
    signin_offered(&inst.spec, settings)?;
    if !inst.spec.auth.mode.signs_in() && !settings.signin.front {
        return Ok(None);
    }
    let endpoints = settings.signin.oidc.as_ref().filter(|_| inst.spec.auth.mode == AuthMode::Oidc).map(|o| {
        let read = |what: &str| format!("<{what} read from {}/.well-known/openid-configuration>", o.issuer_url);
        crate::render::signin::OidcEndpoints {
            issuer: o.issuer_url.clone(),
            authorization: read("authorization_endpoint"),
            token: read("token_endpoint"),
            jwks: read("jwks_uri"),
        }
    });
    Ok(Some(Signin {
        secret: naming::signin_secret(inst.metadata.name.as_deref().unwrap_or_default()),
        data: Default::default(),
        write: false,
        endpoints,
    }))
}

/// The namespace opted in (if the operator asks for that), is prepared, and
/// may run the tier.
fn namespace_gates(
    observed: &Observed,
    host_path_writable: bool,
    settings: &Settings,
    ns: &str,
    tier: SccTier,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), Invalid> {
    let cli = settings.platform.cli();
    if let Some((key, value)) = &settings.required_namespace_label
        && labels.get(key) != Some(value)
    {
        return Err(blocked(
            Blocked::NamespaceNotEnabled,
            format!(
                "namespace {ns} has not opted in to tinycode; a cluster-admin enables it with `{cli} label namespace {ns} {key}={value}`"
            ),
        ));
    }
    if settings.require_prepared_label && !crate::platform::prepare::labelled_prepared(labels) {
        let message = crate::platform::prepare::not_labelled_message(
            settings.platform.cli(),
            ns,
            &settings.operator_namespace,
            &settings.operator_service_account,
        );
        return Err(blocked(Blocked::NamespaceNotPrepared, message));
    }
    if !observed.missing_rules.is_empty() {
        let message = crate::platform::prepare::not_prepared_message(
            settings.platform.cli(),
            ns,
            &observed.missing_rules,
            &settings.operator_namespace,
            &settings.operator_service_account,
        );
        return Err(blocked(Blocked::NamespaceNotPrepared, message));
    }
    check_tier(observed, host_path_writable, settings.platform, ns, tier, labels)
}

/// Without the cluster nothing is approved: say what would need approval.
fn pending_approvals(inst: &TinycodeInstance, ns: &str) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(role) = inst.spec.cluster_admin.cluster_role.as_deref() {
        out.push(format!(
            "ClusterRole {role} is bound only when it is in --allowed-cluster-roles and namespace {ns} carries the label {}={role}",
            approval::ALLOW_CLUSTER_ROLE_LABEL
        ));
    }
    if inst.spec.discovery.as_ref().is_some_and(|d| d.namespaces.iter().any(|n| n != ns)) {
        out.push(format!(
            "other discovery namespaces are searched only when they carry the label {}=true",
            approval::DISCOVERY_LABEL
        ));
    }
    out
}

fn check_tier(
    observed: &Observed,
    host_path_writable: bool,
    platform: Platform,
    ns: &str,
    tier: SccTier,
    labels: &std::collections::BTreeMap<String, String>,
) -> Result<(), Invalid> {
    tier.check_approval(platform.cli(), ns, labels).map_err(|m| blocked(Blocked::SccNotApproved, m))?;
    if host_path_writable {
        SccTier::check_host_path_write(platform.cli(), ns, labels).map_err(|m| blocked(Blocked::SccNotApproved, m))?;
    }
    if !platform.sccs {
        return platform::check_pod_security(ns, tier, labels).map_err(|m| blocked(Blocked::PodSecurityNotAllowed, m));
    }
    if !observed.installed_sccs.contains(&tier.scc_name()) {
        return Err(blocked(
            Blocked::SccMissing,
            format!(
                "SecurityContextConstraints {} is not installed; a cluster-admin installs it with `make install` (config/scc)",
                tier.scc_name()
            ),
        ));
    }
    Ok(())
}

/// The password Secret: the one named, or the generated one (created when missing).
fn password(
    cli: &str,
    observed: &Observed,
    inst: &TinycodeInstance,
    name: &str,
    ns: &str,
    mounted: &mut Vec<String>,
) -> Result<Option<(String, String)>, Invalid> {
    let named = inst.spec.auth.password_secret.clone().filter(|p| !p.is_empty());
    match (&named, &observed.password) {
        (None, SecretFacts::Missing) => {
            let secret = naming::generated_password(name);
            let Some(password) = observed.fresh_password.clone() else {
                return Err(blocked(Blocked::PasswordGenerationFailed, "no random password was drawn"));
            };
            let data = [(PASSWORD_KEY, password.as_bytes())];
            mounted.push(crate::reconcile::stages::observe::content_digest(&secret, data.into_iter()));
            Ok(Some((secret, password)))
        }
        (None, SecretFacts::Present { keys, digest }) => {
            if !keys.iter().any(|k| k == PASSWORD_KEY) {
                let secret = naming::generated_password(name);
                return Err(blocked(
                    Blocked::PasswordSecretInvalid,
                    format!(
                        "Secret {secret} in {ns} has no key {PASSWORD_KEY}; delete it (`{cli} delete secret {secret} -n {ns}`) and the operator generates a new password"
                    ),
                ));
            }
            mounted.push(digest.clone());
            Ok(None)
        }
        (Some(pw), SecretFacts::Missing) => Err(blocked(
            Blocked::PasswordSecretMissing,
            format!(
                "spec.auth.passwordSecret names Secret {pw}, which does not exist in {ns}; create it with `{cli} create secret generic {pw} --from-literal={PASSWORD_KEY}=<password> -n {ns}`"
            ),
        )),
        (Some(pw), SecretFacts::Present { keys, digest }) => {
            if !keys.iter().any(|k| k == PASSWORD_KEY) {
                return Err(blocked(
                    Blocked::PasswordSecretInvalid,
                    format!(
                        "Secret {pw} in {ns} has no key {PASSWORD_KEY}; re-create it with `{cli} create secret generic {pw} --from-literal={PASSWORD_KEY}=<password> -n {ns}`"
                    ),
                ));
            }
            mounted.push(digest.clone());
            Ok(None)
        }
    }
}

fn git_credentials(
    observed: &Observed,
    inst: &TinycodeInstance,
    ns: &str,
    mounted: &mut Vec<String>,
    warnings: &mut Vec<String>,
) -> Result<(), Invalid> {
    let Some(cred) = inst.spec.git.as_ref().and_then(|g| g.credentials_secret.as_deref()) else { return Ok(()) };
    match &observed.git_credentials {
        None | Some(SecretFacts::Missing) => Err(blocked(
            Blocked::GitCredentialsMissing,
            format!(
                "spec.git.credentialsSecret names Secret {cred}, which does not exist in {ns}; create it with keys username and password (HTTPS) or ssh-privatekey (SSH)"
            ),
        )),
        Some(SecretFacts::Present { keys, digest }) => {
            mounted.push(digest.clone());
            let has = |k: &str| keys.iter().any(|x| x == k);
            if !(has("ssh-privatekey") || (has("username") && has("password"))) {
                warnings.push(format!(
                    "Secret {cred} has neither username+password nor ssh-privatekey; the clone will run without credentials"
                ));
            }
            Ok(())
        }
    }
}

/// The kubeconfig of cluster-admin mode. From another namespace it is used
/// only when that namespace's owner shares it with this one (else the copy
/// made earlier goes, and the message does not say whether the Secret exists).
fn kubeconfig(
    cli: &str,
    facts: &KubeconfigFacts,
    inst: &TinycodeInstance,
    ns: &str,
    mounted: &mut Vec<String>,
) -> Result<(Option<(String, ByteString)>, Desired), Invalid> {
    let ca = &inst.spec.cluster_admin;
    let secret_name = ca.kubeconfig_secret_name.clone().unwrap_or_default();
    let key = &ca.kubeconfig_secret_key;
    let source_ns = &facts.source_namespace;
    let cross_namespace = source_ns != ns;
    if cross_namespace {
        let shared =
            facts.source.as_ref().is_some_and(|s| approval::kubeconfig_shared(s.metadata.annotations.as_ref(), ns));
        if !shared {
            return Err(Invalid {
                reason: Blocked::KubeconfigNotShared,
                message: approval::kubeconfig_not_shared_message(cli, &secret_name, source_ns, ns),
            });
        }
    }
    let Some(secret) = &facts.source else {
        return Err(blocked(
            Blocked::KubeconfigSecretMissing,
            format!(
                "spec.clusterAdmin.kubeconfigSecretName names Secret {secret_name}, which does not exist in {source_ns}; create it with `{cli} create secret generic {secret_name} --from-file={key}=<kubeconfig> -n {source_ns}`"
            ),
        ));
    };
    mounted.push(crate::reconcile::stages::observe::secret_digest(secret));
    let Some(bytes) = secret.data.as_ref().and_then(|d| d.get(key)) else {
        return Err(blocked(
            Blocked::KubeconfigKeyMissing,
            format!(
                "Secret {secret_name} in {source_ns} has no key {key}; set spec.clusterAdmin.kubeconfigSecretKey to the key that holds the kubeconfig"
            ),
        ));
    };
    let warnings = kubeconfig_warnings(&bytes.0).map_err(|problem| {
        blocked(
            Blocked::KubeconfigInvalid,
            format!("Secret {secret_name} key {key} in {source_ns}: {problem}; store a working kubeconfig there"),
        )
    })?;
    let from = format!("kubeconfig from Secret {source_ns}/{secret_name} is mounted");
    let condition = if warnings.is_empty() {
        Desired::new(conditions::CLUSTER_ADMIN_READY, true, "KubeconfigReady", from)
    } else {
        let message = format!("{from}; warning: {}", warnings.join("; warning: "));
        Desired::new(conditions::CLUSTER_ADMIN_READY, true, "KubeconfigWarnings", message)
    };
    let copy = cross_namespace.then(|| (key.clone(), bytes.clone()));
    Ok((copy, condition))
}

/// Spec rules first (pure, no cluster): the warnings they give, or why the spec is invalid.
pub fn spec_rules(inst: &TinycodeInstance, settings: &Settings) -> Result<Vec<String>, rules::InvalidSpec> {
    let name = inst.metadata.name.clone().unwrap_or_default();
    let ns = inst.metadata.namespace.clone().unwrap_or_default();
    rules::validate(&name, &ns, &inst.spec, settings)
}

#[cfg(test)]
mod tests;

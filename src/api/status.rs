//! What the operator reports about an instance.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Observed state, written by the operator only.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TinycodeInstanceStatus {
    /// Where the instance stands: Pending, Deploying, Running, Stopped,
    /// Suspended, Failed or Terminating (the Ready condition says why).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Where the tinycode web UI is served: the Route's host on OpenShift, the
    /// Ingress's on Kubernetes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The metadata.generation this status was written for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciling, Stalled, IngressReady, VllmConfigReady,
    /// VllmWarning and ClusterAdminReady, each with a reason and a message
    /// naming the fix.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// Helm release that holds the instance's objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_release: Option<String>,
    /// Revision of that release last applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_revision: Option<i64>,
    /// SecurityContextConstraints granted to the instance's ServiceAccount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scc: Option<String>,
    /// Secret (in the instance namespace, key TINYCODE_SERVER_PASSWORD) holding
    /// the password: spec.auth.passwordSecret, or the one the operator generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_secret: Option<String>,
    /// The last `tinycode.dev/reconcile-requested-at` value handled (a full
    /// reconcile, helm included, ran for it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_reconcile_at: Option<String>,
    /// Helm failures in a row for what is applied now (the rendering and the
    /// reconcile request). Kept on the object, so a restarted operator or a
    /// new leader honours the retry budget instead of starting it over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub helm_failures: Option<HelmFailures>,
    /// The TinycodeClass whose defaults and limits apply (spec.className, or
    /// the default class).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub class: Option<String>,
    /// Who may open the UI (spec.auth.mode as applied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthStatus>,
    /// Idle stop: the timeout in force and whether the operator stopped the
    /// instance for idleness.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle: Option<IdleStatus>,
    /// The last activity the operator knows of when it stopped or started the
    /// instance (it is not rewritten while the instance runs, to save writes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity_time: Option<String>,
    /// Which rendering of the instance runs, and the one that waits for its
    /// busy agent (a change the user did not make: an operator upgrade, a
    /// class change, a rotated Secret).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rendering: Option<RenderingStatus>,
    /// Sign-in modes (with fronts on): who last opened the instance through
    /// its front, and when. The front tells the operator's relay, which
    /// writes it (field manager `tinycode-operator-last-use`); while someone
    /// uses the instance it is about a minute old at most, and a change of
    /// user shows within seconds. The reconcile never writes it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_used_by: Option<LastUse>,
}

/// Who last used an instance, and when (`status.lastUsedBy`).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct LastUse {
    /// The user name the sign-in proxy named (oidc: with the cluster's
    /// username prefix the gate applies; openshift: the OpenShift user).
    pub user: String,
    /// When the relay was told (RFC 3339).
    pub at: String,
}

/// The rendering that runs and the one that waits.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct RenderingStatus {
    /// Digest of the values the running workloads were rendered from.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub current: String,
    /// Digest of the values that wait to be applied (empty: none wait).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub pending: String,
    /// Since when a rendering waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<String>,
    /// The metadata.generation the current rendering was made for: a later
    /// generation is the user's own change, which applies at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation: Option<i64>,
    /// In words: what waits, for what, and until when.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The last tinycode.dev/rollout-now value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_rollout_now: Option<String>,
}

/// Idle stop, as applied.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct IdleStatus {
    /// The timeout in force (spec.idle.timeout or the operator's default,
    /// capped at its maximum), e.g. 2h; "off" when the instance never idles.
    pub timeout: String,
    /// The operator stopped the instance for idleness; it stays stopped until
    /// started (annotation tinycode.dev/start-requested-at, or spec.stopped
    /// set and cleared).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stopped: bool,
    /// What activity is judged by: "activity report" (the image's own
    /// report of requests and agent tasks), "requests" (counted by the
    /// sign-in gate; the image reports nothing), both, or "unknown" (no
    /// check has answered yet, or the last one failed: never stopped then).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub judged_by: String,
    /// In words: the timeout's origin, and what the last check said.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// The last tinycode.dev/start-requested-at value handled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_handled_start_at: Option<String>,
    /// A cluster-admin requires idle stop (--idle-stop-required, or the
    /// class's idle.required): the pods are checked and stopped whatever the
    /// instance's phase (suspended, or its spec refused).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub required: bool,
}

/// How the UI is protected, and who is let in.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AuthStatus {
    /// password, openshift or oidc.
    pub mode: String,
    /// Who gets in, in words: the password Secret's readers, or the users
    /// allowed the RBAC verb below.
    pub allowed: String,
    /// Sign-in modes: the RBAC check made for every user (verb `use` on
    /// `tinycodeinstances/<name>` in the instance's namespace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<AccessCheck>,
}

/// The SubjectAccessReview attributes a signed-in user must be allowed.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct AccessCheck {
    /// The verb (`use`).
    pub verb: String,
    /// The API group (`tinycode.dev`).
    pub group: String,
    /// The resource (`tinycodeinstances`).
    pub resource: String,
    /// The instance's name.
    pub name: String,
    /// The instance's namespace.
    pub namespace: String,
}

/// Helm failures of one attempt (a rendering and a reconcile request).
#[derive(JsonSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HelmFailures {
    /// Digest of what helm failed to apply.
    pub attempt: String,
    /// Failures in a row; at the operator's retry budget the instance is Stalled.
    pub count: u32,
    /// What helm said the last time (shortened).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub last_error: String,
}

#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, strum::VariantArray)]
pub enum Phase {
    Pending,
    Deploying,
    Running,
    Failed,
    Terminating,
    Suspended,
    /// spec.stopped, or idle past its timeout: the workloads are scaled to
    /// zero, everything else is kept.
    Stopped,
}

impl Phase {
    /// Every phase (the derive keeps the list complete).
    pub const ALL: &'static [Phase] = <Phase as strum::VariantArray>::VARIANTS;

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Deploying => "Deploying",
            Phase::Running => "Running",
            Phase::Failed => "Failed",
            Phase::Terminating => "Terminating",
            Phase::Suspended => "Suspended",
            Phase::Stopped => "Stopped",
        }
    }
}

/// A status condition (the Kubernetes type); `lastTransitionTime` changes
/// only when `status` flips.
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

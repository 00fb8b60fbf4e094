//! Asking whether a user may `use` the instance.
//!
//! oidc: the operator's relay is asked ([`RelayReviewer`]), with the
//! instance's relay credential, about the user and groups the proxy named;
//! the operator makes the SubjectAccessReview for this instance only, so the
//! pod holds no right to review anyone's access anywhere.
//! openshift: a SelfSubjectAccessReview made with the user's own token, so
//! the gate needs no token of its own.

use std::path::Path;

use axum::http::{HeaderValue, Uri, header};
use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec, SubjectAccessReviewStatus,
};
use kube::api::PostParams;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::identity::Subject;
use crate::api::TinycodeInstance;
use crate::ops::decisions::{Decision, within_timeout};
use crate::watch_scope::cluster_api;

/// The verb a user needs on the instance.
pub const VERB: &str = "use";

/// The instance every review asks about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    pub namespace: String,
    pub instance: String,
}

impl Target {
    /// `use` on `tinycodeinstances.tinycode.dev` named `instance` in `namespace`.
    pub fn attributes(&self) -> ResourceAttributes {
        use kube::Resource;
        ResourceAttributes {
            group: Some(TinycodeInstance::group(&()).into_owned()),
            resource: Some(TinycodeInstance::plural(&()).into_owned()),
            verb: Some(VERB.into()),
            namespace: Some(self.namespace.clone()),
            name: Some(self.instance.clone()),
            ..Default::default()
        }
    }
}

/// Decides whether a subject may use the instance.
pub trait Reviewer: Send + Sync {
    /// The decision for `subject`, or why the apiserver could not be asked
    /// (the gate then answers 503 and remembers nothing).
    fn review<'a>(&'a self, subject: &'a Subject) -> BoxFuture<'a, Result<Decision, String>>;
}

/// The reviews through the Kubernetes API.
pub struct KubeReviewer {
    client: kube::Client,
    target: Target,
}

impl KubeReviewer {
    pub fn new(client: kube::Client, target: Target) -> Self {
        KubeReviewer { client, target }
    }

    async fn subject_access_review(&self, user: &str, groups: &[String]) -> Result<Decision, String> {
        let review = SubjectAccessReview {
            spec: SubjectAccessReviewSpec {
                user: Some(user.to_string()),
                groups: Some(groups.to_vec()),
                resource_attributes: Some(self.target.attributes()),
                ..Default::default()
            },
            ..Default::default()
        };
        let reviewed = cluster_api::<SubjectAccessReview>(&self.client)
            .create(&PostParams::default(), &review)
            .await
            .map_err(|e| format!("SubjectAccessReview: {e}"))?;
        Ok(decision(user, reviewed.status))
    }

    async fn self_subject_access_review(&self, token: &str, name: &str) -> Result<Decision, String> {
        use kube::Resource;
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(self.target.attributes()),
                ..Default::default()
            },
            ..Default::default()
        };
        let body = serde_json::to_vec(&review).map_err(|e| format!("SelfSubjectAccessReview: {e}"))?;
        let mut request = kube::core::Request::new(SelfSubjectAccessReview::url_path(&(), None))
            .create(&PostParams::default(), body)
            .map_err(|e| format!("SelfSubjectAccessReview: {e}"))?;
        // The client has no credentials of its own: this header is the only one.
        let mut bearer = HeaderValue::try_from(format!("Bearer {token}"))
            .map_err(|_| "SelfSubjectAccessReview: the token cannot be sent in a header".to_string())?;
        bearer.set_sensitive(true);
        request.headers_mut().insert(header::AUTHORIZATION, bearer);
        match self.client.request::<SelfSubjectAccessReview>(request).await {
            Ok(reviewed) => Ok(decision(name, reviewed.status)),
            Err(kube::Error::Api(status)) if status.code == 401 => {
                tracing::debug!(user = name, "gate: the apiserver did not accept the user's token");
                Ok(Decision::Unauthenticated)
            }
            Err(kube::Error::Api(status)) if status.code == 403 => {
                tracing::debug!(user = name, "gate: the user may not ask a SelfSubjectAccessReview");
                Ok(Decision::Forbidden)
            }
            Err(e) => Err(format!("SelfSubjectAccessReview: {e}")),
        }
    }
}

/// The decision a review's status gives.
fn decision(user: &str, status: Option<SubjectAccessReviewStatus>) -> Decision {
    let status = status.unwrap_or_default();
    if status.allowed && status.denied != Some(true) {
        Decision::Allowed
    } else {
        tracing::debug!(
            user,
            reason = status.reason.as_deref().unwrap_or(""),
            evaluation_error = status.evaluation_error.as_deref().unwrap_or(""),
            "gate: not allowed"
        );
        Decision::Forbidden
    }
}

impl Reviewer for KubeReviewer {
    fn review<'a>(&'a self, subject: &'a Subject) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(within_timeout(async move {
            match subject {
                Subject::User { name, groups } => self.subject_access_review(name, groups).await,
                Subject::Token { token, .. } => self.self_subject_access_review(token, subject.display_name()).await,
            }
        }))
    }
}

/// Reviews asked of the operator's relay (`POST <url>` with the instance's
/// relay credential as bearer token), which answers for this instance only.
pub struct RelayReviewer {
    url: String,
    credential_file: std::path::PathBuf,
    http: reqwest::Client,
}

/// How long the relay has to answer (the gate answers 503 after it).
const RELAY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

impl RelayReviewer {
    pub fn new(url: &str, credential_file: &Path) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--review-url {url:?} must be an http(s) URL"));
        }
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(RELAY_TIMEOUT)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build an HTTP client: {e}"))?;
        Ok(RelayReviewer { url: url.to_string(), credential_file: credential_file.to_path_buf(), http })
    }

    async fn ask(&self, user: &str, groups: &[String]) -> Result<Decision, String> {
        // Read each time: a rotated client secret changes the credential.
        let credential = std::fs::read_to_string(&self.credential_file)
            .map_err(|e| format!("cannot read the relay credential {}: {e}", self.credential_file.display()))?;
        let body = crate::signin::oidc::ReviewRequest { user: user.to_string(), groups: groups.to_vec() };
        let answer = self
            .http
            .post(&self.url)
            .bearer_auth(credential.trim())
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("the operator's relay did not answer: {e}"))?;
        let status = answer.status();
        if !status.is_success() {
            return Err(format!("the operator's relay answered HTTP {status}"));
        }
        let bytes = answer.bytes().await.map_err(|e| format!("the operator's relay's answer: {e}"))?;
        let answer: crate::signin::oidc::ReviewAnswer =
            serde_json::from_slice(&bytes).map_err(|e| format!("the operator's relay's answer: {e}"))?;
        Ok(if answer.allowed { Decision::Allowed } else { Decision::Forbidden })
    }
}

impl Reviewer for RelayReviewer {
    fn review<'a>(&'a self, subject: &'a Subject) -> BoxFuture<'a, Result<Decision, String>> {
        Box::pin(within_timeout(async move {
            match subject {
                Subject::User { name, groups } => self.ask(name, groups).await,
                // The relay answers for signed-in users only.
                Subject::Token { .. } => Ok(Decision::Forbidden),
            }
        }))
    }
}

/// Where and how the gate reaches the apiserver.
#[derive(Clone, Debug)]
pub struct ApiAccess<'a> {
    /// `https://host:port`.
    pub server: &'a str,
    /// The CA bundle (PEM) the apiserver's certificate is checked against;
    /// re-read when it rotates.
    pub ca_file: &'a Path,
    /// The bearer token file (re-read at least once a minute, as projected
    /// tokens rotate); `None` sends no credentials of the gate's own.
    pub token_file: Option<&'a Path>,
}

/// A client for exactly `access`: never a kubeconfig, never the in-cluster
/// defaults.
pub fn kube_client(access: &ApiAccess<'_>) -> Result<kube::Client, String> {
    let server: Uri = access.server.parse().map_err(|e| format!("--api-server {:?}: {e}", access.server))?;
    if server.scheme_str() != Some("https") || server.host().is_none() {
        return Err(format!("--api-server {:?} must be an https:// URL", access.server));
    }
    let ca = access.ca_file.display();
    let certs = CertificateDer::pem_file_iter(access.ca_file)
        .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("--ca-file {ca}: {e}"))?;
    if certs.is_empty() {
        return Err(format!("--ca-file {ca} holds no PEM certificate"));
    }
    let mut config = kube::Config::new(server);
    config.root_cert = Some(certs.iter().map(|c| c.to_vec()).collect());
    config.root_cert_file = Some(access.ca_file.to_path_buf());
    if let Some(token_file) = access.token_file {
        // kube re-reads the file when the token it holds is a minute old.
        config.auth_info.token_file = Some(token_file.to_string_lossy().into_owned());
    }
    kube::Client::try_from(config).map_err(|e| format!("cannot build a Kubernetes client: {e}"))
}

/// The default `--api-server`: the in-cluster Service address from
/// KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT.
pub fn in_cluster_server() -> Result<String, String> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST")
        .map_err(|_| "KUBERNETES_SERVICE_HOST is not set; pass --api-server".to_string())?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT")
        .map_err(|_| "KUBERNETES_SERVICE_PORT is not set; pass --api-server".to_string())?;
    Ok(server_url(&host, &port))
}

fn server_url(host: &str, port: &str) -> String {
    if host.contains(':') { format!("https://[{host}]:{port}") } else { format!("https://{host}:{port}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reviews_ask_for_use_on_the_named_instance() {
        let target = Target { namespace: "team-a".into(), instance: "ide".into() };
        let a = target.attributes();
        assert_eq!(a.group.as_deref(), Some("tinycode.dev"));
        assert_eq!(a.resource.as_deref(), Some("tinycodeinstances"));
        assert_eq!(a.verb.as_deref(), Some("use"));
        assert_eq!(a.namespace.as_deref(), Some("team-a"));
        assert_eq!(a.name.as_deref(), Some("ide"));
        assert_eq!(a.subresource, None);
    }

    #[test]
    fn only_an_allowed_and_not_denied_status_allows() {
        let status = |allowed, denied| Some(SubjectAccessReviewStatus { allowed, denied, ..Default::default() });
        assert_eq!(decision("u", status(true, None)), Decision::Allowed);
        assert_eq!(decision("u", status(true, Some(false))), Decision::Allowed);
        assert_eq!(decision("u", status(false, None)), Decision::Forbidden);
        assert_eq!(decision("u", status(false, Some(true))), Decision::Forbidden);
        assert_eq!(decision("u", None), Decision::Forbidden);
    }

    #[test]
    fn the_server_url_brackets_ipv6_hosts() {
        assert_eq!(server_url("10.96.0.1", "443"), "https://10.96.0.1:443");
        assert_eq!(server_url("fd00::1", "6443"), "https://[fd00::1]:6443");
    }

    #[test]
    fn a_client_needs_an_https_server_and_a_ca_bundle() {
        let dir = tempfile::tempdir().unwrap();
        let ca = dir.path().join("ca.crt");
        let access = |server| ApiAccess { server, ca_file: &ca, token_file: None };
        assert!(kube_client(&access("https://10.0.0.1:443")).err().unwrap().contains("--ca-file"));
        std::fs::write(&ca, "not a certificate\n").unwrap();
        assert!(kube_client(&access("https://10.0.0.1:443")).err().unwrap().contains("no PEM certificate"));
        assert!(kube_client(&access("http://10.0.0.1:80")).err().unwrap().contains("https://"));
        assert!(kube_client(&access("not a url")).err().unwrap().contains("--api-server"));
    }

    /// A self-signed CA certificate (P-256), made for this test only.
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\n\
MIIBhDCCASugAwIBAgIUPS6FSQDS6ZYHz8WqIqNT1rllg4owCgYIKoZIzj0EAwIw\n\
FzEVMBMGA1UEAwwMZ2F0ZS10ZXN0LWNhMCAXDTI2MTIwNDA0MjExNloYDzIxMjYx\n\
MTEwMDQyMTE2WjAXMRUwEwYDVQQDDAxnYXRlLXRlc3QtY2EwWTATBgcqhkjOPQIB\n\
BggqhkjOPQMBBwNCAAQYMSmOVN7pbfuCyrAfbu3PEtL+02QzeDcaXP191H3pfXHs\n\
rYug6pxThfjuU06oErwPdKFuftTFdCjzvqpcRXPjo1MwUTAdBgNVHQ4EFgQUHavy\n\
P2rd4on2YpnKMJpexeD6IJ0wHwYDVR0jBBgwFoAUHavyP2rd4on2YpnKMJpexeD6\n\
IJ0wDwYDVR0TAQH/BAUwAwEB/zAKBggqhkjOPQQDAgNHADBEAiAxhEAIy2baE7X8\n\
/FzZ/BPH+Umf/bgnvVR1TLdNXfpqtQIgFwMk+f649Kbrg0aQuWFbA5q7/+eDEPeh\n\
p7bVBQzSLUI=\n\
-----END CERTIFICATE-----\n\
";

    #[tokio::test]
    async fn a_client_is_built_from_the_files_named_and_nothing_else() {
        let _ = rustls::crypto::ring::default_provider().install_default();
        let dir = tempfile::tempdir().unwrap();
        let (ca, token) = (dir.path().join("ca.crt"), dir.path().join("token"));
        std::fs::write(&ca, TEST_CA).unwrap();
        let access = |token_file| ApiAccess { server: "https://127.0.0.1:6443", ca_file: &ca, token_file };
        assert!(kube_client(&access(None)).is_ok(), "openshift mode needs no token");
        let missing = kube_client(&access(Some(&token))).err().unwrap();
        assert!(missing.contains("token"), "{missing}");
        std::fs::write(&token, "a-token").unwrap();
        assert!(kube_client(&access(Some(&token))).is_ok());
    }
}

//! Telling the operator's relay what the proxy refused, so the instance
//! gets an `EgressRefused` event ([`crate::signin::egress`]): in the
//! background (the refused client never waits for it), each host and port at
//! most once per [`SAME_TARGET_EVERY`] and anything at most once per
//! [`ANY_EVERY`], with the instance's start credential.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::signin::egress::{ANY_EVERY, Named, Refused, SAME_TARGET_EVERY};

pub struct Reporter {
    url: String,
    credential_file: PathBuf,
    http: reqwest::Client,
    told: Named,
}

impl Reporter {
    pub fn new(url: &str, credential_file: &Path) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--refused-url {url:?} must be an http(s) URL"));
        }
        // Straight to the relay: never through a proxy of the environment.
        let http = crate::gate::wake::relay_client(reqwest::Client::builder().pool_max_idle_per_host(0).no_proxy())?;
        Ok(Reporter {
            url: url.to_string(),
            credential_file: credential_file.to_path_buf(),
            http,
            told: Named::default(),
        })
    }

    /// A connection to `host`:`port` was refused for `reason`.
    pub fn note(self: &Arc<Self>, host: &str, port: u16, reason: &str) {
        let refused = Refused { host: host.to_ascii_lowercase(), port, reason: reason.to_string() };
        if refused.check().is_err() {
            return;
        }
        let target = format!("{}:{port}", refused.host);
        if !self.told.claim((String::new(), String::new()), target, SAME_TARGET_EVERY, ANY_EVERY) {
            return;
        }
        let reporter = self.clone();
        tokio::spawn(async move {
            if let Err(e) = reporter.tell(&refused).await {
                tracing::warn!(error = %e, "egress-proxy: cannot tell the operator's relay of a refusal");
            }
        });
    }

    async fn tell(&self, refused: &Refused) -> Result<(), String> {
        // Read each time: a rotated key changes the credential.
        let credential = std::fs::read_to_string(&self.credential_file)
            .map_err(|e| format!("cannot read the start credential {}: {e}", self.credential_file.display()))?;
        let answer = self
            .http
            .post(&self.url)
            .bearer_auth(credential.trim())
            .json(refused)
            .send()
            .await
            .map_err(|e| format!("the operator's relay did not answer: {e}"))?;
        match answer.status() {
            s if s.is_success() => Ok(()),
            s => Err(format!("the operator's relay answered HTTP {s}")),
        }
    }
}

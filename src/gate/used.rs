//! Telling the operator's relay who uses the instance (`status.lastUsedBy`,
//! sign-in modes): after letting a user in, the gate posts the user's name
//! to `--used-url` with the instance's start credential, in the background
//! (the user's request never waits for it). It tells the relay at most once
//! per [`SAME_USER_EVERY`](crate::signin::used::SAME_USER_EVERY) while the user stays the same, and at most once
//! per [`ANY_USER_EVERY`](crate::signin::used::ANY_USER_EVERY) in all; a relay that does not answer is tried
//! again at the next allowed request after that.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::signin::used::due;

pub struct Reporter {
    url: String,
    credential_file: PathBuf,
    http: reqwest::Client,
    /// The user last told and when.
    last: Mutex<Option<(String, Instant)>>,
}

impl Reporter {
    pub fn new(url: &str, credential_file: &Path) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--used-url {url:?} must be an http(s) URL"));
        }
        // No kept-alive connection: reports are rare, and the relay allows a
        // peer (a front pod) few connections, which its reviews and starts need.
        let http = super::wake::relay_client(reqwest::Client::builder().pool_max_idle_per_host(0))?;
        Ok(Reporter {
            url: url.to_string(),
            credential_file: credential_file.to_path_buf(),
            http,
            last: Mutex::new(None),
        })
    }

    /// `user` was let in: tell the relay, when it is due and the relay
    /// would take the name.
    pub fn note(self: &Arc<Self>, user: &str) {
        if crate::signin::used::check_user(user).is_err() {
            return;
        }
        {
            let mut last = self.last.lock().expect("lock");
            if !due(last.as_ref().map(|(u, at)| (u.as_str(), at.elapsed())), user) {
                return;
            }
            *last = Some((user.to_string(), Instant::now()));
        }
        let reporter = self.clone();
        let user = user.to_string();
        tokio::spawn(async move {
            if let Err(e) = reporter.tell(&user).await {
                tracing::warn!(error = %e, "gate: cannot tell the operator's relay who used the instance");
            }
        });
    }

    async fn tell(&self, user: &str) -> Result<(), String> {
        // Read each time: a rotated key changes the credential.
        let credential = std::fs::read_to_string(&self.credential_file)
            .map_err(|e| format!("cannot read the start credential {}: {e}", self.credential_file.display()))?;
        let answer = self
            .http
            .post(&self.url)
            .bearer_auth(credential.trim())
            .json(&crate::signin::used::Used { user: user.to_string() })
            .send()
            .await
            .map_err(|e| format!("the operator's relay did not answer: {e}"))?;
        match answer.status() {
            s if s.is_success() => Ok(()),
            s => Err(format!("the operator's relay answered HTTP {s}")),
        }
    }
}

//! Starting the instance when someone the gate lets in (an allowed user, or
//! in password mode whoever has the password) opens it while it is stopped
//! for idleness: the gate asks the operator's relay
//! (`POST <relay>/start/<namespace>/<name>`, `--start-url`) with the
//! instance's start credential (`--start-credential-file`), never anything
//! of the user's, and tells the user what the relay answered: starting, or
//! stopped by spec.stopped.
//!
//! The relay is asked at most once per [`ASK_EVERY`], one request at a
//! time; meanwhile every request gets the last answer. A relay that does not
//! answer leaves the idle page (with the command that starts the instance).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::AgentState;

/// How long an answer of the relay stands before it is asked again.
pub const ASK_EVERY: Duration = Duration::from_secs(10);
/// How long the relay has to answer.
const RELAY_TIMEOUT: Duration = Duration::from_secs(5);

/// An HTTP client for the operator's relay, from `builder`: the relay's
/// timeout, no redirects (the relay sends none).
pub(crate) fn relay_client(builder: reqwest::ClientBuilder) -> Result<reqwest::Client, String> {
    // reqwest is built without a crypto provider of its own (kube brings ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    builder
        .timeout(RELAY_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| format!("cannot build an HTTP client: {e}"))
}

pub struct Waker {
    url: String,
    credential_file: PathBuf,
    http: reqwest::Client,
    /// The last answer and when it came; the lock also makes requests wait
    /// for the one in flight.
    last: tokio::sync::Mutex<Option<(Instant, AgentState)>>,
}

impl Waker {
    pub fn new(url: &str, credential_file: &Path) -> Result<Self, String> {
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(format!("--start-url {url:?} must be an http(s) URL"));
        }
        let http = relay_client(reqwest::Client::builder())?;
        Ok(Waker {
            url: url.to_string(),
            credential_file: credential_file.to_path_buf(),
            http,
            last: tokio::sync::Mutex::new(None),
        })
    }

    /// What to tell a user of the idle-stopped instance: `Runs` (it starts)
    /// or `Stopped`, and whether the relay was asked just now (else the last
    /// answer stands); None when the relay could not be asked.
    pub async fn wake(&self) -> Option<(AgentState, bool)> {
        let mut last = self.last.lock().await;
        if let Some((at, state)) = *last
            && at.elapsed() < ASK_EVERY
        {
            return Some((state, false));
        }
        match self.ask().await {
            Ok(state) => {
                *last = Some((Instant::now(), state));
                Some((state, true))
            }
            Err(e) => {
                tracing::warn!(error = %e, "gate: cannot ask the operator's relay to start the instance");
                None
            }
        }
    }

    async fn ask(&self) -> Result<AgentState, String> {
        // Read each time: a rotated key changes the credential.
        let credential = std::fs::read_to_string(&self.credential_file)
            .map_err(|e| format!("cannot read the start credential {}: {e}", self.credential_file.display()))?;
        let answer = self
            .http
            .post(&self.url)
            .bearer_auth(credential.trim())
            .send()
            .await
            .map_err(|e| format!("the operator's relay did not answer: {e}"))?;
        let status = answer.status();
        if !status.is_success() {
            return Err(format!("the operator's relay answered HTTP {status}"));
        }
        let bytes = answer.bytes().await.map_err(|e| format!("the operator's relay's answer: {e}"))?;
        let answer: crate::signin::start::StartAnswer =
            serde_json::from_slice(&bytes).map_err(|e| format!("the operator's relay's answer: {e}"))?;
        match answer.state.as_str() {
            "starting" => Ok(AgentState::Runs),
            "stopped" => Ok(AgentState::Stopped),
            other => Err(format!("the operator's relay answered state {other:?}")),
        }
    }
}

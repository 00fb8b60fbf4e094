//! Reading an instance's activity report (CONTAINER.md, "Activity"): when
//! somebody last used it and whether its agent is working now.
//!
//! The report comes from the instance's pod, which runs the tenant's image:
//! its answer is bounded ([`MAX_REPORT_BYTES`], one request timeout), and the
//! address dialled passes the same guard as vLLM probes (a tenant can turn
//! its Service into an ExternalName pointing anywhere).

use k8s_openapi::jiff::Timestamp;
use serde::Deserialize;

use crate::settings::ProbeSettings;
use crate::vllm;

/// Longest report read; a report is a few dozen bytes.
pub const MAX_REPORT_BYTES: usize = 4096;

/// What activity is judged by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JudgedBy {
    /// The image's own report (requests and agent tasks).
    Report,
    /// Requests counted by the sign-in gate; the image reports nothing.
    Requests,
    /// The gate's count and the image's report.
    Both,
}

impl JudgedBy {
    pub fn as_str(self) -> &'static str {
        match self {
            JudgedBy::Report => "activity report",
            JudgedBy::Requests => "requests",
            JudgedBy::Both => "requests and activity report",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        [JudgedBy::Report, JudgedBy::Requests, JudgedBy::Both].into_iter().find(|j| j.as_str() == s)
    }
}

/// A parsed activity report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Activity {
    /// The last request or agent task; never later than when it was read.
    pub last_activity: Timestamp,
    /// An agent task is running now (`None`: the reporter cannot tell).
    pub busy: Option<bool>,
    pub judged_by: JudgedBy,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Wire {
    last_activity: String,
    #[serde(default)]
    busy: Option<bool>,
    #[serde(default)]
    judged_by: Option<String>,
}

/// Parses a report read at `now` (pure). A time in the future counts as now.
pub fn parse(body: &[u8], now: Timestamp) -> Result<Activity, String> {
    let wire: Wire = serde_json::from_slice(body)
        .map_err(|e| format!("the activity report is not the JSON of CONTAINER.md, \"Activity\" ({e})"))?;
    let last: Timestamp = wire
        .last_activity
        .parse()
        .map_err(|_| "the activity report's lastActivity is not an RFC 3339 time".to_string())?;
    let judged_by = match wire.judged_by.as_deref() {
        None => JudgedBy::Report,
        Some(s) => JudgedBy::parse(s).ok_or("the activity report's judgedBy is not one CONTAINER.md names")?,
    };
    Ok(Activity { last_activity: last.min(now), busy: wire.busy, judged_by })
}

/// Reads activity reports.
pub struct Reader {
    client: reqwest::Client,
    allow_loopback: bool,
}

impl Reader {
    pub fn new(probes: &ProbeSettings) -> Self {
        Self { client: vllm::guarded_client(probes), allow_loopback: probes.allow_loopback }
    }

    /// GET `url` and parse its answer.
    pub async fn read(&self, url: &str) -> Result<Activity, String> {
        vllm::ssrf_check(url, self.allow_loopback)?;
        let response = self.client.get(url).send().await.map_err(|e| vllm::describe(url, &e))?;
        let status = response.status();
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(
                "the image does not serve the activity report (CONTAINER.md, \"Activity\") and no sign-in gate counts requests"
                    .into(),
            );
        }
        if !status.is_success() {
            return Err(format!("GET {url} answered {status}"));
        }
        let body = vllm::read_bounded(response, MAX_REPORT_BYTES).await?;
        parse(&body, Timestamp::now())
    }
}

/// The report's URL for an instance: the template with its parts replaced.
pub fn url(template: &str, service: &str, namespace: &str, name: &str) -> String {
    template.replace("{service}", service).replace("{namespace}", namespace).replace("{name}", name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_parse_with_their_optional_parts_and_bad_ones_say_why() {
        let now: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        let a = parse(br#"{"lastActivity":"2026-12-04T11:00:00Z","busy":true}"#, now).unwrap();
        assert_eq!(a.last_activity, "2026-12-04T11:00:00Z".parse().unwrap());
        assert_eq!((a.busy, a.judged_by), (Some(true), JudgedBy::Report));
        let gate = parse(br#"{"lastActivity":"2026-12-04T11:00:00Z","judgedBy":"requests"}"#, now).unwrap();
        assert_eq!((gate.busy, gate.judged_by), (None, JudgedBy::Requests));
        // A report from the future cannot push idleness past now.
        let future = parse(br#"{"lastActivity":"2099-01-01T00:00:00Z"}"#, now).unwrap();
        assert_eq!(future.last_activity, now);
        assert!(parse(b"not json", now).unwrap_err().contains("CONTAINER.md"));
        assert!(parse(br#"{"lastActivity":"yesterday"}"#, now).unwrap_err().contains("lastActivity"));
        assert!(parse(br#"{"lastActivity":"2026-12-04T11:00:00Z","judgedBy":"vibes"}"#, now).is_err());
    }

    #[tokio::test]
    async fn a_service_turned_toward_the_node_or_a_metadata_address_is_never_dialled() {
        // A tenant can make the instance's Service an ExternalName, or the
        // template can meet a name that resolves there: the guard refuses
        // before any connection.
        let reader = Reader::new(&ProbeSettings { allow_loopback: false, ..Default::default() });
        for url in ["http://127.0.0.1:4097/activity", "http://169.254.169.254/activity", "http://[::1]:4097/activity"] {
            let e = reader.read(url).await.unwrap_err();
            assert!(e.contains("never") || e.contains("refused") || e.contains("not allowed"), "{url}: {e}");
        }
    }

    #[test]
    fn the_url_template_names_the_instance() {
        let t = "http://{service}.{namespace}.svc:4097/activity";
        assert_eq!(url(t, "dev-tinycode", "team", "dev"), "http://dev-tinycode.team.svc:4097/activity");
        assert_eq!(url("http://127.0.0.1:9/{namespace}/{name}", "s", "team", "dev"), "http://127.0.0.1:9/team/dev");
    }
}

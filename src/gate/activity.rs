//! The gate's activity report (CONTAINER.md, "Activity"): the last request
//! it let through, joined with the image's own report when the image serves
//! one, on the port the operator reads for idle stop.

use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use hyper::service::service_fn;
use k8s_openapi::jiff::Timestamp;
use tokio::net::TcpListener;

use crate::activity::report::{self as activity, Activity, JudgedBy};
use crate::ops::http_server::{self, Limits};

/// Path of the report, on the gate's activity port and in the image.
pub const PATH: &str = "/activity";

/// The operator is the only client: a few connections, short requests.
pub const LIMITS: Limits = Limits {
    header_read_timeout: Duration::from_secs(5),
    request_timeout: Duration::from_secs(5),
    max_connections: 16,
    max_connections_per_peer: 4,
};

/// Requests let through, as activity.
pub struct Tracker {
    last: Mutex<Timestamp>,
    /// The image's report (`None`: not asked).
    image_report: Option<String>,
    client: reqwest::Client,
}

impl Tracker {
    /// The gate starting counts as activity: a pod just started is not idle.
    pub fn new(image_report: Option<String>) -> Self {
        // reqwest is built without a crypto provider of its own (kube brings ring).
        let _ = rustls::crypto::ring::default_provider().install_default();
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .build()
            .expect("HTTP client");
        Tracker { last: Mutex::new(Timestamp::now()), image_report, client }
    }

    /// A request was let through to the server.
    pub fn touch(&self) {
        *self.last.lock().expect("lock") = Timestamp::now();
    }

    /// The last request let through.
    pub fn last(&self) -> Timestamp {
        *self.last.lock().expect("lock")
    }

    /// The image's report, when it serves one.
    async fn image(&self) -> Option<Activity> {
        let url = self.image_report.as_deref()?;
        let response = self.client.get(url).send().await.ok()?;
        if !response.status().is_success() {
            return None;
        }
        let body = crate::vllm::read_bounded(response, activity::MAX_REPORT_BYTES).await.ok()?;
        activity::parse(&body, Timestamp::now()).ok()
    }

    /// The joined report (pure given its parts): the later of the two times,
    /// the image's word on whether its agent is busy.
    pub fn join(requests: Timestamp, image: Option<&Activity>) -> serde_json::Value {
        match image {
            Some(a) => serde_json::json!({
                "lastActivity": requests.max(a.last_activity).to_string(),
                "busy": a.busy,
                "judgedBy": JudgedBy::Both.as_str(),
            }),
            None => serde_json::json!({
                "lastActivity": requests.to_string(),
                "judgedBy": JudgedBy::Requests.as_str(),
            }),
        }
    }

    /// The answer to one request on the activity port.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() != PATH {
            return crate::gate::proxy::text(StatusCode::NOT_FOUND, "not found\n");
        }
        if req.method() != Method::GET {
            return crate::gate::proxy::text(StatusCode::METHOD_NOT_ALLOWED, "GET\n");
        }
        let image = self.image().await;
        let body = Self::join(self.last(), image.as_ref()).to_string();
        Response::builder()
            .status(StatusCode::OK)
            .header("content-type", "application/json")
            .body(Body::from(body))
            .expect("response")
    }
}

/// Serves the report on `listener`, forever.
pub async fn serve(listener: TcpListener, tracker: std::sync::Arc<Tracker>) {
    let builder = http_server::http1_builder(&LIMITS);
    http_server::accept(listener, LIMITS, move |io| {
        let tracker = tracker.clone();
        let handler = service_fn(move |req| {
            let tracker = tracker.clone();
            async move { Ok::<_, Infallible>(tracker.handle(req).await) }
        });
        builder.serve_connection(io, handler)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_joined_report_takes_the_later_time_and_the_images_busy() {
        let requests: Timestamp = "2026-12-04T12:00:00Z".parse().unwrap();
        let alone = Tracker::join(requests, None);
        let parsed = activity::parse(alone.to_string().as_bytes(), requests).unwrap();
        assert_eq!((parsed.last_activity, parsed.busy, parsed.judged_by), (requests, None, JudgedBy::Requests));
        let image = Activity {
            last_activity: "2026-12-04T12:30:00Z".parse().unwrap(),
            busy: Some(true),
            judged_by: JudgedBy::Report,
        };
        let later: Timestamp = "2026-12-04T13:00:00Z".parse().unwrap();
        let both = activity::parse(Tracker::join(requests, Some(&image)).to_string().as_bytes(), later).unwrap();
        assert_eq!((both.last_activity, both.busy, both.judged_by), (image.last_activity, Some(true), JudgedBy::Both));
    }
}

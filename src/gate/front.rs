//! The sign-in modes' public port (`--front-listen`): everything goes to the
//! sign-in proxy on loopback (`--signin-upstream`) unchanged, and comes back
//! unchanged, with one exception. The proxy answers a failed sign-in (a
//! callback it cannot complete, a session it refuses, a gate it cannot
//! reach) with its error page whatever the client asked for: oauth2-proxy's
//! and oauth-proxy's templates see no request headers. A client that is not
//! a browser (its `Accept` does not name `text/html`) gets those answers
//! here as plain text, with the instance's name and what to do.
//!
//! ```text
//! router → front (public port) → sign-in proxy (loopback) → gate (loopback) → agent
//! ```
//!
//! Whose answer a response is, is told by [`MARK`]: the gate behind the
//! proxy puts it on everything it sends back (its own pages, already by
//! `Accept`, and tinycode's answers, never rewritten), and the front takes
//! it off. A response without it is the proxy's own. Nothing here decides
//! who gets in: that stays with the proxy and the gate, and a caller who
//! reaches the proxy's loopback port some other way gains nothing.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, Request, Response, StatusCode, header};
use hyper::body::Incoming;
use hyper::service::service_fn;
use tokio::net::TcpListener;

use super::identity::Mode;
use super::pages;
use super::proxy::{self, Upstream};
use super::{HEALTH_PATH, LIMITS};
use crate::ops::http_server;

/// Put by the gate on every response it sends back through the sign-in
/// proxy; taken off by the front.
pub const MARK: HeaderName = HeaderName::from_static("x-tinycode-gate");
/// The largest proxy error page read to find its words; a longer one is
/// told by its status alone.
pub const PAGE_LIMIT: usize = 64 * 1024;
/// How long the front waits for an error page's body.
const PAGE_WAIT: Duration = Duration::from_secs(5);
/// The element of the error template (`files/signin-error.html`) that
/// carries the proxy's own words, as an attribute so the template's HTML
/// escaping is the only encoding to undo.
const WORDS: &str = "<meta name=\"tinycode-error\" content=\"";

/// The headers the sign-in proxy sets for the gate behind it. A client's
/// own are dropped here, so only the proxy's reach the gate, even where a
/// proxy keeps a header it has no value for.
const IDENTITY_HEADERS: [&str; 10] = [
    "x-forwarded-user",
    "x-forwarded-email",
    "x-forwarded-groups",
    "x-forwarded-preferred-username",
    "x-forwarded-access-token",
    "x-auth-request-user",
    "x-auth-request-email",
    "x-auth-request-groups",
    "x-auth-request-preferred-username",
    "x-auth-request-access-token",
];

/// The proxy's headers a rewritten answer keeps: its cookies (a failed
/// callback clears its CSRF cookie), its challenge and its retry advice.
const KEPT_HEADERS: [HeaderName; 3] = [header::SET_COOKIE, header::WWW_AUTHENTICATE, header::RETRY_AFTER];

/// The front of one instance.
pub struct Front {
    proxy: Upstream,
    namespace: String,
    instance: String,
    mode: Mode,
}

impl Front {
    /// `proxy_url` is the sign-in proxy's `http://host:port`; `mode` says
    /// who signs users in (the operator's relay for oidc, the cluster's
    /// OAuth server for openshift).
    pub fn new(proxy_url: &str, namespace: &str, instance: &str, mode: Mode) -> Result<Self, String> {
        Ok(Front {
            proxy: Upstream::pass_through(proxy_url, "the sign-in proxy")?,
            namespace: namespace.to_string(),
            instance: instance.to_string(),
            mode,
        })
    }

    /// The answer to one request.
    pub async fn handle(&self, req: Request<Incoming>) -> Response<Body> {
        if req.uri().path() == HEALTH_PATH {
            return match *req.method() {
                Method::GET | Method::HEAD => proxy::text(StatusCode::OK, "ok"),
                _ => proxy::text(StatusCode::METHOD_NOT_ALLOWED, "GET or HEAD\n"),
            };
        }
        let html = pages::wants_html(req.headers());
        let head = req.method() == Method::HEAD;
        let mut req = req;
        for name in IDENTITY_HEADERS {
            req.headers_mut().remove(name);
        }
        let mut resp = match self.proxy.forward(req).await {
            Ok(resp) => resp,
            Err(_) => return self.proxy_down(html),
        };
        if resp.headers_mut().remove(MARK).is_some() || html || resp.status().as_u16() < 400 {
            return resp;
        }
        // The proxy's own refusal or error, to a client that shows no pages.
        let status = resp.status();
        let mut kept = HeaderMap::new();
        for name in KEPT_HEADERS {
            for value in resp.headers().get_all(&name) {
                kept.append(name.clone(), value.clone());
            }
        }
        let words = if head { None } else { self.proxy_words(resp).await };
        let mut text = proxy::text(status, self.text(status, words.as_deref()));
        text.headers_mut().extend(kept);
        text.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        text
    }

    /// The proxy's words from its error page, when the page is ours and
    /// arrives whole within [`PAGE_LIMIT`] and [`PAGE_WAIT`].
    async fn proxy_words(&self, resp: Response<Body>) -> Option<String> {
        let is_html = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.trim_start().to_ascii_lowercase().starts_with("text/html"));
        if !is_html {
            return None;
        }
        let body = tokio::time::timeout(PAGE_WAIT, axum::body::to_bytes(resp.into_body(), PAGE_LIMIT)).await;
        let body = body.ok()?.ok()?;
        error_words(&String::from_utf8_lossy(&body))
    }

    /// What a client that is not a browser is told of the proxy's answer.
    fn text(&self, status: StatusCode, words: Option<&str>) -> String {
        let (instance, namespace) = (&self.instance, &self.namespace);
        let what = match (status, words) {
            (_, Some(words)) => format!("the sign-in did not complete: {words}"),
            (StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN, None) => "there is no signed-in session".to_string(),
            (status, None) => format!("the sign-in proxy answered {status}"),
        };
        let through = match self.mode {
            Mode::Openshift => "the cluster's OAuth server, whose log says why",
            Mode::Oidc | Mode::Password => "the tinycode operator, whose log says why",
        };
        format!(
            "tinycode {instance} in namespace {namespace}: {what} ({code}).\n\
             Sign in by opening this instance's URL in a browser. If it fails again, tell your \
             cluster-admin when it happened: this instance's sign-in goes through {through}.\n",
            code = status.as_u16(),
        )
    }

    /// The sign-in proxy does not answer (it is starting, or restarting).
    fn proxy_down(&self, html: bool) -> Response<Body> {
        let message = format!(
            "The sign-in of tinycode {} is not answering yet: it is starting, or restarting by itself.\n",
            self.instance
        );
        if !html {
            return proxy::text(StatusCode::SERVICE_UNAVAILABLE, message);
        }
        let page = pages::page(&self.instance, &self.namespace, &message, None, Some(pages::STARTING_RETRY_SECONDS));
        pages::html(StatusCode::SERVICE_UNAVAILABLE, &page)
    }
}

/// The words in the error template's `tinycode-error` element, unescaped,
/// on one line and at most 1024 characters.
pub fn error_words(page: &str) -> Option<String> {
    let start = page.find(WORDS)? + WORDS.len();
    let end = start + page[start..].find('"')?;
    let words = unescape(&page[start..end]);
    let words: String = words.split_whitespace().collect::<Vec<_>>().join(" ").chars().take(1024).collect();
    (!words.is_empty()).then_some(words)
}

/// Undoes the HTML escaping Go's html/template gives an attribute value
/// (named entities for `&<>"'`, and decimal or hex character references).
fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').filter(|end| *end <= 10).and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => {
                    let number = entity.strip_prefix('#')?;
                    let code = match number.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => number.parse().ok()?,
                    };
                    char::from_u32(code)
                }
            }?;
            Some((c, end + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out.chars().filter(|c| !c.is_control()).collect()
}

/// The value of [`MARK`].
pub fn mark_value() -> HeaderValue {
    HeaderValue::from_static("1")
}

/// Serves `front` on `listener`, forever: HTTP/1 with upgrades.
pub async fn serve(listener: TcpListener, front: Arc<Front>) {
    let builder = http_server::http1_builder(&LIMITS);
    http_server::accept(listener, LIMITS, move |io| {
        let front = front.clone();
        let handler = service_fn(move |req| {
            let front = front.clone();
            async move { Ok::<_, Infallible>(front.handle(req).await) }
        });
        builder.serve_connection(io, handler).with_upgrades()
    })
    .await
}

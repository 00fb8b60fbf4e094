//! The gate's refusals as people meet them: a browser (its `Accept` names
//! `text/html`) gets a small page with the instance's name, what happened
//! and what to do (for a user not allowed `use`, the exact command an admin
//! of the namespace runs); any other client gets the same words as plain
//! text. Every name on a page comes from outside (the identity provider
//! names the user), so each is HTML-escaped, the page runs no script and
//! loads nothing (`Content-Security-Policy: default-src 'none'`), and the
//! command quotes the user for a shell.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, Response, StatusCode, header};

use super::identity::{self, Refusal, Subject, grant_command};
use crate::api::START_REQUEST_ANNOTATION;
use crate::render::signin::AgentState;

/// Seconds before a page for a passing trouble (the review could not be
/// made) asks again by itself.
pub const RETRY_SECONDS: u32 = 5;

/// Whether the client is a browser showing pages: its `Accept` names
/// `text/html` (every browser's navigation does; curl and API clients do not).
pub fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|media| media.split(';').next().is_some_and(|m| m.trim().eq_ignore_ascii_case("text/html")))
}

/// The refusal for a browser or for any other client, by `Accept`.
pub fn refusal(
    headers: &HeaderMap,
    refusal: Refusal,
    subject: Option<&Subject>,
    namespace: &str,
    instance: &str,
) -> Response<Body> {
    let text = identity::message(refusal, subject, namespace, instance);
    if !wants_html(headers) {
        return super::proxy::text(refusal.status(), text);
    }
    let command = match (refusal, subject) {
        (Refusal::Forbidden, Some(Subject::User { name, .. } | Subject::Token { name: Some(name), .. })) => {
            Some(grant_command(name, namespace))
        }
        _ => None,
    };
    let retry = (refusal == Refusal::Unavailable).then_some(RETRY_SECONDS);
    // The command has a box of its own on the page: not twice.
    let text: String = text.lines().filter(|l| Some(*l) != command.as_deref()).map(|l| format!("{l}\n")).collect();
    let lead = format!("Ask an admin of namespace {namespace} to run:");
    let command = command.as_deref().map(|c| (lead.as_str(), c));
    html(refusal.status(), &page(instance, namespace, &text, command, retry))
}

/// Password mode's refusal: 401 with a Basic challenge (the browser asks
/// for the password), and behind it, for whoever cancels the prompt or is
/// not a browser, where the password is and the command that shows it.
pub fn password_prompt(headers: &HeaderMap, namespace: &str, instance: &str, secret: Option<&str>) -> Response<Body> {
    let text = identity::message(Refusal::NoPassword, None, namespace, instance);
    let command = secret.map(|secret| {
        format!(
            "kubectl get secret {} -n {} -o jsonpath='{{.data.TINYCODE_SERVER_PASSWORD}}' | base64 -d",
            identity::shell_word(secret),
            identity::shell_word(namespace)
        )
    });
    let lead = "Someone allowed to read its Secrets in the namespace runs:";
    let mut resp = if wants_html(headers) {
        let command = command.as_deref().map(|c| (lead, c));
        html(StatusCode::UNAUTHORIZED, &page(instance, namespace, &text, command, None))
    } else {
        let text = match &command {
            Some(c) => format!("{text}{lead}\n{c}\n"),
            None => text,
        };
        super::proxy::text(StatusCode::UNAUTHORIZED, text)
    };
    // The realm names the instance: a browser keeps one password per realm.
    let realm = format!("tinycode {namespace}/{instance}").replace(['"', '\\'], "");
    let challenge = HeaderValue::try_from(format!("Basic realm=\"{realm}\", charset=\"UTF-8\""))
        .unwrap_or(HeaderValue::from_static("Basic realm=\"tinycode\""));
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, challenge);
    resp
}

/// Seconds between a starting page's reloads.
pub const STARTING_RETRY_SECONDS: u32 = 5;
/// Seconds between a stopped page's reloads: it turns into the UI by itself
/// once someone starts the instance.
pub const STOPPED_RETRY_SECONDS: u32 = 30;

/// The answer to a user the gate let in while tinycode does not answer
/// (503): it is starting, or it is stopped (by spec.stopped, or for
/// idleness) and how to start it. A page for a browser (`html`, see
/// [`wants_html`]), text otherwise.
pub fn agent_down(html: bool, agent: AgentState, namespace: &str, instance: &str) -> Response<Body> {
    let (message, lead, command, retry) = match agent {
        AgentState::Runs => (
            format!("tinycode {instance} is starting.\nThis page turns into tinycode once it answers."),
            "",
            None,
            STARTING_RETRY_SECONDS,
        ),
        AgentState::Stopped => (
            format!(
                "tinycode {instance} is stopped: its spec.stopped is true. Its data is kept.\nTo start it, someone allowed to edit it runs:"
            ),
            "To start it, someone allowed to edit it runs:",
            Some(format!(
                "kubectl patch tinycodeinstance {} -n {} --type merge -p '{{\"spec\":{{\"stopped\":false}}}}'",
                identity::shell_word(instance),
                identity::shell_word(namespace)
            )),
            STOPPED_RETRY_SECONDS,
        ),
        AgentState::Idle => (
            format!(
                "tinycode {instance} was stopped because nobody used it for a while. Its data is kept.\nTo start it, someone allowed to edit it runs:"
            ),
            "To start it, someone allowed to edit it runs:",
            Some(format!(
                "kubectl annotate tinycodeinstance {} -n {} {START_REQUEST_ANNOTATION}=\"$(date +%s)\" --overwrite",
                identity::shell_word(instance),
                identity::shell_word(namespace)
            )),
            STOPPED_RETRY_SECONDS,
        ),
    };
    if !html {
        let text = match &command {
            Some(c) => format!("{message}\n{c}\n"),
            None => format!("{message}\n"),
        };
        return super::proxy::text(StatusCode::SERVICE_UNAVAILABLE, text);
    }
    // The page puts the lead before the command's box: not twice.
    let message: String = message.lines().filter(|l| *l != lead).map(|l| format!("{l}\n")).collect();
    let command = command.as_deref().map(|c| (lead, c));
    self::html(StatusCode::SERVICE_UNAVAILABLE, &page(instance, namespace, &message, command, Some(retry)))
}

/// A page: the instance in the title and heading, the message, and the
/// command (when there is one) in an element of its own.
pub fn page(
    instance: &str,
    namespace: &str,
    message: &str,
    command: Option<(&str, &str)>,
    retry: Option<u32>,
) -> String {
    let refresh = retry.map(|s| format!("<meta http-equiv=\"refresh\" content=\"{s}\">")).unwrap_or_default();
    let paragraphs: String =
        message.lines().filter(|l| !l.trim().is_empty()).map(|l| format!("<p>{}</p>", escape(l))).collect();
    let command = command
        .map(|(lead, c)| format!("<p>{}</p><pre><code id=\"command\">{}</code></pre>", escape(lead), escape(c)))
        .unwrap_or_default();
    let retry_note =
        retry.map(|s| format!("<p id=\"retry\">This page tries again in {s} seconds.</p>")).unwrap_or_default();
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}\
         <title>tinycode {instance}</title>\
         <style>body{{font-family:sans-serif;max-width:44em;margin:3em auto;padding:0 1em}}\
         pre{{background:#f4f4f4;padding:1em;white-space:pre-wrap;overflow-wrap:anywhere}}</style></head>\
         <body><h1 id=\"instance\">{instance}</h1><p id=\"namespace\">tinycode instance in namespace {namespace}</p>\
         <div id=\"message\">{paragraphs}</div>{command}{retry_note}</body></html>\n",
        instance = escape(instance),
        namespace = escape(namespace),
    )
}

/// `body` as an HTML answer: no script, nothing loaded, not framed, not kept.
pub(super) fn html(status: StatusCode, body: &str) -> Response<Body> {
    let mut resp = Response::new(Body::from(body.to_string()));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"),
    );
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// `s` safe as HTML text or a quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(accept: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(accept).unwrap());
        h
    }

    fn user(name: &str) -> Subject {
        Subject::User { name: name.into(), groups: vec![] }
    }

    async fn body(resp: Response<Body>) -> String {
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        String::from_utf8(bytes.to_vec()).unwrap()
    }

    #[test]
    fn browsers_are_told_apart_by_accept() {
        assert!(wants_html(&headers("text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8")));
        assert!(wants_html(&headers("TEXT/HTML; q=1")));
        assert!(!wants_html(&headers("*/*")));
        assert!(!wants_html(&headers("application/json")));
        assert!(!wants_html(&headers("text/htmlx")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[tokio::test]
    async fn a_forbidden_browser_gets_a_page_with_the_command() {
        let resp =
            refusal(&headers("text/html"), Refusal::Forbidden, Some(&user("carol@example.com")), "team-a", "ide");
        assert_eq!(resp.status(), StatusCode::FORBIDDEN);
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/html; charset=utf-8");
        assert!(resp.headers()[header::CONTENT_SECURITY_POLICY].to_str().unwrap().starts_with("default-src 'none'"));
        let page = body(resp).await;
        assert!(page.contains("<h1 id=\"instance\">ide</h1>"), "{page}");
        let command = "kubectl create rolebinding tinycode-use-carol-example-com \
                       --clusterrole=tinycode-instance-user --user='carol@example.com' -n team-a";
        assert!(page.contains(&format!("<code id=\"command\">{}</code>", escape(command))), "{page}");
        assert!(page.contains("Ask an admin of namespace team-a"), "{page}");
        assert_eq!(page.matches("kubectl create rolebinding").count(), 1, "the command once: {page}");
    }

    #[tokio::test]
    async fn other_clients_get_the_same_words_as_text() {
        let resp = refusal(&headers("*/*"), Refusal::Forbidden, Some(&user("carol")), "team-a", "ide");
        assert_eq!(resp.headers()[header::CONTENT_TYPE], "text/plain; charset=utf-8");
        let text = body(resp).await;
        assert_eq!(text, identity::message(Refusal::Forbidden, Some(&user("carol")), "team-a", "ide"));
        assert!(text.contains(&grant_command("carol", "team-a")), "{text}");
    }

    #[tokio::test]
    async fn names_from_outside_cannot_write_markup_or_commands() {
        let evil = "<script>alert(1)</script>'; rm -rf / #";
        let resp = refusal(&headers("text/html"), Refusal::Forbidden, Some(&user(evil)), "team-a", "ide");
        let page = body(resp).await;
        assert!(!page.contains("<script>"), "{page}");
        assert!(page.contains("&lt;script&gt;"), "{page}");
        // One shell word, whatever it holds.
        let command = grant_command(evil, "team-a");
        assert!(command.contains(r"--user='<script>alert(1)</script>'\''; rm -rf / #'"), "{command}");
        assert!(command.starts_with("kubectl create rolebinding tinycode-use-script-alert-1"), "{command}");
    }

    #[tokio::test]
    async fn an_agent_that_does_not_answer_is_starting_or_stopped() {
        let page_of = |agent| async move { body(agent_down(true, agent, "team-a", "ide")).await };
        let starting = page_of(AgentState::Runs).await;
        assert!(starting.contains("<meta http-equiv=\"refresh\" content=\"5\">"), "{starting}");
        assert!(starting.contains("is starting"), "{starting}");
        assert!(!starting.contains("id=\"command\""), "{starting}");
        let stopped = page_of(AgentState::Stopped).await;
        let patch = r#"kubectl patch tinycodeinstance ide -n team-a --type merge -p '{"spec":{"stopped":false}}'"#;
        assert!(stopped.contains(&format!("<code id=\"command\">{}</code>", escape(patch))), "{stopped}");
        assert_eq!(stopped.matches("someone allowed to edit it runs").count(), 1, "{stopped}");
        let idle = page_of(AgentState::Idle).await;
        assert!(idle.contains("tinycode.dev/start-requested-at=&quot;$(date +%s)&quot; --overwrite"), "{idle}");
        let resp = agent_down(false, AgentState::Stopped, "team-a", "ide");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let text = body(resp).await;
        assert!(text.contains(patch) && text.contains("spec.stopped is true"), "{text}");
        // Names are one shell word on the page's command, whatever they hold.
        let odd = body(agent_down(false, AgentState::Idle, "team a", "x;y")).await;
        assert!(odd.contains("tinycodeinstance 'x;y' -n 'team a'"), "{odd}");
    }

    #[tokio::test]
    async fn a_passing_trouble_refreshes_itself() {
        let resp = refusal(&headers("text/html"), Refusal::Unavailable, None, "team-a", "ide");
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        let page = body(resp).await;
        assert!(page.contains("<meta http-equiv=\"refresh\" content=\"5\">"), "{page}");
        assert!(!page.contains("id=\"command\""), "{page}");
    }
}

//! What a browser sends that must not reach the tinycode server: the sign-in
//! proxy's own cookies (its session holds the user's tokens from the
//! identity provider, which whoever controls the image could read), and
//! requests another site makes in the user's name. Instances share one apps
//! domain, so their cookies are "same-site" to each other and `SameSite=Lax`
//! keeps none of them apart: a page on a sibling instance could otherwise
//! POST, or open a WebSocket, into this one with its user's session.

use axum::http::{HeaderMap, HeaderValue, Method, header};

/// `Sec-Fetch-Site`, sent by every current browser.
const FETCH_SITE: &str = "sec-fetch-site";

/// Removes the proxy's cookies from the request: `name` itself and those it
/// derives from it (a session split over `name_0`, `name_1`..., the sign-in's
/// `name_csrf`); every other cookie (tinycode's own) is kept as it came.
pub fn strip_proxy_cookies(headers: &mut HeaderMap, name: &str) {
    if !headers.contains_key(header::COOKIE) {
        return;
    }
    let derived = format!("{name}_");
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .filter(|pair| {
            let cookie = pair.split_once('=').map_or(*pair, |(n, _)| n).trim();
            cookie != name && !cookie.starts_with(&derived)
        })
        .map(str::to_string)
        .collect();
    headers.remove(header::COOKIE);
    if !kept.is_empty()
        && let Ok(value) = HeaderValue::from_str(&kept.join("; "))
    {
        headers.insert(header::COOKIE, value);
    }
}

/// Why a request is taken for another site's, when it is: a state-changing
/// method or a protocol upgrade (WebSocket) whose `Sec-Fetch-Site` is not
/// `same-origin` (or `none`: typed or bookmarked), or, from a browser that
/// sends no `Sec-Fetch-Site`, whose `Origin` is not this instance's host.
/// A request with neither header (curl, scripts) is not a browser's, and a
/// GET without an upgrade changes nothing: both pass.
pub fn cross_site(method: &Method, headers: &HeaderMap) -> Option<String> {
    let upgrade = headers.contains_key(header::UPGRADE);
    if matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) && !upgrade {
        return None;
    }
    if let Some(site) = headers.get(FETCH_SITE) {
        return match site.to_str().map(str::trim) {
            Ok("same-origin" | "none") => None,
            Ok(other) => Some(format!("Sec-Fetch-Site: {other}")),
            Err(_) => Some("Sec-Fetch-Site that is not text".into()),
        };
    }
    let origin = headers.get(header::ORIGIN)?;
    let Ok(origin) = origin.to_str() else {
        return Some("an Origin that is not text".into());
    };
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or_default();
    let origin_host = origin.strip_prefix("https://").or_else(|| origin.strip_prefix("http://"));
    match origin_host {
        Some(o) if !host.is_empty() && o.eq_ignore_ascii_case(host) => None,
        _ => Some(format!("Origin: {origin}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gate::proxy::tests::headers;

    #[test]
    fn the_proxys_cookies_go_and_tinycodes_stay() {
        let mut h = headers(&[
            ("cookie", "_tinycode_abc=session; theme=dark"),
            ("cookie", "_tinycode_abc_0=part0;_tinycode_abc_1=part1; _tinycode_abc_csrf=x"),
            ("cookie", "tinycode-session=s1; _tinycode_abcdef=other-instance"),
        ]);
        strip_proxy_cookies(&mut h, "_tinycode_abc");
        let kept: Vec<&str> = h.get_all(header::COOKIE).iter().map(|v| v.to_str().unwrap()).collect();
        assert_eq!(kept, ["theme=dark; tinycode-session=s1; _tinycode_abcdef=other-instance"]);

        let mut only_proxy = headers(&[("cookie", "_tinycode_abc=session; _tinycode_abc_csrf=x")]);
        strip_proxy_cookies(&mut only_proxy, "_tinycode_abc");
        assert!(only_proxy.get(header::COOKIE).is_none(), "no empty Cookie header: {only_proxy:?}");
    }

    #[test]
    fn state_changes_and_upgrades_from_another_site_are_refused() {
        let post = Method::POST;
        let same = [("host", "a.apps.example.com")];
        // Fetch metadata decides when present.
        for (site, refused) in [("same-origin", false), ("none", false), ("same-site", true), ("cross-site", true)] {
            let h = headers(&[same[0], ("sec-fetch-site", site), ("origin", "https://a.apps.example.com")]);
            assert_eq!(cross_site(&post, &h).is_some(), refused, "{site}");
        }
        // Else the Origin against the Host the router forwarded.
        assert_eq!(cross_site(&post, &headers(&[same[0], ("origin", "https://a.apps.example.com")])), None);
        assert_eq!(cross_site(&post, &headers(&[same[0], ("origin", "https://A.apps.example.com")])), None);
        for origin in
            ["https://b.apps.example.com", "null", "https://a.apps.example.com.evil.test", "a.apps.example.com"]
        {
            assert!(cross_site(&post, &headers(&[same[0], ("origin", origin)])).is_some(), "{origin}");
        }
        // A WebSocket is a GET, and as dangerous.
        let ws = headers(&[same[0], ("upgrade", "websocket"), ("origin", "https://b.apps.example.com")]);
        assert!(cross_site(&Method::GET, &ws).is_some());
        // Reads and non-browser clients pass.
        let sibling = headers(&[same[0], ("sec-fetch-site", "same-site")]);
        assert_eq!(cross_site(&Method::GET, &sibling), None, "a plain GET changes nothing");
        assert_eq!(cross_site(&Method::DELETE, &headers(&same)), None, "curl sends neither header");
        for m in [Method::PUT, Method::PATCH, Method::DELETE] {
            assert!(cross_site(&m, &headers(&[same[0], ("origin", "https://b.apps.example.com")])).is_some());
        }
    }
}

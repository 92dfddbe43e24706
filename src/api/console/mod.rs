//! The web console at `/console`: a small static app (HTML, one style
//! sheet, ES modules) embedded in the binary, so `cargo build` stays the
//! only build step and it works offline. It is a client of the public API
//! like any other: it sends the key it is given as `Authorization: Bearer`,
//! and every number it shows comes from an endpoint (`/v1/requests`,
//! `/v1/keys/usage`, `/v1/usage`, the arena's leaderboard), never from a
//! bookkeeping of its own.
//!
//! Who gets it: nobody when `console.enabled = false` (a 404, as for an
//! unknown URL); on a gateway without `[[keys]]`, loopback clients only
//! unless `console.open = true` (the server hands the console the peer's
//! address as a [`Peer`]); everyone else gets the page, which asks for a
//! key before it calls anything. Every answer carries a strict
//! Content-Security-Policy: scripts and styles from the console's own
//! files only, no inline script, no frames, no form posts, and the page
//! renders what models wrote as text (`assets/text.js`), never as HTML.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::{AppState, Gateway};
use crate::eval::html::escape::escape;

/// The console's path; everything under it is the console's.
pub const CONSOLE: &str = "/console";

/// The client's address, put on console requests by the server.
#[derive(Debug, Clone, Copy)]
pub struct Peer(pub SocketAddr);

/// The policy every console answer carries.
const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; \
     frame-ancestors 'none'; form-action 'none'";

/// The page, with `{{keyed}}` and `{{grafana}}` filled in per request.
const INDEX: &str = include_str!("assets/index.html");

/// The console's files by name: content type and bytes.
const FILES: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("assets/style.css"),
    ),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
    ("app.js", JS, include_str!("assets/app.js")),
    ("api.js", JS, include_str!("assets/api.js")),
    ("text.js", JS, include_str!("assets/text.js")),
    ("diff.js", JS, include_str!("assets/diff.js")),
    ("timeline.js", JS, include_str!("assets/timeline.js")),
    ("battle.js", JS, include_str!("assets/battle.js")),
    ("leaderboard.js", JS, include_str!("assets/leaderboard.js")),
    ("playground.js", JS, include_str!("assets/playground.js")),
    ("requests.js", JS, include_str!("assets/requests.js")),
    ("keys.js", JS, include_str!("assets/keys.js")),
];

const JS: &str = "text/javascript; charset=utf-8";

/// `GET /console`: the page.
pub async fn page(
    State(gw): State<Arc<Gateway>>,
    peer: Option<Extension<Peer>>,
    method: Method,
    uri: Uri,
) -> Response {
    let app = gw.state();
    if let Err(e) = admit(&app, peer, &method, &uri) {
        return e.into_response();
    }
    let grafana = app.console.grafana_url.as_deref().unwrap_or("");
    let html = INDEX
        .replace(
            "{{keyed}}",
            if app.keys.is_empty() { "false" } else { "true" },
        )
        .replace("{{grafana}}", &escape(grafana));
    answer("text/html; charset=utf-8", html.into_bytes())
}

/// `GET /console/{file}`: one of the console's files.
pub async fn file(
    State(gw): State<Arc<Gateway>>,
    peer: Option<Extension<Peer>>,
    Path(name): Path<String>,
    method: Method,
    uri: Uri,
) -> Response {
    let found = FILES.iter().find(|(n, _, _)| *n == name);
    match (admit(&gw.state(), peer, &method, &uri), found) {
        (Err(e), _) => e.into_response(),
        (Ok(()), Some((_, kind, body))) => answer(kind, body.as_bytes().to_vec()),
        (Ok(()), None) => unknown(&method, &uri).into_response(),
    }
}

/// Whether this client gets the console at all.
fn admit(
    app: &AppState,
    peer: Option<Extension<Peer>>,
    method: &Method,
    uri: &Uri,
) -> Result<(), ApiError> {
    if !app.console.enabled {
        return Err(unknown(method, uri));
    }
    // `::ffff:127.0.0.1` (a dual-stack listener's IPv4 client) is local too.
    let local = peer.is_some_and(|Extension(Peer(p))| p.ip().to_canonical().is_loopback());
    if app.keys.is_empty() && !app.console.open && !local {
        return Err(ApiError::ConsoleLoopbackOnly);
    }
    Ok(())
}

fn unknown(method: &Method, uri: &Uri) -> ApiError {
    ApiError::UnknownUrl {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

fn answer(kind: &'static str, body: Vec<u8>) -> Response {
    let mut resp = (StatusCode::OK, body).into_response();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_file_the_page_loads_is_served() {
        for (name, _, body) in FILES {
            assert!(!body.is_empty(), "{name}");
        }
        // The page's own references, and each module's imports.
        let mut refs: Vec<&str> = Vec::new();
        for text in std::iter::once(INDEX).chain(FILES.iter().map(|(_, _, b)| *b)) {
            for part in text.split("/console/").skip(1) {
                let name = part
                    .split(|c: char| !(c.is_ascii_alphanumeric() || c == '.' || c == '_'))
                    .next()
                    .unwrap_or("");
                if [".js", ".css", ".svg"].iter().any(|x| name.ends_with(x)) {
                    refs.push(name);
                }
            }
        }
        assert!(refs.contains(&"app.js") && refs.contains(&"style.css"));
        for r in refs {
            assert!(FILES.iter().any(|(n, _, _)| *n == r), "{r} is not served");
        }
    }

    #[test]
    fn no_inline_script_or_style_and_no_html_sinks() {
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
        assert!(!INDEX.contains("<style"));
        for (name, _, body) in FILES {
            for sink in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!body.contains(sink), "{name} uses {sink}");
            }
        }
    }

    #[test]
    fn attributes_are_escaped() {
        assert_eq!(
            escape("https://g/d?a=1&b=\"<x>'"),
            "https://g/d?a=1&amp;b=&quot;&lt;x&gt;&#39;"
        );
    }
}

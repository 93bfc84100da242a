//! The console's page, script, style and icon, built into the binary from
//! `control-plane/console/` (no build step, nothing from another host),
//! and the security headers every `/ui` answer carries.

use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Redirect, Response};

const INDEX: &str = include_str!("../../console/index.html");
const SCRIPT: &str = include_str!("../../console/app.js");
const STYLE: &str = include_str!("../../console/app.css");
const ICON: &str = include_str!("../../console/favicon.svg");

/// The Content-Security-Policy of every `/ui` answer: only this origin's
/// script, style and connections; no inline script or style, no frames,
/// no form posts, no `<base>`.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
     connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

/// `/ui` → `/ui/` (relative asset paths resolve under it).
pub async fn to_index() -> Redirect {
    Redirect::permanent("/ui/")
}

/// The page.
pub async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

/// The script.
pub async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

/// The style.
pub async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

/// The icon.
pub async fn icon() -> Response {
    asset("image/svg+xml", ICON)
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, content_type),
            // The binary is the version: revalidate each time.
            (header::CACHE_CONTROL, "no-cache"),
        ],
        body,
    )
        .into_response()
}

/// Adds the security headers to an answer: the CSP, no sniffing, no
/// referrer, no framing; API answers (JSON, events) are never cached.
pub async fn secure(mut response: Response) -> Response {
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(
        "cross-origin-opener-policy",
        HeaderValue::from_static("same-origin"),
    );
    let cached = h.contains_key(header::CACHE_CONTROL);
    if !cached {
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
}

//! Shared by the stage D tests (`oauth_flow`, `e2e_oauth`): the mock
//! authorization server (`oauth_as.py`) and the OAuth-protected MCP stub
//! (`http_stub.py` with `STUB_HTTP_OAUTH_AS`), both real HTTP, and what a
//! browser does with an authorization URL.

use serde_json::Value;
use switchyard_test_support::{HttpServer, start_http_server, stub_script};
use tokio::process::Command;

/// The mock authorization server, with `env` knobs (`OAUTH_AS_*`).
pub async fn start_as(env: &[(&str, &str)]) -> HttpServer {
    switchyard_common::tls::install_crypto_provider();
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("oauth_as.py"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    start_http_server(cmd, "").await
}

/// The protected MCP stub whose tokens `issuer` issues.
pub async fn start_protected(issuer: &str) -> HttpServer {
    let mut cmd = Command::new("python3");
    cmd.arg(stub_script("http_stub.py"))
        .env("STUB_HTTP_OAUTH_AS", issuer);
    start_http_server(cmd, "/mcp").await
}

/// GET `base` + `path` (JSON).
pub async fn get_json(url: &str) -> Value {
    reqwest::get(url)
        .await
        .unwrap_or_else(|e| panic!("GET {url}: {e}"))
        .json()
        .await
        .expect("JSON")
}

/// POST a knob change to the mock authorization server.
pub async fn control(issuer: &str, knobs: Value) {
    let r = reqwest::Client::new()
        .post(format!("{issuer}/_control"))
        .json(&knobs)
        .send()
        .await
        .expect("POST /_control");
    assert!(r.status().is_success(), "{}", r.status());
}

/// What a browser does with an authorization URL: the authorization
/// server approves at once and redirects; the redirect is followed to the
/// callback. Answers the callback's status and page.
pub async fn browse(url: &str) -> (u16, String) {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let r = client.get(url).send().await.expect("GET /authorize");
    assert_eq!(
        r.status().as_u16(),
        302,
        "{}",
        r.text().await.unwrap_or_default()
    );
    let location = r.headers()["location"].to_str().unwrap().to_owned();
    callback(&location).await
}

pub async fn callback(location: &str) -> (u16, String) {
    let r = reqwest::get(location).await.expect("GET the callback");
    (r.status().as_u16(), r.text().await.unwrap())
}

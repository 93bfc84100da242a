//! The control plane's services: the engine API, the admin API, the
//! sidecar registry (gRPC, tonic), the HTTP endpoints (axum), and the JSON
//! shapes of their records that the CLI and the console share.

pub mod admin;
pub mod engine;
pub mod http;
pub mod json;
pub mod sidecar;
pub mod status;

//! The control plane's services: the engine API, the admin API, the
//! sidecar registry (gRPC, tonic) and the HTTP endpoints (axum).

pub mod admin;
pub mod engine;
pub mod http;
pub mod sidecar;
pub mod status;

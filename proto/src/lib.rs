//! Switchyard's gRPC contracts, package `switchyard.v1`, generated from
//! `proto/switchyard/v1/*.proto`: the engine API (`EngineService`), the
//! sidecar API (`SidecarRegistry` served by the control plane,
//! `SidecarCalls` served by each sidecar) and the admin API
//! (`AdminService`). MCP JSON travels as JSON text in `*_json` fields so
//! nothing is lost in transit. [`calls`] holds both halves of the
//! streams of calls (`CallToolStream`, `CallStream`); [`status`] builds
//! statuses that fit in HTTP/2 headers; [`panics`] answers a panicking
//! handler's request with `INTERNAL`.

pub mod calls;
pub mod panics;
pub mod status;

/// The encoded `FileDescriptorSet` of `switchyard.v1`, for gRPC server
/// reflection (`grpc.reflection.v1`), so that tools such as `grpcurl`
/// list and call the services without the proto files.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("switchyard_descriptor");

/// Package `switchyard.v1`.
pub mod v1 {
    #![allow(
        missing_docs,
        missing_debug_implementations,
        clippy::all,
        clippy::pedantic
    )]
    tonic::include_proto!("switchyard.v1");
}

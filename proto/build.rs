//! Generates the switchyard.v1 messages and services with tonic/prost.
//! Needs `protoc` (Debian package protobuf-compiler; `scripts/install-test-peers.sh`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = [
        "switchyard/v1/common.proto",
        "switchyard/v1/engine.proto",
        "switchyard/v1/sidecar.proto",
        "switchyard/v1/admin.proto",
    ];
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    // The descriptors, for gRPC server reflection (`FILE_DESCRIPTOR_SET`).
    let descriptors =
        std::path::PathBuf::from(std::env::var("OUT_DIR")?).join("switchyard_descriptor.bin");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .file_descriptor_set_path(descriptors)
        .compile_protos(&protos, &["."])?;
    Ok(())
}

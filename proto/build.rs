//! Generates the railyard.v1 types with the vendored protoc, so a fresh machine
//! needs nothing but Rust.

/// The package's files: the shared messages, then one file per service.
const PROTOS: [&str; 8] = [
    "railyard/v1/common.proto",
    "railyard/v1/history.proto",
    "railyard/v1/tasks.proto",
    "railyard/v1/schedules.proto",
    "railyard/v1/batches.proto",
    "railyard/v1/triggers.proto",
    "railyard/v1/admin.proto",
    "railyard/v1/capacity.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Malformed messages are the sender's fault: INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::codec::Codec")
        .file_descriptor_set_path(out_dir.join("railyard_descriptor.bin"))
        .compile_protos(&PROTOS, &["."])?;
    for proto in PROTOS {
        println!("cargo:rerun-if-changed={proto}");
    }
    Ok(())
}

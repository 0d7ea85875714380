//! Generates the railyard.v1 types with the vendored protoc, so a fresh machine
//! needs nothing but Rust.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    let out_dir = std::path::PathBuf::from(std::env::var("OUT_DIR")?);
    tonic_prost_build::configure()
        // Malformed messages are the sender's fault: INVALID_ARGUMENT, not INTERNAL.
        .codec_path("crate::codec::Codec")
        .file_descriptor_set_path(out_dir.join("railyard_descriptor.bin"))
        .compile_protos(&["railyard/v1/railyard.proto"], &["."])?;
    println!("cargo:rerun-if-changed=railyard/v1/railyard.proto");
    Ok(())
}

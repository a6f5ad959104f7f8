//! Generates the tonic/prost code for `proto/hub.proto` with a vendored `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/hub.proto");
    // A message that does not decode is the caller's error, not the node's: `codec.rs`.
    tonic_prost_build::configure()
        .codec_path("crate::codec::HubCodec")
        .compile_protos(&["proto/hub.proto"], &["proto"])?;
    Ok(())
}

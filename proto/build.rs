//! Generates the tonic/prost code for `proto/hub.proto` with a vendored `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    // SAFETY: build scripts are single-threaded; nothing else reads the environment concurrently.
    unsafe { std::env::set_var("PROTOC", protoc) };
    println!("cargo:rerun-if-changed=proto/hub.proto");
    tonic_prost_build::compile_protos("proto/hub.proto")?;
    Ok(())
}

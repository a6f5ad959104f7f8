//! Packages the demo service (`demo-service` next to the runner) as a process-driver release
//! artifact in a `file://` registry, as `hubctl demo` and `scripts/demo-package.sh` do.

use std::path::Path;

use anyhow::Context;
use serde_json::json;
use sha2::{Digest, Sha256};

/// Packages `version` of the binary `bin` into `registry/demo-service/`; returns the
/// release manifest of `com.example:demo-service`.
pub fn package(bin: &Path, registry: &Path, version: &str) -> anyhow::Result<String> {
    let dir = registry.join("demo-service");
    std::fs::create_dir_all(&dir).with_context(|| dir.display().to_string())?;
    let name = format!("demo-service-{version}.tar.gz");
    let service = json!({
        "command": "bin/demo-service",
        "args": ["--config", "${CONFIG}", "--version", version],
        "env": {},
        "readiness": {"http": "/healthz"},
        "ready_timeout_ms": 10000,
        "stop_timeout_ms": 5000
    });
    let binary = std::fs::read(bin).with_context(|| {
        format!(
            "{} (cargo build --workspace --bins builds it)",
            bin.display()
        )
    })?;
    let mut tarball = Vec::new();
    {
        let gz = flate2::write::GzEncoder::new(&mut tarball, flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        let mut add = |path: &str, mode: u32, data: &[u8], kind: tar::EntryType| {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(mode);
            h.set_size(data.len() as u64);
            h.set_mtime(1_704_067_200);
            tar.append_data(&mut h, path, data)
        };
        add("bin", 0o755, &[], tar::EntryType::Directory)?;
        add("bin/demo-service", 0o755, &binary, tar::EntryType::Regular)?;
        add(
            "service.json",
            0o644,
            serde_json::to_string_pretty(&service)?.as_bytes(),
            tar::EntryType::Regular,
        )?;
        tar.into_inner()?.finish()?;
    }
    std::fs::write(dir.join(&name), &tarball)?;
    let sha = hex::encode(Sha256::digest(&tarball));
    Ok(format!(
        "product-group: com.example\nproduct-name: demo-service\nproduct-version: {version}\n\
         artifacts:\n  - uri: demo-service/{name}\n    sha256: {sha}\n"
    ))
}

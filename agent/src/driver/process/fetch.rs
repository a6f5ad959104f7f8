//! Artifact sources: resolving a manifest URI against the environment's registries,
//! downloading it (`http://` with hyper, `file://` by copy) crash-safely, and hashing it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use http_body_util::BodyExt;
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::http::{self, redact, HttpUrl};
use super::layout::{sync_parent, temp_sibling};
use crate::plan::Registry;

/// Largest artifact downloaded.
pub const MAX_ARTIFACT_BYTES: u64 = 512 * 1024 * 1024;
/// Time to connect and receive the response head, and the longest pause between two body
/// chunks.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an artifact comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// Plain HTTP.
    Http(HttpUrl),
    /// A local file (absolute path).
    File(PathBuf),
}

impl Source {
    /// The location without credentials: safe to log and report.
    pub fn shown(&self) -> String {
        match self {
            Source::Http(u) => u.shown(),
            Source::File(p) => format!("file://{}", p.display()),
        }
    }
}

/// Resolves an artifact URI: absolute (`http://…`, `file:///…`; an `http://` URI under a
/// registry's URL gets that registry's credentials) or relative to the **first** registry,
/// joined with one `/`.
pub fn resolve(uri: &str, registries: &[Registry]) -> Result<Source, String> {
    let full = if has_scheme(uri) {
        with_registry_credentials(uri, registries)
    } else {
        let Some(registry) = registries.first() else {
            return Err(format!(
                "{uri}: a relative artifact URI needs a registry, and the environment has none"
            ));
        };
        if uri.starts_with('/')
            || uri
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == ".." || s.eq_ignore_ascii_case("%2e%2e"))
        {
            return Err(format!(
                "{uri:?}: a relative artifact URI must not start with '/' or contain empty, \
                 '.' or '..' segments"
            ));
        }
        let base = registry.url.strip_suffix('/').unwrap_or(&registry.url);
        format!("{base}/{uri}")
    };
    source_of(&full)
}

fn source_of(url: &str) -> Result<Source, String> {
    let shown = redact(url);
    if url.starts_with("https://") {
        return Err(format!(
            "{shown}: https is not supported by this agent build"
        ));
    }
    if let Some(path) = url.strip_prefix("file://") {
        if !path.starts_with('/') || path.split('/').any(|s| s == "..") {
            return Err(format!(
                "{shown}: a file URL must be absolute (file:///…) without '..'"
            ));
        }
        return Ok(Source::File(PathBuf::from(path)));
    }
    if url.starts_with("http://") {
        return HttpUrl::parse(url).map(Source::Http);
    }
    Err(format!(
        "{shown}: unsupported URL scheme (this agent fetches http:// and file://)"
    ))
}

fn has_scheme(uri: &str) -> bool {
    uri.find("://").is_some_and(|i| {
        i > 0
            && uri[..i]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

/// `uri` with the credentials of the registry whose URL is its longest prefix (on a path
/// boundary), as the hub resolves it.
fn with_registry_credentials(uri: &str, registries: &[Registry]) -> String {
    let mut best: Option<(&str, usize)> = None;
    for registry in registries {
        let base = registry.url.strip_suffix('/').unwrap_or(&registry.url);
        let key = redact(base);
        if key == base {
            continue; // no credentials to add
        }
        let boundary = uri
            .strip_prefix(key.as_str())
            .is_some_and(|rest| rest.starts_with('/'));
        if boundary && best.is_none_or(|(_, len)| key.len() > len) {
            best = Some((base, key.len()));
        }
    }
    match best {
        Some((base, key_len)) => format!("{base}{}", &uri[key_len..]),
        None => uri.to_string(),
    }
}

/// Downloads `source` into `dest` (temp file, fsync, rename): at most
/// [`MAX_ARTIFACT_BYTES`]. Returns the size. Errors do not name credentials.
pub async fn download(source: &Source, dest: &Path) -> Result<u64, String> {
    let tmp = temp_sibling(dest);
    let result = match source {
        Source::Http(url) => download_http(url, &tmp).await,
        Source::File(path) => copy_file(path, &tmp).await,
    };
    let result = match result {
        Ok(size) => tokio::fs::rename(&tmp, dest)
            .await
            .and_then(|()| sync_parent(dest))
            .map(|()| size)
            .map_err(|e| format!("cannot store the download at {}: {e}", dest.display())),
        Err(e) => Err(e),
    };
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

async fn download_http(url: &HttpUrl, tmp: &Path) -> Result<u64, String> {
    let (response, _connection) = http::get(url, HTTP_TIMEOUT).await?;
    let status = response.status();
    if status.is_redirection() {
        let location = response
            .headers()
            .get(hyper::header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .map(redact)
            .unwrap_or_default();
        return Err(format!(
            "HTTP {status}: redirect to {location:?} not followed"
        ));
    }
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let length = response
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if length.is_some_and(|l| l > MAX_ARTIFACT_BYTES) {
        return Err(format!(
            "artifact is larger than {MAX_ARTIFACT_BYTES} bytes (Content-Length {})",
            length.unwrap_or_default()
        ));
    }
    let mut file = tokio::fs::File::create(tmp)
        .await
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut body = response.into_body();
    let mut total: u64 = 0;
    loop {
        let frame = match tokio::time::timeout(HTTP_TIMEOUT, body.frame()).await {
            Err(_) => {
                return Err(format!(
                    "no data for {} s after {total} bytes",
                    HTTP_TIMEOUT.as_secs()
                ))
            }
            Ok(None) => break,
            Ok(Some(Err(e))) => return Err(format!("reading the body after {total} bytes: {e}")),
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue; // trailers
        };
        total += data.len() as u64;
        if total > MAX_ARTIFACT_BYTES {
            return Err(format!(
                "artifact is larger than {MAX_ARTIFACT_BYTES} bytes"
            ));
        }
        file.write_all(&data)
            .await
            .map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
    }
    if length.is_some_and(|l| l != total) {
        return Err(format!(
            "body ended after {total} of {} bytes",
            length.unwrap_or_default()
        ));
    }
    file.sync_all()
        .await
        .map_err(|e| format!("cannot sync {}: {e}", tmp.display()))?;
    Ok(total)
}

async fn copy_file(path: &Path, tmp: &Path) -> Result<u64, String> {
    let meta = tokio::fs::metadata(path).await.map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".into());
    }
    if meta.len() > MAX_ARTIFACT_BYTES {
        return Err(format!(
            "artifact is larger than {MAX_ARTIFACT_BYTES} bytes"
        ));
    }
    let size = tokio::fs::copy(path, tmp)
        .await
        .map_err(|e| format!("cannot copy to {}: {e}", tmp.display()))?;
    let file = tokio::fs::File::open(tmp)
        .await
        .map_err(|e| format!("cannot open {}: {e}", tmp.display()))?;
    file.sync_all()
        .await
        .map_err(|e| format!("cannot sync {}: {e}", tmp.display()))?;
    Ok(size)
}

/// Hex SHA-256 of the file at `path` (blocking: call from `spawn_blocking`).
pub fn sha256_file(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hex::encode(hasher.finalize()))
}

/// [`sha256_file`] on the blocking pool.
pub async fn sha256_file_async(path: PathBuf) -> std::io::Result<String> {
    tokio::task::spawn_blocking(move || sha256_file(&path))
        .await
        .map_err(std::io::Error::other)?
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(url: &str) -> Registry {
        Registry {
            name: "r".into(),
            url: url.into(),
        }
    }

    #[test]
    fn resolution() {
        let regs = [reg("http://u:p@127.0.0.1:9/base/"), reg("file:///srv/r")];
        let Source::Http(u) = resolve("web/web-1.tar.gz", &regs).unwrap() else {
            panic!("http expected");
        };
        assert_eq!(u.shown(), "http://127.0.0.1:9/base/web/web-1.tar.gz");
        // An absolute URI under a registry with credentials gets them.
        let Source::Http(abs) = resolve("http://127.0.0.1:9/base/x.tar.gz", &regs).unwrap() else {
            panic!("http expected");
        };
        assert_eq!(
            abs,
            HttpUrl::parse("http://u:p@127.0.0.1:9/base/x.tar.gz").unwrap()
        );
        assert_eq!(
            resolve("x.tar.gz", &[reg("file:///srv/r")]),
            Ok(Source::File("/srv/r/x.tar.gz".into()))
        );
        assert_eq!(
            resolve("file:///a/b.tar.gz", &[]),
            Ok(Source::File("/a/b.tar.gz".into()))
        );
        let https = resolve("https://r/x.tar.gz", &[]).unwrap_err();
        assert!(
            https.contains("https is not supported by this agent build"),
            "{https}"
        );
        let https = resolve("x.tar.gz", &[reg("https://u:secret@r/")]).unwrap_err();
        assert!(https.contains("https is not supported") && !https.contains("secret"));
        for bad in ["../x.tar.gz", "a//b", "./a", "/abs"] {
            assert!(resolve(bad, &regs).is_err(), "{bad}");
        }
        assert!(resolve("x", &[]).unwrap_err().contains("no"));
        assert!(resolve("ftp://x/y", &[])
            .unwrap_err()
            .contains("unsupported"));
        assert!(resolve("file://relative/x", &[]).is_err());
    }
}

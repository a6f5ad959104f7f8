//! Artifact sources: resolving a manifest URI against the environment's registries,
//! downloading it (`http://` and `https://` through the agent's download clients, which
//! refuse denied addresses; `file://` by copy, and only from under a `file://` registry of
//! the environment) crash-safely, and hashing it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hub_http::{ClientPool, Method, Trust};
use sha2::{Digest, Sha256};
use tokio::io::AsyncWriteExt;

use super::http::redact;
use super::layout::{sync_parent, temp_sibling};
use crate::plan::Registry;

/// Largest artifact downloaded.
pub const MAX_ARTIFACT_BYTES: u64 = 512 * 1024 * 1024;
/// Time to connect (TLS included), follow redirects and receive the response head, and the
/// longest pause between two body chunks.
pub const HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// Where an artifact comes from.
#[derive(Clone, PartialEq, Eq)]
pub enum Source {
    /// HTTP or HTTPS.
    Http {
        /// The URL; it may carry the registry's `user:password@` (never shown).
        url: String,
        /// How the server's certificate is verified (the registry's setting).
        trust: Trust,
    },
    /// A local file (absolute path).
    File(PathBuf),
}

impl std::fmt::Debug for Source {
    /// [`Source::shown`]: never the credentials.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::Http { trust, .. } => write!(f, "Http({}, {trust:?})", self.shown()),
            Source::File(_) => write!(f, "File({})", self.shown()),
        }
    }
}

impl Source {
    /// The location without credentials: safe to log and report.
    pub fn shown(&self) -> String {
        match self {
            Source::Http { url, .. } => redact(url),
            Source::File(p) => format!("file://{}", p.display()),
        }
    }
}

/// Resolves an artifact URI: absolute (`http(s)://…`, `file:///…`; a URI under a
/// registry's URL gets that registry's credentials and TLS setting) or relative to the
/// **first** registry, joined with one `/`. A `file://` artifact is refused unless it lies
/// under a `file://` registry of the environment: a manifest cannot make the agent read
/// `/etc/shadow` (and report its digest).
pub fn resolve(uri: &str, registries: &[Registry]) -> Result<Source, String> {
    let (full, registry) = if has_scheme(uri) {
        match registry_of(uri, registries) {
            Some((registry, base, key_len)) => {
                (format!("{base}{}", &uri[key_len..]), Some(registry))
            }
            None => (uri.to_string(), None),
        }
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
        (format!("{base}/{uri}"), Some(registry))
    };
    source_of(&full, registry)
}

fn source_of(url: &str, registry: Option<&Registry>) -> Result<Source, String> {
    let shown = redact(url);
    if let Some(path) = url.strip_prefix("file://") {
        // `url` starts with the registry's own url when one matched: a file:// registry.
        if registry.is_none() {
            return Err(format!(
                "{shown}: refused: a file:// artifact is read only from under a file:// \
                 registry of this environment, and none contains it"
            ));
        }
        if !path.starts_with('/') || path.split('/').any(|s| s == "..") {
            return Err(format!(
                "{shown}: a file URL must be absolute (file:///…) without '..'"
            ));
        }
        return Ok(Source::File(PathBuf::from(path)));
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(Source::Http {
            url: url.to_string(),
            trust: registry.map(Registry::trust).unwrap_or(Trust::SystemRoots),
        });
    }
    Err(format!(
        "{shown}: unsupported URL scheme (this agent fetches http://, https:// and file://)"
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

/// The registry whose URL (without credentials) is the longest prefix of `uri` on a path
/// boundary, as the hub resolves it: the registry, its base URL (with credentials) and the
/// length of the prefix in `uri`.
fn registry_of<'a>(
    uri: &str,
    registries: &'a [Registry],
) -> Option<(&'a Registry, &'a str, usize)> {
    let mut best: Option<(&Registry, &str, usize)> = None;
    for registry in registries {
        let base = registry.url.strip_suffix('/').unwrap_or(&registry.url);
        let key = redact(base);
        let boundary = uri
            .strip_prefix(key.as_str())
            .is_some_and(|rest| rest.starts_with('/'));
        if boundary && best.is_none_or(|(_, _, len)| key.len() > len) {
            best = Some((registry, base, key.len()));
        }
    }
    best
}

/// Downloads `source` into `dest` (temp file, fsync, rename) through `clients`: at most
/// [`MAX_ARTIFACT_BYTES`]. Returns the size. Errors do not name credentials; nothing is left
/// behind on failure.
pub async fn download(clients: &ClientPool, source: &Source, dest: &Path) -> Result<u64, String> {
    let tmp = temp_sibling(dest);
    let result = match source {
        Source::Http { url, trust } => download_http(clients, url, trust, &tmp).await,
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

/// The error of a download, without the URL the caller already shows.
fn reason(e: hub_http::HttpError) -> String {
    e.kind.to_string()
}

async fn download_http(
    clients: &ClientPool,
    url: &str,
    trust: &Trust,
    tmp: &Path,
) -> Result<u64, String> {
    let client = clients.client(trust).map_err(|e| e.to_string())?;
    let mut response =
        match tokio::time::timeout(HTTP_TIMEOUT, client.send(Method::GET, url, None)).await {
            Err(_) => return Err(format!("no response within {} s", HTTP_TIMEOUT.as_secs())),
            Ok(result) => result.map_err(reason)?,
        };
    let status = response.status();
    if status.is_redirection() {
        let location = response.header("location").map(redact).unwrap_or_default();
        return Err(format!(
            "HTTP {status}: redirect to {location:?} not followed"
        ));
    }
    if !status.is_success() {
        return Err(format!("HTTP {status}"));
    }
    let length = response.content_length();
    if length.is_some_and(|l| l > MAX_ARTIFACT_BYTES) {
        return Err(format!(
            "artifact is larger than {MAX_ARTIFACT_BYTES} bytes (Content-Length {})",
            length.unwrap_or_default()
        ));
    }
    let mut file = tokio::fs::File::create(tmp)
        .await
        .map_err(|e| format!("cannot create {}: {e}", tmp.display()))?;
    let mut total: u64 = 0;
    loop {
        let data = match tokio::time::timeout(HTTP_TIMEOUT, response.chunk()).await {
            Err(_) => {
                return Err(format!(
                    "no data for {} s after {total} bytes",
                    HTTP_TIMEOUT.as_secs()
                ))
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                return Err(format!(
                    "reading the body after {total} bytes: {}",
                    reason(e)
                ))
            }
            Ok(Ok(Some(data))) => data,
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
            ..Registry::default()
        }
    }

    fn http(url: &str, trust: Trust) -> Source {
        Source::Http {
            url: url.into(),
            trust,
        }
    }

    #[test]
    fn resolution() {
        let regs = [reg("http://u:p@127.0.0.1:9/base/"), reg("file:///srv/r")];
        let relative = resolve("web/web-1.tar.gz", &regs).unwrap();
        assert_eq!(relative.shown(), "http://127.0.0.1:9/base/web/web-1.tar.gz");
        assert!(!format!("{relative:?}").contains("u:p"), "{relative:?}");
        // An absolute URI under a registry with credentials gets them.
        assert_eq!(
            resolve("http://127.0.0.1:9/base/x.tar.gz", &regs),
            Ok(http(
                "http://u:p@127.0.0.1:9/base/x.tar.gz",
                Trust::SystemRoots
            ))
        );
        assert_eq!(
            resolve("x.tar.gz", &[reg("file:///srv/r")]),
            Ok(Source::File("/srv/r/x.tar.gz".into()))
        );
        assert_eq!(
            resolve("file:///srv/r/b.tar.gz", &regs),
            Ok(Source::File("/srv/r/b.tar.gz".into()))
        );
        // A file outside every file:// registry is refused, with or without registries.
        for registries in [&regs[..], &[], &[reg("https://r.example/base")]] {
            let refused = resolve("file:///etc/shadow", registries).unwrap_err();
            assert!(
                refused.starts_with("file:///etc/shadow: refused: a file:// artifact"),
                "{refused}"
            );
        }
        assert!(resolve("file:///srv/rx/b.tar.gz", &regs).is_err());
        assert!(resolve("file:///srv/r/../../etc/shadow", &regs).is_err());
        // https: the registry's trust comes along, relative or absolute.
        let tls = [
            Registry {
                ca_pem: Some("PEM".into()),
                ..reg("https://u:secret@r.example/a/")
            },
            Registry {
                insecure_skip_verify: true,
                ..reg("https://other.example")
            },
        ];
        let with_ca = Trust::SystemRootsAnd {
            ca_pem: "PEM".into(),
        };
        assert_eq!(
            resolve("x.tar.gz", &tls),
            Ok(http(
                "https://u:secret@r.example/a/x.tar.gz",
                with_ca.clone()
            ))
        );
        assert_eq!(
            resolve("https://r.example/a/b/x.tar.gz", &tls),
            Ok(http("https://u:secret@r.example/a/b/x.tar.gz", with_ca))
        );
        assert_eq!(
            resolve("https://other.example/x.tar.gz", &tls),
            Ok(http(
                "https://other.example/x.tar.gz",
                Trust::SkipVerification
            ))
        );
        assert_eq!(
            resolve("https://elsewhere.example/x.tar.gz", &tls),
            Ok(http(
                "https://elsewhere.example/x.tar.gz",
                Trust::SystemRoots
            ))
        );
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

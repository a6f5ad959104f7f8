//! Artifact sources: resolving a manifest URI against the environment's registries,
//! downloading it (`http://` and `https://` through the agent's download clients, which
//! refuse denied addresses; `file://` by copy, and only from under a `file://` registry of
//! the environment) crash-safely, and hashing it.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

use hub_http::{ClientPool, ErrorKind, Method, StatusCode, Trust};
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

/// Why an artifact URI does not resolve to a source this agent may read. `uri` and `shown`
/// are the URI as written and the resolved URL without credentials.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// A relative URI, and the environment has no registry.
    #[error("{uri}: a relative artifact URI needs a registry, and the environment has none")]
    NoRegistry {
        /// The URI.
        uri: String,
    },
    /// A relative URI with a leading `/` or an empty, `.` or `..` segment.
    #[error(
        "{uri:?}: a relative artifact URI must not start with '/' or contain empty, \
         '.' or '..' segments"
    )]
    RelativePath {
        /// The URI.
        uri: String,
    },
    /// A `file://` URL under no `file://` registry of the environment.
    #[error(
        "{shown}: refused: a file:// artifact is read only from under a file:// \
         registry of this environment, and none contains it"
    )]
    FileOutsideRegistries {
        /// The URL.
        shown: String,
    },
    /// A `file://` URL that is not absolute or has `..`.
    #[error("{shown}: a file URL must be absolute (file:///…) without '..'")]
    FilePath {
        /// The URL.
        shown: String,
    },
    /// A scheme other than `http`, `https` and `file`.
    #[error("{shown}: unsupported URL scheme (this agent fetches http://, https:// and file://)")]
    Scheme {
        /// The URL.
        shown: String,
    },
}

/// Why a download failed. The messages do not name the source (the caller shows it) nor
/// credentials.
#[derive(Debug, thiserror::Error)]
pub enum DownloadError {
    /// No download client for the registry's TLS setting.
    #[error("{0}")]
    Client(#[source] ErrorKind),
    /// No response head in time.
    #[error("no response within {} s", HTTP_TIMEOUT.as_secs())]
    NoResponse,
    /// The request failed.
    #[error("{0}")]
    Request(#[source] ErrorKind),
    /// A redirect (never followed).
    #[error("HTTP {status}: redirect to {location:?} not followed")]
    Redirect {
        /// The status.
        status: StatusCode,
        /// Its `Location`, without credentials.
        location: String,
    },
    /// Another status than a success.
    #[error("HTTP {status}")]
    Status {
        /// The status.
        status: StatusCode,
    },
    /// The declared length is above [`MAX_ARTIFACT_BYTES`].
    #[error("artifact is larger than {MAX_ARTIFACT_BYTES} bytes (Content-Length {length})")]
    TooLargeDeclared {
        /// The `Content-Length`.
        length: u64,
    },
    /// More than [`MAX_ARTIFACT_BYTES`] bytes came, or the file holds more.
    #[error("artifact is larger than {MAX_ARTIFACT_BYTES} bytes")]
    TooLarge,
    /// The body paused too long.
    #[error("no data for {} s after {total} bytes", HTTP_TIMEOUT.as_secs())]
    Stalled {
        /// Bytes received.
        total: u64,
    },
    /// Reading the body failed.
    #[error("reading the body after {total} bytes: {kind}")]
    Body {
        /// Bytes received.
        total: u64,
        /// The error.
        #[source]
        kind: ErrorKind,
    },
    /// The body is shorter than declared.
    #[error("body ended after {total} of {length} bytes")]
    Short {
        /// Bytes received.
        total: u64,
        /// The `Content-Length`.
        length: u64,
    },
    /// The `file://` source cannot be read.
    #[error("{0}")]
    Stat(#[source] std::io::Error),
    /// The `file://` source is not a regular file.
    #[error("not a regular file")]
    NotAFile,
    /// A file operation on the download failed: `what` it was (`cannot create`,
    /// `cannot write`, `cannot sync`, `cannot copy to`, `cannot open`, `cannot store the
    /// download at`), the file, and the error.
    #[error("{what} {}: {source}", path.display())]
    File {
        /// The operation.
        what: FileOp,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// A file operation of a download ([`DownloadError::File`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileOp {
    /// Creating the temporary file.
    Create,
    /// Writing to it.
    Write,
    /// Syncing it.
    Sync,
    /// Copying a `file://` source into it.
    Copy,
    /// Opening it.
    Open,
    /// Renaming it into place.
    Store,
}

impl std::fmt::Display for FileOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Create => "cannot create",
            Self::Write => "cannot write",
            Self::Sync => "cannot sync",
            Self::Copy => "cannot copy to",
            Self::Open => "cannot open",
            Self::Store => "cannot store the download at",
        })
    }
}

/// A [`DownloadError::File`] builder for `map_err`.
fn file_error(what: FileOp, path: &Path) -> impl FnOnce(std::io::Error) -> DownloadError {
    let path = path.to_path_buf();
    move |source| DownloadError::File { what, path, source }
}

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
pub fn resolve(uri: &str, registries: &[Registry]) -> Result<Source, ResolveError> {
    let (full, registry) = if has_scheme(uri) {
        match registry_of(uri, registries) {
            Some((registry, base, key_len)) => {
                (format!("{base}{}", &uri[key_len..]), Some(registry))
            }
            None => (uri.to_string(), None),
        }
    } else {
        let Some(registry) = registries.first() else {
            return Err(ResolveError::NoRegistry {
                uri: uri.to_string(),
            });
        };
        if uri.starts_with('/')
            || uri
                .split('/')
                .any(|s| s.is_empty() || s == "." || s == ".." || s.eq_ignore_ascii_case("%2e%2e"))
        {
            return Err(ResolveError::RelativePath {
                uri: uri.to_string(),
            });
        }
        let base = registry.url.strip_suffix('/').unwrap_or(&registry.url);
        (format!("{base}/{uri}"), Some(registry))
    };
    source_of(&full, registry)
}

fn source_of(url: &str, registry: Option<&Registry>) -> Result<Source, ResolveError> {
    let shown = redact(url);
    if let Some(path) = url.strip_prefix("file://") {
        // `url` starts with the registry's own url when one matched: a file:// registry.
        if registry.is_none() {
            return Err(ResolveError::FileOutsideRegistries { shown });
        }
        if !path.starts_with('/') || path.split('/').any(|s| s == "..") {
            return Err(ResolveError::FilePath { shown });
        }
        return Ok(Source::File(PathBuf::from(path)));
    }
    if url.starts_with("http://") || url.starts_with("https://") {
        return Ok(Source::Http {
            url: url.to_string(),
            trust: registry.map(Registry::trust).unwrap_or(Trust::SystemRoots),
        });
    }
    Err(ResolveError::Scheme { shown })
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
pub async fn download(
    clients: &ClientPool,
    source: &Source,
    dest: &Path,
) -> Result<u64, DownloadError> {
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
            .map_err(file_error(FileOp::Store, dest)),
        Err(e) => Err(e),
    };
    if result.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    result
}

async fn download_http(
    clients: &ClientPool,
    url: &str,
    trust: &Trust,
    tmp: &Path,
) -> Result<u64, DownloadError> {
    let client = clients.client(trust).map_err(DownloadError::Client)?;
    let mut response =
        match tokio::time::timeout(HTTP_TIMEOUT, client.send(Method::GET, url, None)).await {
            Err(_) => return Err(DownloadError::NoResponse),
            Ok(result) => result.map_err(|e| DownloadError::Request(e.kind))?,
        };
    let status = response.status();
    if status.is_redirection() {
        let location = response.header("location").map(redact).unwrap_or_default();
        return Err(DownloadError::Redirect { status, location });
    }
    if !status.is_success() {
        return Err(DownloadError::Status { status });
    }
    let length = response.content_length();
    if let Some(length) = length.filter(|l| *l > MAX_ARTIFACT_BYTES) {
        return Err(DownloadError::TooLargeDeclared { length });
    }
    let mut file = tokio::fs::File::create(tmp)
        .await
        .map_err(file_error(FileOp::Create, tmp))?;
    let mut total: u64 = 0;
    loop {
        let data = match tokio::time::timeout(HTTP_TIMEOUT, response.chunk()).await {
            Err(_) => return Err(DownloadError::Stalled { total }),
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                return Err(DownloadError::Body {
                    total,
                    kind: e.kind,
                })
            }
            Ok(Ok(Some(data))) => data,
        };
        total += data.len() as u64;
        if total > MAX_ARTIFACT_BYTES {
            return Err(DownloadError::TooLarge);
        }
        file.write_all(&data)
            .await
            .map_err(file_error(FileOp::Write, tmp))?;
    }
    if let Some(length) = length.filter(|l| *l != total) {
        return Err(DownloadError::Short { total, length });
    }
    file.sync_all()
        .await
        .map_err(file_error(FileOp::Sync, tmp))?;
    Ok(total)
}

async fn copy_file(path: &Path, tmp: &Path) -> Result<u64, DownloadError> {
    let meta = tokio::fs::metadata(path)
        .await
        .map_err(DownloadError::Stat)?;
    if !meta.is_file() {
        return Err(DownloadError::NotAFile);
    }
    if meta.len() > MAX_ARTIFACT_BYTES {
        return Err(DownloadError::TooLarge);
    }
    let size = tokio::fs::copy(path, tmp)
        .await
        .map_err(file_error(FileOp::Copy, tmp))?;
    let file = tokio::fs::File::open(tmp)
        .await
        .map_err(file_error(FileOp::Open, tmp))?;
    file.sync_all()
        .await
        .map_err(file_error(FileOp::Sync, tmp))?;
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
            assert_eq!(
                refused,
                ResolveError::FileOutsideRegistries {
                    shown: "file:///etc/shadow".into()
                }
            );
            assert!(
                refused
                    .to_string()
                    .starts_with("file:///etc/shadow: refused: a file:// artifact"),
                "{refused}"
            );
        }
        assert!(matches!(
            resolve("file:///srv/rx/b.tar.gz", &regs),
            Err(ResolveError::FileOutsideRegistries { .. })
        ));
        assert!(matches!(
            resolve("file:///srv/r/../../etc/shadow", &regs),
            Err(ResolveError::FilePath { .. })
        ));
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
            assert!(
                matches!(resolve(bad, &regs), Err(ResolveError::RelativePath { .. })),
                "{bad}"
            );
        }
        assert!(matches!(
            resolve("x", &[]),
            Err(ResolveError::NoRegistry { .. })
        ));
        assert!(matches!(
            resolve("ftp://x/y", &[]),
            Err(ResolveError::Scheme { .. })
        ));
        assert!(resolve("file://relative/x", &[]).is_err());
    }
}

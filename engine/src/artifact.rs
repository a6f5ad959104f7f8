//! Artifact registries and the pure half of the missing-artifact constraint (SPEC C9).
//!
//! A release manifest lists artifact URIs. Each environment declares artifact registries; the
//! hub resolves every artifact against them ([`resolve`]) and then checks that the artifact
//! exists (the node's artifact checker does the I/O). An artifact is then
//!
//! - [`Availability::Available`];
//! - [`Availability::Unavailable`]: absent, or the registry request failed — this blocks the
//!   plan;
//! - [`Availability::Unchecked`]: no registry matches, or the matching registry is
//!   `hub-access: not-expected` — this does not block. Marking a registry not-expected only
//!   skips the hub's check; the agent must still fetch the artifact.
//!
//! URLs are compared and joined as text: schemes and hosts are case-sensitive (registries and
//! artifacts must spell them alike, lower-case schemes only), and percent-escapes are kept
//! verbatim (a `file://` path is used exactly as written). A registry URL may carry
//! `user:password@` credentials; [`ArtifactLocation`]'s `Display` and
//! [`ArtifactLocation::redacted`] strip them, and artifact URIs in manifests may not carry any.
//!
//! An `https` registry's server certificate is verified against the system's roots, plus an
//! optional CA bundle of the registry ([`RegistryTls::ExtraCa`], PEM text replicated with the
//! registry), or not at all when the operator says so explicitly
//! ([`RegistryTls::InsecureSkipVerify`]). A location carries only the bundle's SHA-256
//! ([`TlsTrust`]), so the leader's observations stay small and a changed bundle is a new
//! location, checked afresh.
//!
//! Nothing here does I/O or reads a clock.

use std::fmt;

use serde::{Deserialize, Serialize};

pub use hub_wire::url_credentials::{basic_authorization, redact_url};

/// Longest registry URL or artifact URI accepted, in bytes.
pub const MAX_URL_LEN: usize = 2048;

/// Longest registry name (a DNS label).
pub const MAX_REGISTRY_NAME_LEN: usize = 63;

/// Longest CA bundle (PEM text) a registry may carry, in bytes.
pub const MAX_CA_PEM_LEN: usize = 64 * 1024;

/// Most certificates in one CA bundle.
pub const MAX_CA_CERTIFICATES: usize = 64;

/// Whether the hub is expected to reach a registry.
///
/// Serialised as `expected` / `not-expected`, as written in an environment's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum HubAccess {
    /// The hub checks the registry's artifacts (the default).
    #[default]
    Expected,
    /// The hub cannot reach the registry (e.g. an air-gapped spoke): its artifacts are
    /// [`Availability::Unchecked`]. The agent still fetches them.
    NotExpected,
}

impl HubAccess {
    /// Parses `expected` or `not-expected`.
    pub fn parse(s: &str) -> Result<Self, UnknownHubAccess> {
        match s {
            "expected" => Ok(Self::Expected),
            "not-expected" => Ok(Self::NotExpected),
            other => Err(UnknownHubAccess(other.to_string())),
        }
    }

    /// The configuration spelling: `expected` or `not-expected`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Expected => "expected",
            Self::NotExpected => "not-expected",
        }
    }
}

impl fmt::Display for HubAccess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A hub-access value other than `expected` and `not-expected` ([`HubAccess::parse`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a hub-access value; use \"expected\" or \"not-expected\"")]
pub struct UnknownHubAccess(pub String);

/// Why a CA bundle's PEM text is refused ([`check_ca_pem`]).
#[derive(Debug, thiserror::Error)]
pub enum CaPemError {
    /// Longer than [`MAX_CA_PEM_LEN`] bytes.
    #[error("{len} bytes, at most {MAX_CA_PEM_LEN} allowed")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// Not PEM.
    #[error("not valid PEM: {0}")]
    Pem(#[source] rustls_pki_types::pem::Error),
    /// A section other than `CERTIFICATE` (e.g. a private key pasted by mistake).
    #[error("holds a {0:?} section; a CA bundle holds CERTIFICATE sections only")]
    Section(rustls_pki_types::pem::SectionKind),
    /// More than [`MAX_CA_CERTIFICATES`] certificates.
    #[error("more than {MAX_CA_CERTIFICATES} certificates")]
    TooMany,
    /// A section that is not an X.509 certificate usable as a trust anchor.
    #[error("certificate {number} is not a valid X.509 certificate: {source}")]
    Certificate {
        /// Its number, from 1.
        number: usize,
        /// The error.
        source: webpki::Error,
    },
    /// No certificate at all.
    #[error("holds no certificate (expected one or more -----BEGIN CERTIFICATE----- sections)")]
    NoCertificate,
    /// A deserialised bundle whose fingerprint is not its text's.
    #[error("the bundle's fingerprint does not match its text")]
    Fingerprint,
}

/// Why a registry name, a registry url or an artifact uri is refused. `shown` is the text
/// without credentials, `uri` an artifact uri as written (one with credentials is refused
/// before it is quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// Empty.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`MAX_URL_LEN`] bytes.
    #[error("{len} bytes, at most {MAX_URL_LEN} allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// Whitespace or control characters.
    #[error("{shown:?} contains whitespace or control characters")]
    Whitespace {
        /// The text.
        shown: String,
    },
    /// A backslash.
    #[error("{shown:?} contains '\\'")]
    Backslash {
        /// The text.
        shown: String,
    },
    /// A query or fragment.
    #[error("{shown:?} must not have a query or fragment")]
    QueryOrFragment {
        /// The text.
        shown: String,
    },
    /// A `.` or `..` segment (also written with `%2e`).
    #[error("{shown:?} has a {segment:?} path segment")]
    DotSegment {
        /// The text.
        shown: String,
        /// The segment as written.
        segment: String,
    },
    /// No `://`.
    #[error("{shown:?} must start with http://, https:// or file://")]
    NoScheme {
        /// The text.
        shown: String,
    },
    /// A `file` URL with a host or a relative path.
    #[error("{shown:?}: a file URL has no host and an absolute path (file:///dir)")]
    FileUrl {
        /// The text.
        shown: String,
    },
    /// A scheme other than `http`, `https` and `file`.
    #[error("{shown:?}: scheme {scheme:?} is not supported; use http, https or file")]
    Scheme {
        /// The text.
        shown: String,
        /// The scheme.
        scheme: String,
    },
    /// An empty segment inside the path of an absolute URL.
    #[error("{shown:?} has an empty path segment (\"//\")")]
    EmptySegment {
        /// The text.
        shown: String,
    },
    /// A `[` host without `]`.
    #[error("{shown:?}: unterminated '[' in the host")]
    UnterminatedIpv6 {
        /// The text.
        shown: String,
    },
    /// A bracketed host that is not an IPv6 address.
    #[error("{shown:?}: malformed IPv6 host")]
    MalformedIpv6 {
        /// The text.
        shown: String,
    },
    /// Something other than `:port` after a bracketed host.
    #[error("{shown:?}: junk after the IPv6 host")]
    AfterIpv6 {
        /// The text.
        shown: String,
    },
    /// No host.
    #[error("{shown:?} has no host")]
    NoHost {
        /// The text.
        shown: String,
    },
    /// A host with other characters than letters, digits, `-`, `.` and `_`.
    #[error("{shown:?}: host {host:?} may contain only letters, digits, '-', '.' and '_'")]
    HostCharacters {
        /// The text.
        shown: String,
        /// The host.
        host: String,
    },
    /// A port that is not 1–65535.
    #[error("{shown:?}: port {port:?} must be 1-65535")]
    Port {
        /// The text.
        shown: String,
        /// The port as written.
        port: String,
    },
    /// An artifact uri with `user:password@`.
    #[error("{shown} must not carry credentials (user:password@); put them in the registry url")]
    Credentials {
        /// The uri, without the credentials.
        shown: String,
    },
    /// An artifact uri naming a directory.
    #[error("{uri:?} must name a file, not a directory")]
    Directory {
        /// The uri.
        uri: String,
    },
    /// An artifact uri with a leading `/` and no scheme.
    #[error("{uri:?} must be relative (no leading '/') or an absolute URL (file:///…)")]
    LeadingSlash {
        /// The uri.
        uri: String,
    },
    /// A relative artifact uri with an empty segment.
    #[error("{uri:?} has an empty path segment (\"//\" or a trailing '/')")]
    RelativeEmptySegment {
        /// The uri.
        uri: String,
    },
}

/// Why a registry name is refused (a DNS label).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegistryNameError {
    /// Empty.
    #[error("must not be empty")]
    Empty,
    /// Longer than [`MAX_REGISTRY_NAME_LEN`] characters.
    #[error("{len} characters, at most {MAX_REGISTRY_NAME_LEN} allowed")]
    TooLong {
        /// Its length.
        len: usize,
    },
    /// A character other than `a-z`, `0-9` and `-`.
    #[error("{name:?} contains {bad:?}; only a-z, 0-9 and '-' are allowed")]
    Character {
        /// The name.
        name: String,
        /// The first such character.
        bad: char,
    },
    /// Not starting with a letter.
    #[error("{name:?} must start with a letter")]
    Start {
        /// The name.
        name: String,
    },
    /// Ending with `-`.
    #[error("{name:?} must not end with '-'")]
    TrailingDash {
        /// The name.
        name: String,
    },
}

/// Why [`ArtifactRegistry::new`] refused a registry: the field at fault (`name`, `url`,
/// `ca_pem` or `insecure_skip_verify`) and what is wrong with it. Maps one-to-one onto an
/// "invalid field" command error.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidRegistry {
    /// `name`, `url`, `ca_pem` or `insecure_skip_verify`.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl fmt::Display for InvalidRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid {}: {}", self.field, self.reason)
    }
}

impl std::error::Error for InvalidRegistry {}

/// A validated PEM bundle of CA certificates (at least one, at most
/// [`MAX_CA_CERTIFICATES`], at most [`MAX_CA_PEM_LEN`] bytes) and its SHA-256.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaBundle {
    pem: String,
    sha256: String,
}

impl fmt::Debug for CaBundle {
    /// The fingerprint only: the PEM text is long and says nothing at a glance.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CaBundle")
            .field("sha256", &self.sha256)
            .finish_non_exhaustive()
    }
}

impl CaBundle {
    /// Parses `pem`: every `CERTIFICATE` section must decode and parse as an X.509
    /// certificate usable as a trust anchor, and there must be at least one. Other sections
    /// (e.g. a private key pasted by mistake) are refused, so the bundle holds exactly what
    /// it claims to.
    pub fn parse(pem: &str) -> Result<Self, CaPemError> {
        check_ca_pem(pem)?;
        Ok(Self {
            pem: pem.to_string(),
            sha256: sha256_hex(pem.as_bytes()),
        })
    }

    /// The PEM text as given.
    pub fn pem(&self) -> &str {
        &self.pem
    }

    /// Lowercase hex SHA-256 of the PEM text.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    /// Re-checks a deserialised value: the PEM parses and the fingerprint matches it.
    fn validate(&self) -> Result<(), CaPemError> {
        check_ca_pem(&self.pem)?;
        if sha256_hex(self.pem.as_bytes()) != self.sha256 {
            return Err(CaPemError::Fingerprint);
        }
        Ok(())
    }
}

/// Checks a CA bundle's PEM text (the rules of [`CaBundle::parse`]); the number of
/// certificates. [`check_ca_pem`] with the reason as text, for the CA file of a node's
/// configuration (whose error carries the reason as text).
pub fn validate_ca_pem(pem: &str) -> Result<usize, String> {
    check_ca_pem(pem).map_err(|e| e.to_string())
}

/// Checks a CA bundle's PEM text (the rules of [`CaBundle::parse`]); the number of
/// certificates.
pub fn check_ca_pem(pem: &str) -> Result<usize, CaPemError> {
    use rustls_pki_types::pem::{PemObject, SectionKind};
    use rustls_pki_types::CertificateDer;

    if pem.len() > MAX_CA_PEM_LEN {
        return Err(CaPemError::TooLarge { len: pem.len() });
    }
    let mut certificates = 0usize;
    for section in <(SectionKind, Vec<u8>)>::pem_slice_iter(pem.as_bytes()) {
        let (kind, der) = section.map_err(CaPemError::Pem)?;
        if kind != SectionKind::Certificate {
            return Err(CaPemError::Section(kind));
        }
        certificates += 1;
        if certificates > MAX_CA_CERTIFICATES {
            return Err(CaPemError::TooMany);
        }
        let der = CertificateDer::from(der);
        webpki::anchor_from_trusted_cert(&der).map_err(|source| CaPemError::Certificate {
            number: certificates,
            source,
        })?;
    }
    if certificates == 0 {
        return Err(CaPemError::NoCertificate);
    }
    Ok(certificates)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// How the server certificate of an `https` registry is verified.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum RegistryTls {
    /// Against the system's trusted roots (the default, and the only choice for `http` and
    /// `file` registries).
    #[default]
    SystemRoots,
    /// Against the system's roots and the certificates of this bundle.
    ExtraCa(CaBundle),
    /// Not at all (`--insecure-skip-verify`): anyone on the path can impersonate the
    /// registry. `hubctl` shows it in red wherever the registry matters.
    InsecureSkipVerify,
}

impl RegistryTls {
    /// Builds the setting from the operator's two inputs: a CA bundle, or skipping
    /// verification, or neither (both at once is refused: the bundle would be ignored).
    pub fn from_input(
        ca_pem: Option<&str>,
        insecure_skip_verify: bool,
    ) -> Result<Self, InvalidRegistry> {
        match (ca_pem, insecure_skip_verify) {
            (None, false) => Ok(Self::SystemRoots),
            (None, true) => Ok(Self::InsecureSkipVerify),
            (Some(pem), false) => {
                CaBundle::parse(pem)
                    .map(Self::ExtraCa)
                    .map_err(|e| InvalidRegistry {
                        field: "ca_pem",
                        reason: e.to_string(),
                    })
            }
            (Some(_), true) => Err(InvalidRegistry {
                field: "insecure_skip_verify",
                reason: "a CA bundle and skipping verification exclude each other: a \
                         skipped verification ignores the bundle"
                    .to_string(),
            }),
        }
    }

    /// What a location resolved through this registry carries.
    pub fn trust(&self) -> TlsTrust {
        match self {
            Self::SystemRoots => TlsTrust::SystemRoots,
            Self::ExtraCa(bundle) => TlsTrust::ExtraCa {
                sha256: bundle.sha256.clone(),
            },
            Self::InsecureSkipVerify => TlsTrust::InsecureSkipVerify,
        }
    }

    /// The CA bundle's PEM text, if any.
    pub fn ca_pem(&self) -> Option<&str> {
        match self {
            Self::ExtraCa(bundle) => Some(bundle.pem()),
            _ => None,
        }
    }

    /// Whether certificate verification is skipped.
    pub fn skips_verification(&self) -> bool {
        matches!(self, Self::InsecureSkipVerify)
    }

    /// How hubctl names it: `system-roots`, `ca-bundle sha256:<first 16 hex>`,
    /// `insecure-skip-verify`.
    pub fn label(&self) -> String {
        match self {
            Self::SystemRoots => "system-roots".to_string(),
            Self::ExtraCa(bundle) => format!("ca-bundle sha256:{}", &bundle.sha256[..16]),
            Self::InsecureSkipVerify => "insecure-skip-verify".to_string(),
        }
    }
}

/// How a location's server certificate is verified, as observations name it: the bundle by
/// its SHA-256 only (the PEM text stays in the registry record).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TlsTrust {
    /// The system's roots.
    SystemRoots,
    /// The system's roots and the registry's CA bundle with this SHA-256.
    ExtraCa {
        /// Lowercase hex SHA-256 of the bundle's PEM text.
        sha256: String,
    },
    /// No verification.
    InsecureSkipVerify,
}

/// An environment's artifact registry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArtifactRegistry {
    /// Unique within the environment (a DNS label).
    pub name: String,
    /// Base URL: `http://…`, `https://…` or `file:///absolute/dir`.
    pub url: String,
    /// Whether the hub checks this registry's artifacts.
    pub hub_access: HubAccess,
    /// How an `https` registry's certificate is verified. Added last: the record's binary
    /// form is positional.
    #[serde(default)]
    pub tls: RegistryTls,
}

impl ArtifactRegistry {
    /// Builds a registry after validating it (see [`ArtifactRegistry::validate`]).
    pub fn new(name: &str, url: &str, hub_access: HubAccess) -> Result<Self, InvalidRegistry> {
        Self::with_tls(name, url, hub_access, RegistryTls::SystemRoots)
    }

    /// [`ArtifactRegistry::new`] with a TLS setting (only for `https` urls).
    pub fn with_tls(
        name: &str,
        url: &str,
        hub_access: HubAccess,
        tls: RegistryTls,
    ) -> Result<Self, InvalidRegistry> {
        let registry = Self {
            name: name.to_string(),
            url: url.to_string(),
            hub_access,
            tls,
        };
        registry.validate()?;
        Ok(registry)
    }

    /// Checks the name (a DNS label: 1–63 of `a-z`, `0-9`, `-`, starting with a letter, not
    /// ending with `-`) and the url: scheme `http`, `https` or `file` (lower case); a `file`
    /// URL has no host and an absolute path (`file:///dir`); an `http(s)` URL has a host and
    /// an optional numeric port; no whitespace or control characters; at most
    /// [`MAX_URL_LEN`] bytes; no query or fragment; no `.`/`..` or empty path segments (one
    /// trailing `/` is allowed). A CA bundle or skipped verification needs an `https` url,
    /// and a bundle must parse ([`CaBundle::parse`]). Useful for values that were
    /// deserialised rather than built.
    pub fn validate(&self) -> Result<(), InvalidRegistry> {
        validate_registry_name(&self.name).map_err(|e| InvalidRegistry {
            field: "name",
            reason: e.to_string(),
        })?;
        parse_url(&self.url).map_err(|e| InvalidRegistry {
            field: "url",
            reason: e.to_string(),
        })?;
        let field = match &self.tls {
            RegistryTls::SystemRoots => return Ok(()),
            RegistryTls::ExtraCa(bundle) => {
                bundle.validate().map_err(|e| InvalidRegistry {
                    field: "ca_pem",
                    reason: e.to_string(),
                })?;
                "ca_pem"
            }
            RegistryTls::InsecureSkipVerify => "insecure_skip_verify",
        };
        if !self.url.starts_with("https://") {
            return Err(InvalidRegistry {
                field,
                reason: format!(
                    "only for https registries; {} is not one",
                    redact_url(&self.url)
                ),
            });
        }
        Ok(())
    }
}

/// Where the hub must look for one artifact.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum ArtifactLocation {
    /// A full `http://` or `https://` URL (it may carry the registry's `user:password@`) and
    /// how the server's certificate is verified.
    Http {
        /// The URL.
        url: String,
        /// The registry's certificate verification ([`TlsTrust::SystemRoots`] for `http`).
        trust: TlsTrust,
    },
    /// An absolute file-system path.
    File(String),
}

impl ArtifactLocation {
    /// An `http(s)` location verified against the system's roots.
    pub fn http(url: impl Into<String>) -> Self {
        Self::Http {
            url: url.into(),
            trust: TlsTrust::SystemRoots,
        }
    }

    /// The location with any `user:password@` removed: safe to log or show.
    pub fn redacted(&self) -> String {
        match self {
            Self::Http { url, .. } => redact_url(url),
            Self::File(path) => path.clone(),
        }
    }
}

impl fmt::Display for ArtifactLocation {
    /// Writes [`ArtifactLocation::redacted`]: never the credentials.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.redacted())
    }
}

/// How one artifact of a release resolves against an environment's registries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// The hub must check this location (via registry `registry`).
    Check {
        /// The matching registry's name.
        registry: String,
        /// Where to look.
        location: ArtifactLocation,
    },
    /// The hub does not check; why ("no registry matches", "registry r is hub-access:
    /// not-expected").
    Unchecked {
        /// Why the hub does not check.
        reason: String,
    },
}

/// Resolves an artifact URI against an environment's registries (in declaration order).
///
/// - An absolute URI (one with a scheme) matches the registry whose url is the longest prefix
///   of it on a path-segment boundary: `http://r/a` (or `http://r/a/`) matches
///   `http://r/a/x.tgz` but not `http://r/ab.tgz`. Registry credentials are ignored when
///   matching and carried into the location. Among equally long matches the first declared
///   wins.
/// - A relative URI (`web/web-1.2.0.tar.gz`) resolves against the first registry, joined with
///   exactly one `/`.
/// - A `file:` registry yields [`ArtifactLocation::File`] with the absolute path.
/// - No matching registry (or none at all) gives [`Resolution::Unchecked`] `no registry
///   matches…`; a matching registry marked [`HubAccess::NotExpected`] gives
///   [`Resolution::Unchecked`] `registry <name> is hub-access: not-expected` (a shorter
///   expected registry is not tried instead).
///
/// Precondition: `artifact_uri` passed [`validate_artifact_uri`] (manifests are refused
/// otherwise), and the registries passed [`ArtifactRegistry::validate`]. Defensively, an
/// invalid URI gives `Unchecked` `invalid artifact uri: …` (never a location outside a
/// registry), and registries with an invalid url are skipped.
pub fn resolve(artifact_uri: &str, registries: &[ArtifactRegistry]) -> Resolution {
    if let Err(reason) = validate_artifact_uri(artifact_uri) {
        return unchecked(format!("invalid artifact uri: {reason}"));
    }
    if registries.is_empty() {
        return unchecked("no registry matches: the environment has no artifact registries");
    }
    let (registry, full_url) = if has_scheme(artifact_uri) {
        let mut best: Option<(&ArtifactRegistry, &str, usize)> = None;
        for registry in registries {
            if parse_url(&registry.url).is_err() {
                continue;
            }
            let base = strip_one_slash(&registry.url);
            let key = redact_url(base);
            let boundary = artifact_uri
                .strip_prefix(key.as_str())
                .is_some_and(|rest| rest.starts_with('/'));
            if boundary && best.is_none_or(|(_, _, len)| key.len() > len) {
                best = Some((registry, base, key.len()));
            }
        }
        let Some((registry, base, key_len)) = best else {
            return unchecked("no registry matches");
        };
        (registry, format!("{base}{}", &artifact_uri[key_len..]))
    } else {
        let registry = &registries[0];
        if let Err(reason) = parse_url(&registry.url) {
            return unchecked(format!(
                "registry {} has an invalid url: {reason}",
                registry.name
            ));
        }
        let base = strip_one_slash(&registry.url);
        (registry, format!("{base}/{artifact_uri}"))
    };
    if registry.hub_access == HubAccess::NotExpected {
        return unchecked(format!(
            "registry {} is hub-access: not-expected",
            registry.name
        ));
    }
    let location = match full_url.strip_prefix("file://") {
        Some(path) => ArtifactLocation::File(path.to_string()),
        None => ArtifactLocation::Http {
            url: full_url,
            trust: registry.tls.trust(),
        },
    };
    Resolution::Check {
        registry: registry.name.clone(),
        location,
    }
}

/// Validates an artifact URI as it appears in a manifest: either absolute (`http://`,
/// `https://` or `file:///`, following the registry url rules, without credentials) or
/// relative (no leading `/`, no empty, `.` or `..` segments); in both cases no whitespace or
/// control characters, no `\`, no query or fragment, at most [`MAX_URL_LEN`] bytes, and it
/// must name a file (not end with `/`). `..` written as `%2e%2e` counts as `..`.
pub fn validate_artifact_uri(uri: &str) -> Result<(), UrlError> {
    check_common(uri)?;
    if has_scheme(uri) {
        let parsed = parse_url(uri)?;
        if parsed.userinfo {
            return Err(UrlError::Credentials {
                shown: redact_url(uri),
            });
        }
        if parsed.path.is_empty() || parsed.path.ends_with('/') {
            return Err(UrlError::Directory {
                uri: uri.to_string(),
            });
        }
        return Ok(());
    }
    if uri.starts_with('/') {
        return Err(UrlError::LeadingSlash {
            uri: uri.to_string(),
        });
    }
    for segment in uri.split('/') {
        check_segment(uri, segment)?;
        if segment.is_empty() {
            return Err(UrlError::RelativeEmptySegment {
                uri: uri.to_string(),
            });
        }
    }
    Ok(())
}

/// What the hub knows about one artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Availability {
    /// The registry has it.
    Available,
    /// Absent, or the registry request failed. Blocks the plan.
    Unavailable {
        /// What the check found.
        reason: String,
    },
    /// The hub did not check. Does not block.
    Unchecked {
        /// Why not.
        reason: String,
    },
}

impl Availability {
    /// Only [`Availability::Unavailable`] blocks.
    pub fn blocks(&self) -> bool {
        matches!(self, Self::Unavailable { .. })
    }
}

impl Resolution {
    /// The availability known without a check: `Some(Unchecked)` for an unchecked
    /// resolution, `None` for one the checker must answer.
    pub fn known_availability(&self) -> Option<Availability> {
        match self {
            Self::Check { .. } => None,
            Self::Unchecked { reason } => Some(Availability::Unchecked {
                reason: reason.clone(),
            }),
        }
    }
}

fn unchecked(reason: impl Into<String>) -> Resolution {
    Resolution::Unchecked {
        reason: reason.into(),
    }
}

fn strip_one_slash(url: &str) -> &str {
    url.strip_suffix('/').unwrap_or(url)
}

fn validate_registry_name(name: &str) -> Result<(), RegistryNameError> {
    if name.is_empty() {
        return Err(RegistryNameError::Empty);
    }
    if name.len() > MAX_REGISTRY_NAME_LEN {
        return Err(RegistryNameError::TooLong { len: name.len() });
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '-'))
    {
        return Err(RegistryNameError::Character {
            name: name.to_string(),
            bad,
        });
    }
    if !name.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(RegistryNameError::Start {
            name: name.to_string(),
        });
    }
    if name.ends_with('-') {
        return Err(RegistryNameError::TrailingDash {
            name: name.to_string(),
        });
    }
    Ok(())
}

/// Whether `uri` starts with an RFC 3986 scheme (`ALPHA *(ALPHA / DIGIT / + / - / .)` then
/// `:`).
fn has_scheme(uri: &str) -> bool {
    let Some(colon) = uri.find(':') else {
        return false;
    };
    let scheme = &uri[..colon];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// Checks shared by registry urls and artifact uris.
fn check_common(uri: &str) -> Result<(), UrlError> {
    if uri.is_empty() {
        return Err(UrlError::Empty);
    }
    if uri.len() > MAX_URL_LEN {
        return Err(UrlError::TooLong { len: uri.len() });
    }
    let shown = redact_url(uri);
    if uri.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(UrlError::Whitespace { shown });
    }
    if uri.contains('\\') {
        return Err(UrlError::Backslash { shown });
    }
    if uri.contains(['?', '#']) {
        return Err(UrlError::QueryOrFragment { shown });
    }
    Ok(())
}

/// Refuses `.` and `..` segments, also when written with `%2e`.
fn check_segment(uri: &str, segment: &str) -> Result<(), UrlError> {
    let decoded = segment.replace("%2e", ".").replace("%2E", ".");
    if decoded == "." || decoded == ".." {
        return Err(UrlError::DotSegment {
            shown: redact_url(uri),
            segment: segment.to_string(),
        });
    }
    Ok(())
}

/// The parts of a valid absolute URL that callers need.
struct ParsedUrl<'a> {
    /// Whether the authority has `user:password@`.
    userinfo: bool,
    /// The path: empty, or starting with `/`.
    path: &'a str,
}

/// Validates an absolute `http`, `https` or `file` URL (the rules of
/// [`ArtifactRegistry::validate`]).
fn parse_url(url: &str) -> Result<ParsedUrl<'_>, UrlError> {
    check_common(url)?;
    let shown = redact_url(url);
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(UrlError::NoScheme { shown });
    };
    let (userinfo, path) = match scheme {
        "file" => {
            if !rest.starts_with('/') {
                return Err(UrlError::FileUrl { shown });
            }
            (false, rest)
        }
        "http" | "https" => {
            let authority_end = rest.find('/').unwrap_or(rest.len());
            let (authority, path) = rest.split_at(authority_end);
            let (userinfo, host_port) = match authority.rsplit_once('@') {
                Some((_, host_port)) => (true, host_port),
                None => (false, authority),
            };
            check_host_port(&shown, host_port)?;
            (userinfo, path)
        }
        other => {
            return Err(UrlError::Scheme {
                shown,
                scheme: other.to_string(),
            })
        }
    };
    if let Some(segments) = path.strip_prefix('/') {
        let count = segments.split('/').count();
        for (i, segment) in segments.split('/').enumerate() {
            check_segment(url, segment)?;
            if segment.is_empty() && i + 1 != count {
                return Err(UrlError::EmptySegment { shown });
            }
        }
    }
    Ok(ParsedUrl { userinfo, path })
}

fn check_host_port(shown: &str, host_port: &str) -> Result<(), UrlError> {
    let shown = || shown.to_string();
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let Some((addr, after)) = v6.split_once(']') else {
            return Err(UrlError::UnterminatedIpv6 { shown: shown() });
        };
        if addr.is_empty()
            || !addr
                .chars()
                .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
        {
            return Err(UrlError::MalformedIpv6 { shown: shown() });
        }
        match after {
            "" => (addr, None),
            _ => match after.strip_prefix(':') {
                Some(port) => (addr, Some(port)),
                None => return Err(UrlError::AfterIpv6 { shown: shown() }),
            },
        }
    } else {
        match host_port.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (host_port, None),
        }
    };
    if host.is_empty() {
        return Err(UrlError::NoHost { shown: shown() });
    }
    if !host_port.starts_with('[')
        && !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
    {
        return Err(UrlError::HostCharacters {
            shown: shown(),
            host: host.to_string(),
        });
    }
    if let Some(port) = port {
        let ok = !port.is_empty()
            && port.len() <= 5
            && port.chars().all(|c| c.is_ascii_digit())
            && port.parse::<u16>().is_ok_and(|p| p != 0);
        if !ok {
            return Err(UrlError::Port {
                shown: shown(),
                port: port.to_string(),
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reg(name: &str, url: &str) -> ArtifactRegistry {
        ArtifactRegistry::new(name, url, HubAccess::Expected).unwrap()
    }

    fn check(registry: &str, location: ArtifactLocation) -> Resolution {
        Resolution::Check {
            registry: registry.to_string(),
            location,
        }
    }

    fn http(url: &str) -> ArtifactLocation {
        ArtifactLocation::http(url)
    }

    // SPEC C9: artifacts resolve against the environment's matching registry.
    #[test]
    fn resolution_table() {
        let mut offline = reg("offline", "http://r/offline");
        offline.hub_access = HubAccess::NotExpected;
        let regs = vec![
            reg("first", "https://r/a/"),
            reg("short", "http://r"),
            reg("long", "http://r/a"),
            reg("longer", "http://r/a/b"),
            reg("same-again", "http://r/a/b/"),
            offline,
            reg("files", "file:///srv/artifacts"),
            reg("creds", "http://u:p@secret.example:8080/repo"),
        ];
        let cases: Vec<(&str, Resolution)> = vec![
            // Longest prefix wins; the first declared breaks ties (trailing '/' ignored).
            ("http://r/a/x.tgz", check("long", http("http://r/a/x.tgz"))),
            (
                "http://r/a/b/x.tgz",
                check("longer", http("http://r/a/b/x.tgz")),
            ),
            (
                "http://r/a/bc/x.tgz",
                check("long", http("http://r/a/bc/x.tgz")),
            ),
            // Segment boundary: http://r/a does not match http://r/ab.tgz.
            ("http://r/ab.tgz", check("short", http("http://r/ab.tgz"))),
            ("http://r/x.tgz", check("short", http("http://r/x.tgz"))),
            // Host boundary: http://r is not a prefix of http://r2/… or http://r:81/….
            ("http://r2/x.tgz", unchecked("no registry matches")),
            ("http://r:81/x.tgz", unchecked("no registry matches")),
            // Schemes must match.
            (
                "https://r/a/x.tgz",
                check("first", http("https://r/a/x.tgz")),
            ),
            ("https://r/x.tgz", unchecked("no registry matches")),
            // Relative → first registry, joined with exactly one '/'.
            (
                "web/web-1.2.0.tar.gz",
                check("first", http("https://r/a/web/web-1.2.0.tar.gz")),
            ),
            // Not-expected → Unchecked naming the registry, even with a shorter expected match.
            (
                "http://r/offline/x.tgz",
                unchecked("registry offline is hub-access: not-expected"),
            ),
            // File registry, absolute file URI → absolute path.
            (
                "file:///srv/artifacts/web/x.tgz",
                check(
                    "files",
                    ArtifactLocation::File("/srv/artifacts/web/x.tgz".into()),
                ),
            ),
            ("file:///srv/other/x.tgz", unchecked("no registry matches")),
            // Credentials: matched without them, carried into the location.
            (
                "http://secret.example:8080/repo/x.tgz",
                check("creds", http("http://u:p@secret.example:8080/repo/x.tgz")),
            ),
        ];
        for (uri, want) in cases {
            assert_eq!(resolve(uri, &regs), want, "{uri}");
        }
    }

    // SPEC C9: relative paths, file registries, not-expected and empty registry lists.
    #[test]
    fn resolution_edge_cases() {
        // No registries → Unchecked.
        let none = resolve("web/x.tgz", &[]);
        assert!(
            matches!(&none, Resolution::Unchecked { reason } if reason.starts_with("no registry matches")),
            "{none:?}"
        );
        let none = resolve("http://r/x.tgz", &[]);
        assert!(matches!(none, Resolution::Unchecked { .. }));

        // File registry + relative path → File(absolute path), one '/' whatever the trailing '/'.
        for url in ["file:///srv/artifacts", "file:///srv/artifacts/"] {
            assert_eq!(
                resolve("web/web-1.2.0.tar.gz", &[reg("files", url)]),
                check(
                    "files",
                    ArtifactLocation::File("/srv/artifacts/web/web-1.2.0.tar.gz".into())
                ),
                "{url}"
            );
        }
        // The root directory as a registry.
        assert_eq!(
            resolve("x.tgz", &[reg("root", "file:///")]),
            check("root", ArtifactLocation::File("/x.tgz".into()))
        );
        assert_eq!(
            resolve("file:///x.tgz", &[reg("root", "file:///")]),
            check("root", ArtifactLocation::File("/x.tgz".into()))
        );

        // Relative → the first registry even if it is not-expected (no fallback).
        let regs = [
            ArtifactRegistry::new("air-gapped", "http://mirror/a", HubAccess::NotExpected).unwrap(),
            reg("other", "http://other"),
        ];
        assert_eq!(
            resolve("web/x.tgz", &regs),
            unchecked("registry air-gapped is hub-access: not-expected")
        );
        assert_eq!(
            resolve("http://other/x.tgz", &regs),
            check("other", http("http://other/x.tgz"))
        );

        // Defensive: invalid URIs never resolve to a location.
        for bad in ["../etc/passwd", "web/../../x", "http://r/a/../x"] {
            let got = resolve(bad, &[reg("r", "http://r/a")]);
            assert!(
                matches!(&got, Resolution::Unchecked { reason } if reason.starts_with("invalid artifact uri")),
                "{bad}: {got:?}"
            );
        }
        // Registries with an invalid url (built field by field) are skipped.
        let broken = ArtifactRegistry {
            name: "broken".into(),
            url: "ftp://r".into(),
            hub_access: HubAccess::Expected,
            tls: RegistryTls::SystemRoots,
        };
        assert_eq!(
            resolve("ftp://r/x", std::slice::from_ref(&broken)),
            unchecked("invalid artifact uri: \"ftp://r/x\": scheme \"ftp\" is not supported; use http, https or file")
        );
        assert!(matches!(
            resolve("x.tgz", &[broken]),
            Resolution::Unchecked { .. }
        ));

        // Unchecked resolutions become Unchecked availabilities; Check ones await the checker.
        assert_eq!(
            unchecked("no registry matches").known_availability(),
            Some(Availability::Unchecked {
                reason: "no registry matches".into()
            })
        );
        assert_eq!(check("r", http("http://r/x")).known_availability(), None);
    }

    // SPEC C9: registries are validated on configuration.
    #[test]
    fn registry_validation_table() {
        let long_url = format!("http://r/{}", "a".repeat(MAX_URL_LEN));
        let long_name = "a".repeat(MAX_REGISTRY_NAME_LEN + 1);
        let ok_name = "a".repeat(MAX_REGISTRY_NAME_LEN);
        let cases: Vec<(&str, &str, Option<&str>)> = vec![
            ("main", "http://registry.example", None),
            ("main", "http://registry.example/", None),
            ("main", "https://registry.example:8443/artifacts/", None),
            ("main", "http://user:pa%40ss@registry.example/a", None),
            ("main", "http://127.0.0.1:8080/a", None),
            ("main", "http://[::1]:8080/a", None),
            ("main", "http://my_host/a", None),
            ("main", "file:///srv/artifacts", None),
            ("main", "file:///", None),
            (&ok_name, "http://r", None),
            ("m-2", "http://r", None),
            // Names.
            ("", "http://r", Some("name")),
            ("Main", "http://r", Some("name")),
            ("2nd", "http://r", Some("name")),
            ("main-", "http://r", Some("name")),
            ("ma_in", "http://r", Some("name")),
            (&long_name, "http://r", Some("name")),
            // Urls.
            ("main", "", Some("url")),
            ("main", "ftp://r/a", Some("url")),
            ("main", "HTTP://r/a", Some("url")),
            ("main", "registry.example/a", Some("url")),
            ("main", "http:/r/a", Some("url")),
            ("main", "http://", Some("url")),
            ("main", "http:///a", Some("url")),
            ("main", "http://r:/a", Some("url")),
            ("main", "http://r:0/a", Some("url")),
            ("main", "http://r:70000/a", Some("url")),
            ("main", "http://r:80x/a", Some("url")),
            ("main", "http://[::1/a", Some("url")),
            ("main", "http://r!/a", Some("url")),
            ("main", "http://u:p@/a", Some("url")),
            ("main", "http://r/a b", Some("url")),
            ("main", "http://r/a\tb", Some("url")),
            ("main", "http://r/a?x=1", Some("url")),
            ("main", "http://r/a#frag", Some("url")),
            ("main", "http://r/a\\b", Some("url")),
            ("main", "http://r/a//b", Some("url")),
            ("main", "http://r/a/../b", Some("url")),
            ("main", "http://r/a/%2E%2e/b", Some("url")),
            ("main", "http://r/./a", Some("url")),
            ("main", "file://host/srv", Some("url")),
            ("main", "file:relative/dir", Some("url")),
            ("main", "file:///srv/../etc", Some("url")),
            ("main", &long_url, Some("url")),
        ];
        for (name, url, want) in cases {
            let got = ArtifactRegistry::new(name, url, HubAccess::Expected);
            match want {
                None => assert!(got.is_ok(), "{name} {url}: {got:?}"),
                Some(field) => {
                    let err = got.expect_err(url);
                    assert_eq!(err.field, field, "{name} {url}: {err}");
                    assert!(!err.reason.is_empty());
                }
            }
        }
        // Reasons never show credentials.
        let err = ArtifactRegistry::new("m", "http://user:hunter2@r/a b", HubAccess::Expected)
            .unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        assert!(err.to_string().starts_with("invalid url: "), "{err}");
    }

    // SPEC C9: manifests' artifact URIs are validated on admission.
    #[test]
    fn artifact_uri_validation_table() {
        let long = "a".repeat(MAX_URL_LEN + 1);
        let ok = [
            "web/web-1.2.0.tar.gz",
            "web-1.2.0.tar.gz",
            "a/b/c/d.tgz",
            "web/..hidden",
            "web/x..y.tgz",
            "web/%20x.tgz",
            "http://r/a/x.tgz",
            "https://r:8443/a/x.tgz",
            "file:///srv/a/x.tgz",
        ];
        for uri in ok {
            assert_eq!(validate_artifact_uri(uri), Ok(()), "{uri}");
        }
        let bad = [
            "",
            "/abs/path.tgz",
            "../x.tgz",
            "web/../x.tgz",
            "web/..",
            "web/%2e%2E/x.tgz",
            "./x.tgz",
            "web//x.tgz",
            "web/",
            "web/x .tgz",
            " web/x.tgz",
            "web/x.tgz\n",
            "web\\x.tgz",
            "web/x.tgz?v=1",
            "web/x.tgz#f",
            "ftp://r/x.tgz",
            "c:/x.tgz",
            "http://r",
            "http://r/",
            "http://r/a/",
            "http://r/a/../x.tgz",
            "http://user:pw@r/x.tgz",
            "file://host/x.tgz",
            "file:///srv/a/",
            &long,
        ];
        for uri in bad {
            let err = validate_artifact_uri(uri).expect_err(uri);
            assert!(!err.to_string().is_empty(), "{uri}");
        }
        let err = validate_artifact_uri("http://user:pw@r/x.tgz").unwrap_err();
        assert!(matches!(err, UrlError::Credentials { .. }), "{err}");
        assert!(!err.to_string().contains("pw"), "{err}");
    }

    // SPEC C9: only Unavailable blocks.
    #[test]
    fn availability_blocks_and_hub_access_spellings() {
        assert!(!Availability::Available.blocks());
        assert!(Availability::Unavailable { reason: "x".into() }.blocks());
        assert!(!Availability::Unchecked { reason: "x".into() }.blocks());

        for access in [HubAccess::Expected, HubAccess::NotExpected] {
            assert_eq!(HubAccess::parse(access.as_str()), Ok(access));
            assert_eq!(access.to_string(), access.as_str());
        }
        assert_eq!(HubAccess::default(), HubAccess::Expected);
        assert!(HubAccess::parse("NotExpected").is_err());
        assert!(HubAccess::parse("").is_err());

        let loc = http("https://u:secret@r/a/x.tgz");
        assert_eq!(loc.to_string(), "https://r/a/x.tgz");
        assert_eq!(
            ArtifactLocation::File("/srv/x".into()).to_string(),
            "/srv/x"
        );
        assert_eq!(redact_url("http://r/a@b"), "http://r/a@b");
        assert_eq!(redact_url("not a url"), "not a url");
    }

    // SPEC C9: the types round-trip through serde.
    #[test]
    fn serde_round_trip() {
        let registry =
            ArtifactRegistry::new("air-gapped", "file:///srv/a", HubAccess::NotExpected).unwrap();
        let json = serde_json::to_string(&registry).unwrap();
        assert!(json.contains("\"not-expected\""), "{json}");
        assert_eq!(
            serde_json::from_str::<ArtifactRegistry>(&json).unwrap(),
            registry
        );
        assert_eq!(
            serde_json::from_str::<HubAccess>("\"expected\"").unwrap(),
            HubAccess::Expected
        );

        for location in [
            http("http://r/a/x.tgz"),
            ArtifactLocation::File("/x".into()),
        ] {
            let json = serde_json::to_string(&location).unwrap();
            assert_eq!(
                serde_json::from_str::<ArtifactLocation>(&json).unwrap(),
                location
            );
        }
        for availability in [
            Availability::Available,
            Availability::Unavailable {
                reason: "HEAD http://r/x: 404 Not Found".into(),
            },
            Availability::Unchecked {
                reason: "no registry matches".into(),
            },
        ] {
            let json = serde_json::to_string(&availability).unwrap();
            assert_eq!(
                serde_json::from_str::<Availability>(&json).unwrap(),
                availability
            );
        }
    }

    /// A self-signed CA certificate (P-256), valid until 2126.
    const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBgzCCASmgAwIBAgIUPkslldVmKXBmg6tfS2VdhQu/YLMwCgYIKoZIzj0EAwIw\nFjEUMBIGA1UEAwwLaHViIHRlc3QgQ0EwIBcNMjYxMjAxMDkwMjIzWhgPMjEyNjEx\nMDcwOTAyMjNaMBYxFDASBgNVBAMMC2h1YiB0ZXN0IENBMFkwEwYHKoZIzj0CAQYI\nKoZIzj0DAQcDQgAEpZIvzp4DaI1GTvIi8UewpCJvYaFE1lT4wEXyACdIIs7BPj4L\n7QH1zuugJ2+bgcfSy2cptP4ThNZKSqtOIJinxaNTMFEwHQYDVR0OBBYEFMdDx4/K\nQvDdb2LOUURlN6coioOTMB8GA1UdIwQYMBaAFMdDx4/KQvDdb2LOUURlN6coioOT\nMA8GA1UdEwEB/wQFMAMBAf8wCgYIKoZIzj0EAwIDSAAwRQIgBkWenGtj4QPCg997\no9PL4/WyGFl9E1wkmU40/hz1SikCIQCuEjjOpIKCx+IlAQIkJhuV3qdfHV8x9wzH\nFVboxUhnYw==\n-----END CERTIFICATE-----\n";

    #[test]
    fn ca_bundles_are_validated() {
        let bundle = CaBundle::parse(TEST_CA).unwrap();
        assert_eq!(bundle.pem(), TEST_CA);
        assert_eq!(bundle.sha256().len(), 64);
        assert!(!format!("{bundle:?}").contains("BEGIN"));
        assert_eq!(validate_ca_pem(&format!("{TEST_CA}{TEST_CA}")), Ok(2));
        // Text around the sections is ignored, as in any PEM file.
        assert_eq!(validate_ca_pem(&format!("# my CA\n{TEST_CA}")), Ok(1));

        assert!(matches!(
            check_ca_pem("just some text\n"),
            Err(CaPemError::NoCertificate)
        ));
        let no_cert = validate_ca_pem("just some text\n").unwrap_err();
        assert!(no_cert.contains("holds no certificate"), "{no_cert}");
        assert!(validate_ca_pem("").unwrap_err().contains("no certificate"));
        let key =
            "-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEIA==\n-----END PRIVATE KEY-----\n";
        let with_key = validate_ca_pem(&format!("{TEST_CA}{key}")).unwrap_err();
        assert!(with_key.contains("CERTIFICATE sections only"), "{with_key}");
        let garbage =
            "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n";
        let not_x509 = validate_ca_pem(garbage).unwrap_err();
        assert!(
            not_x509.contains("not a valid X.509 certificate"),
            "{not_x509}"
        );
        let unterminated = TEST_CA.replace("-----END CERTIFICATE-----", "");
        assert!(validate_ca_pem(&unterminated)
            .unwrap_err()
            .contains("not valid PEM"));
        let huge = format!("{TEST_CA}{}", " ".repeat(MAX_CA_PEM_LEN));
        assert!(validate_ca_pem(&huge).unwrap_err().contains("at most"));
    }

    #[test]
    fn registry_tls_settings() {
        assert_eq!(
            RegistryTls::from_input(None, false),
            Ok(RegistryTls::SystemRoots)
        );
        assert_eq!(
            RegistryTls::from_input(None, true),
            Ok(RegistryTls::InsecureSkipVerify)
        );
        let ca = RegistryTls::from_input(Some(TEST_CA), false).unwrap();
        assert_eq!(ca.ca_pem(), Some(TEST_CA));
        assert!(
            ca.label().starts_with("ca-bundle sha256:"),
            "{}",
            ca.label()
        );
        let both = RegistryTls::from_input(Some(TEST_CA), true).unwrap_err();
        assert_eq!(both.field, "insecure_skip_verify");
        let empty = RegistryTls::from_input(Some("nothing"), false).unwrap_err();
        assert_eq!(empty.field, "ca_pem");

        // Only https registries take a TLS setting.
        let url_https = "https://u:secret@r.example/a";
        for tls in [ca.clone(), RegistryTls::InsecureSkipVerify] {
            assert!(
                ArtifactRegistry::with_tls("r", url_https, HubAccess::Expected, tls.clone())
                    .is_ok()
            );
            for url in ["http://u:secret@r.example/a", "file:///srv"] {
                let err = ArtifactRegistry::with_tls("r", url, HubAccess::Expected, tls.clone())
                    .unwrap_err();
                assert!(
                    matches!(err.field, "ca_pem" | "insecure_skip_verify"),
                    "{err}"
                );
                assert!(err.reason.contains("only for https"), "{err}");
                assert!(!err.reason.contains("secret"), "{err}");
            }
        }
        // A deserialised bundle whose fingerprint does not match is refused.
        let mut forged = serde_json::to_value(CaBundle::parse(TEST_CA).unwrap()).unwrap();
        forged["sha256"] = serde_json::json!("00");
        let forged: CaBundle = serde_json::from_value(forged).unwrap();
        let err = ArtifactRegistry::with_tls(
            "r",
            url_https,
            HubAccess::Expected,
            RegistryTls::ExtraCa(forged),
        )
        .unwrap_err();
        assert_eq!(err.field, "ca_pem");

        // Locations carry the fingerprint; a changed bundle is a different location.
        let registry =
            ArtifactRegistry::with_tls("r", "https://r.example/a", HubAccess::Expected, ca.clone())
                .unwrap();
        let Resolution::Check { location, .. } = resolve("x.tgz", &[registry]) else {
            panic!("a check expected");
        };
        let RegistryTls::ExtraCa(bundle) = &ca else {
            unreachable!()
        };
        assert_eq!(
            location,
            ArtifactLocation::Http {
                url: "https://r.example/a/x.tgz".into(),
                trust: TlsTrust::ExtraCa {
                    sha256: bundle.sha256().to_string()
                }
            }
        );
        assert_ne!(location, http("https://r.example/a/x.tgz"));
    }
}

//! Certificates and keys from PEM files, checked before anything uses them: the CA file
//! holds at least one certificate, the key matches the certificate, the certificate is
//! signed by the CA, valid now, and names exactly one hub identity.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::sign::CertifiedKey;
use rustls::RootCertStore;
use x509_parser::extensions::GeneralName;

use crate::identity::{ClusterIdentity, IdentityError, URI_PREFIX};
use crate::{provider, TlsError};

/// Largest PEM file read (a CA bundle of a few hundred certificates fits).
pub const MAX_PEM_BYTES: u64 = 1 << 20;

/// Where a party's TLS files are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFiles {
    /// The cluster CA's certificate(s).
    pub ca: PathBuf,
    /// This party's certificate (chain), leaf first.
    pub cert: PathBuf,
    /// This party's private key.
    pub key: PathBuf,
}

impl TlsFiles {
    /// `--ca-file F --cert-file F --key-file F`: the flags `hub-node` and `hub-agent` take.
    pub fn flags(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--ca-file".into(),
            self.ca.clone().into(),
            "--cert-file".into(),
            self.cert.clone().into(),
            "--key-file".into(),
            self.key.clone().into(),
        ]
    }
}

/// Checked TLS material of one party.
#[derive(Clone)]
pub struct Material {
    /// The CA certificates clients and servers are verified against.
    pub roots: Arc<RootCertStore>,
    /// This party's certificate chain and key.
    pub certified: Arc<CertifiedKey>,
    /// Who this party is.
    pub identity: ClusterIdentity,
    /// The certificate's validity, seconds since the epoch.
    pub validity: Validity,
}

impl std::fmt::Debug for Material {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The key stays out of logs.
        f.debug_struct("Material")
            .field("identity", &self.identity.to_string())
            .field("validity", &self.validity)
            .finish_non_exhaustive()
    }
}

/// A certificate's validity period, seconds since the epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Validity {
    /// Not valid before.
    pub not_before: i64,
    /// Not valid after.
    pub not_after: i64,
}

impl Validity {
    /// Whether `now` (seconds since the epoch) is inside the period.
    pub fn contains(&self, now: i64) -> bool {
        self.not_before <= now && now <= self.not_after
    }
}

/// Seconds since the epoch of `t`.
pub fn unix_secs(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_secs()).unwrap_or(i64::MAX),
    }
}

/// `2026-12-01T08:00:00Z` for seconds since the epoch.
pub fn format_time(secs: i64) -> String {
    time::OffsetDateTime::from_unix_timestamp(secs)
        .ok()
        .and_then(|t| {
            t.format(&time::format_description::well_known::Rfc3339)
                .ok()
        })
        .unwrap_or_else(|| format!("{secs} s after the epoch"))
}

fn read_pem(path: &Path) -> Result<Vec<u8>, TlsError> {
    let file = path.to_path_buf();
    let meta = std::fs::metadata(path).map_err(|source| TlsError::Read {
        file: file.clone(),
        source,
    })?;
    if meta.len() > MAX_PEM_BYTES {
        return Err(TlsError::BadPem {
            file,
            reason: format!("{} bytes, at most {MAX_PEM_BYTES}", meta.len()),
        });
    }
    std::fs::read(path).map_err(|source| TlsError::Read { file, source })
}

/// The certificates of a PEM file; at least one.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read_pem(path)?;
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            file: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate {
            file: path.to_path_buf(),
        });
    }
    Ok(certs)
}

/// The private key of a PEM file.
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    let pem = read_pem(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| TlsError::NoKey {
        file: path.to_path_buf(),
        reason: e.to_string(),
    })
}

/// A root store of the CA file's certificates.
pub fn load_roots(path: &Path) -> Result<Arc<RootCertStore>, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| TlsError::BadPem {
            file: path.to_path_buf(),
            reason: format!("not a usable CA certificate: {e}"),
        })?;
    }
    Ok(Arc::new(roots))
}

/// The hub identity and validity a certificate names.
pub fn certificate_identity(
    cert: &CertificateDer<'_>,
) -> Result<(ClusterIdentity, Validity), CertificateIdentityError> {
    let (_, x509) = x509_parser::parse_x509_certificate(cert.as_ref())
        .map_err(|e| CertificateIdentityError::Unparsable(e.to_string()))?;
    let validity = Validity {
        not_before: x509.validity().not_before.timestamp(),
        not_after: x509.validity().not_after.timestamp(),
    };
    let san = x509
        .subject_alternative_name()
        .map_err(|e| CertificateIdentityError::Unparsable(e.to_string()))?;
    let mut uris = san
        .iter()
        .flat_map(|ext| ext.value.general_names.iter())
        .filter_map(|name| match name {
            GeneralName::URI(uri) if uri.starts_with(URI_PREFIX) => Some(*uri),
            _ => None,
        });
    let Some(uri) = uris.next() else {
        return Err(CertificateIdentityError::NoIdentity);
    };
    if uris.next().is_some() {
        return Err(CertificateIdentityError::SeveralIdentities);
    }
    let identity = ClusterIdentity::parse_uri(uri).map_err(CertificateIdentityError::Identity)?;
    Ok((identity, validity))
}

/// Why a certificate names no usable hub identity.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertificateIdentityError {
    /// Not a parsable X.509 certificate.
    #[error("not a parsable X.509 certificate: {0}")]
    Unparsable(String),
    /// No `hub://` URI SAN.
    #[error("it names no hub identity (no hub:// URI subject alternative name)")]
    NoIdentity,
    /// More than one `hub://` URI SAN.
    #[error("it names more than one hub identity")]
    SeveralIdentities,
    /// A malformed `hub://` URI SAN.
    #[error("{0}")]
    Identity(IdentityError),
}

impl TlsFiles {
    /// Reads and checks the files at time `now`.
    pub fn load(&self, now: SystemTime) -> Result<Material, TlsError> {
        let roots = load_roots(&self.ca)?;
        let chain = load_certs(&self.cert)?;
        let key = load_key(&self.key)?;
        let (identity, validity) =
            certificate_identity(&chain[0]).map_err(|reason| TlsError::NoIdentity {
                file: self.cert.clone(),
                reason,
            })?;
        let certified =
            CertifiedKey::from_der(chain.clone(), key, &provider()).map_err(|e| match e {
                rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                    cert: self.cert.clone(),
                    key: self.key.clone(),
                },
                other => TlsError::NoKey {
                    file: self.key.clone(),
                    reason: other.to_string(),
                },
            })?;
        let secs = unix_secs(now);
        if !validity.contains(secs) {
            return Err(TlsError::NotValidNow {
                file: self.cert.clone(),
                identity: identity.to_string(),
                not_before: format_time(validity.not_before),
                not_after: format_time(validity.not_after),
                now: format_time(secs),
            });
        }
        // Signed by the CA: the check a peer will make (client-auth usage; node certificates
        // carry both usages).
        let verifier =
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider().into())
                .build()
                .map_err(|e| TlsError::Config(e.to_string()))?;
        let unix = UnixTime::since_unix_epoch(std::time::Duration::from_secs(
            u64::try_from(secs).unwrap_or(0),
        ));
        verifier
            .verify_client_cert(&chain[0], &chain[1..], unix)
            .map_err(|e| TlsError::NotSignedByCa {
                cert: self.cert.clone(),
                ca: self.ca.clone(),
                reason: e.to_string(),
            })?;
        Ok(Material {
            roots,
            certified: Arc::new(certified),
            identity,
            validity,
        })
    }
}

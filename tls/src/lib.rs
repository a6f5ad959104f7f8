//! Mutual TLS for the hub: the cluster PKI, the identities its certificates carry, and the
//! reloadable TLS 1.3 configurations every listener and client uses.
//!
//! # Layout
//! - [`identity`]: [`Identity`] (`node/<id>`, `agent/<environment>`, `operator/<name>`) and its
//!   URI SAN form `hub://<cluster>/<kind>/<name>`.
//! - [`pki`]: the cluster CA and certificate issuance (`hubctl pki`), with rcgen.
//! - [`material`]: PEM files to checked material: the key matches, the CA signed it, it is
//!   valid now, it names one identity. Every error names the file.
//! - [`server`]: the listener: TLS handshakes off the accept loop under a deadline, and
//!   connections that carry the verified peer ([`server::Authenticated`]) to the gRPC layer.
//! - [`budget`]: what each kind of party may hold of a listener's connections (peers,
//!   identified parties, and connections that have not proved who they are yet).
//! - [`log_gate`]: one log line per period for what a flood would repeat.
//! - [`client`]: the connector tonic channels dial through; it checks the server is a node of
//!   the same cluster.
//! - [`reload`]: certificates, keys and CA re-read on SIGHUP; open connections are kept.
//!
//! rustls with the `ring` provider is the only TLS stack; only TLS 1.3 is offered.

pub mod budget;
pub mod client;
pub mod log_gate;
pub mod material;
pub mod pki;
pub mod reload;
pub mod server;
pub mod stream;

use std::path::PathBuf;
use std::sync::Arc;

pub use hub_identity as identity;
pub use hub_identity::{ClusterIdentity, Identity, IdentityError};
pub use material::{Material, TlsFiles};

/// The crypto provider of every TLS configuration in the hub.
pub fn provider() -> rustls::crypto::CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// The protocol versions the hub speaks: TLS 1.3 only.
pub static PROTOCOLS: &[&rustls::SupportedProtocolVersion] = &[&rustls::version::TLS13];

/// The ALPN protocol of gRPC.
pub const ALPN_H2: &[u8] = b"h2";

/// The ALPN protocol of HTTP/1.1 (the metrics and web listeners also speak it: Prometheus
/// scrapes with HTTP/1.1 by default).
pub const ALPN_HTTP1: &[u8] = b"http/1.1";

fn arc_provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(provider())
}

/// Why TLS material could not be loaded, created or used. Every variant names its file.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A file could not be read.
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("{}: cannot write: {source}", file.display())]
    Write {
        /// The file.
        file: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file that must not be overwritten exists.
    #[error("{}: already exists (refusing to overwrite it)", file.display())]
    Exists {
        /// The file.
        file: PathBuf,
    },
    /// Not valid PEM, or an unusable certificate in it.
    #[error("{}: {reason}", file.display())]
    BadPem {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A certificate file (or CA file) with no certificate in it.
    #[error("{}: holds no certificate", file.display())]
    NoCertificate {
        /// The file.
        file: PathBuf,
    },
    /// A key file with no usable private key.
    #[error("{}: no usable private key: {reason}", file.display())]
    NoKey {
        /// The file.
        file: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key is not the certificate's.
    #[error("{}: the key does not match the certificate {}", key.display(), cert.display())]
    KeyMismatch {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// The certificate is not signed by the CA.
    #[error("{}: not signed by the CA in {} ({reason})", cert.display(), ca.display())]
    NotSignedByCa {
        /// The certificate file.
        cert: PathBuf,
        /// The CA file.
        ca: PathBuf,
        /// The verifier's reason.
        reason: String,
    },
    /// The certificate is expired or not yet valid.
    #[error("{}: the certificate of {identity} is valid from {not_before} to {not_after}, not now ({now})", file.display())]
    NotValidNow {
        /// The certificate file.
        file: PathBuf,
        /// Whom it names.
        identity: String,
        /// Start of validity.
        not_before: String,
        /// End of validity.
        not_after: String,
        /// Now.
        now: String,
    },
    /// The certificate names no usable hub identity.
    #[error("{}: {reason}", file.display())]
    NoIdentity {
        /// The certificate file.
        file: PathBuf,
        /// Why.
        reason: material::CertificateIdentityError,
    },
    /// The certificate names another party than the one that uses it.
    #[error("{}: the certificate is for {found}, but this is {expected}", file.display())]
    WrongIdentity {
        /// The certificate file.
        file: PathBuf,
        /// Who uses it.
        expected: String,
        /// Whom it names.
        found: String,
    },
    /// Issuing a certificate failed.
    #[error("cannot issue the certificate: {0}")]
    Issue(String),
    /// A rustls configuration could not be built.
    #[error("TLS configuration: {0}")]
    Config(String),
}

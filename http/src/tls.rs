//! TLS for outbound calls: rustls with the `ring` provider, the system's roots, optional CA
//! bundles, and (explicitly) no verification; and what a rustls failure means.

use std::fmt;
use std::sync::{Arc, OnceLock};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore};
use rustls_pki_types::pem::PemObject;

use crate::error::ErrorKind;

/// How a server's certificate is verified.
#[derive(Clone, PartialEq, Eq, Hash)]
pub enum Trust {
    /// Against the system's roots.
    SystemRoots,
    /// Against the system's roots and the certificates of this PEM bundle.
    SystemRootsAnd {
        /// PEM text with one or more certificates.
        ca_pem: String,
    },
    /// Not at all: any certificate is accepted (signatures are still checked, so the
    /// handshake is with the holder of the presented key).
    SkipVerification,
}

impl fmt::Debug for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::SystemRoots => f.write_str("SystemRoots"),
            Self::SystemRootsAnd { ca_pem } => {
                write!(f, "SystemRootsAnd({} bytes of PEM)", ca_pem.len())
            }
            Self::SkipVerification => f.write_str("SkipVerification"),
        }
    }
}

/// The only crypto provider used: `ring`.
fn provider() -> Arc<CryptoProvider> {
    static PROVIDER: OnceLock<Arc<CryptoProvider>> = OnceLock::new();
    PROVIDER
        .get_or_init(|| Arc::new(rustls::crypto::ring::default_provider()))
        .clone()
}

/// The system's roots, loaded once per process. Certificates that do not parse are skipped
/// (and logged); none at all is logged as a warning: every verified https call will fail.
fn system_roots() -> &'static RootCertStore {
    static ROOTS: OnceLock<RootCertStore> = OnceLock::new();
    ROOTS.get_or_init(|| {
        let loaded = rustls_native_certs::load_native_certs();
        for error in &loaded.errors {
            tracing::warn!(%error, "reading the system's CA certificates");
        }
        let mut roots = RootCertStore::empty();
        let (added, ignored) = roots.add_parsable_certificates(loaded.certs);
        if ignored > 0 {
            tracing::warn!(
                ignored,
                "system CA certificates that do not parse were skipped"
            );
        }
        if added == 0 {
            tracing::warn!(
                "no system CA certificates found (install Debian's ca-certificates, or set \
                 SSL_CERT_FILE): https calls verified against the system's roots will fail"
            );
        } else {
            tracing::debug!(added, "system CA certificates loaded");
        }
        roots
    })
}

/// The rustls configuration of a client with `trust`, HTTP/1.1 only.
pub(crate) fn client_config(trust: &Trust) -> Result<ClientConfig, ErrorKind> {
    let provider = provider();
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ErrorKind::Setup(e.to_string()))?;
    let mut config = match trust {
        Trust::SystemRoots => builder
            .with_root_certificates(system_roots().clone())
            .with_no_client_auth(),
        Trust::SystemRootsAnd { ca_pem } => {
            let mut roots = system_roots().clone();
            let mut added = 0usize;
            for cert in CertificateDer::pem_slice_iter(ca_pem.as_bytes()) {
                let cert = cert.map_err(|e| ErrorKind::InvalidCaBundle(e.to_string()))?;
                roots
                    .add(cert)
                    .map_err(|e| ErrorKind::InvalidCaBundle(e.to_string()))?;
                added += 1;
            }
            if added == 0 {
                return Err(ErrorKind::InvalidCaBundle(
                    "holds no certificate".to_string(),
                ));
            }
            builder.with_root_certificates(roots).with_no_client_auth()
        }
        Trust::SkipVerification => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(SkipVerification(provider)))
            .with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts any certificate chain and name; checks handshake signatures with the provider, so
/// the peer holds the key of the certificate it presented.
#[derive(Debug)]
struct SkipVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for SkipVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

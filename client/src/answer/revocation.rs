//! `revoked_certificates`: the cluster's certificate revocation list.

use serde::{Deserialize, Serialize};

use super::Typed;
use crate::query::Query;

/// The answer to `revoked_certificates`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedCertificatesAnswer {
    /// Every revoked certificate, by serial.
    pub certificates: Vec<RevokedCertificateView>,
}

/// One revoked certificate.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RevokedCertificateView {
    /// Whom the certificate names (`operator/alice`), if known.
    pub identity: Option<String>,
    /// When the certificate itself expires, if known (the entry is dropped a day after).
    pub not_after: Option<String>,
    /// Why it was revoked.
    pub reason: String,
    /// When it was revoked.
    pub revoked: String,
    /// Who revoked it.
    pub revoked_by: String,
    /// Its serial number: lowercase hex, no leading zero bytes.
    pub serial: String,
}

/// Asks for the revocation list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListRevokedCertificates;

impl Typed for ListRevokedCertificates {
    type Answer = RevokedCertificatesAnswer;
    fn query(&self) -> Query {
        Query::RevokedCertificates
    }
}

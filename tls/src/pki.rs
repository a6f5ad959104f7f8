//! The cluster PKI: one CA per cluster, and the node, agent and operator certificates it
//! signs (`hubctl pki`). Everything is made locally with rcgen; the CA's key never leaves
//! its directory, and every key file is written with mode 0600.
//!
//! Files in the CA directory: `ca.pem`, `ca-key.pem`, `cluster-id`; issued certificates are
//! `<kind>-<name>.pem` with `<kind>-<name>-key.pem` (e.g. `node-1.pem`, `agent-prod.pem`).

use std::io::Write;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use rcgen::string::Ia5String;
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose, SanType,
};

use crate::identity::{validate_name, Identity};
use crate::material::unix_secs;
use crate::TlsError;

/// The CA certificate's file name.
pub const CA_CERT: &str = "ca.pem";
/// The CA key's file name.
pub const CA_KEY: &str = "ca-key.pem";
/// The file holding the cluster id.
pub const CLUSTER_FILE: &str = "cluster-id";

/// How long the CA is valid.
pub const CA_VALIDITY_DAYS: u32 = 10 * 365;
/// Default validity of node and agent certificates.
pub const DEFAULT_SERVICE_DAYS: u32 = 365;
/// Default validity of operator certificates.
pub const DEFAULT_OPERATOR_DAYS: u32 = 90;
/// Certificates are valid from this long before they are issued, for clocks a little behind.
pub const BACKDATE_SECS: i64 = 300;

/// An opened cluster CA.
pub struct Ca {
    dir: PathBuf,
    cluster: String,
    cert_pem: String,
    key: KeyPair,
}

impl std::fmt::Debug for Ca {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ca")
            .field("dir", &self.dir)
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

/// A certificate and its key, as PEM.
pub struct Issued {
    /// The certificate.
    pub cert_pem: String,
    /// The private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for Issued {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issued").finish_non_exhaustive()
    }
}

/// The paths an issued certificate was written to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Written {
    /// The certificate.
    pub cert: PathBuf,
    /// The key (0600).
    pub key: PathBuf,
}

fn issue_err(e: impl std::fmt::Display) -> TlsError {
    TlsError::Issue(e.to_string())
}

fn time_at(secs: i64) -> Result<time::OffsetDateTime, TlsError> {
    time::OffsetDateTime::from_unix_timestamp(secs).map_err(issue_err)
}

/// Writes `bytes` to `path` through a temporary file and a rename, with `mode`; refuses to
/// overwrite when `exclusive`.
pub fn write_file(path: &Path, bytes: &[u8], mode: u32, exclusive: bool) -> Result<(), TlsError> {
    use std::os::unix::fs::OpenOptionsExt;
    let werr = |source| TlsError::Write {
        file: path.to_path_buf(),
        source,
    };
    if exclusive && path.exists() {
        return Err(TlsError::Exists {
            file: path.to_path_buf(),
        });
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(&tmp)
        .map_err(werr)?;
    f.write_all(bytes).map_err(werr)?;
    f.sync_all().map_err(werr)?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(werr)?;
    if let Some(dir) = path.parent() {
        if let Ok(d) = std::fs::File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Creates `dir` with mode 0700 if missing; with `force`, an existing one is made 0700 too.
fn create_private_dir(dir: &Path, force: bool) -> Result<(), TlsError> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    let werr = |source| TlsError::Write {
        file: dir.to_path_buf(),
        source,
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(werr)?;
    if force {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).map_err(werr)?;
    }
    Ok(())
}

impl Ca {
    /// Creates the CA of `cluster` in `dir` (made 0700). Refuses if a CA is already there.
    pub fn init(dir: &Path, cluster: &str, now: SystemTime) -> Result<Ca, TlsError> {
        validate_name("cluster id", cluster).map_err(issue_err)?;
        for name in [CA_CERT, CA_KEY, CLUSTER_FILE] {
            if dir.join(name).exists() {
                return Err(TlsError::Exists {
                    file: dir.join(name),
                });
            }
        }
        create_private_dir(dir, true)?;
        let key = KeyPair::generate().map_err(issue_err)?;
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("hub cluster {cluster} CA"));
        dn.push(DnType::OrganizationName, cluster);
        params.distinguished_name = dn;
        params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let secs = unix_secs(now);
        params.not_before = time_at(secs - BACKDATE_SECS)?;
        params.not_after = time_at(secs + i64::from(CA_VALIDITY_DAYS) * 86_400)?;
        let cert = params.self_signed(&key).map_err(issue_err)?;
        let cert_pem = cert.pem();
        write_file(
            &dir.join(CA_KEY),
            key.serialize_pem().as_bytes(),
            0o600,
            true,
        )?;
        write_file(&dir.join(CA_CERT), cert_pem.as_bytes(), 0o644, true)?;
        write_file(
            &dir.join(CLUSTER_FILE),
            format!("{cluster}\n").as_bytes(),
            0o644,
            true,
        )?;
        Ok(Ca {
            dir: dir.to_path_buf(),
            cluster: cluster.to_string(),
            cert_pem,
            key,
        })
    }

    /// Opens the CA in `dir`.
    pub fn open(dir: &Path) -> Result<Ca, TlsError> {
        let read = |name: &str| {
            let file = dir.join(name);
            std::fs::read_to_string(&file).map_err(|source| TlsError::Read { file, source })
        };
        let cluster = read(CLUSTER_FILE)?.trim().to_string();
        validate_name("cluster id", &cluster).map_err(|e| TlsError::BadPem {
            file: dir.join(CLUSTER_FILE),
            reason: e.to_string(),
        })?;
        let cert_pem = read(CA_CERT)?;
        let key = KeyPair::from_pem(&read(CA_KEY)?).map_err(|e| TlsError::NoKey {
            file: dir.join(CA_KEY),
            reason: e.to_string(),
        })?;
        Ok(Ca {
            dir: dir.to_path_buf(),
            cluster,
            cert_pem,
            key,
        })
    }

    /// The cluster id.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The CA certificate file.
    pub fn cert_path(&self) -> PathBuf {
        self.dir.join(CA_CERT)
    }

    /// Signs a certificate for `identity`, valid for `days` from `now`. Nodes get `hosts` as
    /// DNS or IP subject alternative names (clients verify them) and both server and client
    /// usage; agents and operators are clients only.
    pub fn issue(
        &self,
        identity: &Identity,
        hosts: &[String],
        days: u32,
        now: SystemTime,
    ) -> Result<Issued, TlsError> {
        if days == 0 {
            return Err(TlsError::Issue("validity must be at least one day".into()));
        }
        if !identity.is_certificate_identity() {
            return Err(TlsError::Issue(format!(
                "{identity} is an operator token: it has no certificate (hubctl token create)"
            )));
        }
        let node = matches!(identity, Identity::Node(_));
        if node && hosts.is_empty() {
            return Err(TlsError::Issue(
                "a node certificate needs at least one --host (the names clients dial)".into(),
            ));
        }
        if !node && !hosts.is_empty() {
            return Err(TlsError::Issue(format!(
                "{identity} is a client: it takes no --host"
            )));
        }
        let mut params = CertificateParams::default();
        for host in hosts {
            let san = match host.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName(
                    Ia5String::try_from(host.as_str())
                        .map_err(|e| issue_err(format!("--host {host:?}: {e}")))?,
                ),
            };
            params.subject_alt_names.push(san);
        }
        let uri = identity.uri(&self.cluster);
        params
            .subject_alt_names
            .push(SanType::URI(Ia5String::try_from(uri).map_err(issue_err)?));
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, identity.to_string());
        dn.push(DnType::OrganizationName, self.cluster.as_str());
        params.distinguished_name = dn;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = if node {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        params.use_authority_key_identifier_extension = true;
        let secs = unix_secs(now);
        params.not_before = time_at(secs - BACKDATE_SECS)?;
        params.not_after = time_at(secs + i64::from(days) * 86_400)?;
        let key = KeyPair::generate().map_err(issue_err)?;
        let issuer =
            Issuer::from_ca_cert_pem(&self.cert_pem, &self.key).map_err(|e| TlsError::BadPem {
                file: self.cert_path(),
                reason: e.to_string(),
            })?;
        let cert = params.signed_by(&key, &issuer).map_err(issue_err)?;
        Ok(Issued {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }
}

/// The file stem of an identity's certificate: `node-1`, `agent-prod`, `operator-alice`.
pub fn file_stem(identity: &Identity) -> String {
    match identity {
        Identity::Node(id) => format!("node-{id}"),
        Identity::Agent(env) => format!("agent-{env}"),
        Identity::Operator(name) => format!("operator-{name}"),
        Identity::Token(name) => format!("token-{name}"),
    }
}

impl Issued {
    /// Writes `<stem>.pem` and `<stem>-key.pem` (0600) into `dir`, replacing older ones (a
    /// rotation writes new files, then signals the process to reload them).
    pub fn write(&self, dir: &Path, stem: &str) -> Result<Written, TlsError> {
        create_private_dir(dir, false)?;
        let key = dir.join(format!("{stem}-key.pem"));
        let cert = dir.join(format!("{stem}.pem"));
        write_file(&key, self.key_pem.as_bytes(), 0o600, false)?;
        write_file(&cert, self.cert_pem.as_bytes(), 0o644, false)?;
        Ok(Written { cert, key })
    }
}

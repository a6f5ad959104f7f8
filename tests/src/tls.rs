//! The test cluster's PKI: every process a test starts talks mutual TLS with a certificate
//! issued from `DIR/pki` (made by `hubctl dev up`), as the hub is deployed.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use hub_tls::client::{ClientMode, ClientTls, Connector};
use hub_tls::pki::{file_stem, Ca, CA_CERT};
use hub_tls::{Identity, TlsFiles};
use tonic::transport::Channel;

use crate::Cluster;

/// The operator identity `hubctl dev up` issues (what every test's hubctl runs as).
pub const ADMIN: &str = "admin";

impl Cluster {
    /// Whether the cluster runs plaintext (`dev up --insecure`).
    pub fn insecure(&self) -> bool {
        !self.pki_dir().join(CA_CERT).exists()
    }

    /// `DIR/pki`.
    pub fn pki_dir(&self) -> PathBuf {
        self.dir().join("pki")
    }

    /// The TLS files of `identity`, issued from the cluster's CA on first use.
    pub fn tls_files(&self, identity: &Identity) -> TlsFiles {
        let pki = self.pki_dir();
        let stem = file_stem(identity);
        let files = TlsFiles {
            ca: pki.join(CA_CERT),
            cert: pki.join(format!("{stem}.pem")),
            key: pki.join(format!("{stem}-key.pem")),
        };
        if !files.cert.exists() {
            let ca = Ca::open(&pki).expect("open the cluster CA");
            let hosts = match identity {
                Identity::Node(_) => vec!["127.0.0.1".to_string(), "localhost".to_string()],
                _ => Vec::new(),
            };
            ca.issue(identity, &hosts, 30, SystemTime::now())
                .expect("issue a certificate")
                .write(&pki, &stem)
                .expect("write the certificate");
        }
        files
    }

    /// `--ca-file F --cert-file F --key-file F` for `identity`, or `--insecure` when the
    /// cluster is plaintext (hub-node and hub-agent take the same flags).
    pub fn tls_args(&self, identity: &Identity) -> Vec<OsString> {
        if self.insecure() {
            return vec!["--insecure".into()];
        }
        self.tls_files(identity).flags()
    }

    /// The environment of a `hubctl` that talks to this cluster as its admin.
    pub fn hubctl_env(&self) -> Vec<(&'static str, OsString)> {
        if self.insecure() {
            return Vec::new();
        }
        let f = self.tls_files(&Identity::Operator(ADMIN.into()));
        vec![
            ("HUBCTL_CA_FILE", f.ca.into()),
            ("HUBCTL_CERT_FILE", f.cert.into()),
            ("HUBCTL_KEY_FILE", f.key.into()),
        ]
    }

    /// `hubctl -e <all endpoints> ARGS` as `identity` (its certificate issued on first use).
    pub fn hubctl_as(&self, identity: &Identity, args: &[&str]) -> crate::CmdOutput {
        let f = self.tls_files(identity);
        let mut cmd = std::process::Command::new(crate::hubctl_bin());
        cmd.env("HUBCTL_CA_FILE", &f.ca)
            .env("HUBCTL_CERT_FILE", &f.cert)
            .env("HUBCTL_KEY_FILE", &f.key)
            .args(["--endpoints", &self.endpoints()])
            .args(args);
        crate::run_with_limit(&mut cmd, crate::HUBCTL_LIMIT)
    }

    /// `hubctl --endpoints ENDPOINTS ARGS` with operator token `token` (HUBCTL_TOKEN) and the
    /// cluster's CA, and no certificate of its own.
    pub fn hubctl_with_token(
        &self,
        token: &str,
        endpoints: &str,
        args: &[&str],
    ) -> crate::CmdOutput {
        let mut cmd = std::process::Command::new(crate::hubctl_bin());
        cmd.env("HUBCTL_CA_FILE", self.pki_dir().join(CA_CERT))
            .env("HUBCTL_TOKEN", token)
            .args(["--endpoints", endpoints])
            .args(args);
        crate::run_with_limit(&mut cmd, crate::HUBCTL_LIMIT)
    }

    /// A channel to `addr` that verifies the node against the cluster's CA and presents no
    /// certificate (a token caller's transport).
    pub async fn anonymous_channel(&self, addr: &str) -> Result<Channel, tonic::transport::Error> {
        let mode =
            hub_tls::client::anonymous(&self.pki_dir().join(CA_CERT)).expect("load the cluster CA");
        Connector::new(mode, Duration::from_secs(2))
            .channel(addr, |e| e)
            .await
    }

    /// A connector dialling as `identity` (plaintext when the cluster is).
    pub fn connector(&self, identity: &Identity) -> Connector {
        let mode = if self.insecure() {
            ClientMode::Plaintext
        } else {
            let tls = ClientTls::load(self.tls_files(identity), None, SystemTime::now())
                .expect("load the test's TLS files");
            ClientMode::Tls(Arc::new(tls))
        };
        Connector::new(mode, Duration::from_secs(2))
    }

    /// A channel to `addr` as `identity`, connected now.
    pub async fn channel_as(
        &self,
        identity: &Identity,
        addr: &str,
    ) -> Result<Channel, tonic::transport::Error> {
        self.connector(identity).channel(addr, |e| e).await
    }
}

//! `hubctl pki revoke` and `hubctl pki revoked`: adds a certificate to the cluster's replicated revocation list; every
//! node then refuses it on the next call on any connection (docs/SECURITY.md "Revocation").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use hub_client::FailoverClient;
use hub_engine::revocation::serial_from_der_bytes;
use hub_engine::Command;

use super::args::ReadArgs;
use super::calls::{freshness, submit_and_print};
use super::output::{print_list, Format};

/// `hubctl pki revoke (--serial S | --cert FILE) --reason R`
#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The certificate's serial number, hex (colons allowed), as `openssl x509 -serial`
    /// prints it.
    #[arg(long, required_unless_present = "cert", conflicts_with = "cert")]
    serial: Option<String>,
    /// The certificate file (PEM): its serial, identity and expiry are read from it, and it
    /// must have been signed by the cluster CA (--ca-file).
    #[arg(long, value_name = "PEM_FILE")]
    cert: Option<PathBuf>,
    /// Why (recorded and listed; at most 200 characters).
    #[arg(long)]
    reason: String,
}

/// Runs `hubctl pki revoke`, with the cluster CA of `--ca-file` for `--cert`.
pub async fn run(
    client: &FailoverClient,
    args: RevokeArgs,
    ca_file: Option<&Path>,
    fmt: Format,
) -> anyhow::Result<()> {
    let command = match (args.serial, args.cert) {
        (Some(serial), None) => Command::RevokeCertificate {
            serial,
            reason: args.reason,
            identity: None,
            not_after: None,
        },
        (None, Some(cert)) => {
            let ca = ca_file.context("--cert: needs --ca-file (HUBCTL_CA_FILE) to check the certificate is the cluster CA's")?;
            from_certificate(&cert, ca, args.reason)?
        }
        _ => bail!("give --serial or --cert"),
    };
    submit_and_print(client, &command, fmt).await.map(|_| ())
}

/// The revocation of the certificate in `path`, checked to be signed by the CA in `ca`.
fn from_certificate(path: &Path, ca: &Path, reason: String) -> anyhow::Result<Command> {
    let pem_of = |p: &Path| -> anyhow::Result<Vec<u8>> {
        let text = std::fs::read(p).with_context(|| format!("{}: cannot read", p.display()))?;
        let (_, pem) = x509_parser::pem::parse_x509_pem(&text)
            .map_err(|e| anyhow::anyhow!("{}: not a PEM certificate: {e}", p.display()))?;
        Ok(pem.contents)
    };
    let (cert_der, ca_der) = (pem_of(path)?, pem_of(ca)?);
    let (_, cert) = x509_parser::parse_x509_certificate(&cert_der)
        .map_err(|e| anyhow::anyhow!("{}: not a certificate: {e}", path.display()))?;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der)
        .map_err(|e| anyhow::anyhow!("{}: not a certificate: {e}", ca.display()))?;
    if cert.verify_signature(Some(ca_cert.public_key())).is_err() {
        bail!(
            "--cert {}: not signed by the cluster CA in {}; revoke certificates of this cluster's CA only",
            path.display(),
            ca.display()
        );
    }
    let identity = hub_tls::material::certificate_identity(&cert_der.clone().into())
        .map(|(id, _)| id.identity.to_string())
        .ok();
    Ok(Command::RevokeCertificate {
        serial: serial_from_der_bytes(cert.tbs_certificate.raw_serial()),
        reason,
        identity,
        not_after: Some(cert.validity().not_after.timestamp() * 1000),
    })
}

/// `hubctl pki revoked`: the revocation list.
pub async fn list(client: &FailoverClient, read: ReadArgs, fmt: Format) -> anyhow::Result<()> {
    let answer = client
        .ask(
            &hub_client::answer::ListRevokedCertificates,
            freshness(read),
        )
        .await?;
    let rows = serde_json::to_value(&answer.certificates)?;
    print_list(
        fmt,
        rows.as_array().cloned().unwrap_or_default(),
        &[
            "serial",
            "identity",
            "reason",
            "revoked",
            "revoked_by",
            "not_after",
        ],
        Clone::clone,
    )
}

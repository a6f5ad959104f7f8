//! `hubctl pki revoke` and `hubctl pki revoked`: adds a certificate to the cluster's replicated revocation list; every
//! node then refuses it on the next call on any connection (docs/SECURITY.md "Revocation").

use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::Args;
use hub_client::FailoverClient;
use hub_engine::revocation::{serial_from_der_bytes, CertificateRevocation};
use hub_engine::Command;

use super::args::ReadArgs;
use super::calls::submit_and_print;
use super::output::{print_list, Format};

/// `hubctl pki revoke (--serial S | --cert FILE | --crl-file FILE) [--reason R]`
#[derive(Args, Debug)]
pub struct RevokeArgs {
    /// The certificate's serial number, hex (colons allowed), as `openssl x509 -serial`
    /// prints it.
    #[arg(long, required_unless_present_any = ["cert", "crl_file"], conflicts_with_all = ["cert", "crl_file"])]
    serial: Option<String>,
    /// The certificate file (PEM): its serial, identity and expiry are read from it, and it
    /// must have been signed by the cluster CA (--ca-file).
    #[arg(long, value_name = "PEM_FILE", conflicts_with = "crl_file")]
    cert: Option<PathBuf>,
    /// A certificate revocation list (PEM or DER) signed by the cluster CA, from an
    /// operator's own CA tooling: every certificate it lists is revoked (a repeat changes
    /// nothing).
    #[arg(long, value_name = "CRL_FILE")]
    crl_file: Option<PathBuf>,
    /// Why (recorded and listed; at most 200 characters). Required with --serial and
    /// --cert; with --crl-file, each entry's reason code is used when this is not given.
    #[arg(long)]
    reason: Option<String>,
}

/// Runs `hubctl pki revoke`, with the cluster CA of `--ca-file` for `--cert` and
/// `--crl-file`.
pub async fn run(
    client: &FailoverClient,
    args: RevokeArgs,
    ca_file: Option<&Path>,
    fmt: Format,
) -> anyhow::Result<()> {
    let ca = || {
        ca_file.context(
            "--cert and --crl-file need --ca-file (HUBCTL_CA_FILE): what is revoked must be the cluster CA's",
        )
    };
    let reason = || args.reason.clone().context("--reason: say why");
    let command = match (&args.serial, &args.cert, &args.crl_file) {
        (Some(serial), None, None) => Command::RevokeCertificate {
            serial: serial.clone(),
            reason: reason()?,
            identity: None,
            not_after: None,
        },
        (None, Some(cert), None) => from_certificate(cert, ca()?, reason()?)?,
        (None, None, Some(crl)) => {
            let batches = from_crl(crl, ca()?, args.reason.as_deref())?;
            return submit_batches(client, crl, batches, fmt).await;
        }
        _ => bail!("give one of --serial, --cert and --crl-file"),
    };
    submit_and_print(client, &command, fmt).await.map(|_| ())
}

/// Most certificates in one `RevokeCertificates` entry: with the longest serial and reason,
/// 500 entries stay well under a command's size limit (256 KiB).
const CRL_BATCH: usize = 500;

/// Submits a CRL's batches in order; each is one entry, all or nothing. A failure names the
/// batch, and the ones before it stay revoked (a rerun repeats them harmlessly).
async fn submit_batches(
    client: &FailoverClient,
    crl: &Path,
    batches: Vec<Vec<CertificateRevocation>>,
    fmt: Format,
) -> anyhow::Result<()> {
    let listed: usize = batches.iter().map(Vec::len).sum();
    if listed == 0 {
        eprintln!("{}: lists no certificates; nothing revoked", crl.display());
        return Ok(());
    }
    let count = batches.len();
    for (i, certificates) in batches.into_iter().enumerate() {
        let command = Command::RevokeCertificates { certificates };
        super::calls::submit(client, &command)
            .await
            .with_context(|| {
                format!(
                "--crl-file {}: batch {} of {count} refused (the batches before it are revoked; \
                 running the command again repeats them harmlessly)",
                crl.display(),
                i + 1
            )
            })?;
    }
    super::output::print(
        fmt,
        &serde_json::json!({"listed": listed, "batches": count}),
        &["listed", "batches"],
    )
}

/// The DER of the first PEM block of `path`, or its bytes when it is not PEM.
fn der_of(path: &Path) -> anyhow::Result<Vec<u8>> {
    let bytes = std::fs::read(path).with_context(|| format!("{}: cannot read", path.display()))?;
    match x509_parser::pem::parse_x509_pem(&bytes) {
        Ok((_, pem)) => Ok(pem.contents),
        Err(_) if !bytes.starts_with(b"-----") => Ok(bytes),
        Err(e) => bail!("{}: not PEM: {e}", path.display()),
    }
}

/// The certificates the CRL at `path` lists, in batches of at most [`CRL_BATCH`], its
/// signature checked against the CA in `ca`.
fn from_crl(
    path: &Path,
    ca: &Path,
    reason: Option<&str>,
) -> anyhow::Result<Vec<Vec<CertificateRevocation>>> {
    let (crl_der, ca_der) = (der_of(path)?, der_of(ca)?);
    let (_, crl) = x509_parser::parse_x509_crl(&crl_der)
        .map_err(|e| anyhow::anyhow!("--crl-file {}: not a CRL: {e}", path.display()))?;
    let (_, ca_cert) = x509_parser::parse_x509_certificate(&ca_der)
        .map_err(|e| anyhow::anyhow!("{}: not a certificate: {e}", ca.display()))?;
    if crl.verify_signature(ca_cert.public_key()).is_err() {
        bail!(
            "--crl-file {}: not signed by the cluster CA in {}",
            path.display(),
            ca.display()
        );
    }
    let entries: Vec<_> = crl.iter_revoked_certificates().collect();
    let most = hub_engine::revocation::MAX_REVOKED_CERTIFICATES;
    if entries.len() > most {
        bail!(
            "--crl-file {}: lists {} certificates, more than the {most} a hub keeps; rotate the CA instead",
            path.display(),
            entries.len()
        );
    }
    let certificates: Vec<CertificateRevocation> = entries
        .into_iter()
        .map(|entry| CertificateRevocation {
            serial: serial_from_der_bytes(entry.raw_serial()),
            reason: reason.map_or_else(
                || match entry.reason_code() {
                    Some((_, code)) => format!("listed in a CRL: {code:?}"),
                    None => "listed in a CRL".to_string(),
                },
                str::to_string,
            ),
            identity: None,
            not_after: None,
        })
        .collect();
    Ok(certificates
        .chunks(CRL_BATCH)
        .map(<[CertificateRevocation]>::to_vec)
        .collect())
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
    let answer =
        super::calls::ask(client, &hub_client::answer::ListRevokedCertificates, read).await?;
    print_list(
        fmt,
        &answer.certificates,
        &[
            "serial",
            "identity",
            "reason",
            "revoked",
            "revoked_by",
            "not_after",
        ],
        |c| serde_json::json!(c),
    )
}

//! `hubctl snapshot save|status|restore`: backups of the replicated state, taken from a live
//! node, and the restore that seeds a new cluster from one (docs/PRODUCTION.md "Backups").

use std::fs;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use clap::{Args, Subcommand};
use hub_client::FailoverClient;
use hub_proto::SnapshotSaveRequest;
use raft_store::backup::{self, BackupFile, BackupHeader, RestoreTarget};
use serde_json::{json, Value};

use super::output::{print, Format};

/// `hubctl snapshot …`
#[derive(Subcommand, Debug)]
pub enum SnapshotCmd {
    /// Save a backup of the hub's replicated state, from any node (admins only), to FILE:
    /// written owner-only, synced, verified and only then given its name. It holds every
    /// secret the hub holds (docs/SECURITY.md "Backups").
    Save {
        /// The file to write (refused if it exists).
        file: PathBuf,
    },
    /// Verify a backup's checksum and print its header: cluster, index, term, records,
    /// digest and membership. Exits non-zero if the file is damaged.
    Status {
        /// The backup file.
        file: PathBuf,
    },
    /// Seed the data directory of a new cluster's first node from a backup (no hub is
    /// contacted), then start that node with `hub-node` and add the others as to any
    /// cluster.
    Restore(RestoreArgs),
}

/// `hubctl snapshot restore …`
#[derive(Args, Debug)]
pub struct RestoreArgs {
    /// The backup file (`hubctl snapshot save`).
    #[arg(long)]
    snapshot: PathBuf,
    /// The new node's data directory: absent or empty.
    #[arg(long)]
    data_dir: PathBuf,
    /// The new node's id.
    #[arg(long)]
    id: u64,
    /// The new cluster's id: not the backup's, so the old cluster's members can never be
    /// taken for the new one's.
    #[arg(long)]
    cluster_id: String,
    /// The address the new node is reached at (its `hub-node --advertise`).
    #[arg(long)]
    advertise: String,
    /// Keep the old cluster's CA: its agents' and operators' certificates keep working. The
    /// nodes then run with `--certificate-cluster OLD`, and their certificates name OLD.
    #[arg(long, conflicts_with = "new_ca")]
    keep_ca: bool,
    /// Start over with the new CA whose certificate this is (`hubctl pki init --cluster-id
    /// NEW` makes it): it must be a CA of the new cluster id. Every node, agent and operator
    /// certificate is then issued anew from it; the roles bound to each identity carry over.
    #[arg(long, value_name = "CA_CERT")]
    new_ca: Option<PathBuf>,
}

/// Runs `hubctl snapshot …`.
pub async fn run(
    connect: impl FnOnce() -> anyhow::Result<FailoverClient>,
    cmd: SnapshotCmd,
    fmt: Format,
) -> anyhow::Result<()> {
    match cmd {
        SnapshotCmd::Save { file } => save(&connect()?, &file, fmt).await,
        SnapshotCmd::Status { file } => {
            let backup = BackupFile::open(&file)?;
            print(fmt, &header_json(backup.header(), backup.len()), COLUMNS)
        }
        SnapshotCmd::Restore(args) => restore(args, fmt).await,
    }
}

/// The header fields `status`, `save` and `restore` print, in order.
const COLUMNS: &[&str] = &[
    "cluster_id",
    "index",
    "term",
    "records",
    "bytes",
    "digest",
    "members",
    "node_id",
    "node_version",
    "created_ms",
];

fn header_json(h: &BackupHeader, bytes: u64) -> Value {
    let members: Vec<String> = h
        .membership
        .membership()
        .nodes()
        .map(|(id, node)| format!("{id}={}", node.addr))
        .collect();
    json!({
        "cluster_id": h.cluster_id,
        "index": h.index(),
        "term": h.term(),
        "records": h.records,
        "bytes": bytes,
        "digest": h.digest,
        "members": members.join(","),
        "node_id": h.node_id,
        "node_version": h.node_version,
        "created_ms": h.created_ms,
    })
}

/// `hubctl snapshot save FILE`: streams the backup into `FILE.partial` (0600), syncs and
/// verifies it, then renames it into place, so FILE is only ever a whole, checked backup.
async fn save(client: &FailoverClient, file: &Path, fmt: Format) -> anyhow::Result<()> {
    if file.exists() {
        bail!("{}: exists; choose another name", file.display());
    }
    let partial = partial_path(file);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&partial)
        .with_context(|| format!("{}: cannot create", partial.display()))?;
    let written = receive(client, &mut out, &partial).await;
    let verified = written.and_then(|()| {
        out.sync_all()
            .with_context(|| format!("{}: sync", partial.display()))?;
        Ok(BackupFile::open(&partial)?)
    });
    let backup = match verified {
        Ok(b) => b,
        Err(e) => {
            let _ = fs::remove_file(&partial);
            return Err(e);
        }
    };
    fs::rename(&partial, file).with_context(|| format!("{}: rename", file.display()))?;
    let dir = file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .with_context(|| format!("{}: sync", dir.display()))?;
    let mut v = header_json(backup.header(), backup.len());
    if let Value::Object(o) = &mut v {
        o.insert("file".into(), json!(file.display().to_string()));
    }
    print(fmt, &v, COLUMNS)
}

/// `FILE.partial`, where `save` writes before the backup is whole.
fn partial_path(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Writes the backup stream of `SnapshotSave` into `out`.
async fn receive(client: &FailoverClient, out: &mut fs::File, path: &Path) -> anyhow::Result<()> {
    let mut stream = client
        .call(|mut c| async move { c.snapshot_save(SnapshotSaveRequest {}).await })
        .await?;
    let mut writer = std::io::BufWriter::new(out);
    while let Some(chunk) = stream
        .message()
        .await
        .context("the node ended the backup")?
    {
        writer
            .write_all(&chunk.data)
            .with_context(|| format!("{}: write", path.display()))?;
    }
    writer
        .flush()
        .with_context(|| format!("{}: write", path.display()))?;
    Ok(())
}

/// Checks that `path` is a CA certificate of `cluster` (its organization, as `hubctl pki
/// init` writes it): the new cluster's own CA, not the old one's nor a leaf certificate.
fn check_new_ca(path: &Path, cluster: &str) -> anyhow::Result<()> {
    let text = std::fs::read(path).with_context(|| format!("--new-ca {}", path.display()))?;
    let (_, pem) = x509_parser::pem::parse_x509_pem(&text)
        .map_err(|e| anyhow::anyhow!("--new-ca {}: not a PEM certificate: {e}", path.display()))?;
    let (_, cert) = x509_parser::parse_x509_certificate(&pem.contents)
        .map_err(|e| anyhow::anyhow!("--new-ca {}: not a certificate: {e}", path.display()))?;
    if !cert.is_ca() {
        bail!("--new-ca {}: not a CA certificate", path.display());
    }
    let names: Vec<&str> = cert
        .subject()
        .iter_organization()
        .filter_map(|o| o.as_str().ok())
        .collect();
    if names != [cluster] {
        bail!(
            "--new-ca {}: the CA of cluster {:?}, not of the new cluster {cluster:?}; make one \
             with hubctl pki init --cluster-id {cluster}",
            path.display(),
            names.join(",")
        );
    }
    Ok(())
}

/// `hubctl snapshot restore …`.
async fn restore(args: RestoreArgs, fmt: Format) -> anyhow::Result<()> {
    if !args.keep_ca && args.new_ca.is_none() {
        bail!(
            "--keep-ca or --new-ca CA_CERT: say whether the old cluster's CA stays trusted (its \
             agents' and operators' certificates keep working) or which new CA the new cluster \
             trusts (hubctl pki init --cluster-id {})",
            args.cluster_id
        );
    }
    if let Some(ca) = &args.new_ca {
        check_new_ca(ca, &args.cluster_id)?;
    }
    if args.id == 0 {
        bail!("--id: node ids start at 1");
    }
    hub_identity::validate_name("--cluster-id", &args.cluster_id)?;
    if !args.advertise.contains(':') {
        bail!("--advertise: {:?} is not host:port", args.advertise);
    }
    let backup = BackupFile::open(&args.snapshot)?;
    let target = RestoreTarget {
        data_dir: args.data_dir.clone(),
        node_id: args.id,
        cluster_id: args.cluster_id.clone(),
        advertise: args.advertise.clone(),
    };
    let digest = backup::restore(&backup, &target).await?;
    let old = &backup.header().cluster_id;
    let certificates = match &args.new_ca {
        None => format!("--certificate-cluster {old} (certificates of the old CA naming {old:?})"),
        Some(ca) => format!(
            "--ca-file {} and certificates it issued naming {:?} (hubctl pki issue)",
            ca.display(),
            args.cluster_id
        ),
    };
    let v = json!({
        "data_dir": args.data_dir.display().to_string(),
        "node_id": args.id,
        "cluster_id": args.cluster_id,
        "from_cluster": old,
        "index": backup.header().index(),
        "digest": digest,
        "next": format!(
            "start hub-node --id {} --cluster-id {} --data-dir {} --advertise {} with {certificates}, \
             without --initial-members; then add nodes with `hubctl cluster add-node`",
            args.id, args.cluster_id, args.data_dir.display(), args.advertise
        ),
    });
    print(
        fmt,
        &v,
        &[
            "data_dir",
            "node_id",
            "cluster_id",
            "from_cluster",
            "index",
            "digest",
            "next",
        ],
    )
}

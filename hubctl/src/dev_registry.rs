//! `hubctl dev registry DIR`: serves a directory of artifacts over HTTPS with a CA generated
//! on the spot (its certificate written to `--tls-dir`), so the demo and tests can use an
//! https registry the way an operator would: `hubctl env registry set … --ca-file ca.pem`.
//! A development tool: files are read whole into memory, only `GET` and `HEAD`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context;
use clap::Args;
use hub_http::local::{Handler, LocalCa, LocalServer, Reply, Request};

/// `hubctl dev registry`
#[derive(Args, Debug)]
pub struct RegistryArgs {
    /// The directory to serve (e.g. scripts/demo-package.sh's OUT_DIR/registry).
    pub dir: PathBuf,
    /// Address to listen on; port 0 picks a free one.
    #[arg(long, default_value = "127.0.0.1:8443")]
    pub listen: SocketAddr,
    /// Directory for `ca.pem` (the CA clients must trust) and `url` (the registry's URL),
    /// both written once the server listens.
    #[arg(long)]
    pub tls_dir: PathBuf,
}

/// A running https registry.
pub struct Registry {
    /// The server (dropping it stops accepting).
    pub server: LocalServer,
    /// The CA certificate (PEM) that signed its certificate.
    pub ca_pem: String,
    /// `https://ADDRESS`.
    pub url: String,
}

/// Starts serving `dir` on `listen` (IPv4 or IPv6 loopback, or any address: the certificate
/// names the listen address, `localhost` and `127.0.0.1`).
pub async fn start(dir: &Path, listen: SocketAddr) -> anyhow::Result<Registry> {
    let root = dir
        .canonicalize()
        .with_context(|| format!("registry directory {}", dir.display()))?;
    let ca = LocalCa::generate("hubctl dev registry CA").context("generate the CA")?;
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .with_context(|| format!("--listen {listen}: cannot bind"))?;
    let addr = listener.local_addr()?;
    let ip = addr.ip().to_string();
    let tls = ca
        .server_config(&[&ip, "localhost", "127.0.0.1"])
        .context("the server certificate")?;
    let handler: Handler = Arc::new(move |request| serve_file(&root, &request));
    let server = LocalServer::start(listener, Some(tls), handler)?;
    Ok(Registry {
        server,
        ca_pem: ca.ca_pem().to_string(),
        url: format!("https://{addr}"),
    })
}

/// Runs `hubctl dev registry` until SIGTERM or Ctrl-C.
pub async fn run(args: RegistryArgs) -> anyhow::Result<()> {
    let registry = start(&args.dir, args.listen).await?;
    std::fs::create_dir_all(&args.tls_dir)
        .with_context(|| format!("--tls-dir {}", args.tls_dir.display()))?;
    let ca_file = args.tls_dir.join("ca.pem");
    write_atomically(&ca_file, registry.ca_pem.as_bytes())?;
    write_atomically(&args.tls_dir.join("url"), registry.url.as_bytes())?;
    println!(
        "serving {} at {} (clients trust {})",
        args.dir.display(),
        registry.url,
        ca_file.display()
    );
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::select! {
        _ = term.recv() => {},
        _ = tokio::signal::ctrl_c() => {},
    }
    Ok(())
}

fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes).with_context(|| format!("write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("write {}", path.display()))
}

/// `GET`/`HEAD` of a regular file under `root`; no listings, nothing outside `root` (no `..`,
/// symbolic links resolved and checked).
fn serve_file(root: &Path, request: &Request) -> Reply {
    if request.method != hub_http::Method::GET && request.method != hub_http::Method::HEAD {
        return Reply::text(405, "only GET and HEAD");
    }
    let path = request.path.split('?').next().unwrap_or_default();
    let relative = path.trim_start_matches('/');
    if relative
        .split('/')
        .any(|s| s.is_empty() || s == "." || s == ".." || s.contains('\0'))
    {
        return Reply::text(404, "not found");
    }
    let file = match root.join(relative).canonicalize() {
        Ok(file) if file.starts_with(root) && file.is_file() => file,
        _ => return Reply::text(404, "not found"),
    };
    match std::fs::read(&file) {
        Ok(bytes) => Reply {
            status: 200,
            headers: vec![("content-type".into(), "application/octet-stream".into())],
            body: bytes.into(),
        },
        Err(_) => Reply::text(500, "cannot read the file"),
    }
}

//! A 3-member etcd cluster on this machine: Debian's `etcd-server` (3.4), installed if
//! missing, each member its own process on loopback with free ports, with or without mutual
//! TLS (certificates from a hub PKI, so both systems use the same kind of key and chain).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{bail, Context};
use etcd_client::{Certificate, Client, ConnectOptions, Identity, KvClient, TlsOptions};

use super::load::Writer;

/// Where Debian's package puts the server.
const DEBIAN_ETCD: &str = "/usr/bin/etcd";

/// Why etcd cannot be had here, with what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum EtcdMissing {
    /// Not on PATH, and this user may not install packages.
    #[error("etcd is not installed and only root can install it: run `apt-get install etcd-server` as root, or pass --etcd PATH")]
    NotRoot,
    /// Not on PATH, and there is no apt-get.
    #[error("etcd is not installed and there is no apt-get to install Debian's etcd-server: install etcd 3.4 by hand and pass --etcd PATH")]
    NoAptGet,
    /// apt-get could not install it (no package access, or no such package).
    #[error("etcd is not installed and `apt-get install etcd-server` failed ({0}): this machine needs access to Debian's packages, or pass --etcd PATH")]
    InstallFailed(String),
    /// `--etcd` names no executable file.
    #[error("--etcd: {0} is not an executable file")]
    NotExecutable(PathBuf),
}

/// The etcd server to run: `explicit` if given, else `etcd` on PATH or Debian's, else Debian's
/// `etcd-server` installed with apt-get (as root).
pub fn find_or_install(explicit: Option<&Path>) -> Result<PathBuf, EtcdMissing> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    find_or_install_in(explicit, &path, root)
}

/// [`find_or_install`] with the search path and the user's rights given.
fn find_or_install_in(
    explicit: Option<&Path>,
    path: &std::ffi::OsStr,
    root: bool,
) -> Result<PathBuf, EtcdMissing> {
    if let Some(p) = explicit {
        return if is_executable(p) {
            Ok(p.to_path_buf())
        } else {
            Err(EtcdMissing::NotExecutable(p.to_path_buf()))
        };
    }
    let on_path = |name: &str| {
        std::env::split_paths(path)
            .map(|d| d.join(name))
            .find(|p| is_executable(p))
    };
    if let Some(p) = on_path("etcd") {
        return Ok(p);
    }
    let Some(apt_get) = on_path("apt-get") else {
        return Err(EtcdMissing::NoAptGet);
    };
    if !root {
        return Err(EtcdMissing::NotRoot);
    }
    eprintln!("etcd not found: installing Debian's etcd-server");
    let install = || {
        Command::new(&apt_get)
            .args(["install", "-y", "-qq", "etcd-server"])
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .output()
    };
    let mut out = install().map_err(|e| EtcdMissing::InstallFailed(e.to_string()))?;
    if !out.status.success() {
        // The package lists may be missing or stale: refresh them once.
        let update = Command::new(&apt_get)
            .args(["update", "-qq"])
            .stdin(Stdio::null())
            .output()
            .map_err(|e| EtcdMissing::InstallFailed(e.to_string()))?;
        if !update.status.success() {
            return Err(EtcdMissing::InstallFailed(last_line(&update.stderr)));
        }
        out = install().map_err(|e| EtcdMissing::InstallFailed(e.to_string()))?;
    }
    if !out.status.success() {
        return Err(EtcdMissing::InstallFailed(last_line(&out.stderr)));
    }
    on_path("etcd")
        .or_else(|| is_executable(Path::new(DEBIAN_ETCD)).then(|| PathBuf::from(DEBIAN_ETCD)))
        .ok_or_else(|| EtcdMissing::InstallFailed("installed, but no etcd binary on PATH".into()))
}

fn last_line(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let line = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("no output");
    line.trim().chars().take(300).collect()
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// The server's version line (`etcd Version: 3.4.23`).
pub fn version(binary: &Path) -> anyhow::Result<String> {
    let out = Command::new(binary).arg("--version").output()?;
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .lines()
        .find(|l| l.starts_with("etcd Version"))
        .unwrap_or("etcd Version: unknown")
        .trim()
        .to_string())
}

/// Client and member certificates for an etcd cluster with mutual TLS.
struct Tls {
    ca: PathBuf,
    member: (PathBuf, PathBuf),
    client_cert: String,
    client_key: String,
    ca_pem: String,
}

impl Tls {
    fn make(dir: &Path) -> anyhow::Result<Tls> {
        let now = SystemTime::now();
        let pki = dir.join("pki");
        let ca = hub_tls::pki::Ca::init(&pki, "etcd-bench", now)?;
        // A node identity has server and client usage, which members need (they dial peers).
        let member = ca.issue(
            &hub_tls::Identity::Node(1),
            &["127.0.0.1".to_string(), "localhost".to_string()],
            2,
            now,
        )?;
        let member = member.write(&pki, "member")?;
        let client = ca.issue(&hub_tls::Identity::Operator("bench".into()), &[], 2, now)?;
        let ca_path = ca.cert_path();
        Ok(Tls {
            ca_pem: std::fs::read_to_string(&ca_path)?,
            ca: ca_path,
            member: (member.cert, member.key),
            client_cert: client.cert_pem.clone(),
            client_key: client.key_pem.clone(),
        })
    }
}

/// One member: its URLs and its process.
struct Member {
    name: String,
    client_url: String,
    args: Vec<String>,
    log: PathBuf,
    child: Option<Child>,
}

/// A running 3-member etcd cluster; dropping it kills every member.
pub struct EtcdCluster {
    binary: PathBuf,
    members: Vec<Member>,
    tls: Option<Tls>,
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl EtcdCluster {
    /// Starts 3 members in `dir` (with mutual TLS when `tls`) and waits until they have a
    /// leader.
    pub async fn start(binary: &Path, dir: &Path, tls: bool) -> anyhow::Result<EtcdCluster> {
        std::fs::create_dir_all(dir)?;
        let tls = if tls { Some(Tls::make(dir)?) } else { None };
        let scheme = if tls.is_some() { "https" } else { "http" };
        let mut urls = Vec::new();
        for i in 1..=3 {
            urls.push((
                format!("m{i}"),
                format!("{scheme}://127.0.0.1:{}", free_port()?),
                format!("{scheme}://127.0.0.1:{}", free_port()?),
            ));
        }
        let initial: Vec<String> = urls.iter().map(|(n, _, p)| format!("{n}={p}")).collect();
        let mut members = Vec::new();
        for (name, client_url, peer_url) in &urls {
            let mut args = vec![
                format!("--name={name}"),
                format!("--data-dir={}", dir.join(name).display()),
                format!("--listen-client-urls={client_url}"),
                format!("--advertise-client-urls={client_url}"),
                format!("--listen-peer-urls={peer_url}"),
                format!("--initial-advertise-peer-urls={peer_url}"),
                format!("--initial-cluster={}", initial.join(",")),
                "--initial-cluster-state=new".to_string(),
                "--initial-cluster-token=hub-bench".to_string(),
                "--logger=zap".to_string(),
                "--log-outputs=stderr".to_string(),
            ];
            if let Some(t) = &tls {
                let (cert, key) = (t.member.0.display(), t.member.1.display());
                let ca = t.ca.display();
                args.extend([
                    format!("--cert-file={cert}"),
                    format!("--key-file={key}"),
                    format!("--trusted-ca-file={ca}"),
                    "--client-cert-auth".to_string(),
                    format!("--peer-cert-file={cert}"),
                    format!("--peer-key-file={key}"),
                    format!("--peer-trusted-ca-file={ca}"),
                    "--peer-client-cert-auth".to_string(),
                ]);
            }
            members.push(Member {
                name: name.clone(),
                client_url: client_url.clone(),
                args,
                log: dir.join(format!("{name}.log")),
                child: None,
            });
        }
        let mut cluster = EtcdCluster {
            binary: binary.to_path_buf(),
            members,
            tls,
        };
        for i in 0..3 {
            cluster.spawn(i)?;
        }
        cluster.wait_leader(Duration::from_secs(30), None).await?;
        Ok(cluster)
    }

    fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log)?;
        let child = Command::new(&self.binary)
            .args(&m.args)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("start etcd member {}", m.name))?;
        m.child = Some(child);
        Ok(())
    }

    fn options(&self) -> ConnectOptions {
        let mut o = ConnectOptions::new()
            .with_connect_timeout(Duration::from_millis(500))
            .with_timeout(Duration::from_secs(5));
        if let Some(t) = &self.tls {
            o = o.with_tls(
                TlsOptions::new()
                    .ca_certificate(Certificate::from_pem(&t.ca_pem))
                    .identity(Identity::from_pem(&t.client_cert, &t.client_key)),
            );
        }
        o
    }

    /// A client of member `i` only (no balancing across members).
    pub async fn client(&self, i: usize) -> anyhow::Result<Client> {
        let url = &self.members[i].client_url;
        Client::connect([url.as_str()], Some(self.options()))
            .await
            .with_context(|| format!("connect to etcd member {}", self.members[i].name))
    }

    /// The index of the member that leads, as a majority of the reachable members (other than
    /// `skip`) report it.
    pub async fn leader(&self, skip: Option<usize>) -> Option<usize> {
        let mut ids = Vec::new();
        let mut leader_ids = Vec::new();
        for i in (0..self.members.len()).filter(|i| Some(*i) != skip) {
            let Ok(mut c) = self.client(i).await else {
                ids.push(None);
                continue;
            };
            match c.status().await {
                Ok(s) => {
                    ids.push(s.header().map(|h| h.member_id()));
                    if s.leader() != 0 {
                        leader_ids.push(s.leader());
                    }
                }
                Err(_) => ids.push(None),
            }
        }
        let leader = *leader_ids.first()?;
        if leader_ids.iter().filter(|l| **l == leader).count() * 2 <= leader_ids.len() {
            return None;
        }
        (0..self.members.len())
            .filter(|i| Some(*i) != skip)
            .zip(ids)
            .find(|(_, id)| *id == Some(leader))
            .map(|(i, _)| i)
    }

    /// Waits until a leader other than `skip` is known.
    pub async fn wait_leader(
        &self,
        timeout: Duration,
        skip: Option<usize>,
    ) -> anyhow::Result<usize> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.leader(skip).await {
                return Ok(l);
            }
            if Instant::now() > deadline {
                bail!("etcd elected no leader within {timeout:?}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits until member `i` knows a leader and has applied what the leader had when the
    /// wait began (so that a quorum survives the next kill).
    pub async fn wait_caught_up(&self, i: usize, timeout: Duration) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        let leader = self.wait_leader(timeout, Some(i)).await?;
        let want = self.client(leader).await?.status().await?.raft_index();
        loop {
            if let Ok(mut c) = self.client(i).await {
                if let Ok(s) = c.status().await {
                    if s.leader() != 0 && s.raft_index() >= want {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "etcd member {} did not catch up within {timeout:?}",
                    self.members[i].name
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILLs member `i` and reaps it.
    pub fn kill9(&mut self, i: usize) {
        if let Some(mut c) = self.members[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Starts member `i` again on its data.
    pub fn restart(&mut self, i: usize) -> anyhow::Result<()> {
        self.kill9(i);
        self.spawn(i)
    }

    /// Member count.
    pub fn len(&self) -> usize {
        self.members.len()
    }

    /// Whether the cluster has no members (never, once started).
    pub fn is_empty(&self) -> bool {
        self.members.is_empty()
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill9(i);
        }
    }
}

/// Puts `value` under a new key per write.
pub struct EtcdWriter {
    kv: KvClient,
    prefix: String,
    value: Vec<u8>,
}

impl EtcdWriter {
    /// A writer of keys `<prefix><seq>` on its own connection to member `member`.
    pub async fn connect(
        cluster: &EtcdCluster,
        member: usize,
        prefix: String,
        value: &[u8],
    ) -> anyhow::Result<EtcdWriter> {
        Ok(EtcdWriter {
            kv: cluster.client(member).await?.kv_client(),
            prefix,
            value: value.to_vec(),
        })
    }
}

impl Writer for EtcdWriter {
    async fn write(&mut self, seq: u64) -> Result<(), String> {
        let key = format!("{}{seq}", self.prefix);
        self.kv
            .put(key, self.value.clone(), None)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn script(dir: &Path, name: &str, body: &str) {
        let p = dir.join(name);
        std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    #[test]
    fn no_etcd_and_no_package_access_is_refused_with_the_reason() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().as_os_str();
        // No etcd, no apt-get.
        let e = find_or_install_in(None, path, true).unwrap_err();
        assert!(matches!(e, EtcdMissing::NoAptGet), "{e}");
        assert!(e.to_string().contains("etcd-server"), "{e}");
        // apt-get (a stand-in for Debian's, which cannot reach its mirrors) fails.
        script(
            dir.path(),
            "apt-get",
            "echo 'E: Unable to locate package etcd-server' >&2; exit 100",
        );
        let e = find_or_install_in(None, path, true).unwrap_err();
        assert!(
            e.to_string()
                .contains("E: Unable to locate package etcd-server"),
            "{e}"
        );
        assert!(e.to_string().contains("access to Debian's packages"), "{e}");
        // Not root: nothing is tried.
        let e = find_or_install_in(None, path, false).unwrap_err();
        assert!(matches!(e, EtcdMissing::NotRoot), "{e}");
    }

    #[test]
    fn an_etcd_on_the_path_or_named_is_used() {
        let dir = tempfile::tempdir().unwrap();
        script(dir.path(), "etcd", "exit 0");
        let found = find_or_install_in(None, dir.path().as_os_str(), false).unwrap();
        assert_eq!(found, dir.path().join("etcd"));
        let missing = dir.path().join("nope");
        let e = find_or_install_in(Some(&missing), dir.path().as_os_str(), true).unwrap_err();
        assert!(e.to_string().starts_with("--etcd: "), "{e}");
    }
}

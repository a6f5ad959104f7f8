//! Partitions between hub nodes, made one of two ways (the report names which):
//!
//! - **Network namespaces** ([`Network`], root with `ip` from iproute2 and `nft` from
//!   nftables): every node on its own host, a namespace with a veth link to a bridge in the
//!   runner's namespace and its own address; a cut is an nftables rule that silently drops
//!   the peer's packets at a node's input. The runner, its register clients and the agents
//!   stay in the runner's namespace and reach every node over the bridge; only traffic between
//!   nodes is ever dropped, so a client of a minority node sees what a real one sees.
//! - **The nodes' transport fault layer** (a chaos build of `hub-node`, started with
//!   `--chaos-faults`; `node/src/fault_layer.rs`): the runner writes each node's
//!   `DATA/chaos-faults.json`, and the node drops every message to the peers listed there.
//!
//! [`Partitions`] keeps the set of directed cuts and applies it through either.
//!
//! Namespace and link names carry the runner's pid (`hc<pid>-…`), so a run never touches
//! another's, and a run removes the leftovers of runners that died without cleaning up (their
//! pid is gone). [`Network`] deletes its namespaces and links when dropped.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

/// The port every node listens on (each node has its own address).
pub const NODE_PORT: u16 = 7401;

/// The namespaces, links and addresses of one run.
#[derive(Debug)]
pub struct Network {
    /// `hc<pid>`: the prefix of every name this run creates.
    tag: String,
    /// The bridge's /24 (`10.77.<subnet>.0`).
    subnet: u8,
    /// Node ids.
    nodes: Vec<u64>,
}

/// Why the machine cannot provide network faults, or `None` when it can.
pub fn unavailable() -> Option<String> {
    // SAFETY: geteuid(2) has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("the runner is not root (network namespaces need it)".into());
    }
    for tool in ["ip", "nft"] {
        let found = Command::new(tool)
            .arg("-V")
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            return Some(format!(
                "`{tool}` is not installed (apt-get install iproute2 nftables)"
            ));
        }
    }
    None
}

impl Network {
    /// Creates a namespace per node (`hc<pid>-n<id>`), linked to a new bridge.
    pub fn create(nodes: &[u64]) -> anyhow::Result<Network> {
        if let Some(why) = unavailable() {
            bail!("network faults are not available: {why}");
        }
        remove_stale();
        let tag = format!("hc{}", std::process::id());
        let subnet = free_subnet()?;
        let mut net = Network {
            tag,
            subnet,
            nodes: nodes.to_vec(),
        };
        net.build().context("create the test network")?;
        Ok(net)
    }

    fn build(&mut self) -> anyhow::Result<()> {
        let br = self.bridge();
        ip(&["link", "add", &br, "type", "bridge"])?;
        ip(&["addr", "add", &format!("{}/24", self.gateway()), "dev", &br])?;
        ip(&["link", "set", &br, "up"])?;
        for id in self.nodes.clone() {
            let ns = self.netns(id);
            let link = self.link(id);
            ip(&["netns", "add", &ns])?;
            ip(&["-n", &ns, "link", "set", "lo", "up"])?;
            ip(&[
                "link", "add", &link, "type", "veth", "peer", "name", "eth0", "netns", &ns,
            ])?;
            ip(&["link", "set", &link, "master", &br, "up"])?;
            ip(&[
                "-n",
                &ns,
                "addr",
                "add",
                &format!("{}/24", self.addr(id)),
                "dev",
                "eth0",
            ])?;
            ip(&["-n", &ns, "link", "set", "eth0", "up"])?;
            nft(
                &ns,
                "add table inet chaos\n\
                 add chain inet chaos input { type filter hook input priority 0; policy accept; }",
            )?;
        }
        Ok(())
    }

    /// The namespace node `id` runs in.
    pub fn netns(&self, id: u64) -> String {
        format!("{}-n{id}", self.tag)
    }

    /// Node `id`'s address.
    pub fn addr(&self, id: u64) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 10 + id as u8)
    }

    /// The bridge's address (the runner's side).
    fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::new(10, 77, self.subnet, 1)
    }

    fn bridge(&self) -> String {
        format!("{}-br", self.tag)
    }

    fn link(&self, id: u64) -> String {
        format!("{}-n{id}", self.tag)
    }

    /// Makes node `to` drop every packet from `froms` (and nothing else).
    fn drop_at(&self, to: u64, froms: &[u64]) -> anyhow::Result<()> {
        let mut script = String::from("flush chain inet chaos input\n");
        for from in froms {
            script.push_str(&format!(
                "add rule inet chaos input ip saddr {} drop\n",
                self.addr(*from)
            ));
        }
        nft(&self.netns(to), &script)
    }

    fn teardown(&self) {
        for id in &self.nodes {
            // The pair now (a namespace's own links go only when the kernel gets round to
            // destroying it), then the namespace.
            let _ = ip(&["link", "del", &self.link(*id)]);
            let _ = ip(&["netns", "del", &self.netns(*id)]);
        }
        let _ = ip(&["link", "del", &self.bridge()]);
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.teardown();
    }
}

/// How cuts reach the nodes.
pub enum Backend {
    /// nftables rules in the nodes' namespaces.
    Netns(Network),
    /// Each node's `chaos-faults.json` (node id → path), read by its transport fault layer.
    Transport(BTreeMap<u64, PathBuf>),
}

/// The directed cuts in force and the backend that applies them.
pub struct Partitions {
    backend: Backend,
    nodes: Vec<u64>,
    /// `(from, to)`: everything `from` sends to `to` is lost.
    cuts: BTreeSet<(u64, u64)>,
}

impl Partitions {
    /// Partitions of `nodes` through `backend`; no cut yet.
    pub fn new(backend: Backend, nodes: &[u64]) -> Partitions {
        Partitions {
            backend,
            nodes: nodes.to_vec(),
            cuts: BTreeSet::new(),
        }
    }

    /// Sets the nodes cuts are about: the cluster's members now (membership changes add and
    /// remove them; a node outside is neither cut nor waited for).
    pub fn set_nodes(&mut self, nodes: &[u64]) {
        self.nodes = nodes.to_vec();
    }

    /// The namespaces, when that is the backend.
    pub fn network(&self) -> Option<&Network> {
        match &self.backend {
            Backend::Netns(n) => Some(n),
            Backend::Transport(_) => None,
        }
    }

    /// How the cuts are made, for the report.
    pub fn mechanism(&self) -> &'static str {
        match self.backend {
            Backend::Netns(_) => {
                "partitions as nftables drop rules at each node's input, every node in its own \
                 network namespace with a veth link to a bridge (runner is root)"
            }
            Backend::Transport(_) => {
                "partitions in the nodes' own transport (chaos build, hub-node --chaos-faults): \
                 calls to a cut peer are never sent and replies to it are withheld"
            }
        }
    }

    /// Loses everything `from` sends to `to` (one direction).
    pub fn cut(&mut self, from: u64, to: u64) -> anyhow::Result<()> {
        if from != to && self.cuts.insert((from, to)) {
            self.apply()?;
        }
        Ok(())
    }

    /// Cuts both directions between every node of `side` and every node outside it.
    pub fn split(&mut self, side: &[u64]) -> anyhow::Result<()> {
        for a in side {
            for b in self.nodes.iter().filter(|b| !side.contains(b)) {
                self.cuts.insert((*a, *b));
                self.cuts.insert((*b, *a));
            }
        }
        self.apply()
    }

    /// Removes every cut.
    pub fn heal(&mut self) -> anyhow::Result<()> {
        self.cuts.clear();
        self.apply()
    }

    /// The cuts in force, `(from, to)`.
    pub fn cuts(&self) -> Vec<(u64, u64)> {
        self.cuts.iter().copied().collect()
    }

    /// Brings every node's rules in line with `cuts`.
    fn apply(&self) -> anyhow::Result<()> {
        for id in &self.nodes {
            match &self.backend {
                Backend::Netns(net) => {
                    let froms: Vec<u64> = self
                        .cuts
                        .iter()
                        .filter(|(_, to)| to == id)
                        .map(|(from, _)| *from)
                        .collect();
                    net.drop_at(*id, &froms)?;
                }
                Backend::Transport(files) => {
                    let path = files
                        .get(id)
                        .with_context(|| format!("no fault file for node {id}"))?;
                    let cut_to: Vec<u64> = self
                        .cuts
                        .iter()
                        .filter(|(from, _)| from == id)
                        .map(|(_, to)| *to)
                        .collect();
                    write_atomic(path, &serde_json::json!({ "cut_to": cut_to }).to_string())?;
                }
            }
        }
        if let Backend::Transport(files) = &self.backend {
            // The cut holds once every node has acknowledged its file.
            let deadline = Instant::now() + Duration::from_secs(5);
            for id in &self.nodes {
                let path = files
                    .get(id)
                    .with_context(|| format!("no fault file for node {id}"))?;
                let want = std::fs::read(path).with_context(|| path.display().to_string())?;
                let ack = path.with_file_name("chaos-faults.applied");
                while std::fs::read(&ack).ok() != Some(want.clone()) {
                    if Instant::now() > deadline {
                        bail!("node {id} did not take up {} within 5 s", path.display());
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        }
        Ok(())
    }
}

/// Writes `path` through a temporary file and a rename, so a node never reads half of it.
pub(crate) fn write_atomic(path: &std::path::Path, text: &str) -> anyhow::Result<()> {
    let tmp = path.with_extension("json.tmp");
    std::fs::write(&tmp, text).with_context(|| tmp.display().to_string())?;
    std::fs::rename(&tmp, path).with_context(|| path.display().to_string())?;
    Ok(())
}

/// Runs `ip ARGS`, failing with its stderr.
fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().context("run ip")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// Runs an nft script inside namespace `ns`.
fn nft(ns: &str, script: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut child = Command::new("ip")
        .args(["netns", "exec", ns, "nft", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("run nft")?;
    child
        .stdin
        .take()
        .context("nft stdin")?
        .write_all(script.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "nft in {ns}: {}: {}",
            script.trim().replace('\n', "; "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// A /24 under 10.77.0.0/16 no interface uses yet.
fn free_subnet() -> anyhow::Result<u8> {
    let out = Command::new("ip")
        .args(["-o", "-4", "addr", "show"])
        .output()
        .context("run ip addr")?;
    let used = String::from_utf8_lossy(&out.stdout).to_string();
    let start = (std::process::id() % 250) as u8;
    (0..250u8)
        .map(|i| ((start as u16 + i as u16) % 250) as u8)
        .find(|s| !used.contains(&format!("10.77.{s}.")))
        .context("no free 10.77.x.0/24 subnet for the test network")
}

/// Deletes the namespaces and bridges of runners whose pid is gone.
fn remove_stale() {
    let dead = |name: &str| -> bool {
        name.strip_prefix("hc")
            .and_then(|r| r.split('-').next())
            .and_then(|pid| pid.parse::<u32>().ok())
            .is_some_and(|pid| !super::process::is_alive(pid))
    };
    if let Ok(out) = Command::new("ip").args(["netns", "list"]).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            let name = line.split_whitespace().next().unwrap_or("");
            if name.contains("-n") && dead(name) {
                let _ = ip(&["link", "del", name]); // the veth of the same name
                let _ = ip(&["netns", "del", name]);
            }
        }
    }
    if let Ok(out) = Command::new("ip")
        .args(["-o", "link", "show", "type", "bridge"])
        .output()
    {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            // "12: hc123-br: <…>"
            let name = line.split(':').nth(1).unwrap_or("").trim();
            if name.ends_with("-br") && dead(name) {
                let _ = ip(&["link", "del", name]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{SocketAddr, TcpListener, TcpStream};
    use std::time::Duration;

    /// Runs `f` on a thread inside namespace `ns` (sockets it opens live there).
    fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/run/netns/{ns}");
        std::thread::spawn(move || {
            let file = std::fs::File::open(&path).unwrap();
            use std::os::fd::AsRawFd;
            // SAFETY: setns(2) on this thread with a namespace fd we own.
            assert_eq!(
                unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            f()
        })
        .join()
        .unwrap()
    }

    fn reaches(net: &Network, from: u64, to: SocketAddr) -> bool {
        in_netns(&net.netns(from), move || {
            TcpStream::connect_timeout(&to, Duration::from_millis(1_000)).is_ok()
        })
    }

    // The CI machine is root with iproute2 and nftables (scripts/deps.sh installs them).
    #[test]
    fn cuts_drop_packets_one_way_and_heal_and_everything_is_removed() {
        if let Some(why) = unavailable() {
            panic!("network faults unavailable: {why}");
        }
        let net = Network::create(&[1, 2, 3]).unwrap();
        let (addr2, ns2, tag) = (
            SocketAddr::new(net.addr(2).into(), 7999),
            net.netns(2),
            net.tag.clone(),
        );
        let mut parts = Partitions::new(Backend::Netns(net), &[1, 2, 3]);
        let reaches =
            |parts: &Partitions, from: u64| reaches(parts.network().unwrap(), from, addr2);
        let listener = in_netns(&ns2, move || TcpListener::bind(addr2).unwrap());
        assert!(reaches(&parts, 1) && reaches(&parts, 3));
        // The runner's own namespace reaches every node over the bridge.
        assert!(TcpStream::connect_timeout(&addr2, Duration::from_millis(1_000)).is_ok());

        parts.cut(1, 2).unwrap();
        assert!(!reaches(&parts, 1), "1 -> 2 is cut");
        assert!(reaches(&parts, 3), "3 -> 2 is not");
        parts.split(&[3]).unwrap();
        assert_eq!(parts.cuts(), vec![(1, 2), (1, 3), (2, 3), (3, 1), (3, 2)]);
        assert!(!reaches(&parts, 3));
        assert!(TcpStream::connect_timeout(&addr2, Duration::from_millis(1_000)).is_ok());
        parts.heal().unwrap();
        assert!(reaches(&parts, 1) && reaches(&parts, 3));
        drop(listener);

        drop(parts);
        let list = Command::new("ip").args(["netns", "list"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&list.stdout).contains(&tag));
        let links = Command::new("ip").args(["-o", "link"]).output().unwrap();
        assert!(!String::from_utf8_lossy(&links.stdout).contains(&tag));
    }

    /// The transport backend writes each node the peers its messages to are lost to, and
    /// returns once every node acknowledged (here a thread stands in for the nodes).
    #[test]
    fn transport_cuts_are_written_per_sending_node() {
        let dir = tempfile::tempdir().unwrap();
        let files: BTreeMap<u64, PathBuf> = (1..=3)
            .map(|id| {
                let d = dir.path().join(format!("node-{id}"));
                std::fs::create_dir_all(&d).unwrap();
                (id, d.join("chaos-faults.json"))
            })
            .collect();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let nodes = {
            let (files, stop) = (files.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for path in files.values() {
                        if let Ok(b) = std::fs::read(path) {
                            let _ = std::fs::write(path.with_file_name("chaos-faults.applied"), b);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
            })
        };
        // The file the runner writes for a node's fault layer: whom it cuts itself off from.
        #[derive(serde::Deserialize)]
        struct Faults {
            cut_to: Vec<u64>,
        }
        let read = |id: u64| -> Vec<u64> {
            serde_json::from_slice::<Faults>(&std::fs::read(&files[&id]).unwrap())
                .unwrap()
                .cut_to
        };
        let mut parts = Partitions::new(Backend::Transport(files.clone()), &[1, 2, 3]);
        parts.cut(2, 1).unwrap();
        assert_eq!(read(2), vec![1]);
        assert_eq!(read(1), Vec::<u64>::new());
        parts.split(&[3]).unwrap();
        assert_eq!(read(3), vec![1, 2]);
        assert_eq!(read(1), vec![3]);
        assert_eq!(read(2), vec![1, 3]);
        parts.heal().unwrap();
        for id in 1..=3 {
            assert_eq!(read(id), Vec::<u64>::new());
        }
        assert!(parts.mechanism().contains("chaos build"));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        nodes.join().unwrap();
        // Without acknowledgements the cut is an error, not a silent no-op.
        let e = parts.cut(1, 2).unwrap_err().to_string();
        assert!(e.contains("did not take up"), "{e}");
    }
}

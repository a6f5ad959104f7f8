//! `hub-bench compare-etcd`: the hub and etcd side by side on this machine, in one run.
//!
//! Both are 3 members on loopback, both get the same closed-loop writers (one connection
//! each, to the leader) writing a new record of the same size per write — an environment
//! whose description is the value on the hub, a key on etcd — for the same seconds at each
//! client count. The two alternate (each round starts both afresh, and the one that goes
//! first swaps), once with mutual TLS on both and once without. Failover is compared the same
//! way: the leader killed with SIGKILL, timed to the first write a new leader acknowledges.
//! Any failed write is reported in the table and makes the run fail.
//!
//! - [`load`]: the closed-loop writers, shared by both systems;
//! - [`hub`]: a `hubctl dev up` cluster and its writer;
//! - [`etcd`]: Debian's etcd 3.4 (installed when missing) as a 3-member cluster, and its
//!   writer through the `etcd-client` crate.

pub mod etcd;
pub mod hub;
pub mod load;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};

use crate::stats::Latencies;
use etcd::{EtcdCluster, EtcdWriter};
use hub::{HubCluster, HubWriter};
use load::LoadResult;

/// With or without mutual TLS, on both systems alike.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Security {
    /// Mutual TLS between clients and members and among members.
    Tls,
    /// Plaintext everywhere (`hub-node --insecure`, etcd over http).
    Plaintext,
}

impl Security {
    fn name(self) -> &'static str {
        match self {
            Security::Tls => "mutual TLS",
            Security::Plaintext => "plaintext",
        }
    }
}

/// The two systems.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum System {
    /// This project.
    Hub,
    /// etcd 3.4.
    Etcd,
}

/// What to run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Client counts, each run for `seconds`.
    pub clients: Vec<usize>,
    /// Seconds per client count.
    pub seconds: u64,
    /// Rounds of hub-and-etcd (at least 2: each system goes first once).
    pub rounds: usize,
    /// Bytes of every written value.
    pub value_bytes: usize,
    /// Leader kills of the hub, and of etcd (0 skips failover).
    pub hub_kills: usize,
    /// Leader kills of etcd.
    pub etcd_kills: usize,
    /// With TLS, without, or both (in that order).
    pub security: Vec<Security>,
    /// Where the clusters' directories go (each removed after its round).
    pub dir: PathBuf,
    /// `hubctl`, which starts the hub.
    pub hubctl: PathBuf,
    /// The etcd server.
    pub etcd: PathBuf,
}

impl Settings {
    /// Refuses settings that cannot give a fair comparison, naming the flag.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.clients.is_empty() || self.clients.contains(&0) {
            bail!("--clients: give one or more client counts, each at least 1");
        }
        if self.seconds == 0 {
            bail!("--seconds: at least 1");
        }
        if self.rounds < 2 {
            bail!("--rounds: at least 2, so that each system runs first once");
        }
        if self.value_bytes == 0 || self.value_bytes > 1024 {
            bail!("--value-bytes: 1 to 1024 (a hub environment's description holds at most 1024)");
        }
        if self.security.is_empty() {
            bail!("--security: tls, plaintext or both");
        }
        Ok(())
    }
}

/// One cell per (security, client count, system).
pub type WriteCells = BTreeMap<(Security, usize, System), LoadResult>;

/// Failover samples per system (kill to first acknowledged write).
pub type FailoverSamples = BTreeMap<System, Latencies>;

/// Runs the write comparison and the failover comparison, printing tables as it goes.
/// `Ok(false)` when any write failed (the tables say where).
pub async fn run(s: &Settings) -> anyhow::Result<bool> {
    s.check()?;
    println!("etcd: {}", etcd::version(&s.etcd)?);
    println!(
        "writes: {:?} clients x {} s, value {} B, {} rounds, alternating\n",
        s.clients, s.seconds, s.value_bytes, s.rounds
    );
    let mut cells = WriteCells::new();
    let value = "v".repeat(s.value_bytes);
    for &security in &s.security {
        for round in 0..s.rounds {
            let order = if round % 2 == 0 {
                [System::Hub, System::Etcd]
            } else {
                [System::Etcd, System::Hub]
            };
            for system in order {
                let dir = s
                    .dir
                    .join(format!("{security:?}-{round}-{system:?}").to_lowercase());
                let results = match system {
                    System::Hub => hub_writes(s, &dir, security, &value).await?,
                    System::Etcd => etcd_writes(s, &dir, security, &value).await?,
                };
                let _ = std::fs::remove_dir_all(&dir);
                for (clients, r) in results {
                    eprintln!(
                        "  {} round {} {:?} {} clients: {:.0} w/s, {} errors",
                        security.name(),
                        round + 1,
                        system,
                        clients,
                        r.throughput(),
                        r.errors
                    );
                    cells
                        .entry((security, clients, system))
                        .or_default()
                        .merge(r);
                }
            }
        }
    }
    let clean = print_writes(s, &cells);
    if s.hub_kills > 0 || s.etcd_kills > 0 {
        let security = s.security[0];
        let mut samples = FailoverSamples::new();
        if s.hub_kills > 0 {
            let dir = s.dir.join("failover-hub");
            samples.insert(System::Hub, hub_failover(s, &dir, security).await?);
            let _ = std::fs::remove_dir_all(&dir);
        }
        if s.etcd_kills > 0 {
            let dir = s.dir.join("failover-etcd");
            samples.insert(System::Etcd, etcd_failover(s, &dir, security).await?);
            let _ = std::fs::remove_dir_all(&dir);
        }
        print_failover(security, &samples);
    }
    Ok(clean)
}

async fn hub_writes(
    s: &Settings,
    dir: &std::path::Path,
    security: Security,
    value: &str,
) -> anyhow::Result<Vec<(usize, LoadResult)>> {
    let hub = HubCluster::start(&s.hubctl, dir, security == Security::Tls)?;
    let mut out = Vec::new();
    for &n in &s.clients {
        let leader = hub.wait_leader(Duration::from_secs(30), None).await?;
        let mut writers = Vec::with_capacity(n);
        for w in 0..n {
            // Each client count writes names of its own.
            let prefix = format!("c{n}w{w}-");
            writers.push(HubWriter::connect(&hub, &leader.addr, prefix, value).await?);
        }
        out.push((
            n,
            load::closed_loop(writers, Duration::from_secs(s.seconds)).await,
        ));
    }
    Ok(out)
}

async fn etcd_writes(
    s: &Settings,
    dir: &std::path::Path,
    security: Security,
    value: &str,
) -> anyhow::Result<Vec<(usize, LoadResult)>> {
    let etcd = EtcdCluster::start(&s.etcd, dir, security == Security::Tls).await?;
    let mut out = Vec::new();
    for &n in &s.clients {
        let leader = etcd.wait_leader(Duration::from_secs(30), None).await?;
        let mut writers = Vec::with_capacity(n);
        for w in 0..n {
            let prefix = format!("bench/c{n}w{w}/");
            writers.push(EtcdWriter::connect(&etcd, leader, prefix, value.as_bytes()).await?);
        }
        out.push((
            n,
            load::closed_loop(writers, Duration::from_secs(s.seconds)).await,
        ));
    }
    Ok(out)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints one table per security setting; false when any cell had errors.
fn print_writes(s: &Settings, cells: &WriteCells) -> bool {
    let mut clean = true;
    for &security in &s.security {
        println!(
            "\n### Writes, {} ({} rounds x {} s per cell, value {} B)\n",
            security.name(),
            s.rounds,
            s.seconds,
            s.value_bytes
        );
        println!("| clients | hub w/s | hub p50 ms | hub p99 ms | etcd w/s | etcd p50 ms | etcd p99 ms | throughput hub/etcd | p99 hub/etcd | errors hub / etcd |");
        println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
        for &n in &s.clients {
            let empty = LoadResult::default();
            let h = cells.get(&(security, n, System::Hub)).unwrap_or(&empty);
            let e = cells.get(&(security, n, System::Etcd)).unwrap_or(&empty);
            let ratio = |a: f64, b: f64| {
                if b > 0.0 {
                    format!("{:.2}x", a / b)
                } else {
                    "-".into()
                }
            };
            let (h99, e99) = (
                ms(h.latencies.percentile(99.0)),
                ms(e.latencies.percentile(99.0)),
            );
            println!(
                "| {n} | {:.0} | {:.2} | {:.2} | {:.0} | {:.2} | {:.2} | {} | {} | {} / {} |",
                h.throughput(),
                ms(h.latencies.percentile(50.0)),
                h99,
                e.throughput(),
                ms(e.latencies.percentile(50.0)),
                e99,
                ratio(h.throughput(), e.throughput()),
                ratio(h99, e99),
                h.errors,
                e.errors
            );
            for (system, r) in [("hub", h), ("etcd", e)] {
                if r.errors > 0 {
                    clean = false;
                    println!(
                        "|  | {system} errors at {n} clients: {} (first: {}) |",
                        r.errors,
                        r.first_error.as_deref().unwrap_or("?")
                    );
                }
            }
        }
    }
    if !clean {
        println!("\nERRORS: some writes failed (see the tables); the comparison is not clean");
    }
    clean
}

fn print_failover(security: Security, samples: &FailoverSamples) {
    println!(
        "\n### Failover, {}: leader SIGKILL to the first write a new leader acknowledged\n",
        security.name()
    );
    println!("| system | kills | p50 ms | p99 ms | max ms |");
    println!("|---|---:|---:|---:|---:|");
    for (system, l) in samples {
        println!(
            "| {system:?} | {} | {:.0} | {:.0} | {:.0} |",
            l.len(),
            ms(l.percentile(50.0)),
            ms(l.percentile(99.0)),
            ms(l.percentile(100.0))
        );
    }
}

/// How long one failover may take before the run gives up.
const FAILOVER_LIMIT: Duration = Duration::from_secs(30);

/// How long one write after the kill may take before it is abandoned and another one sent
/// (to the next surviving member), the same for both systems. An etcd member drops the
/// proposals it forwarded to a leader that died, and its client then waits for its whole
/// timeout; the hub's members retry for their callers. A short attempt keeps the
/// measurement to the clusters' own recovery, within this resolution.
const FAILOVER_ATTEMPT: Duration = Duration::from_millis(250);

async fn hub_failover(
    s: &Settings,
    dir: &std::path::Path,
    security: Security,
) -> anyhow::Result<Latencies> {
    let hub = HubCluster::start(&s.hubctl, dir, security == Security::Tls)?;
    let value = "v".repeat(s.value_bytes);
    let mut samples = Latencies::default();
    for round in 1..=s.hub_kills {
        let old = hub.wait_leader(FAILOVER_LIMIT, None).await?;
        let survivors: Vec<_> = hub
            .nodes()?
            .into_iter()
            .filter(|n| n.id != old.id)
            .collect();
        let mut writers = Vec::new();
        for (i, n) in survivors.iter().enumerate() {
            let prefix = format!("f{round}w{i}-");
            writers.push(HubWriter::connect(&hub, &n.addr, prefix, &value).await?);
        }
        // A write before the kill: the cluster is healthy and the connections are up.
        load::Writer::write(&mut writers[0], u64::MAX)
            .await
            .map_err(|e| anyhow::anyhow!("round {round}: write before the kill: {e}"))?;
        // SAFETY: kill(2) on the pid `hubctl dev up` recorded for a node it started.
        unsafe { libc::kill(old.pid as i32, libc::SIGKILL) };
        let killed = Instant::now();
        let mut seq = 0u64;
        let took = loop {
            let k = (seq as usize) % writers.len();
            let put = tokio::time::timeout(FAILOVER_ATTEMPT, writers[k].write_with_leader(seq));
            if matches!(put.await, Ok(Ok(leader)) if leader != old.id) {
                break killed.elapsed();
            }
            seq += 1;
            if killed.elapsed() > FAILOVER_LIMIT {
                bail!("round {round}: no write acknowledged within {FAILOVER_LIMIT:?} of the kill");
            }
        };
        samples.push(took);
        eprintln!("  hub kill {round}: {:.0} ms", ms(took));
        while crate::runner::process::is_alive(old.pid) {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        hub.restart(old.id)?;
        // Caught up before the next kill, so that a quorum survives it.
        let deadline = Instant::now() + FAILOVER_LIMIT;
        loop {
            let want = hub.applied(&survivors[0].addr).await;
            if want > 0 && hub.applied(&old.addr).await >= want {
                break;
            }
            if Instant::now() > deadline {
                bail!(
                    "round {round}: node {} did not catch up after its restart",
                    old.id
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    Ok(samples)
}

async fn etcd_failover(
    s: &Settings,
    dir: &std::path::Path,
    security: Security,
) -> anyhow::Result<Latencies> {
    let mut etcd = EtcdCluster::start(&s.etcd, dir, security == Security::Tls).await?;
    let value = "v".repeat(s.value_bytes);
    let mut samples = Latencies::default();
    for round in 1..=s.etcd_kills {
        let old = etcd.wait_leader(FAILOVER_LIMIT, None).await?;
        let survivors: Vec<usize> = (0..etcd.len()).filter(|i| *i != old).collect();
        let mut writers = Vec::new();
        for (w, &m) in survivors.iter().enumerate() {
            let prefix = format!("bench/f{round}w{w}/");
            writers.push(EtcdWriter::connect(&etcd, m, prefix, value.as_bytes()).await?);
        }
        load::Writer::write(&mut writers[0], u64::MAX)
            .await
            .map_err(|e| anyhow::anyhow!("round {round}: write before the kill: {e}"))?;
        etcd.kill9(old);
        let killed = Instant::now();
        let mut seq = 0u64;
        let took = loop {
            let k = (seq as usize) % writers.len();
            let put =
                tokio::time::timeout(FAILOVER_ATTEMPT, load::Writer::write(&mut writers[k], seq))
                    .await;
            if matches!(put, Ok(Ok(()))) {
                break killed.elapsed();
            }
            seq += 1;
            if killed.elapsed() > FAILOVER_LIMIT {
                bail!("round {round}: no etcd write acknowledged within {FAILOVER_LIMIT:?} of the kill");
            }
        };
        samples.push(took);
        eprintln!("  etcd kill {round}: {:.0} ms", ms(took));
        etcd.restart(old)
            .with_context(|| format!("round {round}: restart etcd member {old}"))?;
        etcd.wait_caught_up(old, FAILOVER_LIMIT).await?;
    }
    Ok(samples)
}

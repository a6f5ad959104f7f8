//! Faults and their seeded schedule. The schedule depends only on the seed, the fault list
//! and the duration, so `--replay` (the same seed) injects the same kinds at the same offsets;
//! which node a fault hits is decided when it fires (the leader then may differ).

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// A fault the runner can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
    /// SIGKILL the leader, restart it after a pause.
    KillLeader,
    /// SIGKILL a random node, restart it after a pause.
    KillAny,
    /// SIGSTOP a random node (the leader half the time), SIGCONT it after a pause.
    Pause,
    /// SIGKILL every node at once, restart them all.
    RestartAll,
    /// A network partition between nodes: the leader isolated, a minority split from the
    /// majority, or a one-way cut of everything the leader sends.
    Partition,
    /// Delay (100–400 ms each way) on the agents' links to the hub ("another region").
    Latency,
    /// SIGKILL an agent of the rollout workload while it runs a task, restart it after a
    /// pause on the same data directory (its services keep running).
    KillAgent,
    /// SIGSTOP an agent while it runs a task, SIGCONT it after a pause.
    PauseAgent,
    /// Jump one node's wall clock (the leader half the time) by 5 minutes to 2 hours either
    /// way, or make it drift 100–500 ms per second, for three times the usual hold; a chaos
    /// build's fault layer does it.
    ClockSkew,
    /// Fill one node's filesystem (the leader half the time) for three times the usual hold,
    /// then free it; a node that stopped is restarted. Its data directory is on a small
    /// loop-mounted ext4 (root).
    DiskFull,
    /// Make every sync under one node (the leader half the time) fail with EIO for the
    /// usual hold; a node that stopped is restarted. Its data directory is on the runner's
    /// FUSE pass-through filesystem (root).
    FsyncError,
    /// Change the membership under load: add a node (up to 5), remove one (down to 3; the
    /// leader half the time, its process left running, cut out), or replace one with a new
    /// id (killed, removed, a new node added).
    Membership,
    /// Stop the next node still on the previous release (`--upgrade-from`; followers first,
    /// the leader last) with SIGTERM, as an operator does, and start it on this build's
    /// `hub-node` on its data; before each, submit the new release's command, which the
    /// feature-level gate must refuse. Once every node is upgraded, a no-op.
    Upgrade,
}

impl Fault {
    /// Every fault, by name.
    pub const ALL: [Fault; 13] = [
        Fault::KillLeader,
        Fault::KillAny,
        Fault::Pause,
        Fault::RestartAll,
        Fault::Partition,
        Fault::Latency,
        Fault::KillAgent,
        Fault::PauseAgent,
        Fault::ClockSkew,
        Fault::DiskFull,
        Fault::FsyncError,
        Fault::Membership,
        Fault::Upgrade,
    ];

    /// The name on the command line.
    pub fn as_str(self) -> &'static str {
        match self {
            Fault::KillLeader => "kill-leader",
            Fault::KillAny => "kill-any",
            Fault::Pause => "pause",
            Fault::RestartAll => "restart-all",
            Fault::Partition => "partition",
            Fault::Latency => "latency",
            Fault::KillAgent => "kill-agent",
            Fault::PauseAgent => "pause-agent",
            Fault::ClockSkew => "clock-skew",
            Fault::DiskFull => "disk-full",
            Fault::FsyncError => "fsync-error",
            Fault::Membership => "membership",
            Fault::Upgrade => "upgrade",
        }
    }

    /// Whether it needs network namespaces (root, iproute2, nftables).
    pub fn needs_netns(self) -> bool {
        self == Fault::Partition
    }

    /// Whether it needs a chaos build of hub-node (its fault layer).
    pub fn needs_chaos_build(self) -> bool {
        self == Fault::ClockSkew
    }

    /// The disk fault it is, if it is one (its node's data directory must be on a disk of the
    /// runner's).
    pub fn disk(self) -> Option<crate::check::DiskFault> {
        match self {
            Fault::DiskFull => Some(crate::check::DiskFault::DiskFull),
            Fault::FsyncError => Some(crate::check::DiskFault::FsyncError),
            Fault::KillLeader
            | Fault::KillAny
            | Fault::Pause
            | Fault::RestartAll
            | Fault::Partition
            | Fault::Latency
            | Fault::KillAgent
            | Fault::PauseAgent
            | Fault::ClockSkew
            | Fault::Membership
            | Fault::Upgrade => None,
        }
    }

    /// Whether it strikes an agent of the rollout workload (which must then have one).
    pub fn hits_agents(self) -> bool {
        matches!(self, Fault::KillAgent | Fault::PauseAgent)
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Fault {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        Fault::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| {
                format!(
                    "unknown fault {s:?}; known: {}",
                    Fault::ALL.map(Fault::as_str).join(", ")
                )
            })
    }
}

/// Parses `--faults a,b,c`: every name known, at least one. Whether the machine can inject
/// them is checked by the runner ([`super::net::unavailable`]).
pub fn parse_faults(list: &str) -> Result<Vec<Fault>, String> {
    let mut out = Vec::new();
    for name in list.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let f: Fault = name.parse().map_err(|e| format!("--faults: {e}"))?;
        if !out.contains(&f) {
            out.push(f);
        }
    }
    if out.is_empty() {
        return Err("--faults: at least one fault is required".into());
    }
    Ok(out)
}

/// One scheduled fault: what, when (offset from the start) and for how long.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scheduled {
    /// Offset from the start of the run, in milliseconds.
    pub at_ms: u64,
    /// The fault.
    pub fault: Fault,
    /// How long the node stays down or paused, in milliseconds.
    pub hold_ms: u64,
    /// A random number the injector uses to pick a node.
    pub pick: u64,
}

/// A small deterministic generator (xorshift64*), so schedules replay across platforms.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 is remapped: xorshift must not start at 0).
    pub fn new(seed: u64) -> Self {
        Rng(seed.max(1) ^ 0x5851_F42D_4C95_7F2D)
    }

    /// The next number.
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `lo..=hi`.
    pub fn between(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// The fault schedule of a run: a fault every 3–6 s after a 3 s warm-up, each held 0.5–3 s,
/// none in the last 5 s (the cluster heals before the run ends).
pub fn schedule(seed: u64, faults: &[Fault], duration: Duration) -> Vec<Scheduled> {
    let mut rng = Rng::new(seed);
    let end = duration.as_millis() as u64;
    let mut at = 3_000;
    let mut out = Vec::new();
    while !faults.is_empty() && at + 5_000 < end {
        let fault = faults[(rng.next_u64() % faults.len() as u64) as usize];
        let hold_ms = rng.between(500, 3_000);
        out.push(Scheduled {
            at_ms: at,
            fault,
            hold_ms,
            pick: rng.next_u64(),
        });
        at += hold_ms + rng.between(3_000, 6_000);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_bad_ones_are_named() {
        for f in Fault::ALL {
            assert_eq!(f.as_str().parse::<Fault>(), Ok(f));
        }
        let e = parse_faults("kill-leader,explode").unwrap_err();
        assert!(
            e.contains("\"explode\"") && e.contains("kill-leader"),
            "{e}"
        );
        assert_eq!(
            parse_faults("partition,latency").unwrap(),
            vec![Fault::Partition, Fault::Latency]
        );
        assert!(parse_faults("").is_err());
        assert_eq!(
            parse_faults("pause, kill-any,pause").unwrap(),
            vec![Fault::Pause, Fault::KillAny]
        );
    }

    #[test]
    fn a_seed_replays_its_schedule() {
        let f = [Fault::KillLeader, Fault::Pause, Fault::RestartAll];
        let a = schedule(7, &f, Duration::from_secs(180));
        assert_eq!(a, schedule(7, &f, Duration::from_secs(180)));
        assert_ne!(a, schedule(8, &f, Duration::from_secs(180)));
        assert!(a.len() >= 20, "{}", a.len());
        assert!(a.iter().all(|s| s.at_ms + 5_000 < 180_000));
        assert!(a.windows(2).all(|w| w[0].at_ms + w[0].hold_ms < w[1].at_ms));
    }
}
